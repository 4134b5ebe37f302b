"""Linear algebra on ocl devices. Matrix products run on dlprim's ``Gemm`` (through
ops_nn's ``_gemm``; float16 and bfloat16 operands compute in float32 and round once at
the end); matrix-vector products, dot and trace are pointwise-reduce
expressions; the small dense factorizations (LU, Cholesky, their solves, inverse,
determinant) run one work-group per matrix (``core/linalg_small.py``). Composite
operators (matmul, einsum, tensordot, kron, inner, multi_dot, outer, the matrix norms) reach
these through PyTorch's decompositions; gradients come from PyTorch's autograd."""
import numpy as np
import torch

from ..core import linalg_small
from ..core.pointwise import pointwise, pointwise_reduce
from ..tensor import Tensor
from . import ops_nn
from .dispatch import handle, register
from .ops_tensor import convert, meta_of, meta_result
from .tensor import as_dlprim, assign, empty, numpy_dtype, to_cpu, write_into

aten = torch.ops.aten

__all__ = []


def _ctx(t):
    return t._ocl_storage.ctx


def _new(shape, dtype, like):
    return empty(tuple(shape), dtype, like._ocl_storage.index)


def _name(dtype):
    return {torch.float32: "Float", torch.float16: "Half", torch.bfloat16: "BFloat16",
            torch.int64: "Long", torch.int32: "Int", torch.uint8: "Byte",
            torch.bool: "Bool"}.get(dtype, str(dtype))


def _same_dtype(op, *ts):
    if len({t.dtype for t in ts}) > 1:
        raise RuntimeError("%s: expected the operands to have the same dtype, got %s"
                           % (op, ", ".join(_name(t.dtype) for t in ts)))
    if ts[0].dtype == torch.bool:
        raise NotImplementedError('"%s" not implemented for \'Bool\'' % op)


def _scalar(dtype, value):
    """A pointwise parameter of the compute type of ``dtype``."""
    if dtype == torch.float64:
        return np.float64(value)
    if dtype.is_floating_point:
        return np.float32(value)
    return np.uint8(bool(value)) if dtype == torch.bool else np.int64(value)


# ----- matrix products: Gemm for float32, 16-bit floats through float32, integers and
# float64 as a sum-of-products reduction in their own type (Gemm computes in float32)
_GEMM_TYPES = (torch.float32, torch.float16, torch.bfloat16)
def _in_float32(fn, *ts):
    """fn over float32 operands; 16-bit float operands are widened and the result rounded
    back once."""
    dtype = ts[0].dtype
    if dtype == torch.float32:
        return fn(*ts)
    return convert(fn(*[convert(t, torch.float32) for t in ts]), dtype)


def _reduce_product(a, b):
    """a @ b for 2-D or 3-D operands: (.., n, k, 1) * (.., 1, k, m) summed over k."""
    n, k, m = a.shape[-2], a.shape[-1], b.shape[-1]
    lead = tuple(a.shape[:-2])
    out = _new(lead + (n, m), a.dtype, a)
    if out.numel():
        pointwise_reduce(_ctx(a), [as_dlprim(a).view(lead + (n, k, 1)),
                                   as_dlprim(b).view(lead + (1, k, m))],
                         [as_dlprim(out).view(lead + (n, 1, m))], "y0 = x0 * x1;")
    return out


def _product(a, b):
    """a @ b for 2-D or 3-D (batched) operands of one dtype: a new contiguous tensor (16-bit
    operands on the Gemm of their type: tensor cores where the device has them)."""
    if a.dtype in _GEMM_TYPES:
        return (ops_nn._mm if a.dim() == 2 else ops_nn._bmm)(a, b)
    return _reduce_product(a, b)


@register(aten.mm.default)
def _mm(a, b):
    if a.dim() == 2 and b.dim() == 2 and a.shape[1] != b.shape[0]:
        raise RuntimeError("mat1 and mat2 shapes cannot be multiplied (%dx%d and %dx%d)"
                           % (tuple(a.shape) + tuple(b.shape)))
    meta_result(aten.mm.default, a, b)  # PyTorch's checks
    _same_dtype("addmm_impl_cpu_", a, b)
    return _product(a, b)


@register(aten.bmm.default)
def _bmm(a, b):
    meta_result(aten.bmm.default, a, b)
    _same_dtype("bmm", a, b)
    return _product(a, b)


