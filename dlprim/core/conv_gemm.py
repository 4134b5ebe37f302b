"""Implicit-GEMM convolution (``kernels/conv_gemm.cl``): the three directions.

Each direction is one tiled GEMM whose loads gather straight from the NCHW tensors; see
the template for the index algebra. Plain 1x1 layers run forward and backward-data on
``core/gemm.py`` (batched over images); their backward-filter sums over the batch, which
the implicit GEMM does in its reduction.
"""
import numpy as np

from ..kernels import program
from .conv import geometry_args, scalar, ws_view
from .gemm import Gemm

__all__ = ["Forward", "BackwardData", "BackwardFilter", "ConvGemm", "tiles_for"]


def tiles_for(ctx, m, n):
    """(TM, TN, TK, WM, WN) for a GEMM of m x n outputs on this device."""
    if not ctx.facts.is_gpu:
        return 32, 32, 8, 4, 4
    if m <= 64:
        return 64, 128, 16, 8, 8
    return 128, 128, 16, 8, 8


class ConvGemm:
    """One implicit-GEMM direction (``mode``) for a geometry, kernels built here."""

    def __init__(self, ctx, geom, mode, bias=False, activation="identity", tiles=None):
        self.ctx, self.geom, self.mode = ctx, geom, mode
        g = geom
        cg, kg, khw = g.in_c // g.groups, g.out_c // g.groups, g.kh * g.kw
        # GEMM M and the batch-independent one of N/K, to size the tiles
        self.gemm_m = {"forward": kg, "backward_data": cg, "backward_filter": kg}[mode]
        n_hint = {"forward": 64 * g.out_h * g.out_w, "backward_data": 64 * g.in_h * g.in_w,
                  "backward_filter": cg * khw}[mode]
        self.tiles = tiles or tiles_for(ctx, self.gemm_m, n_hint)
        tm, tn, tk, wm, wn = self.tiles
        baked, self.geom_args = geometry_args(ctx, geom)
        self.program = program.get(ctx, "conv_gemm", MODE=mode, TM=tm, TN=tn, TK=tk, WM=wm,
                                   WN=wn, BIAS=bool(bias), ACTIVATION=activation,
                                   GEOM_BAKED=baked)
        self.bias = bool(bias)

    def dims(self, batch):
        g = self.geom
        cg, kg, khw = g.in_c // g.groups, g.out_c // g.groups, g.kh * g.kw
        if self.mode == "forward":
            return kg, batch * g.out_h * g.out_w, cg * khw
        if self.mode == "backward_data":
            return cg, batch * g.in_h * g.in_w, kg * khw
        return kg, cg * khw, batch * g.out_h * g.out_w

    def launch(self, batch, a, b, out, bias=None, alpha=1.0, beta=0.0, splits=1,
               k_per_split=None, split_stride=0):
        tm, tn, tk, wm, wn = self.tiles
        m, n, k = self.dims(batch)
        if k_per_split is None:
            k_per_split = k
        local = (tn // wn, tm // wm, 1)
        groups = self.geom.groups * splits
        gsize = (program.round_up(n, tn) // tn * local[0],
                 program.round_up(m, tm) // tm * local[1], groups)
        args = [np.int32(batch)] + self.geom_args + [np.int32(splits), np.int32(k_per_split),
                                                     a, b, out, np.uint64(split_stride)]
        if self.bias:
            args.append(bias)
        args += [scalar(alpha), scalar(beta)]
        return program.Launch(self.program, "conv_gemm", gsize, local, args,
                              flops=self.geom.flops(batch))


class _Plain1x1:
    """A 1x1, stride-1, pad-0 layer is a GEMM per image; the Gemm's strided batch runs
    them in one launch: forward y[b] = w @ x[b], backward-data dx[b] = w^T @ dy[b]."""

    def __init__(self, ctx, m, n, k, trans_a, bias, activation):
        self.ctx, self.shape, self.trans_a = ctx, (m, n, k), trans_a
        self.bias, self.activation = "row" if bias else None, activation
        self.ops = {}
        self.op(1)  # build the kernels now

    def op(self, batch):
        if batch not in self.ops:
            m, n, k = self.shape
            self.ops[batch] = Gemm(self.ctx, m, n, k, trans_a=self.trans_a, bias=self.bias,
                                   activation=self.activation, batch=batch)
        return self.ops[batch]

    def launches(self, w, src, dst, b, beta):
        m, n, k = self.shape
        return self.op(src.shape[0]).launches(w, src, dst, bias=b, beta=beta, stride_a=0,
                                              stride_b=k * n, stride_c=m * n)


class Forward:
    def __init__(self, ctx, geom, bias=False, activation="identity"):
        if geom.is_plain_1x1:
            self.op = _Plain1x1(ctx, geom.out_c, geom.in_h * geom.in_w, geom.in_c, False,
                                bias, activation)
        else:
            self.op = ConvGemm(ctx, geom, "forward", bias, activation)

    def workspace_bytes(self, batch):
        return 0

    def launches(self, x, w, y, b, ws, beta):
        if isinstance(self.op, _Plain1x1):
            return self.op.launches(w, x, y, b, beta)
        return [self.op.launch(x.shape[0], w, x, y, b, beta=beta)]


class BackwardData:
    def __init__(self, ctx, geom, bias=False, activation="identity"):
        if geom.is_plain_1x1:
            self.op = _Plain1x1(ctx, geom.in_c, geom.in_h * geom.in_w, geom.out_c, True,
                                bias, activation)
        else:
            self.op = ConvGemm(ctx, geom, "backward_data", bias, activation)

    def workspace_bytes(self, batch):
        return 0

    def launches(self, dy, w, dx, b, ws, beta):
        if isinstance(self.op, _Plain1x1):
            return self.op.launches(w, dy, dx, b, beta)
        return [self.op.launch(dy.shape[0], w, dy, dx, b, beta=beta)]


class BackwardFilter:
    def __init__(self, ctx, geom, splits=None):
        self.ctx, self.geom, self.forced_splits = ctx, geom, splits
        self.op = ConvGemm(ctx, geom, "backward_filter")

    def split_plan(self, batch):
        """(splits, k_per_split): cut the batch*pixels reduction so the GPU fills up."""
        m, n, k = self.op.dims(batch)
        tm, tn, tk = self.op.tiles[:3]
        if self.forced_splits:
            splits = self.forced_splits
        else:
            work_groups = -(-m // tm) * -(-n // tn) * self.geom.groups
            target = 2 * self.ctx.facts.compute_units
            splits = max(1, min(-(-target // work_groups), k // 1024, 64))
        k_per_split = program.round_up(-(-k // splits), tk)
        return -(-k // k_per_split), k_per_split

    def workspace_bytes(self, batch):
        splits, _ = self.split_plan(batch)
        return 0 if splits == 1 else splits * int(np.prod(self.geom.weight_shape)) * 4

    def launches(self, x, dy, dw, ws, beta):
        batch = x.shape[0]
        splits, k_per_split = self.split_plan(batch)
        if splits == 1:
            return [self.op.launch(batch, dy, x, dw, beta=beta)]
        size = int(np.prod(self.geom.weight_shape))
        partial = ws_view(ws, 0, splits * size)
        reduce = program.Launch(self.op.program, "conv_split_reduce",
                                (program.round_up(size, 256),), (256,) if self.ctx.facts.is_gpu
                                else None, [np.int32(size), np.int32(splits), partial, dw,
                                            scalar(beta)])
        return [self.op.launch(batch, dy, x, partial, splits=splits, k_per_split=k_per_split,
                               split_stride=size), reduce]
