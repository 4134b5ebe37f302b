"""Winograd F(2x2, 3x3) convolution for 3x3, stride-1, undilated, ungrouped layers.

Four launches: filter transform, input transform, 16 GEMMs (the implicit-GEMM kernel as a
16-group 1x1 convolution), output transform. The filter transform is a launch of its own
at the start of every pass, so it runs once per forward (once per weight update in
training) and never reads stale weights after a load.

Backward-data is the same algorithm on the transposed problem: dx is the correlation of dy
with the filter rotated by 180 degrees and with input/output channels swapped, padded by
``2 - pad`` (``winograd_filter`` with ``flip``).
"""
import numpy as np

from ..kernels import program
from .conv import ConvGeometry, ws_view
from .conv_gemm import ConvGemm

__all__ = ["Forward", "BackwardData", "WinogradPlan"]


class WinogradPlan:
    """``y (out_c, out_hw) = act(correlate3x3(x (in_c, in_hw), w) + bias) + beta*y``."""

    def __init__(self, ctx, in_c, out_c, in_hw, out_hw, pad_hw, flip, bias, activation):
        self.ctx = ctx
        self.in_c, self.out_c, self.flip, self.bias = in_c, out_c, flip, bias
        self.in_h, self.in_w = in_hw
        self.out_h, self.out_w = out_hw
        self.pad_h, self.pad_w = pad_hw
        self.tiles_w = -(-self.out_w // 2)
        self.tiles = -(-self.out_h // 2) * self.tiles_w
        self.program = program.get(ctx, "winograd", ACTIVATION=activation, BIAS=bool(bias))
        gemm_geom = ConvGeometry(16 * in_c, 16 * out_c, (1, self.tiles), (1, 1), groups=16)
        self.gemm = ConvGemm(ctx, gemm_geom, "forward")

    def sizes(self, batch):
        """Float counts of U, V and M in the workspace."""
        return (16 * self.out_c * self.in_c, batch * 16 * self.in_c * self.tiles,
                batch * 16 * self.out_c * self.tiles)

    def workspace_bytes(self, batch):
        return 4 * sum(self.sizes(batch))

    def launches(self, x, w, y, b, ws, beta):
        batch = x.shape[0]
        nu, nv, nm = self.sizes(batch)
        u = ws_view(ws, 0, nu).reshape(16 * self.out_c, self.in_c, 1, 1)
        v = ws_view(ws, 4 * nu, nv).reshape(batch, 16 * self.in_c, 1, self.tiles)
        m = ws_view(ws, 4 * (nu + nv), nm).reshape(batch, 16 * self.out_c, 1, self.tiles)
        i32 = np.int32
        local = (64, 1, 1) if self.ctx.facts.is_gpu else None
        t_global = program.round_up(self.tiles, 64)
        filt = program.Launch(self.program, "winograd_filter",
                              (program.round_up(self.in_c, 16), program.round_up(self.out_c, 16)),
                              (16, 16) if self.ctx.facts.is_gpu else None,
                              [i32(self.out_c), i32(self.in_c), i32(self.flip), w, u])
        inp = program.Launch(self.program, "winograd_input", (t_global, self.in_c, batch), local,
                             [i32(self.in_c), i32(self.in_h), i32(self.in_w), i32(self.tiles_w),
                              i32(self.tiles), i32(self.pad_h), i32(self.pad_w), x, v])
        gemm = self.gemm.launch(batch, u, v, m)
        args = [i32(self.out_c), i32(self.out_h), i32(self.out_w), i32(self.tiles_w),
                i32(self.tiles), m, y]
        if self.bias:
            args.append(b)
        args.append(np.float32(beta))
        out = program.Launch(self.program, "winograd_output", (t_global, self.out_c, batch),
                             local, args)
        return [filt, inp, gemm, out]


class Forward:
    def __init__(self, ctx, geom, bias=False, activation="identity"):
        self.plan = WinogradPlan(ctx, geom.in_c, geom.out_c, (geom.in_h, geom.in_w),
                                 (geom.out_h, geom.out_w), geom.pad[:2], False, bias, activation)

    def workspace_bytes(self, batch):
        return self.plan.workspace_bytes(batch)

    def launches(self, x, w, y, b, ws, beta):
        return self.plan.launches(x, w, y, b, ws, beta)


class BackwardData:
    def __init__(self, ctx, geom, bias=False, activation="identity"):
        self.plan = WinogradPlan(ctx, geom.out_c, geom.in_c, (geom.out_h, geom.out_w),
                                 (geom.in_h, geom.in_w), (2 - geom.pad[0], 2 - geom.pad[1]),
                                 True, bias, activation)

    def workspace_bytes(self, batch):
        return self.plan.workspace_bytes(batch)

    def launches(self, dy, w, dx, b, ws, beta):
        return self.plan.launches(dy, w, dx, b, ws, beta)
