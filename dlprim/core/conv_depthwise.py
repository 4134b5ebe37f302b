"""Depthwise convolution (every group has one input channel, MobileNet's 3x3 layers):
direct kernels from ``kernels/conv_depthwise.cl`` for the three directions."""
import numpy as np

from ..kernels import program
from ..tensor import ws_view
from .conv_geometry import geometry_args, scalar
from . import tuning_launch
from ..utils import ceil_div, round_up

__all__ = ["Forward", "BackwardData", "BackwardFilter"]


def _program(ctx, geom, bias=False, activation="identity"):
    baked, args = geometry_args(ctx, geom)
    wg = tuning_launch.depthwise_filter_wg(ctx.facts)
    return program.get(ctx, "conv_depthwise", BIAS=bool(bias), ACTIVATION=activation,
                       GEOM_BAKED=baked, WG=wg, KH_T=1, KW_T=1, TAPS=1), args, wg


def _local(ctx):
    return tuning_launch.gpu_local(ctx.facts, (tuning_launch.DEPTHWISE_WG, 1, 1))


class Forward:
    def __init__(self, ctx, geom, bias=False, activation="identity", batch=16):
        self.ctx, self.geom, self.bias = ctx, geom, bool(bias)
        self.program, self.geom_args, _ = _program(ctx, geom, bias, activation)

    def workspace_bytes(self, batch):
        return 0

    def launches(self, x, w, y, b, ws, beta):
        g = self.geom
        args = self.geom_args + [x, w, y] + ([b] if self.bias else []) + [scalar(beta)]
        gsize = (round_up(g.out_h * g.out_w, tuning_launch.DEPTHWISE_WG), g.out_c, x.shape[0])
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
        gsize = (round_up(g.in_h * g.in_w, tuning_launch.DEPTHWISE_WG), g.in_c, dy.shape[0])
        return [program.Launch(self.program, "depthwise_backward_data", gsize, _local(self.ctx),
                               self.geom_args + [dy, w, dx] + ([b] if self.bias else [])
                               + [scalar(beta)],
                               flops=g.flops(dy.shape[0]))]


class BackwardFilter:
    """Per (channel, chunk of batch*pixels) partial tap sums, then a sum over chunks."""

    def __init__(self, ctx, geom, splits=None, batch=16):
        self.ctx, self.geom, self.forced_chunks = ctx, geom, splits
        baked, self.geom_args = geometry_args(ctx, geom)
        self.wg = tuning_launch.depthwise_filter_wg(ctx.facts)
        # the tap count sizes a register array, so the kernel size is always baked in
        self.program = program.get(ctx, "conv_depthwise", BIAS=False, ACTIVATION="identity",
                                   GEOM_BAKED=baked, WG=self.wg, KH_T=geom.kh, KW_T=geom.kw,
                                   TAPS=geom.kh * geom.kw)

    def chunk_plan(self, batch):
        """(chunks, chunk): enough work-groups to fill the device, >= 16 items a work-item."""
        total = batch * self.geom.out_h * self.geom.out_w
        if self.forced_chunks:
            chunks = self.forced_chunks
        else:
            chunks = tuning_launch.depthwise_chunks(self.ctx.facts, self.geom.out_c, total,
                                                    self.wg)
        chunk = ceil_div(total, chunks)
        return ceil_div(total, chunk), chunk

    def workspace_bytes(self, batch):
        g = self.geom
        return 4 * self.chunk_plan(batch)[0] * g.out_c * g.kh * g.kw

    def launches(self, x, dy, dw, ws, beta):
        g = self.geom
        batch = x.shape[0]
        chunks, chunk = self.chunk_plan(batch)
        n = g.out_c * g.kh * g.kw
        part = ws_view(ws, 0, chunks * n)
        args = [np.int32(batch)] + self.geom_args + [np.int32(chunk), x, dy, part]
        sums = program.Launch(self.program, "depthwise_backward_filter",
                              (self.wg, chunks, g.out_c), (self.wg, 1, 1), args,
                              flops=g.flops(batch))
        wg = tuning_launch.DEPTHWISE_WG
        total = program.Launch(self.program, "depthwise_filter_sum", (round_up(n, wg),),
                               tuning_launch.gpu_local(self.ctx.facts, (wg,)),
                               [np.int32(n), np.int32(chunks), part, dw, scalar(beta)])
        return [sums, total]
