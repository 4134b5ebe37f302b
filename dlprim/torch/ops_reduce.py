"""Reductions, scans and sorting on ocl devices, with PyTorch's semantics: output shapes
and dtypes (and the errors) come from running the operator on meta tensors first.

Reductions are statements for dlprim's pointwise-broadcast-reduce generator (16-bit
floats accumulate in float, integers in int64 where PyTorch's sums do); scans run
``core/scan.py``, sorting (and what is built on it: topk, kthvalue, median, unique)
``core/sort.py``. Every ``out=`` overload computes the functional result and stores it
into ``out`` as PyTorch does (resized where its shape differs)."""
import math

import numpy as np
import torch

from ..core.pointwise import memo, pointwise, pointwise_reduce
from ..core.scan import scan_launches
from ..core.sort import sort_launches, sorter_for
from ..dtypes import cl_limits, cl_type
from ..tensor import Tensor
from .dispatch import register, handle
from .ops_tensor import convert, meta_result
from .tensor import (OclTensor, Storage, as_dlprim, empty, enqueue, from_numpy, numpy_dtype,
                     write_into)

aten = torch.ops.aten

__all__ = []


def _meta_call(func, *args, **kwargs):
    """PyTorch's meta kernel of ``func``: its output(s) (shape, dtype) and its errors (once
    per signature of the arguments: ``meta_result``)."""
    return meta_result(func, *args, **kwargs)


def _ctx(x):
    return x._ocl_storage.ctx


def _new(m, like):
    """A new ocl tensor shaped as meta tensor ``m`` on like's device."""
    return empty(m.shape, m.dtype, like._ocl_storage.index)


def _fill(t, value):
    return handle(aten.fill_.Scalar, (t, value), {}) if t.numel() else t


def _flat(x):
    """x as a contiguous dlprim Tensor, a 0-d one as (1,)."""
    return as_dlprim(x) if x.dim() else as_dlprim(x).view((1,))


def _axes(x, dim):
    """The reduced dims, sorted: all for None or an empty list."""
    if dim is None or (isinstance(dim, (list, tuple)) and len(dim) == 0):
        return tuple(range(max(x.dim(), 1)))
    dims = dim if isinstance(dim, (list, tuple)) else [dim]
    return tuple(sorted({d % max(x.dim(), 1) for d in dims}))


def _kept(x, axes):
    """x's shape with the reduced axes as 1 (a 0-d x as (1,))."""
    shape = tuple(x.shape) or (1,)
    return tuple(1 if k in axes else n for k, n in enumerate(shape))


def _nonempty(name, x, axes):
    """PyTorch's IndexError for a reduction without identity over an empty dim."""
    for axis in axes:
        if x.dim() and x.shape[axis] == 0:
            raise IndexError("%s: Expected reduction dim %d to have non-zero size."
                             % (name, axis))


def _count(x, axes):
    shape = tuple(x.shape) or (1,)
    return math.prod(shape[k] for k in axes)




def _ctype(dtype):
    return cl_type(numpy_dtype(dtype))


# the folds: (code over x0 -> y0, reduce_init, reduce); a NaN wins max and min
def _max_fold(dtype):
    return ("y0 = x0;", "reduce_y0 = %s;" % cl_limits(_ctype(dtype))[0],
            "if (y0 > reduce_y0 || y0 != y0) reduce_y0 = y0;")


def _min_fold(dtype):
    return ("y0 = x0;", "reduce_y0 = %s;" % cl_limits(_ctype(dtype))[1],
            "if (y0 < reduce_y0 || y0 != y0) reduce_y0 = y0;")


_SUM = ("reduce_y0 = 0;", "reduce_y0 += y0;")
_FOLDS = {
    "sum": lambda d: ("y0 = x0;",) + _SUM,
    "nansum": lambda d: ("y0 = (x0 != x0) ? 0 : x0;",) + _SUM,
    "prod": lambda d: ("y0 = x0;", "reduce_y0 = 1;", "reduce_y0 *= y0;"),
    "any": lambda d: ("y0 = (x0 != 0);", "reduce_y0 = 0;", "reduce_y0 = (reduce_y0 || y0);"),
    "all": lambda d: ("y0 = (x0 != 0);", "reduce_y0 = 1;", "reduce_y0 = (reduce_y0 && y0);"),
    "count_nonzero": lambda d: ("y0 = (x0 != 0);",) + _SUM,
    "amax": _max_fold, "amin": _min_fold,
}
_IDENTITY = {"sum": 0, "nansum": 0, "prod": 1, "any": 0, "all": 1, "count_nonzero": 0}


def _fold_into(out, axes, x, code, init, red, extra=(), params=(), alpha=1.0):
    """out (kept shape) = the fold of ``code`` over x (and ``extra`` inputs of the kept
    shape) along ``axes``."""
    keep = _kept(x, axes)
    xs = [_flat(x)]
    xs += [as_dlprim(e).view(keep) for e in extra]
    pointwise_reduce(_ctx(x), xs, [as_dlprim(out).view(keep)], code, init, red,
                     params=params, alpha=alpha)
    return out


