"""The value sequences of the creation operators (``kernels/sequence.cl``): arange,
linspace and logspace, computed on the device the way PyTorch's CPU kernels compute them
(integers exactly in long; floats in double where the device has it, as PyTorch steps),
and the (row, column) pairs of tril_indices / triu_indices (a closed-form count of the
elements before each row, searched by each element)."""
import numpy as np

from ..dtypes import as_dtype, cl_type
from ..kernels import program
from ..utils import round_up

__all__ = ["ARANGE", "LINSPACE", "LOGSPACE", "sequence", "compute_dtype", "triangle_bounds",
           "triangle_indices"]

ARANGE, LINSPACE, LOGSPACE = 0, 1, 2
_C_TYPES = {"l": "long", "d": "double", "f": "float"}  # the compute types by numpy code


def compute_dtype(ctx, dtype, mode):
    """The numpy dtype ``sequence`` computes in for storage ``dtype``."""
    if mode == ARANGE and as_dtype(dtype).kind in "iub":
        return np.dtype(np.int64)
    return np.dtype(np.float64 if ctx.facts.fp64 else np.float32)


def sequence(ctx, y, mode, start, step, end=0, base=10.0, queue=None):
    """y[i] (a contiguous 1-D dlprim Tensor) = the ``mode`` sequence: ARANGE start + i*step;
    LINSPACE start + i*step up to the halfway point, end - (n-1-i)*step after it;
    LOGSPACE base ** (that linspace value)."""
    n = int(y.size)
    if n == 0:
        return
    ct = compute_dtype(ctx, y.dtype, mode)
    prog = program.get(ctx, "sequence", STORE=cl_type(as_dtype(y.dtype)),
                       COMPUTE=_C_TYPES[ct.char])
    c = ct.type
    wg = min(256, ctx.facts.max_work_group)
    halfway = n if mode == ARANGE else n // 2
    args = [np.uint64(n), c(start), c(step), c(end), np.uint64(halfway), np.int32(mode),
            c(base), y]
    program.Launch(prog, "sequence", (round_up(n, wg),), (wg,), args)(queue or ctx.queue)


def _clamped_sum(r, c, cols):
    z = min(max(-c, 0), r)
    u = min(max(cols - c, z), r)
    return (u - z) * c + (u - 1 + z) * (u - z) // 2 + cols * (r - u)


def triangle_bounds(rows, cols, offset, lower):
    """(a, b, count): row i of the triangle holds the columns [clamp(i + a, 0, cols),
    clamp(i + b, 0, cols)); count is the triangle's number of elements."""
    a, b = (-(rows + cols), offset + 1) if lower else (offset, rows + cols)
    return a, b, _clamped_sum(rows, b, cols) - _clamped_sum(rows, a, cols)


def triangle_indices(ctx, y, rows, cols, offset, lower, queue=None):
    """y (a contiguous 2 x count integer dlprim Tensor) = the (row, column) pairs of the
    lower (tril_indices) or upper (triu_indices) triangle, row-major."""
    a, b, n = triangle_bounds(rows, cols, offset, lower)
    if n == 0:
        return
    prog = program.get(ctx, "sequence", STORE=cl_type(as_dtype(y.dtype)), COMPUTE="long")
    wg = min(256, ctx.facts.max_work_group)
    args = [np.uint64(n), np.int64(rows), np.int64(cols), np.int64(a), np.int64(b), y]
    program.Launch(prog, "triangle_indices", (round_up(n, wg),), (wg,), args)(queue or ctx.queue)
