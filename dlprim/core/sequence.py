"""The value sequences of the creation operators (``kernels/sequence.cl``): arange,
linspace and logspace, computed on the device the way PyTorch's CPU kernels compute them
(integers exactly in long; floats in double where the device has it, as PyTorch steps)."""
import numpy as np

from ..dtypes import as_dtype, cl_type
from ..kernels import program
from ..utils import round_up

__all__ = ["ARANGE", "LINSPACE", "LOGSPACE", "sequence", "compute_dtype"]

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