def _simple(kind, func, x, dim, args, kwargs):
    """A reduction of _FOLDS to PyTorch's output (identity over an empty dim)."""
    if kind not in _IDENTITY:
        _nonempty(kind + "()", x, _axes(x, dim))
    m = _meta_call(func, *args, **kwargs)
    out = _new(m, x)
    if out.numel() == 0:
        return out
    axes = _axes(x, dim)
    if _count(x, axes) == 0:
        if kind not in _IDENTITY:
            raise IndexError("%s(): Expected reduction dim to have non-zero size" % kind)
        return _fill(out, _IDENTITY[kind])
    return _fold_into(out, axes, x, *_FOLDS[kind](out.dtype))


def _acc(dtype):
    """(torch dtype, C type) that intermediate float results of ``dtype`` values keep:
    double for float64, float for the other float types (16-bit ones accumulate in it)."""
    return (torch.float64, "double") if dtype == torch.float64 else (torch.float32, "float")


def _mean_into(out, x, axes):
    """out (kept shape, a float dtype) = the mean of x over axes (NaN over nothing)."""
    count = _count(x, axes)
    if count == 0:
        return _fill(out, float("nan"))
    return _fold_into(out, axes, x, "y0 = x0;", *_SUM, alpha=1.0 / count)


# ----- sum, prod, any, all, count_nonzero, amax, amin, nansum
def _register_simple(kind, overloads, dim_of):
    for func in overloads:
        def run(*args, _f=func, **kwargs):
            return _simple(kind, _f, args[0], dim_of(args, kwargs), args, kwargs)
        register(func)(run)


def _dim_arg(args, kwargs):
    return kwargs.get("dim", args[1] if len(args) > 1 else None)


_register_simple("sum", [aten.sum.default], lambda a, k: None)
_register_simple("sum", [aten.sum.dim_IntList], _dim_arg)
_register_simple("nansum", [aten.nansum.default], _dim_arg)
_register_simple("prod", [aten.prod.default], lambda a, k: None)
_register_simple("prod", [aten.prod.dim_int], _dim_arg)
for _kind in ("any", "all"):
    _p = getattr(aten, _kind)
    _register_simple(_kind, [_p.default], lambda a, k: None)
    _register_simple(_kind, [_p.dim, _p.dims], _dim_arg)
_register_simple("count_nonzero", [aten.count_nonzero.default, aten.count_nonzero.dim_IntList],
                 _dim_arg)
_register_simple("amax", [aten.amax.default], _dim_arg)
_register_simple("amin", [aten.amin.default], _dim_arg)


@register(aten.mean.default, aten.mean.dim)
def _mean(x, dim=None, keepdim=False, dtype=None):
    func = aten.mean.default if dim is None and not keepdim else aten.mean.dim
    m = _meta_call(func, x, dtype=dtype) if func is aten.mean.default else \
        _meta_call(func, x, dim, keepdim, dtype=dtype)
    out = _new(m, x)
    return _mean_into(out, x, _axes(x, dim)) if out.numel() else out


@register(aten.nanmean.default)
def _nanmean(x, dim=None, keepdim=False, dtype=None):
    m = _meta_call(aten.nanmean.default, x, dim, keepdim, dtype=dtype)
    out = _new(m, x)
    if out.numel() == 0:
        return out
    axes = _axes(x, dim)
    keep = _kept(x, axes)
    sums = empty(keep, _acc(x.dtype)[0], x._ocl_storage.index)
    counts = empty(keep, _acc(x.dtype)[0], x._ocl_storage.index)
    if _count(x, axes) == 0:
        return _fill(out, float("nan"))
    pointwise_reduce(_ctx(x), [_flat(x).view(tuple(x.shape) or (1,))],
                     [as_dlprim(sums), as_dlprim(counts)],
                     "y0 = (x0 != x0) ? 0 : x0; y1 = (x0 == x0);",
                     "reduce_y0 = 0; reduce_y1 = 0;", "reduce_y0 += y0; reduce_y1 += y1;")
    pointwise(_ctx(x), [as_dlprim(sums), as_dlprim(counts)], [as_dlprim(out).view(keep)],
              "y0 = x0 / x1;")
    return out


# ----- var, std, var_mean, std_mean: the mean, then the squared deviations from it
def _correction(unbiased, correction):
    if correction is not None:
        return float(correction)
    return 1.0 if unbiased is None or unbiased else 0.0


