"""Depthwise convolution (every group has one input channel, MobileNet's 3x3 layers):
direct kernels from ``kernels/depthwise.cl`` for the three directions."""
import numpy as np

from ..kernels import program
from .conv import geometry_args, scalar

__all__ = ["Forward", "BackwardData", "BackwardFilter"]

REDUCE_WG = 256  # work-items reducing one filter tap in backward-filter


def _program(ctx, geom, bias=False, activation="identity"):
    baked, args = geometry_args(ctx, geom)
    wg = REDUCE_WG if ctx.facts.is_gpu else 32
    return program.get(ctx, "depthwise", BIAS=bool(bias), ACTIVATION=activation,
                       GEOM_BAKED=baked, WG=wg), args, wg


def _local(ctx):
    return (64, 1, 1) if ctx.facts.is_gpu else None


class Forward:
    def __init__(self, ctx, geom, bias=False, activation="identity", batch=16):
        self.ctx, self.geom, self.bias = ctx, geom, bool(bias)
        self.program, self.geom_args, _ = _program(ctx, geom, bias, activation)

    def workspace_bytes(self, batch):
        return 0

    def launches(self, x, w, y, b, ws, beta):
        g = self.geom
        args = self.geom_args + [x, w, y] + ([b] if self.bias else []) + [scalar(beta)]
        gsize = (program.round_up(g.out_h * g.out_w, 64), g.out_c, x.shape[0])
        return [program.Launch(self.program, "depthwise_forward", gsize, _local(self.ctx), args,
                               flops=g.flops(x.shape[0]))]


class BackwardData:
    def __init__(self, ctx, geom, bias=False, activation="identity", batch=16):
        self.ctx, self.geom, self.bias = ctx, geom, bool(bias)
        self.program, self.geom_args, _ = _program(ctx, geom, bias, activation)

    def workspace_bytes(self, batch):
        return 0

    def launches(self, dy, w, dx, b, ws, beta):
        g = self.geom
        gsize = (program.round_up(g.in_h * g.in_w, 64), g.in_c, dy.shape[0])
        return [program.Launch(self.program, "depthwise_backward_data", gsize, _local(self.ctx),
                               self.geom_args + [dy, w, dx] + ([b] if self.bias else [])
                               + [scalar(beta)],
                               flops=g.flops(dy.shape[0]))]


class BackwardFilter:
    def __init__(self, ctx, geom, splits=None, batch=16):
        self.ctx, self.geom = ctx, geom
        self.program, self.geom_args, self.wg = _program(ctx, geom)

    def workspace_bytes(self, batch):
        return 0

    def launches(self, x, dy, dw, ws, beta):
        g = self.geom
        gsize = (self.wg, g.kh * g.kw, g.out_c)
        args = [np.int32(x.shape[0])] + self.geom_args + [x, dy, dw, scalar(beta)]
        return [program.Launch(self.program, "depthwise_backward_filter", gsize, (self.wg, 1, 1),
                               args, flops=g.flops(x.shape[0]))]