def _gemm_add(c, a, b, beta, alpha):
    """beta * c + alpha * (a @ b) for float32 2-D or 3-D a, b (c broadcast to the result);
    beta=0 never reads c."""
    out_shape = tuple(a.shape[:-1]) + (b.shape[-1],)
    out = _new(out_shape, torch.float32, a)
    if out.numel() == 0:
        return out
    if not a.shape[-1]:  # an empty sum: beta * c alone
        return _axpby(c, handle(aten.zero_.default, (out,), {}), beta, 0, out_shape)
    if beta != 0:
        assign(out, c.expand(out_shape))
    return ops_nn._gemm(a, b, out, alpha=float(alpha), beta=float(beta) if beta != 0 else 0.0)


def _add_product(op, c, a, b, beta, alpha):
    _same_dtype(op, c, a, b)
    if a.dtype in _GEMM_TYPES:
        return _in_float32(lambda c, a, b: _gemm_add(c, a, b, beta, alpha), c, a, b)
    shape = tuple(a.shape[:-1]) + (b.shape[-1],)
    return _axpby(c, _reduce_product(a, b), beta, alpha, shape)


@register(aten.addmm.default)
def _addmm(c, a, b, beta=1, alpha=1):
    meta_result(aten.addmm.default, c, a, b)
    if c.dtype == a.dtype == b.dtype and a.dtype in _GEMM_TYPES and a.shape[1] and a.shape[0] \
            and b.shape[1] and (a.dtype == torch.float32 or beta == 1 and c.numel() == b.shape[1]
                                and c.shape[-1] == b.shape[1]):
        return ops_nn._addmm(c, a, b, beta, alpha)
    return _add_product("addmm_impl_cpu_", c, a, b, beta, alpha)


def _group_bounds(offs, groups):
    """The groups' [start, end) along the cut dim, from the device's offsets (read once)."""
    ends = [int(v) for v in offs.cpu().tolist()]
    if len(ends) != groups:
        raise RuntimeError("grouped_mm: offs must have one entry per group (%d), got %d"
                           % (groups, len(ends)))
    return list(zip([0] + ends[:-1], ends))


@register(aten._grouped_mm.default)
def _grouped_mm(a, b, offs=None, bias=None, out_dtype=None):
    """torch._grouped_mm: 2-D a by 3-D b, a's rows in groups (offs: the groups' ends);
    3-D a by 2-D b, b's columns in groups; 2-D a by 2-D b, the inner dim in groups (a
    3-D result); 3-D by 3-D, a batched product. A product per group, on the Gemm; rows or
    columns past the last offset are zero. The offsets are read on the host."""
    # (PyTorch's meta kernel takes CUDA's bfloat16 alone; its CPU kernel, which
    # transformers' mixture-of-experts layers call in float32 too, any float: its checks)
    if a.dim() not in (2, 3) or b.dim() not in (2, 3):
        raise RuntimeError("grouped_mm: mat_a and mat_b must be 2-D or 3-D, got %d-D and %d-D"
                           % (a.dim(), b.dim()))
    if a.dtype != b.dtype:
        raise RuntimeError("grouped_mm: mat_a and mat_b must have one dtype, got %s and %s"
                           % (a.dtype, b.dtype))
    if a.shape[-1] != b.shape[-2]:
        raise RuntimeError("grouped_mm: contraction dims differ: mat_a %s, mat_b %s"
                           % (list(a.shape), list(b.shape)))
    if (offs is None) != (a.dim() == 3 and b.dim() == 3):
        raise RuntimeError("grouped_mm: offs is needed where an operand is 2-D, and only then")
    if bias is not None:
        raise NotImplementedError("dlprim.torch: _grouped_mm with a bias on ocl devices")
    dtype = out_dtype or a.dtype
    if a.dim() == 3 and b.dim() == 3:
        return convert(_product(a, b), dtype)
    if a.dim() == 2 and b.dim() == 3:  # a's rows in groups
        shape, groups = (a.shape[0], b.shape[2]), b.shape[0]
        part = lambda g, s, e: (a[s:e], b[g], slice(s, e))  # noqa: E731
    elif a.dim() == 3:  # b's columns in groups
        shape, groups = (a.shape[1], b.shape[1]), a.shape[0]
        part = lambda g, s, e: (a[g], b[:, s:e], (slice(None), slice(s, e)))  # noqa: E731
    else:  # the inner dim in groups: a product per group
        shape, groups = (offs.shape[0], a.shape[0], b.shape[1]), offs.shape[0]
        part = lambda g, s, e: (a[:, s:e], b[s:e], g)  # noqa: E731
    out = handle(aten.zeros.default, (shape,), {"dtype": dtype, "device": a.device})
    for g, (start, end) in enumerate(_group_bounds(offs, groups)):
        if end > start:
            x, y, where = part(g, start, end)
            out[where] = _product(x, y)
    return out