def _moments(x, dim, unbiased, keepdim, correction, root, want_mean):
    if not x.is_floating_point():
        raise RuntimeError("std and var only support floating point and complex dtypes")
    m = _meta_call(aten.var.correction, x, dim, correction=correction, keepdim=keepdim)
    var = _new(m, x)
    mean_out = _new(m, x) if want_mean else None
    if var.numel() == 0:
        return (var, mean_out) if want_mean else var
    axes = _axes(x, dim)
    keep = _kept(x, axes)
    count = _count(x, axes)
    c = _correction(unbiased, correction)
    acc, T = _acc(var.dtype)
    mean = empty(keep, acc, x._ocl_storage.index)
    _mean_into(mean, x, axes)
    denom = max(0.0, count - c)
    if count == 0:
        _fill(var, float("nan"))
    else:  # no samples left after the correction: 0 * inf = NaN, as PyTorch's 0 / 0
        _fold_into(var, axes, x, "%s d = x0 - x1; y0 = d * d;" % T, *_SUM, extra=(mean,),
                   alpha=(1.0 / denom) if denom else float("inf"))
    if root:
        pointwise(_ctx(x), [as_dlprim(var)], [as_dlprim(var)], "y0 = sqrt(x0);")
    if not want_mean:
        return var
    pointwise(_ctx(x), [as_dlprim(mean)], [as_dlprim(mean_out).view(keep)], "y0 = x0;")
    return var, mean_out


def _register_moments(packet, root, want_mean):
    def run(x, dim=None, unbiased=None, keepdim=False, *, correction=None):
        if isinstance(dim, bool):  # var(x, unbiased): the default overload
            dim, unbiased = None, dim
        return _moments(x, dim, unbiased, keepdim, correction, root, want_mean)
    for name in ("default", "dim", "correction"):
        register(getattr(packet, name))(run)


_register_moments(aten.var, False, False)
_register_moments(aten.std, True, False)
_register_moments(aten.var_mean, False, True)
_register_moments(aten.std_mean, True, True)


# ----- norms: sum |x|^p, then ^(1/p); max / min |x| for +-inf; count for 0
def _norm_into(out, x, ord, axes):
    ord = float(ord)
    acc_dtype, T = _acc(x.dtype)
    if _count(x, axes) == 0:
        return _fill(out, 0.0)
    if ord in (float("inf"), float("-inf")):
        init, cmp = ("0", ">") if ord > 0 else ("INFINITY", "<")
        return _fold_into(out, axes, x, "y0 = fabs((%s)x0);" % T, "reduce_y0 = %s;" % init,
                          "if (y0 %s reduce_y0 || y0 != y0) reduce_y0 = y0;" % cmp)
    if ord == 0:
        return _fold_into(out, axes, x, "y0 = (x0 != 0);", *_SUM)
    # the sum of |x|^p in float32 at least: |x|^p of a 16-bit float overflows it
    keep = _kept(x, axes)
    acc = out if out.dtype == acc_dtype else empty(keep, acc_dtype, x._ocl_storage.index)
    if ord == 1:
        _fold_into(acc, axes, x, "y0 = fabs((%s)x0);" % T, *_SUM)
        root, params = "y0 = x0;", []
    elif ord == 2:
        _fold_into(acc, axes, x, "%s a = x0; y0 = a * a;" % T, *_SUM)
        root, params = "y0 = sqrt(x0);", []
    else:
        _fold_into(acc, axes, x, "y0 = pow(fabs((%s)x0), (%s)w0);" % (T, T), *_SUM,
                   params=[ord])
        root, params = "y0 = pow(x0, (%s)w0);" % T, [1.0 / ord]
    pointwise(_ctx(x), [as_dlprim(acc).view(keep)], [as_dlprim(out).view(keep)], root, params)
    return out


@register(aten.linalg_vector_norm.default)
def _vector_norm(x, ord=2, dim=None, keepdim=False, *, dtype=None):
    m = _meta_call(aten.linalg_vector_norm.default, x, ord, dim, keepdim, dtype=dtype)
    out = _new(m, x)
    if out.numel() == 0:
        return out
    src = x if dtype is None or x.dtype == dtype else convert(x, dtype)
    return _norm_into(out, src, ord, _axes(x, dim))


@register(aten.norm.Scalar, aten.norm.ScalarOpt_dim, aten.norm.ScalarOpt_dim_dtype,
          aten.norm.ScalarOpt_dtype)
def _norm(x, p=2, dim=None, keepdim=False, *, dtype=None):
    if isinstance(dim, torch.dtype):  # norm.ScalarOpt_dtype(x, p, dtype)
        dim, dtype = None, dim
    return _vector_norm(x, 2 if p is None else p, dim, keepdim, dtype=dtype)


# ----- logsumexp: max + log(sum(exp(x - max))), the max taken as 0 where it is infinite
@register(aten.logsumexp.default)
def _logsumexp(x, dim, keepdim=False):
    m = _meta_call(aten.logsumexp.default, x, dim, keepdim)
    out = _new(m, x)
    if out.numel() == 0:
        return out
    axes = _axes(x, dim)
    if _count(x, axes) == 0:
        return _fill(out, float("-inf"))
    keep = _kept(x, axes)
    src = x if x.is_floating_point() else convert(x, out.dtype)
    acc, T = _acc(out.dtype)
    top = empty(keep, acc, x._ocl_storage.index)
    _fold_into(top, axes, src, "y0 = x0;", "reduce_y0 = -INFINITY;",
               "if (y0 > reduce_y0 || y0 != y0) reduce_y0 = y0;")
    pointwise(_ctx(x), [as_dlprim(top)], [as_dlprim(top)], "y0 = isinf(x0) ? 0 : x0;")
    total = empty(keep, acc, x._ocl_storage.index)
    _fold_into(total, axes, src, "y0 = exp((%s)x0 - x1);" % T, *_SUM, extra=(top,))
    pointwise(_ctx(x), [as_dlprim(total), as_dlprim(top)], [as_dlprim(out).view(keep)],
              "y0 = log(x0) + x1;")
    return out


