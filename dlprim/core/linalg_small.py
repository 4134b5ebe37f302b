"""Small dense linear algebra (``kernels/linalg_small.cl``): LU with partial pivoting,
its solves, triangular solves and Cholesky over batches of n x n matrices, one
work-group per matrix with the matrix in local memory, so n <= MAX_N.

Every tensor is a contiguous dlprim Tensor of (batch, n, n) matrices or (batch, n, k)
right-hand sides, row-major; pivots and info are int32 as LAPACK returns them (pivots
1-based), so PyTorch's linalg operators can hand them on unchanged.
"""
import numpy as np

from ..dtypes import cl_type
from ..kernels import program
from ..utils import round_up

__all__ = ["MAX_N", "fits", "lu_factor", "lu_unpack", "lu_solve", "tri_solve", "cholesky"]

MAX_N = 64  # a float matrix of 64 x 64 is 16 KiB of local memory


def fits(n):
    """Whether an n x n matrix fits one work-group's kernels (n <= MAX_N)."""
    return int(n) <= MAX_N


def _program(ctx, dtype):
    store = cl_type(dtype)
    compute = "float" if store in ("half", "bfloat16") else store  # 16-bit floats: in float
    return program.get(ctx, "linalg_small", T=store, C=compute, MAX_N=MAX_N)


def _wg(ctx, n):
    return max(1, min(program.pow2_at_least(max(int(n), 1)), MAX_N, ctx.facts.max_work_group))


def _u(*values):
    return [np.uint64(v) for v in values]


def _run(ctx, dtype, kernel, gsize, lsize, args, queue):
    program.enqueue_now(queue or ctx.queue, _program(ctx, dtype), kernel, gsize, lsize,
                        program.expand_args(args))


def _check(n):
    if not fits(n):
        raise ValueError("small linalg kernels: matrices of at most %d x %d, got %d x %d"
                         % (MAX_N, MAX_N, n, n))


def lu_factor(ctx, a, lu, piv, info, stats, batch, n, rows=None, queue=None):
    """lu, piv, info = LU of the (rows x n, square by default) matrices of a (getrf);
    stats (batch, 3) of square ones: det, the sign of det (0 when singular), log |det|."""
    rows = n if rows is None else rows
    _check(max(rows, n))
    if batch * n * rows == 0:
        return
    wg = _wg(ctx, rows)
    _run(ctx, a.dtype, "lu_factor", (batch * wg,), (wg,), _u(rows, n) + [a, lu, piv, info, stats],
         queue)


def lu_unpack(ctx, lu, piv, p, l, u, batch, rows, n, queue=None):
    """p (rows x rows), l (rows x k), u (k x n), k = min(rows, n): A = p l u from
    lu_factor's lu and piv."""
    _check(max(rows, n))
    if batch * rows * n == 0:
        return
    wg = _wg(ctx, max(rows, n))
    _run(ctx, lu.dtype, "lu_unpack", (batch * wg,), (wg,), _u(rows, n) + [lu, piv, p, l, u],
         queue)


def _columns(ctx, nrhs, batch):
    wg = min(64, ctx.facts.max_work_group)
    return (round_up(max(nrhs, 1), wg), batch), (wg, 1)


def lu_solve(ctx, lu, piv, b, x, batch, n, nrhs, adjoint=False, identity=False, queue=None):
    """x = A^-1 b (A^-T b with ``adjoint``) from lu_factor's lu and piv; with ``identity``
    b is the identity (not read): x = A^-1."""
    if batch * n * nrhs == 0:
        return
    gsize, lsize = _columns(ctx, nrhs, batch)
    _run(ctx, lu.dtype, "lu_solve", gsize, lsize,
         _u(n, nrhs) + [np.int32(adjoint), np.int32(identity), lu, piv,
                        b if b is not None else x, x], queue)


def tri_solve(ctx, a, b, x, batch, n, nrhs, upper, unit=False, queue=None):
    """x = A^-1 b for triangular matrices A (upper or lower; ``unit``: a unit diagonal)."""
    if batch * n * nrhs == 0:
        return
    gsize, lsize = _columns(ctx, nrhs, batch)
    _run(ctx, a.dtype, "tri_solve", gsize, lsize,
         _u(n, nrhs) + [np.int32(upper), np.int32(unit), a, b, x], queue)


def cholesky(ctx, a, l, info, batch, n, queue=None):
    """l = the lower Cholesky factor of each matrix of a (its lower triangle is read);
    info: the order of the first minor that is not positive definite (potrf)."""
    _check(n)
    if batch * n == 0:
        return
    wg = _wg(ctx, n)
    _run(ctx, a.dtype, "cholesky", (batch * wg,), (wg,), _u(n) + [a, l, info], queue)