@register(aten.baddbmm.default)
def _baddbmm(c, b1, b2, beta=1, alpha=1):
    aten.baddbmm.default(meta_of(c), meta_of(b1), meta_of(b2))
    return _add_product("baddbmm", c, b1, b2, beta, alpha)


@register(aten.addbmm.default)
def _addbmm(c, b1, b2, beta=1, alpha=1):
    """sum over the batch of b1[i] @ b2[i]: one (n, batch * k) @ (batch * k, m) product."""
    aten.addbmm.default(meta_of(c), meta_of(b1), meta_of(b2))
    batch, n, k = b1.shape
    a = b1.permute(1, 0, 2).reshape(n, batch * k)
    b = b2.reshape(batch * k, b2.shape[2])
    return _add_product("addbmm", c, a, b, beta, alpha)


# ----- matrix-vector products, dot, trace: pointwise-reduce expressions (every dtype)
def _sum_of_products(xs, keep_shape, dtype, like, code="y0 = x0 * x1;"):
    """A new tensor of ``keep_shape`` (the xs' broadcast shape with 1 where it is summed)
    holding the sum of ``code``, in ``dtype``."""
    out = _new(keep_shape, dtype, like)
    if out.numel():
        pointwise_reduce(_ctx(like), [as_dlprim(x) for x in xs], [as_dlprim(out)], code)
    return out


@register(aten.dot.default, aten.vdot.default)
def _dot(a, b):
    if a.dim() != 1 or b.dim() != 1:
        raise RuntimeError("1D tensors expected, but got %dD and %dD tensors" % (a.dim(), b.dim()))
    if a.shape[0] != b.shape[0]:
        raise RuntimeError("inconsistent tensor size, expected tensor [%d] and src [%d] to have "
                           "the same number of elements, but got %d and %d elements respectively"
                           % (a.shape[0], b.shape[0], a.shape[0], b.shape[0]))
    _same_dtype("dot", a, b)
    if a.shape[0] == 0:
        return handle(aten.zero_.default, (_new((), a.dtype, a),), {})
    return _sum_of_products([a, b], (1,), a.dtype, a).view(())


@register(aten.mv.default)
def _mv(m, v):
    if m.dim() != 2 or v.dim() != 1 or m.shape[1] != v.shape[0]:
        raise RuntimeError("size mismatch, got input (%d), mat (%s), vec (%d)"
                           % (m.shape[0] if m.dim() else 0, "x".join(map(str, m.shape)),
                              v.shape[0] if v.dim() else 0))
    _same_dtype("mv", m, v)
    if m.shape[1] == 0:
        return handle(aten.zero_.default, (_new((m.shape[0],), m.dtype, m),), {})
    return _sum_of_products([m, v], (m.shape[0], 1), m.dtype, m).view((m.shape[0],))


def _axpby(c, y, beta, alpha, shape):
    """beta * c + alpha * y (c broadcast to ``shape``; beta=0 never reads c)."""
    out = _new(shape, y.dtype, y)
    if out.numel() == 0:
        return out
    ctx = _ctx(y)
    ps = [_scalar(y.dtype, beta), _scalar(y.dtype, alpha)]
    if beta == 0:
        pointwise(ctx, [as_dlprim(y)], [as_dlprim(out)], "y0 = w1 * x0;", ps)
    else:
        pointwise(ctx, [as_dlprim(c), as_dlprim(y)], [as_dlprim(out)], "y0 = w0 * x0 + w1 * x1;",
                  ps)
    return out


@register(aten.addmv.default)
def _addmv(c, m, v, beta=1, alpha=1):
    _same_dtype("addmv", c, m, v)
    return _axpby(c, _mv(m, v), beta, alpha, (m.shape[0],))