# ----- max / min with their index, argmax / argmin, aminmax: (value, index) folds over
# an arange that broadcasts along the other dims; the first index wins ties, the first
# NaN beats every number
def _arange(x, axis):
    n = (tuple(x.shape) or (1,))[axis]
    trail = max(x.dim(), 1) - axis - 1
    ctx = _ctx(x)
    return memo(ctx, ("torch_reduce_arange", n, trail), lambda: Tensor.from_numpy(
        ctx, np.arange(n, dtype=np.int64).reshape((n,) + (1,) * trail)))


def _arg_fold_into(values, indices, x, axis, largest):
    """values, indices (kept shape) = the extreme of x along ``axis`` and its index."""
    dtype = _ctype(x.dtype)
    cmp, init = (">", cl_limits(dtype)[0]) if largest else ("<", cl_limits(dtype)[1])
    keep = _kept(x, (axis,))
    pointwise_reduce(
        _ctx(x), [_flat(x), _arange(x, axis)], [as_dlprim(values).view(keep),
                                                as_dlprim(indices).view(keep)],
        "y0 = x0; y1 = x1;", "reduce_y0 = %s; reduce_y1 = 0;" % init,
        "if (y0 != y0 ? (reduce_y0 == reduce_y0 || y1 < reduce_y1) "
        ": (y0 %s reduce_y0 || (y0 == reduce_y0 && y1 < reduce_y1))) "
        "{ reduce_y0 = y0; reduce_y1 = y1; }" % cmp)


def _extreme_dim(name, largest):
    def run(x, dim, keepdim=False):
        _nonempty(name + "()", x, _axes(x, dim))
        mv, mi = _meta_call(getattr(aten, name).dim, x, dim, keepdim)
        values, indices = _new(mv, x), _new(mi, x)
        if values.numel():
            _arg_fold_into(values, indices, x, dim % max(x.dim(), 1), largest)
        return values, indices
    return run


def _arg(name, largest):
    def run(x, dim=None, keepdim=False):
        if x.dtype == torch.bool:
            raise RuntimeError("%s(): does not support bool input" % name)
        if dim is None and x.numel() == 0:
            raise IndexError("%s(): Expected reduction dim to be specified for "
                             "input.numel() == 0." % name)
        if dim is not None:
            _nonempty(name + "()", x, _axes(x, dim))
        m = _meta_call(getattr(aten, name).default, x, dim, keepdim)
        indices = _new(m, x)
        if indices.numel() == 0:
            return indices
        src, axis = (x.reshape(-1), 0) if dim is None else (x, dim % max(x.dim(), 1))
        values = empty(_kept(src, (axis,)), x.dtype, x._ocl_storage.index)
        _arg_fold_into(values, indices, src, axis, largest)
        return indices
    return run


def _extreme_all(name, fold):
    def run(x):
        if x.numel() == 0:
            raise RuntimeError("%s(): Expected reduction dim to be specified for "
                               "input.numel() == 0. Specify the reduction dim with the "
                               "'dim' argument." % name)
        return _simple(fold, getattr(aten, fold).default, x, None, (x,), {})
    return run


register(aten.max.dim)(_extreme_dim("max", True))
register(aten.min.dim)(_extreme_dim("min", False))
register(aten.argmax.default)(_arg("argmax", True))
register(aten.argmin.default)(_arg("argmin", False))
register(aten.max.default)(_extreme_all("max", "amax"))
register(aten.min.default)(_extreme_all("min", "amin"))


@register(aten.aminmax.default)
def _aminmax(x, *, dim=None, keepdim=False):
    if dim is not None:
        _nonempty("aminmax", x, _axes(x, dim))
    lo, hi = _meta_call(aten.aminmax.default, x, dim=dim, keepdim=keepdim)
    lo, hi = _new(lo, x), _new(hi, x)
    if lo.numel():
        axes = _axes(x, dim)
        ct = _ctype(x.dtype)
        keep = _kept(x, axes)
        pointwise_reduce(_ctx(x), [_flat(x)], [as_dlprim(lo).view(keep), as_dlprim(hi).view(keep)],
                         "y0 = x0; y1 = x0;",
                         "reduce_y0 = %s; reduce_y1 = %s;" % (cl_limits(ct)[1], cl_limits(ct)[0]),
                         "if (y0 < reduce_y0 || y0 != y0) reduce_y0 = y0; "
                         "if (y1 > reduce_y1 || y1 != y1) reduce_y1 = y1;")
    return lo, hi


# ----- scans along a dim (core/scan.py), integers promoted to int64 as PyTorch's cumsum
def _around(x, dim):
    shape = tuple(x.shape) or (1,)
    dim = dim % len(shape)
    return math.prod(shape[:dim]), shape[dim], math.prod(shape[dim + 1:])


