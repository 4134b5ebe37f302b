"""Index gathers and their gradients (``kernels/gather.cl``): ``index_select`` (embedding
lookups are its rows case), ``gather`` and the scatter-adds ``index_add`` / ``scatter_add``
that are their adjoints.

Every tensor is seen as (outer, n, inner) around the indexed axis and is contiguous; the
index tensor is int64 or int32. An index outside [0, n) gives NaN (0 for integers) where
it is read, and is skipped where it is added to, so a bad index is visible rather than a
read of other memory. The adds are float32 (an atomic compare-and-swap loop).
"""
import numpy as np

from ..dtypes import as_dtype, cl_type
from ..kernels import program
from ..utils import round_up
from .pointwise import memo

__all__ = ["IndexOps", "index_ops"]

_KINDS = ("index_select", "gather", "index_add", "scatter_add")


class IndexOps:
    """The four index kernels for one element dtype and one index dtype."""

    def __init__(self, ctx, dtype, index_dtype):
        self.ctx, self.dtype, self.index_dtype = ctx, as_dtype(dtype), as_dtype(index_dtype)
        if self.index_dtype not in (np.dtype(np.int64), np.dtype(np.int32)):
            raise TypeError("index kernels: indices must be int64 or int32, got %s"
                            % self.index_dtype.name)
        self.program = program.get(ctx, "gather", T=cl_type(self.dtype),
                                   I=cl_type(self.index_dtype))
        self._wg = min(256, ctx.facts.max_work_group)

    def launches(self, kind, src, idx, dst, outer, n, m, inner, alpha=1.0, skip=-1):
        """One launch of ``kind`` over (outer, n, inner) / (outer, m, inner) views:
        ``index_select`` and ``gather`` write dst (of (outer, m, inner)) from src (of
        (outer, n, inner)); ``index_add`` and ``scatter_add`` add src (of (outer, m, inner))
        into dst (of (outer, n, inner)), ``index_add`` scaled by alpha and leaving out the
        index ``skip``."""
        if kind not in _KINDS:
            raise ValueError("index kernels: kind %r is not one of %s" % (kind, _KINDS))
        if kind in ("index_add", "scatter_add") and self.dtype != np.float32:
            raise TypeError("index kernels: %s adds float32 values, got %s"
                            % (kind, self.dtype.name))
        total = outer * m * inner
        if total == 0:
            return []
        u = np.uint64
        args = [u(total), u(n), u(m), u(inner), src, idx, dst]
        if kind == "index_add":
            args += [np.float32(alpha), np.int64(skip)]
        return [program.Launch(self.program, kind, (round_up(total, self._wg),), (self._wg,),
                               args)]


    def select_scaled(self, src, scale, idx, dst, n, m, inner):
        """dst (m, inner) float32 = the rows ``idx`` of an int8 table src (n, inner) times
        their float32 ``scale`` (n,) (the IndexOps of int8 elements); NaN rows for an
        index outside [0, n)."""
        if self.dtype != np.int8:
            raise TypeError("index kernels: scaled rows are of an int8 table, got %s"
                            % self.dtype.name)
        total = m * inner
        if total == 0:
            return []
        u = np.uint64
        return [program.Launch(self.program, "index_select_scaled",
                               (round_up(total, self._wg),), (self._wg,),
                               [u(total), u(n), u(m), u(inner), src, scale, idx, dst])]


def index_ops(ctx, dtype, index_dtype):
    """The ``IndexOps`` of these dtypes on ctx (made once)."""
    return memo(ctx, ("index_ops", as_dtype(dtype), as_dtype(index_dtype)),
                 lambda: IndexOps(ctx, dtype, index_dtype))