@register(aten.addr.default)
def _addr(c, v1, v2, beta=1, alpha=1):
    if v1.dim() != 1 or v2.dim() != 1:
        raise RuntimeError("addr: Expected 1-D argument vec1, but got %d-D" % v1.dim()
                           if v1.dim() != 1 else
                           "addr: Expected 1-D argument vec2, but got %d-D" % v2.dim())
    if len({c.dtype, v1.dtype, v2.dtype}) > 1:
        raise RuntimeError("addr: expected the operands to have the same dtype")
    shape = (v1.shape[0], v2.shape[0])
    out = _new(shape, c.dtype, c)
    if out.numel() == 0:
        return out
    col, ps = v1.view((shape[0], 1)), [_scalar(c.dtype, beta), _scalar(c.dtype, alpha)]
    if c.dtype == torch.bool:  # beta and alpha are truth values: (beta and c) or (alpha and v1 v2)
        code = "y0 = (w0 && x0) || (w1 && x1 && x2);" if beta else "y0 = w1 && x1 && x2;"
    else:
        code = "y0 = w0 * x0 + w1 * x1 * x2;" if beta != 0 else "y0 = w1 * x1 * x2;"
    xs = [c, col, v2] if beta != 0 else [col, col, v2]
    pointwise(_ctx(c), [as_dlprim(x) for x in xs], [as_dlprim(out)], code, ps)
    return out


@register(aten.trace.default)
def _trace(x):
    if x.dim() != 2:
        raise RuntimeError("trace: expected a matrix, but got tensor with dim %d" % x.dim())
    if x.dtype == torch.bool:
        raise NotImplementedError('"trace" not implemented for \'Bool\'')
    dtype = x.dtype if x.is_floating_point() else torch.int64
    diag = x.diagonal()
    if diag.numel() == 0:
        return handle(aten.zero_.default, (_new((), dtype, x),), {})
    return _sum_of_products([diag], (1,), dtype, x, "y0 = x0;").view(())


# ----- cross product along a dimension of length 3
@register(aten.linalg_cross.default)
def _cross(a, b, dim=-1):
    if a.dim() != b.dim():
        raise RuntimeError("linalg.cross: inputs must have the same number of dimensions.")
    m = aten.linalg_cross.default(meta_of(a), meta_of(b), dim=dim)  # PyTorch's checks
    out = _new(m.shape, m.dtype, a)
    if out.numel() == 0:
        return out
    dim = dim % out.dim()
    parts = [as_dlprim(t.expand(m.shape).narrow(dim, k, 1)) for t in (a, b) for k in range(3)]
    shape = parts[0].shape
    ys = [Tensor(_ctx(a), shape, numpy_dtype(m.dtype)) for _ in range(3)]
    pointwise(_ctx(a), parts, ys, "y0 = x1 * x5 - x2 * x4; y1 = x2 * x3 - x0 * x5; "
                                  "y2 = x0 * x4 - x1 * x3;")
    for k, y in enumerate(ys):
        write_into(out.narrow(dim, k, 1), y)
    return out


# ----- small dense factorizations, one work-group per matrix (n <= linalg_small.MAX_N)
def _square(op, A, square=True):
    """(batch shape, n) of A's n x n matrices (of its m x n ones where not ``square``)."""
    if A.dim() < 2 or (square and A.shape[-1] != A.shape[-2]):
        raise RuntimeError("%s: A must be batches of square matrices, but they are %s matrices"
                           % (op, " by ".join(map(str, A.shape[-2:])) if A.dim() >= 2 else
                              "%d-D" % A.dim()))
    if A.dtype not in (torch.float32, torch.float64):  # PyTorch's CPU has no other
        raise RuntimeError("%s: expected a float32 or float64 tensor, got %s" % (op, A.dtype))
    if not linalg_small.fits(max(A.shape[-2:])):
        raise NotImplementedError("dlprim.torch: %s on ocl devices: matrices up to %d x %d "
                                  "(one work-group per matrix), got %d x %d"
                                  % ((op, linalg_small.MAX_N, linalg_small.MAX_N)
                                     + tuple(A.shape[-2:])))
    return tuple(A.shape[:-2]), A.shape[-1]