def _scan(op, func, x, dim, indexed=False, **kwargs):
    m = _meta_call(func, x, dim, **kwargs)
    values = _new(m[0] if indexed else m, x)
    indices = _new(m[1], x) if indexed else None
    if values.numel():
        src = x if x.dtype == values.dtype else convert(x, values.dtype)
        outer, n, inner = _around(x, dim)
        ctx = _ctx(x)
        enqueue(ctx, scan_launches(ctx, op, _flat(src), _flat(values),
                                   _flat(indices) if indexed else None, outer, n, inner))
    return (values, indices) if indexed else values


register(aten.cumsum.default)(lambda x, dim, *, dtype=None: _scan(
    "sum", aten.cumsum.default, x, dim, dtype=dtype))
register(aten.cumprod.default)(lambda x, dim, *, dtype=None: _scan(
    "prod", aten.cumprod.default, x, dim, dtype=dtype))
register(aten.logcumsumexp.default, aten._logcumsumexp.default)(lambda x, dim: _scan(
    "logsumexp", aten.logcumsumexp.default, x, dim))
register(aten.cummax.default)(lambda x, dim: _scan("max", aten.cummax.default, x, dim, True))
register(aten.cummin.default)(lambda x, dim: _scan("min", aten.cummin.default, x, dim, True))


def _scan_inplace(packet):
    def run(x, dim, *, dtype=None):
        _meta_call(getattr(aten, packet.__name__ + "_").default, x, dim, dtype=dtype)
        return write_into(x, as_dlprim(handle(packet.default, (x, dim), {"dtype": dtype})))
    return run


register(aten.cumsum_.default)(_scan_inplace(aten.cumsum))
register(aten.cumprod_.default)(_scan_inplace(aten.cumprod))


@register(aten._cummax_helper.default, aten._cummin_helper.default)
def _cum_helper(x, values, indices, dim):
    raise NotImplementedError("dlprim.torch: _cummax_helper/_cummin_helper are reached only "
                              "through cummax/cummin, which ocl implements whole")


# ----- sorting (core/sort.py): stable, NaN as the largest value
def _wrap(dim, x):
    """dim as a non-negative index, or PyTorch's IndexError."""
    n = max(x.dim(), 1)
    if not -n <= dim < n:
        raise IndexError("Dimension out of range (expected to be in range of [%d, %d], but "
                         "got %d)" % (-n, n - 1, dim))
    return dim % n


def _sorted(x, dim, descending):
    """(values, int64 indices): x sorted along dim, new contiguous tensors."""
    dim = _wrap(dim, x)
    values = empty(x.shape, x.dtype, x._ocl_storage.index)
    indices = empty(x.shape, torch.int64, x._ocl_storage.index)
    if x.numel():
        outer, n, inner = _around(x, dim)
        ctx = _ctx(x)
        enqueue(ctx, sort_launches(ctx, _flat(x), _flat(values), _flat(indices), outer, n,
                                   inner, bool(descending)))
    return values, indices


@register(aten.sort.default, aten.sort.stable)
def _sort(x, dim=-1, descending=False, *, stable=None):
    if isinstance(dim, bool) or dim is None:  # sort.stable(x, stable, dim, descending)
        stable, dim = dim, -1
    _meta_call(aten.sort.default, x, dim, descending)
    return _sorted(x, dim, descending)


@register(aten.argsort.default, aten.argsort.stable)
def _argsort(x, dim=-1, descending=False, *, stable=False):
    if isinstance(dim, bool):  # argsort.stable(x, stable, dim, descending)
        stable, dim = dim, -1
    _meta_call(aten.sort.default, x, dim, descending)
    return _sorted(x, dim, descending)[1]


register(aten.msort.default)(lambda x: _sort(x, 0)[0])


def _narrow(t, dim, start, length):
    """A contiguous copy of t[start:start+length] along dim."""
    view = t.narrow(dim, start, length)
    out = empty(view.shape, t.dtype, t._ocl_storage.index)
    return write_into(out, as_dlprim(view)) if out.numel() else out


@register(aten.topk.default)
def _topk(x, k, dim=-1, largest=True, sorted=True):
    _meta_call(aten.topk.default, x, k, dim, largest, sorted)
    values, indices = _sorted(x, dim, largest)
    d = dim % max(x.dim(), 1)
    if x.dim() == 0:
        return values, indices
    return _narrow(values, d, 0, k), _narrow(indices, d, 0, k)


def _pick(values, indices, x, dim, position, keepdim):
    """values/indices at ``position`` (an int64 ocl tensor of x's shape with 1 along dim)."""
    if x.dim() == 0:
        return values, indices
    v = handle(aten.gather.default, (values, dim, position), {})
    i = handle(aten.gather.default, (indices, dim, position), {})
    if not keepdim:
        v, i = v.squeeze(dim), i.squeeze(dim)
    return v, i


