"""MatMul: the product of two data tensors with numpy's ``matmul`` batching, on the GEMM
kernels with strided batches (docs/operators.md).

Inputs A (..., M, K) and B (..., K, N) (``transpose_a``: A is (..., K, M) and used
transposed; ``transpose_b``: B is (..., N, K)); output alpha * op(A) @ op(B) of shape
batch + (M, N), where batch is the two batch shapes broadcast. Each operand's batch must
equal that batch or be absent (or all ones): it is then read with batch stride 0, and its
gradient is the sum over the batch (a batched GEMM into the workspace, then a reduce).
"""
import math

import numpy as np

from ..core.gemm import Gemm
from ..core.pointwise import PointwiseBroadcastReduce
from ..tensor import ws_view
from ..utils import round_up
from ..dtypes import HALF_TYPES, dtype_name
from .base import Layer, Setup, TensorSpec, register


@register("MatMul")
class MatMul(Layer):
    """alpha * op(A) @ op(B) over broadcast batches (Transformer attention's Q K^T and
    P V where the products are done apart, linear maps of data tensors)."""
    OPTIONS = {"transpose_a": False, "transpose_b": False, "alpha": 1.0}
    BACKWARD_READS_INPUTS = True
    HALF_STORAGE = "prefers"

    def __init__(self, ctx, name=None, **options):
        super().__init__(ctx, name=name, **options)
        o = self.options
        for key in ("transpose_a", "transpose_b"):
            if o[key] not in (True, False, 0, 1):
                self.fail("option %r must be true/false, got %r" % (key, o[key]))
        if isinstance(o["alpha"], bool) or not isinstance(o["alpha"], (int, float)):
            self.fail("option 'alpha' must be a number, got %r" % (o["alpha"],))
        self.ta, self.tb = bool(o["transpose_a"]), bool(o["transpose_b"])
        self.alpha = float(o["alpha"])

    def build(self, in_specs):
        if len(in_specs) != 2:
            self.fail("expects 2 inputs (A and B), got %d" % len(in_specs))
        a, b = (s.shape for s in in_specs)
        dt = in_specs[0].dtype
        if len(a) < 2 or len(b) < 2 or dt not in (np.float32,) + HALF_TYPES or \
                in_specs[1].dtype != dt:
            self.fail("inputs must be both float32 (or both float16, or bfloat16) with at least 2 "
                      "dimensions, got %s %s and %s %s" % (a, dtype_name(in_specs[0].dtype), b,
                                                           dtype_name(in_specs[1].dtype)))
        m, k = (a[-1], a[-2]) if self.ta else (a[-2], a[-1])
        k2, n = (b[-1], b[-2]) if self.tb else (b[-2], b[-1])
        if k != k2:
            self.fail("op(A) is %dx%d and op(B) is %dx%d: the inner sizes differ"
                      % (m, k, k2, n))
        try:
            batch = tuple(np.broadcast_shapes(a[:-2], b[:-2]))
        except ValueError:
            self.fail("the batch shapes %s and %s do not broadcast" % (a[:-2], b[:-2]))
        count = math.prod(batch)
        self.m, self.n, self.k, self.batch = m, n, k, count
        self.full = []
        for what, shape in (("A", a), ("B", b)):
            own = (1,) * (len(batch) - len(shape[:-2])) + tuple(shape[:-2])
            if own != batch and math.prod(own) != 1:
                self.fail("%s's batch %s must equal the output's %s or be absent: partial "
                          "broadcasting is not supported" % (what, shape[:-2], batch))
            self.full.append(own == batch and count > 1)
        self.dtype = dt
        summed = [not full and count > 1 for full in self.full]
        # a gradient summed over the batch: float32 products in the workspace, then the sum
        da, db = ((dt, dt, np.float32 if s else dt) for s in summed)
        p = self.precision
        self.forward_gemm = Gemm(self.ctx, m, n, k, self.ta, self.tb, batch=count, precision=p,
                                 dtypes=(dt, dt, dt))
        # dA (stored shape) and dB (stored shape), as batched GEMMs over dC
        if self.ta:   # dA^T = op(B) dC^T: (K, M)
            self.gemm_da = Gemm(self.ctx, k, m, n, self.tb, True, batch=count, precision=p,
                                dtypes=da)
        else:         # dA = dC op(B)^T: (M, K)
            self.gemm_da = Gemm(self.ctx, m, k, n, False, not self.tb, batch=count, precision=p,
                                dtypes=da)
        if self.tb:   # dB^T = dC^T op(A): (N, K)
            self.gemm_db = Gemm(self.ctx, n, k, m, True, self.ta, batch=count, precision=p,
                                dtypes=db)
        else:         # dB = op(A)^T dC: (K, N)
            self.gemm_db = Gemm(self.ctx, k, n, m, not self.ta, False, batch=count, precision=p,
                                dtypes=db)
        sizes = (m * k, k * n)
        self.sums = [PointwiseBroadcastReduce(
            self.ctx, [((count, size), np.float32)], [((1, size), dt)], "y0 = x0;",
            name="matmul_batch_sum") if s else None for s, size in zip(summed, sizes)]
        # the workspace: the per-batch products a broadcast operand's gradient sums, then
        # the GEMMs' split-K partial sums
        self.sum_bytes = round_up(max([0] + [4 * count * size for s, size in zip(self.sums, sizes)
                                             if s is not None]), 16)  # 16: float4 GEMM reads
        ws = self.sum_bytes + 4 * max(g.workspace_elements
                                      for g in (self.forward_gemm, self.gemm_da, self.gemm_db))
        return Setup([TensorSpec(batch + (m, n), dt)], [], ws)

    def _strides(self):
        return [self.m * self.k if self.full[0] else 0, self.k * self.n if self.full[1] else 0]

    def forward(self, x, y, params, ws, saved):
        sa, sb = self._strides()
        return self.forward_gemm.launches(x[0], x[1], y[0], alpha=self.alpha, stride_a=sa,
                                          stride_b=sb, stride_c=self.m * self.n,
                                          workspace=self.forward_gemm.workspace_in(ws, self.sum_bytes))

    def backward(self, x, dx, y, dy, params, dparams, ws, saved, accumulate):
        a, b, dc = x[0], x[1], dy[0]
        sa, sb = self._strides()
        mn = self.m * self.n
        out = []
        for i, (gemm, size, sums) in enumerate(((self.gemm_da, self.m * self.k, self.sums[0]),
                                                (self.gemm_db, self.k * self.n, self.sums[1]))):
            if dx[i] is None:
                continue
            beta = float(accumulate[i])
            target = dx[i] if sums is None else ws_view(ws, 0, self.batch * size)
            if i == 0:
                first, second = (b, dc) if self.ta else (dc, b)
                strides = dict(stride_a=sb, stride_b=mn) if self.ta else dict(stride_a=mn,
                                                                              stride_b=sb)
            else:
                first, second = (dc, a) if self.tb else (a, dc)
                strides = dict(stride_a=mn, stride_b=sa) if self.tb else dict(stride_a=sa,
                                                                              stride_b=mn)
            out += gemm.launches(first, second, target, alpha=self.alpha,
                                 beta=beta if sums is None else 0.0,
                                 stride_c=size if (sums is not None or self.full[i]) else 0,
                                 workspace=gemm.workspace_in(ws, self.sum_bytes), **strides)
            if sums is not None:
                out += sums.launches([target.view((self.batch, size))],
                                     [dx[i].view((1, size))], beta=beta)
        return out