def _batch(t, shape):
    """t as a contiguous dlprim Tensor of (batch, *shape[-k:]) matrices."""
    d = as_dlprim(t)
    return d.view((max(d.size // max(int(np.prod(shape)), 1), 1),) + tuple(shape)) if d.size else d


def _lu(A, op, square=True):
    """(LU, pivots, info, stats) of the matrices of A, new ocl tensors (stats: det, its
    sign, log |det| of square ones)."""
    batch, n = _square(op, A, square)
    rows = A.shape[-2]
    LU = _new(A.shape, A.dtype, A)
    piv = _new(batch + (min(rows, n),), torch.int32, A)
    info = _new(batch, torch.int32, A)
    stats = _new(batch + (3,), A.dtype, A)
    count = int(np.prod(batch))
    if count * n * rows:
        linalg_small.lu_factor(_ctx(A), as_dlprim(A), as_dlprim(LU), as_dlprim(piv),
                               as_dlprim(info), as_dlprim(stats), count, n, rows)
    elif count:
        handle(aten.zero_.default, (info,), {})
        handle(aten.copy_.default, (stats, torch.tensor([1.0, 1.0, 0.0])), {})
    return LU, piv, info, stats


def _check_errors(info, api_name, is_matrix=True):
    """PyTorch's LinAlgError from the info codes (read on the host)."""
    aten._linalg_check_errors.default(to_cpu(info), api_name, is_matrix=is_matrix)


@register(aten._linalg_check_errors.default)
def _linalg_check_errors(info, api_name, is_matrix):
    _check_errors(info, api_name, is_matrix)


@register(aten.linalg_lu_factor_ex.default)
def _lu_factor_ex(A, pivot=True, check_errors=False):
    if not pivot:
        raise RuntimeError("linalg.lu_factor: LU without pivoting is not implemented on the CPU")
    LU, piv, info, _ = _lu(A, "linalg.lu_factor", square=False)
    if check_errors:
        _check_errors(info, "torch.linalg.lu_factor_ex")
    return LU, piv, info


@register(aten.lu_unpack.default)
def _lu_unpack(LU, piv, unpack_data=True, unpack_pivots=True):
    """(P, L, U) with A = P L U; the parts not asked for are empty (PyTorch's rule)."""
    batch, n = _square("torch.lu_unpack", LU, square=False)
    rows, k = LU.shape[-2], min(LU.shape[-2:])
    P = _new(batch + (rows, rows), LU.dtype, LU)
    L = _new(batch + (rows, k), LU.dtype, LU)
    U = _new(batch + (k, n), LU.dtype, LU)
    count = int(np.prod(batch))
    if count * rows * n:
        linalg_small.lu_unpack(_ctx(LU), as_dlprim(LU), as_dlprim(piv.expand(batch + (k,))),
                               as_dlprim(P), as_dlprim(L), as_dlprim(U), count, rows, n)
    elif count * rows:  # no columns: P is the identity
        handle(aten.copy_.default, (P, torch.eye(rows)), {})
    nothing = _new((0,), LU.dtype, LU)
    return (P if unpack_pivots else nothing), (L if unpack_data else nothing), \
        (U if unpack_data else nothing)


@register(aten.linalg_lu.default)
def _linalg_lu(A, pivot=True):
    LU, piv, _ = _lu_factor_ex(A, pivot)
    return _lu_unpack(LU, piv)


def _lu_solve_into(LU, piv, B, adjoint=False, identity=False):
    """A^-1 B (A^-T B) for A = P L U; B (*, n, k) broadcast against LU's batch."""
    n = LU.shape[-1]
    batch = torch.broadcast_shapes(LU.shape[:-2], B.shape[:-2])
    k = B.shape[-1]
    X = _new(batch + (n, k), LU.dtype, LU)
    count = int(np.prod(batch))
    if X.numel():
        lu = _batch(LU.expand(batch + (n, n)), (n, n))
        pv = _batch(piv.expand(batch + (n,)), (n,))
        b = None if identity else _batch(B.expand(batch + (n, k)), (n, k))
        linalg_small.lu_solve(_ctx(LU), lu, pv, b, as_dlprim(X), count, n, k, adjoint, identity)
    return X


@register(aten.linalg_lu_solve.default)
def _lu_solve(LU, piv, B, left=True, adjoint=False):
    _square("linalg.lu_solve", LU)
    if left:
        return _lu_solve_into(LU, piv, B, adjoint)
    # X A = B  <=>  A^T X^T = B^T
    return _lu_solve_into(LU, piv, B.mT, not adjoint).mT


@register(aten._linalg_solve_ex.default)
def _solve_ex(A, B, left=True, check_errors=False):
    LU, piv, info, _ = _lu(A, "linalg.solve")
    vector = B.dim() == 1 or (A.dim() - 1 == B.dim() and B.shape == A.shape[:-1])
    if B.dtype != A.dtype:
        raise RuntimeError("linalg.solve: Expected A and B to have the same dtype, but found "
                           "A of type %s and B of type %s instead" % (_name(A.dtype),
                                                                      _name(B.dtype)))
    Bm = B.unsqueeze(-1) if vector and left else (B.unsqueeze(-2) if vector else B)
    X = _lu_solve(LU, piv, Bm, left)
    if vector:
        X = X.squeeze(-1 if left else -2)
    if check_errors:
        _check_errors(info, "torch.linalg.solve_ex")
    return X, LU, piv, info


@register(aten.linalg_inv_ex.default)
def _inv_ex(A, check_errors=False):
    LU, piv, info, _ = _lu(A, "linalg.inv")
    inv = _lu_solve_into(LU, piv, LU, identity=True)
    if check_errors:
        _check_errors(info, "torch.linalg.inv_ex")
    return inv, info


def _lu_for_det(A, op):
    """The LU that PyTorch's det and slogdet keep for their gradients: of A^T where A is
    contiguous (det(A^T) = det(A); the backward formulas count on it), else of A."""
    return _lu(A.mT if A.dim() >= 2 and A.is_contiguous() else A, op)


@register(aten._linalg_det.default)
def _det(A):
    LU, piv, _, stats = _lu_for_det(A, "linalg.det")
    return stats[..., 0].clone(), LU, piv


@register(aten._linalg_slogdet.default)
def _slogdet(A):
    LU, piv, _, stats = _lu_for_det(A, "linalg.slogdet")
    return stats[..., 1].clone(), stats[..., 2].clone(), LU, piv


@register(aten.linalg_cholesky_ex.default)
def _cholesky_ex(A, upper=False, check_errors=False):
    batch, n = _square("linalg.cholesky", A)
    # the upper factor of A is the transpose of the lower one of A^T (A's upper triangle)
    src = A.mT if upper else A
    L = _new(A.shape, A.dtype, A)
    info = _new(batch, torch.int32, A)
    count = int(np.prod(batch))
    if count * n:
        linalg_small.cholesky(_ctx(A), _batch(src, (n, n)), as_dlprim(L), as_dlprim(info),
                              count, n)
    elif count:
        handle(aten.zero_.default, (info,), {})
    if check_errors:
        _check_errors(info, "torch.linalg.cholesky_ex")
    return (L.mT.contiguous() if upper else L), info


@register(aten.linalg_solve_triangular.default)
def _solve_triangular(A, B, upper, left=True, unitriangular=False):
    _square("linalg.solve_triangular", A)
    if not left:  # X A = B  <=>  A^T X^T = B^T, and A^T is triangular the other way
        return _solve_triangular(A.mT, B.mT, not upper, True, unitriangular).mT
    n, k = A.shape[-1], B.shape[-1]
    batch = torch.broadcast_shapes(A.shape[:-2], B.shape[:-2])
    X = _new(batch + (n, k), A.dtype, A)
    if X.numel():
        linalg_small.tri_solve(_ctx(A), _batch(A.expand(batch + (n, n)), (n, n)),
                               _batch(B.expand(batch + (n, k)), (n, k)), as_dlprim(X),
                               int(np.prod(batch)), n, k, upper, unitriangular)
    return X


def _identity(n, like):
    eye = handle(aten.zero_.default, (_new((n, n), like.dtype, like),), {})
    handle(aten.fill_.Scalar, (eye.diagonal(), 1.0), {})
    return eye


@register(aten.cholesky_solve.default)
def _cholesky_solve(B, L, upper=False):
    """X with A X = B for A = L L^T (U^T U where ``upper``): two triangular solves."""
    if upper:  # A = U^T U: X = U^-1 (U^-T B)
        return _solve_triangular(L, _solve_triangular(L.mT, B, upper=False), upper=True)
    return _solve_triangular(L.mT, _solve_triangular(L, B, upper=False), upper=True)


@register(aten.cholesky_inverse.default)
def _cholesky_inverse(L, upper=False):
    _square("cholesky_inverse", L)
    return _cholesky_solve(_identity(L.shape[-1], L).expand(L.shape), L, upper)