@register(aten.kthvalue.default)
def _kthvalue(x, k, dim=-1, keepdim=False):
    _nonempty("kthvalue()", x, _axes(x, dim))
    _meta_call(aten.kthvalue.default, x, k, dim, keepdim)
    d = dim % max(x.dim(), 1)
    values, indices = _sorted(x, d, False)
    if x.dim() == 0:
        return values, indices
    keep = _kept(x, (d,))
    position = empty(keep, torch.int64, x._ocl_storage.index)
    _fill(position, k - 1)
    return _pick(values, indices, x, d, position, keepdim)


def _median(x, dim, keepdim, ignore_nan):
    """The lower median along dim: a NaN if the row has one (the first), or with
    ``ignore_nan`` the median of the row's other values."""
    values, indices = _sorted(x, dim, False)
    if x.dim() == 0:
        return values, indices
    keep = _kept(x, (dim,))
    n = x.shape[dim]
    position = empty(keep, torch.int64, x._ocl_storage.index)
    # numbers (not NaN) in each row: they sort first, the NaNs after them in their order
    _fold_into(position, (dim,), x, "y0 = (x0 == x0);", *_SUM)
    code = "y0 = x0 > 0 ? (x0 - 1) / 2 : 0;" if ignore_nan else \
        "y0 = x0 < w0 ? x0 : (w0 - 1) / 2;"
    pointwise(_ctx(x), [as_dlprim(position)], [as_dlprim(position)], code, [np.int64(n)])
    return _pick(values, indices, x, dim, position, keepdim)


def _median_dim(name, ignore_nan):
    def run(x, dim=-1, keepdim=False):
        _nonempty("median()", x, _axes(x, dim))
        _meta_call(getattr(aten, name).dim, x, dim, keepdim)
        return _median(x, dim % max(x.dim(), 1), keepdim, ignore_nan)
    return run


def _median_all(ignore_nan):
    def run(x):
        if x.numel() == 0:  # NaN, as PyTorch converts it to x's dtype
            out = empty((), x.dtype, x._ocl_storage.index)
            return _fill(out, torch.tensor(float("nan")).to(x.dtype).item())
        return _median(x.reshape(-1), 0, False, ignore_nan)[0]
    return run


register(aten.median.dim)(_median_dim("median", False))
register(aten.nanmedian.dim)(_median_dim("nanmedian", True))
register(aten.median.default)(_median_all(False))
register(aten.nanmedian.default)(_median_all(True))


# ----- unique: sort (or not, for unique_consecutive), mark where a value differs from the
# one before, count the marks (a scan) and scatter each group's value, size and members.
# The number of groups decides the output's size: it is read back (one number), as on CUDA
def _starts_of(values):
    """1 where a group starts in the ordered flat ``values`` (the first element, and each
    that differs from the one before it), else 0, as int64."""
    N = values.numel()
    starts = empty((N,), torch.int64, values._ocl_storage.index)
    if N:
        _fill(starts, 1)
        if N > 1:
            v = as_dlprim(values)
            pointwise(_ctx(values), [v.view((N - 1,), 1), v.view((N - 1,))],
                      [as_dlprim(starts).view((N - 1,), 1)], "y0 = (x0 != x1);")
    return starts


def _groups(x, values, perm, return_inverse, return_counts, starts=None, inverse_shape=None):
    """(unique values, inverse, counts, first) of ``values`` (x's values in the order to
    group, flat, from x's positions ``perm``); ``starts``: where groups start, when not
    where values differ; ``first``: each group's first position in that order."""
    index, ctx = x._ocl_storage.index, _ctx(x)
    N = values.numel()
    starts = _starts_of(values) if starts is None else starts
    cum = empty((N,), torch.int64, index)
    if N:
        enqueue(ctx, scan_launches(ctx, "sum", as_dlprim(starts), as_dlprim(cum), None, 1, N, 1))
    U = int(as_dlprim(cum).view((1,), N - 1).to_host()[0]) if N else 0
    out = empty((U,), values.dtype, index)
    inverse = empty(tuple(x.shape) if inverse_shape is None else inverse_shape, torch.int64,
                    index)
    first = empty((max(U, 1),), torch.int64, index)
    sorter = sorter_for(ctx, numpy_dtype(values.dtype))
    enqueue(ctx, sorter.unique_launches(as_dlprim(values), as_dlprim(perm), as_dlprim(cum),
                                        as_dlprim(out), _flat(inverse), as_dlprim(first), N))
    counts = empty((U,), torch.int64, index)
    if return_counts:
        enqueue(ctx, sorter.counts_launches(as_dlprim(first), as_dlprim(counts), U, N))
    if not return_inverse:
        inverse = empty((0,), torch.int64, index)
    if not return_counts:
        counts = empty((0,), torch.int64, index)
    return out, inverse, counts, first.narrow(0, 0, U)


@register(aten._unique2.default)
def _unique2(x, sorted=True, return_inverse=False, return_counts=False):
    values, perm = _sorted(x.reshape(-1), 0, False)
    return _groups(x, values, perm, return_inverse, return_counts)[:3]


@register(aten._unique.default)
def _unique(x, sorted=True, return_inverse=False):
    out, inverse, _ = _unique2(x, sorted, return_inverse, False)
    return out, inverse


