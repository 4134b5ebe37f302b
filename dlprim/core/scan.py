"""Inclusive scans along one axis (``kernels/scan.cl``): cumulative sum, product,
log-sum-exp, and the running maximum / minimum with its index (PyTorch's cummax: the last
of equal values, a NaN once seen stays).

A tensor is seen as (outer, n, inner) around the axis; one work-group scans one row, so
any length runs in one launch: each work-item folds a chunk of the row, the chunk totals
are scanned in local memory (Hillis & Steele, CACM 1986), and each chunk is scanned again
from the totals before it. CPU drivers run a work-group as a loop on one thread, so there
a work-group is one item and a row is a plain loop, rows side by side on the cores.

A 64 x 4096 float32 cumsum: 0.8 ms on an H200 (NVIDIA's OpenCL), 3 ms on Intel's CPU
runtime on a loaded 2-core machine (tests/test_torch_reduce.py times it).
"""
import numpy as np

from ..dtypes import as_dtype, cl_type
from ..kernels import program
from ..tensor import Tensor
from .pointwise import memo

__all__ = ["Scan", "scan_launches", "OPS", "accumulator"]

OPS = ("sum", "prod", "logsumexp", "max", "min")
# elements per work-item before a row takes another one (GPUs): long enough that the
# chunk loop hides the local-memory steps, short enough that a row of a few thousand
# fills a work-group
_ELEMS_PER_ITEM = 8
_WG_CAP = 256


def accumulator(dtype, fp64=False):
    """The OpenCL type a scan of ``dtype`` values is computed in (PyTorch's CPU acc_type):
    float for 16-bit floats, double for float32 where the device has it (a long running
    sum in float drifts, and the backward of logcumsumexp subtracts two such sums), long
    for every integer type."""
    ct = cl_type(dtype)
    if ct in ("half", "bfloat16"):
        return "float"
    if ct in ("float", "double"):
        return "double" if fp64 or ct == "double" else "float"
    return "long"


class Scan:
    """An inclusive scan ``op`` of one dtype: ``launches(x, y, yi, outer, n, inner)``."""

    def __init__(self, ctx, op, dtype, wg):
        if op not in OPS:
            raise ValueError("Scan: op %r is not one of %s" % (op, OPS))
        self.ctx, self.op, self.dtype, self.wg = ctx, op, as_dtype(dtype), int(wg)
        ct = cl_type(self.dtype)
        self.program = program.get(ctx, "scan", T=ct, OP=op, WG=self.wg,
                                   A=accumulator(self.dtype, ctx.facts.fp64))
        self._dummy = None

    def launches(self, x, y, yi, outer, n, inner):
        """x, y: contiguous (outer, n, inner) tensors of the dtype; yi: int64 indices of
        the same shape for max/min, else None."""
        rows = outer * inner
        if rows == 0 or n == 0:
            return []
        if yi is None:
            if self._dummy is None:
                self._dummy = Tensor(self.ctx, (1,), np.int64)
            yi = self._dummy
        u = np.uint64
        return [program.Launch(self.program, "scan", (rows * self.wg,), (self.wg,),
                               [u(n), u(inner), x, y, yi])]


def work_group(ctx, n):
    """Items per row: 1 on CPU drivers, else a short or a long row's (two sizes, so at
    most two programs per op and dtype)."""
    if ctx.facts.is_cpu:
        return 1
    cap = min(_WG_CAP, ctx.facts.max_work_group)
    return min(cap, 32 if n <= 32 * _ELEMS_PER_ITEM else _WG_CAP)


def scan_launches(ctx, op, x, y, yi, outer, n, inner):
    """The launches of scan ``op`` over contiguous (outer, n, inner) tensors (memoized)."""
    wg = work_group(ctx, n)
    s = memo(ctx, ("scan", op, x.dtype, wg), lambda: Scan(ctx, op, x.dtype, wg))
    return s.launches(x, y, yi, outer, n, inner)
