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


# (TM, TN, TK, WM, WN) on GPUs, largest first; every one satisfies the template's load
# mappings (work-group size a multiple of TN and TK, tiles a multiple of the work-group)
GPU_TILES = ((128, 128, 16, 8, 8), (64, 128, 16, 8, 8), (64, 64, 16, 4, 4), (32, 64, 16, 4, 4))
CPU_TILES = (32, 32, 8, 4, 4)
VEC_READS = True  # float4 local-memory reads on GPUs (benchmarks/conv.py --compare-vec)


def _pow2_at_least(n):
    return 1 << max(int(n) - 1, 0).bit_length()


def tiles_for(ctx, m, n, groups=1, fill=True):
    """Tiles for an m x n GEMM (times ``groups``): the largest tile that does not overhang
    m and, with ``fill``, still gives most compute units a work-group."""
    if not ctx.facts.is_gpu:
        return CPU_TILES
    fitting = [t for t in GPU_TILES if t[0] <= max(32, _pow2_at_least(m))
               and t[1] <= max(64, _pow2_at_least(n))]
    if not fill:
        return fitting[0]
    want = ctx.facts.compute_units * 3 // 4
    for t in fitting:
        if -(-m // t[0]) * -(-n // t[1]) * groups >= want:
            return t
    return fitting[-1]


class ConvGemm:
    """One implicit-GEMM direction (``mode``) for a geometry. Forward and backward-data
    pick their tiles per batch size (their N grows with it); ``batch`` is the size whose
    kernels are built at once."""

    def __init__(self, ctx, geom, mode, bias=False, activation="identity", batch=16):
        self.ctx, self.geom, self.mode = ctx, geom, mode
        self.baked, self.geom_args = geometry_args(ctx, geom)
        # strided backward-data runs per stride phase (see the template)
        self.phased = (mode == "backward_data" and max(geom.sh, geom.sw) > 1
                       and geom.dh == geom.dw == 1)
        self.params = dict(MODE=mode, BIAS=bool(bias), ACTIVATION=activation,
                           GEOM_BAKED=self.baked, PHASES=self.phased)
        self.bias = bool(bias)
        self.program(batch)

    def tiles(self, batch):
        m, n, _ = self.dims(batch)
        # backward-filter fills the device by splitting its reduction instead
        return tiles_for(self.ctx, m, n, self.geom.groups, fill=self.mode != "backward_filter")

    def program(self, batch):
        tm, tn, tk, wm, wn = self.tiles(batch)
        # float4 reads of the local tiles where every work-item owns runs of 4
        # (not where the reduction is short: then the strided epilogue stores dominate)
        k = self.dims(batch)[2]
        vec = 4 if (VEC_READS and self.ctx.facts.is_gpu and wm % 4 == 0 and wn % 4 == 0
                    and (self.mode == "backward_filter" or k >= 256)) else 1
        return program.get(self.ctx, "conv_gemm", TM=tm, TN=tn, TK=tk, WM=wm, WN=wn, VEC=vec,
                           **self.params)

    def dims(self, batch):
        g = self.geom
        cg, kg, khw = g.in_c // g.groups, g.out_c // g.groups, g.kh * g.kw
        if self.mode == "forward":
            return kg, batch * g.out_h * g.out_w, cg * khw
        if self.mode == "backward_data" and self.phased:
            return (cg, batch * -(-g.in_h // g.sh) * -(-g.in_w // g.sw),
                    kg * -(-g.kh // g.sh) * -(-g.kw // g.sw))
        if self.mode == "backward_data":
            return cg, batch * g.in_h * g.in_w, kg * khw
        return kg, cg * khw, batch * g.out_h * g.out_w

    def phases(self, batch):
        """Per stride phase (ph, pw): its kernel arguments and (m, n, k)."""
        g = self.geom
        out = []
        for ph in range(g.sh):
            for pw in range(g.sw):
                ihp, iwp = -(-(g.in_h - ph) // g.sh), -(-(g.in_w - pw) // g.sw)
                if ihp <= 0 or iwp <= 0:
                    continue
                r0, s0 = (ph + g.pad[0]) % g.sh, (pw + g.pad[1]) % g.sw
                rh, rw = max(0, -(-(g.kh - r0) // g.sh)), max(0, -(-(g.kw - s0) // g.sw))
                qh, qw = (ph + g.pad[0] - r0) // g.sh, (pw + g.pad[1] - s0) // g.sw
                dims = (g.in_c // g.groups, batch * ihp * iwp, g.out_c // g.groups * rh * rw)
                out.append(([ph, pw, ihp, iwp, r0, s0, rh, rw, qh, qw], dims))
        return out

    def launches(self, batch, a, b, out, bias=None, alpha=1.0, beta=0.0):
        """All launches of this direction (one, or one per stride phase)."""
        if not self.phased:
            return [self.launch(batch, a, b, out, bias, alpha, beta)]
        return [self.launch(batch, a, b, out, bias, alpha, beta, phase=p, dims=d)
                for p, d in self.phases(batch)]

    def launch(self, batch, a, b, out, bias=None, alpha=1.0, beta=0.0, splits=1,
               k_per_split=None, split_stride=0, phase=None, dims=None):
        tm, tn, tk, wm, wn = self.tiles(batch)
        m, n, k = dims or self.dims(batch)
        if k_per_split is None:
            k_per_split = k
        local = (tn // wn, tm // wm, 1)
        groups = self.geom.groups * splits
        gsize = (max(1, program.round_up(n, tn) // tn) * local[0],
                 program.round_up(m, tm) // tm * local[1], groups)
        args = [np.int32(batch)] + self.geom_args + [np.int32(splits), np.int32(k_per_split)]
        args += [np.int32(v) for v in phase or []]
        args += [a, b, out, np.uint64(split_stride)]
        if self.bias:
            args.append(bias)
        args += [scalar(alpha), scalar(beta)]
        return program.Launch(self.program(batch), "conv_gemm", gsize, local, args,
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
    def __init__(self, ctx, geom, bias=False, activation="identity", batch=16):
        if geom.is_plain_1x1:
            self.op = _Plain1x1(ctx, geom.out_c, geom.in_h * geom.in_w, geom.in_c, False,
                                bias, activation)
        else:
            self.op = ConvGemm(ctx, geom, "forward", bias, activation, batch)

    def workspace_bytes(self, batch):
        return 0

    def launches(self, x, w, y, b, ws, beta):
        if isinstance(self.op, _Plain1x1):
            return self.op.launches(w, x, y, b, beta)
        return [self.op.launch(x.shape[0], w, x, y, b, beta=beta)]


class BackwardData:
    def __init__(self, ctx, geom, bias=False, activation="identity", batch=16):
        if geom.is_plain_1x1:
            self.op = _Plain1x1(ctx, geom.in_c, geom.in_h * geom.in_w, geom.out_c, True,
                                bias, activation)
        else:
            self.op = ConvGemm(ctx, geom, "backward_data", bias, activation, batch)

    def workspace_bytes(self, batch):
        return 0

    def launches(self, dy, w, dx, b, ws, beta):
        if isinstance(self.op, _Plain1x1):
            return self.op.launches(w, dy, dx, b, beta)
        return self.op.launches(dy.shape[0], w, dy, dx, b, beta=beta)


class BackwardFilter:
    def __init__(self, ctx, geom, splits=None, batch=16):
        self.ctx, self.geom, self.forced_splits = ctx, geom, splits
        self.op = ConvGemm(ctx, geom, "backward_filter", batch=batch)

    def split_plan(self, batch):
        """(splits, k_per_split): cut the batch*pixels reduction so the GPU fills up."""
        m, n, k = self.op.dims(batch)
        tm, tn, tk = self.op.tiles(batch)[:3]
        if self.forced_splits:
            splits = self.forced_splits
        else:
            work_groups = -(-m // tm) * -(-n // tn) * self.geom.groups
            target = 2 * self.ctx.facts.compute_units
            splits = max(1, min(-(-target // work_groups), k // 512, 256))
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
        reduce = program.Launch(self.op.program(batch), "conv_split_reduce",
                                (program.round_up(size, 256),), (256,) if self.ctx.facts.is_gpu
                                else None, [np.int32(size), np.int32(splits), partial, dw,
                                            scalar(beta)])
        return [self.op.launch(batch, dy, x, partial, splits=splits, k_per_split=k_per_split,
                               split_stride=size), reduce]