def _positions(x):
    """0 .. numel - 1 as an int64 ocl tensor over a memoized buffer (read it, never write)."""
    n = x.numel()
    ctx = _ctx(x)
    perm = memo(ctx, ("torch_reduce_arange", n, 0), lambda: Tensor.from_numpy(
        ctx, np.arange(n, dtype=np.int64)))
    return OclTensor(Storage.over(x._ocl_storage.index, perm), (n,), (1,), 0, torch.int64)


@register(aten.unique_consecutive.default)
def _unique_consecutive(x, return_inverse=False, return_counts=False, dim=None):
    if dim is not None and x.dim() > 1:
        return _unique_slices(x, dim, return_inverse, return_counts, False)
    flat = x.reshape(-1)
    if not flat.is_contiguous():
        flat = flat.contiguous()
    return _groups(x, flat, _positions(flat), return_inverse, return_counts)[:3]


@register(aten.unique_dim.default)
def _unique_dim(x, dim, sorted=True, return_inverse=False, return_counts=False):
    if x.dim() == 0:
        raise IndexError("Dimension specified as %d but tensor has no dimensions" % dim)
    _wrap(dim, x)
    if x.dim() == 1:
        return _unique2(x, sorted, return_inverse, return_counts)
    return _unique_slices(x, dim, return_inverse, return_counts, True)


def _unique_slices(x, dim, return_inverse, return_counts, sort):
    """The distinct slices along dim (``sort``: in order as tuples, first element first;
    else runs of equal neighbours): the slices' order from a stable sort by each element
    in turn, last to first (LSD radix order, one sort of R keys per element of a slice)."""
    d = _wrap(dim, x)
    moved = x.movedim(d, 0)
    R, C = moved.shape[0], math.prod(moved.shape[1:])
    if C == 0 and R:
        raise RuntimeError("There are 0 sized dimensions, and they aren't selected, so "
                           "unique cannot be applied")
    if R == 0:
        nothing = empty((0,), torch.int64, x._ocl_storage.index)
        return empty(x.shape, x.dtype, x._ocl_storage.index), nothing, nothing
    rows = moved.reshape(R, C)
    perm = _positions(rows[:, 0]).clone()
    for c in reversed(range(C) if sort else ()):
        column = handle(aten.index_select.default, (rows[:, c], 0, perm), {})
        perm = handle(aten.index_select.default, (perm, 0, _sorted(column, 0, False)[1]), {})
    ordered = handle(aten.index_select.default, (rows, 0, perm), {})
    starts = empty((R,), torch.int64, x._ocl_storage.index)
    _fill(starts, 1)
    if R > 1:  # a slice starts a group where any element differs from the slice before
        o = as_dlprim(ordered)
        pointwise_reduce(_ctx(x), [o.view((R - 1, C), C), o.view((R - 1, C))],
                         [as_dlprim(starts).view((R - 1, 1), 1)], "y0 = (x0 != x1);",
                         "reduce_y0 = 0;", "reduce_y0 = reduce_y0 | y0;")
    _, inverse, counts, first = _groups(x, starts, perm, return_inverse, return_counts,
                                        starts=starts, inverse_shape=(R,))
    picked = handle(aten.index_select.default, (ordered, 0, first), {})
    out = picked.reshape((first.shape[0],) + tuple(moved.shape[1:])).movedim(0, d).contiguous()
    return out, inverse, counts


# ----- searchsorted / bucketize: a binary search per value
def _search(seq, values, out_int32, right, side, sorter):
    if side is not None:
        right = side == "right"
    m = _meta_call(aten.searchsorted.Tensor, seq, values, out_int32=out_int32, right=right,
                   side=side, sorter=sorter)
    index = seq._ocl_storage.index
    common = torch.promote_types(seq.dtype, values.dtype)
    seq = seq if seq.dtype == common else convert(seq, common)
    values = values if values.dtype == common else convert(values, common)
    out = empty(m.shape, torch.int64, index)
    L = seq.shape[-1] if seq.dim() else 1
    shared = seq.dim() <= 1
    m_per_row = values.shape[-1] if values.dim() else 1
    if out.numel():
        ctx = _ctx(seq)
        s = sorter_for(ctx, numpy_dtype(common))
        enqueue(ctx, s.search_launches(_flat(seq), None if sorter is None else _flat(sorter),
                                       _flat(values), _flat(out), L, m_per_row, shared,
                                       bool(right)))
    return convert(out, torch.int32) if out_int32 else out


@register(aten.searchsorted.Tensor)
def _searchsorted(seq, values, *, out_int32=False, right=False, side=None, sorter=None):
    if not isinstance(values, OclTensor):
        values = _scalar_tensor(seq, values)
    return _search(seq, values, out_int32, right, side, sorter)


def _scalar_tensor(like, value):
    if isinstance(value, torch.Tensor):
        value = value.item()
    dtype = torch.result_type(torch.empty((), dtype=like.dtype), value)
    return from_numpy(np.array(value), like._ocl_storage.index, dtype)


@register(aten.searchsorted.Scalar)
def _searchsorted_scalar(seq, value, *, out_int32=False, right=False, side=None, sorter=None):
    values = _scalar_tensor(seq, value)
    _meta_call(aten.searchsorted.Scalar, seq, value, out_int32=out_int32, right=right,
               side=side, sorter=sorter)
    return _search(seq, values, out_int32, right, side, sorter)


@register(aten.bucketize.Tensor)
def _bucketize(x, boundaries, *, out_int32=False, right=False):
    _meta_call(aten.bucketize.Tensor, x, boundaries, out_int32=out_int32, right=right)
    return _search(boundaries, x, out_int32, right, None, None)


@register(aten.bucketize.Scalar)
def _bucketize_scalar(x, boundaries, *, out_int32=False, right=False):
    return _search(boundaries, _scalar_tensor(boundaries, x), out_int32, right, None, None)


# ----- out= overloads: the functional result, stored into out (resized where its shape
# differs, as PyTorch's out= does)
_OUT_OF = {  # out= overload -> the functional overload it stores the result of
    "sum.IntList_out": "sum.dim_IntList", "sum.out": "sum.default",
    "prod.int_out": "prod.dim_int", "prod.out": "prod.default",
    "mean.out": "mean.dim", "mean.dtype_out": "mean.default",
    "var.correction_out": "var.correction", "var.out": "var.dim",
    "std.correction_out": "std.correction", "std.out": "std.dim",
    "var_mean.correction_out": "var_mean.correction",
    "std_mean.correction_out": "std_mean.correction",
    "norm.dtype_out": "norm.ScalarOpt_dim_dtype", "norm.out": "norm.ScalarOpt_dim",
    "norm.ScalarOpt_dtype_out": "norm.ScalarOpt_dtype", "norm.Scalar_out": "norm.Scalar",
    "linalg_vector_norm.out": "linalg_vector_norm.default",
    "logsumexp.out": "logsumexp.default",
    "any.out": "any.dim", "any.dims_out": "any.dims", "any.all_out": "any.default",
    "all.out": "all.dim", "all.dims_out": "all.dims", "all.all_out": "all.default",
    "count_nonzero.dim_IntList_out": "count_nonzero.dim_IntList",
    "count_nonzero.out": "count_nonzero.default",
    "argmax.out": "argmax.default", "argmin.out": "argmin.default",
    "max.dim_max": "max.dim", "max.unary_out": "max.default",
    "min.dim_min": "min.dim", "min.unary_out": "min.default",
    "median.dim_values": "median.dim", "median.out": "median.default",
    "nanmedian.dim_values": "nanmedian.dim", "nanmedian.out": "nanmedian.default",
    "nanmean.out": "nanmean.default", "nansum.out": "nansum.default",
    "aminmax.out": "aminmax.default", "amax.out": "amax.default", "amin.out": "amin.default",
    "cumsum.out": "cumsum.default", "cumprod.out": "cumprod.default",
    "cummax.out": "cummax.default", "cummin.out": "cummin.default",
    "logcumsumexp.out": "logcumsumexp.default", "_logcumsumexp.out": "_logcumsumexp.default",
    "sort.values": "sort.default", "sort.values_stable": "sort.stable",
    "argsort.stable_out": "argsort.stable", "msort.out": "msort.default",
    "topk.values": "topk.default", "kthvalue.values": "kthvalue.default",
    "_unique2.out": "_unique2.default", "_unique.out": "_unique.default",
    "unique_dim.out": "unique_dim.default",
    "unique_consecutive.out": "unique_consecutive.default",
    "searchsorted.Tensor_out": "searchsorted.Tensor",
    "searchsorted.Scalar_out": "searchsorted.Scalar",
    "bucketize.Tensor_out": "bucketize.Tensor", "bucketize.Scalar_out": "bucketize.Scalar",
}


def _overload(name):
    packet, overload = name.split(".")
    return getattr(getattr(aten, packet), overload)


def _store(out, result):
    """out[...] = result, out resized to result's shape where it differs."""
    if result.dtype != out.dtype:
        result = convert(result, out.dtype)
    if tuple(out.shape) != tuple(result.shape):
        out.data = result  # sizes, strides and storage: PyTorch's resize of an out tensor
        return out
    return write_into(out, as_dlprim(result)) if out.numel() else out


def _register_out(out_name, functional_name):
    func, functional = _overload(out_name), _overload(functional_name)
    names = [a.name for a in func._schema.arguments if a.is_out]

    def run(*args, **kwargs):
        outs = [kwargs.pop(n) for n in names]
        result = handle(functional, args, kwargs)
        results = result if isinstance(result, (tuple, list)) else (result,)
        stored = [_store(o, r) for o, r in zip(outs, results)]
        return tuple(stored) if len(stored) > 1 else stored[0]
    register(func)(run)


for _out, _functional in _OUT_OF.items():
    _register_out(_out, _functional)


# max(a, b) / min(a, b): the elementwise maximum / minimum (NaN wins)
register(aten.max.other)(lambda a, b: handle(aten.maximum.default, (a, b), {}))
register(aten.min.other)(lambda a, b: handle(aten.minimum.default, (a, b), {}))
