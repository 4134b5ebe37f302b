"""Elementwise operators, their in-place and ``_foreach_`` forms (what ``torch.optim``
issues), and reductions on ocl devices, all on dlprim's pointwise-broadcast-reduce
generator. Output shapes and dtypes (broadcasting, type promotion) come from running the
operator on meta tensors, so they are PyTorch's."""
import operator

import numpy as np
import torch

from ..core.pointwise import memo, pointwise, pointwise_reduce
from ..core.reduction import ArgMax, op_code
from ..dtypes import cl_type
from ..tensor import Tensor
from ..utils import BoundedCache
from .dispatch import register, handle
from .multi_tensor import Overlap, list_shapes, remember_shapes, run_lists
from .ops_tensor import convert, meta_args, meta_result
from .tensor import OclTensor, as_dlprim, empty, empty_list, numpy_dtype, write_into

aten = torch.ops.aten

__all__ = ["elementwise"]


def _scalar(a):
    """A python number for a number or a 0-dim CPU tensor (PyTorch's wrapped scalars)."""
    if isinstance(a, torch.Tensor) and not isinstance(a, OclTensor) and a.device.type != "meta":
        if a.dim() != 0:
            raise RuntimeError("Expected all tensors to be on the same device, but found a "
                               "CPU tensor of shape %s among ocl tensors" % (list(a.shape),))
        return a.item()
    return a


def _ctype(dtype):
    """The C type a kernel computes ``dtype`` in: 16-bit floats widen to float (their
    storage stays 16-bit; no device needs half arithmetic)."""
    if dtype in (torch.float16, torch.bfloat16):
        return "float"
    return cl_type(numpy_dtype(dtype))


def _signature(a):
    """What an operator's output shape and dtype can depend on, for one argument."""
    if type(a) is OclTensor:  # the common case first
        return (a.shape, a.dtype, OclTensor)
    if isinstance(a, torch.Tensor):
        return (a.shape, a.dtype, type(a))
    if isinstance(a, (bool, int, float)):
        return type(a)
    if isinstance(a, (list, tuple)):
        return tuple(_signature(x) for x in a)
    return a


# (operator, argument signatures) -> (output shape, dtype, compute dtype), the most
# recently used RESULTS_KEPT
RESULTS_KEPT = 8192
_result_cache = BoundedCache(RESULTS_KEPT)


def _result(func, args, kwargs, compute):
    """The output shape and dtype of an elementwise operator (PyTorch's meta kernel, once
    per operator and argument shapes/dtypes/scalar types), and the dtype to compute in."""
    key = (func, tuple(map(_signature, args)),
           tuple((k, _signature(v)) for k, v in sorted(kwargs.items())) if kwargs else (),
           torch.get_default_dtype())  # (a Python float promotes to the default dtype)
    hit = _result_cache.get(key)
    if hit is None:
        metas = meta_args(list(args))
        m = func(*metas, **{k: meta_args(v) for k, v in kwargs.items()})
        hit = _result_cache[key] = (tuple(m.shape), m.dtype,
                                    compute(*metas) if compute else m.dtype)
    return hit


def elementwise(func, args, kwargs, build, compute=None, out=None, result=None):
    """Run an elementwise operator: ``build(T, *args, **kwargs)`` gives (tensors, params,
    code) with inputs x0.., params w0.., output y0 and ``T`` the C type to compute in (the
    output's, or ``compute(meta args)``'s dtype). ``out``: a contiguous tensor of the
    result's shape and dtype to write into (an in-place operator's self), else a new one;
    ``result``: ``_result``'s answer where the caller has it already."""
    shape, dtype, compute_dtype = result or _result(func, args, kwargs, compute)
    ref = next(a for a in list(args) + list(kwargs.values()) if isinstance(a, OclTensor))
    storage = ref._ocl_storage
    tensors, params, code = build(_ctype(compute_dtype), *args, **kwargs)
    out = empty(shape, dtype, storage.index) if out is None else out
    if out.numel():
        xs = [as_dlprim(t) for t in tensors]
        pointwise(storage.ctx, xs, [as_dlprim(out)], code, _values(params))
    return out


def _values(params):
    """A build's scalar params as kernel arguments: integers int64; Python floats stay
    Python floats, which the pointwise generator passes as float, or as double to a
    kernel over float64 tensors (a float would round 1e-12 away there)."""
    return [np.int64(p) if isinstance(p, (bool, int)) else p for p in params]


def _promoted(*args):
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    others = [a for a in args if not isinstance(a, torch.Tensor) and isinstance(a, (int, float, bool))]
    dtype = tensors[0].dtype
    for a in tensors[1:] + others:
        dtype = torch.result_type(torch.empty((), dtype=dtype), a) if not isinstance(a, torch.Tensor) \
            else torch.promote_types(dtype, a.dtype)
    return dtype


def _overlaps(self, args, kwargs):
    """Whether another argument reads self's storage through a different layout (writing
    the result straight into self would then change values still to be read)."""
    for a in list(args) + list(kwargs.values()):
        if isinstance(a, OclTensor) and a._ocl_storage is self._ocl_storage and (
                a.shape != self.shape or a.stride() != self.stride()
                or a.storage_offset() != self.storage_offset()):
            return True
    return False


_BUILDS = {}  # an elementwise overload, functional or in place -> (functional, build, compute)


def _register_inplace(functional, inplace, build, compute=None):
    """The functional overload, and its in-place form writing into self."""
    _BUILDS[functional] = (functional, build, compute)
    if inplace is not None:
        _BUILDS[inplace] = (functional, build, compute)

    def run(*args, **kwargs):
        return elementwise(functional, args, kwargs, build, compute)
    register(functional)(run)
    if inplace is not None:
        def run_inplace(self, *args, **kwargs):
            full = (self,) + args
            result = _result(functional, full, kwargs, compute)
            if result[0] == self.shape and result[1] == self.dtype and self.is_contiguous() \
                    and not _overlaps(self, args, kwargs):
                # elementwise: each output element is written after its own inputs are read
                return elementwise(functional, full, kwargs, build, compute, out=self,
                                   result=result)
            _result(inplace, full, kwargs, None)  # PyTorch's checks (broadcast into self, casting)
            out = elementwise(functional, full, kwargs, build, compute, result=result)
            if out.dtype != self.dtype:
                out = convert(out, self.dtype)
            return write_into(self, as_dlprim(out))
        register(inplace)(run_inplace)


@register(aten.where.self)
def _where(cond, a, b):
    def build(T, c, a, b):
        a, b = _scalar(a), _scalar(b)
        xs, params, names = [c], [], []
        for v in (a, b):
            if isinstance(v, OclTensor):
                xs.append(v)
                names.append("((%s)x%d)" % (T, len(xs) - 1))
            else:
                params.append(v)
                names.append("((%s)w%d)" % (T, len(params) - 1))
        return xs, params, "y0 = x0 ? %s : %s;" % tuple(names)
    return elementwise(aten.where.self, (cond, a, b), {}, build)


def _masked_fill_build(T, a, mask, value):
    value = _scalar(value)
    if isinstance(value, OclTensor):  # a 0-dim tensor on the device
        return [a, mask, value], [], "y0 = x1 ? ((%s)x2) : ((%s)x0);" % (T, T)
    return [a, mask], [value], "y0 = x1 ? ((%s)w0) : ((%s)x0);" % (T, T)


_register_inplace(aten.masked_fill.Scalar, aten.masked_fill_.Scalar, _masked_fill_build)
_register_inplace(aten.masked_fill.Tensor, aten.masked_fill_.Tensor, _masked_fill_build)


# ----- _foreach_: the same operator over lists (torch.optim's multi-tensor path)
def _foreach(func, *args, **kwargs):
    overload, n_positional, keywords = _foreach_plan(func)
    lists = [isinstance(a, (list, tuple)) for a in args]  # per element, else shared
    wrapped = func._overloadname == "Tensor"  # one tensor for every element: a scalar
    inplace = func.overloadpacket.__name__.endswith("_")

    def item(i):
        one = [a[i] if is_list else a for a, is_list in zip(args, lists)]
        if wrapped and len(one) > 1 and isinstance(one[1], torch.Tensor) and \
                not isinstance(one[1], OclTensor):
            one[1] = one[1].item()
        extra = dict(zip(keywords, one[n_positional:]))  # addcmul's value: keyword-only
        return tuple(one[:n_positional]), dict(kwargs, **extra)
    # (the list's length: pow's ScalarAndTensor overload takes a scalar first)
    n = len(next(a for a, is_list in zip(args, lists) if is_list))
    if n and lists[0] and overload in _BUILDS:
        results = _foreach_multi(overload, inplace, args, lists, item)
        if results is not None:
            return None if inplace else results
    results = [handle(overload, *item(i)) for i in range(n)]
    if inplace and not overload.overloadpacket.__name__.endswith("_"):
        for dst, result in zip(args[0], results):  # a functional base (maximum): into self
            dst.copy_(result)
    return None if inplace else results


def _foreach_multi(overload, inplace, args, lists, item):
    """A _foreach_ call as multi-tensor launches (``multi_tensor.run_lists``), where every
    element computes the same statements on contiguous ocl tensors of its own size (a
    list of one scalar for all, or tensors shaped as the first list's): the outputs (the
    first list itself for an in-place call); None where it cannot (each element then
    runs as its own operator)."""
    functional, build, compute = _BUILDS[overload]
    scalars = [a for a, is_list in zip(args, lists) if is_list and a and
               not isinstance(a[0], torch.Tensor)]
    if any(any(v != a[0] for v in a) for a in scalars):
        return None  # a scalar per element (steps apart): not one statement string
    first_args, first_kwargs = item(0)
    first = first_args[0]
    shape, dtype, compute_dtype = _result(functional, first_args, first_kwargs, compute)
    if shape != tuple(first.shape) or (inplace and dtype != first.dtype):
        return None
    tensors, params, code = build(_ctype(compute_dtype), *first_args, **first_kwargs)
    flat = list(first_args) + list(first_kwargs.values())
    where = []  # each input tensor: the argument it is (its list gives every element's)
    for t in tensors:
        k = next((k for k, a in enumerate(flat) if a is t), None)
        if k is None or k >= len(args) or not lists[k]:
            return None
        where.append(k)
    x_lists = [args[k] for k in where]
    ys = list(args[0]) if inplace else None
    def check():  # each list's facts kept while its tensors are (an optimizer's step
        # would pay for them every call)
        facts = [list_shapes(lst) for lst in [args[0]] + x_lists]
        if None in facts or any(f[1] != facts[0][1] for f in facts):
            raise _NotOneKernel
    values = _values(params)
    try:
        if not inplace:
            check()
            ys = empty_list([t.shape for t in args[0]], dtype, first._ocl_storage.index)
            remember_shapes(ys)
        run_lists(str(overload), code, x_lists, [ys], values, keep=inplace,
                  check=check if inplace else None)
    except (_NotOneKernel, Overlap):
        return None
    return ys




class _NotOneKernel(Exception):
    """A _foreach_ call whose elements cannot share one multi-tensor kernel."""


_foreach_plans = {}


def _foreach_plan(func):
    """(the single-tensor overload, its positional count, its keyword-only names) of a
    _foreach_ overload, worked out once."""
    plan = _foreach_plans.get(func)
    if plan is None:
        name = func.overloadpacket.__name__.replace("_foreach_", "", 1)
        functional, inplace = name.rstrip("_"), "_" if name.endswith("_") else ""
        if functional in _CLAMPS and func._overloadname in ("Scalar", "ScalarList"):
            # a number's maximum / minimum (aten.maximum takes two tensors): a clamp
            name = _CLAMPS[functional] + inplace
        overload = _base_overload(_base_packet(name), func._overloadname)
        positional = [a for a in overload._schema.arguments if not a.kwarg_only]
        keywords = [a.name for a in overload._schema.arguments if a.kwarg_only]
        plan = _foreach_plans[func] = (overload, len(positional), keywords)
    return plan


_CLAMPS = {"maximum": "clamp_min", "minimum": "clamp_max"}


def _base_packet(name):
    """The single-tensor ATen packet ``name`` (a _foreach_ packet's without the prefix)
    applies per element, or None: for an in-place one that has no in-place form
    (maximum_), the functional one, whose result _foreach writes into self."""
    base = getattr(aten, name, None)
    if base is None and name.endswith("_"):
        base = getattr(aten, name[:-1], None)
    return base


def _base_overload(base, foreach_overload):
    """The single-tensor overload a _foreach_ overload maps to: Scalar/ScalarList -> Scalar,
    List/Tensor -> Tensor, where the base operator has them; else its default."""
    names = base.overloads()
    want = {"Scalar": "Scalar", "ScalarList": "Scalar", "List": "Tensor",
            "Tensor": "Tensor", "ScalarAndTensor": "Scalar"}.get(foreach_overload, "default")
    if want in names:
        return getattr(base, want)
    return getattr(base, "default" if "default" in names else names[0])


# every _foreach_ operator PyTorch has (``dir(aten)`` lists only those used so far)
_FOREACH = sorted({n.split("::")[1].split(".")[0] for n in torch._C._dispatch_get_all_op_names()
                   if n.startswith("aten::_foreach_")})
for _packet in _FOREACH:
    if _base_packet(_packet[len("_foreach_"):]) is None:
        continue  # no single-tensor operator to apply per element
    for _o in getattr(aten, _packet).overloads():
        if _o != "out":
            _f = getattr(getattr(aten, _packet), _o)
            register(_f)(lambda *a, _f=_f, **k: _foreach(_f, *a, **k))


# ----- reductions
def _dims(x, dim):
    if dim is None or (isinstance(dim, (list, tuple)) and len(dim) == 0):
        return tuple(range(x.dim()))
    dims = dim if isinstance(dim, (list, tuple)) else [dim]
    return tuple(sorted(d % max(x.dim(), 1) for d in dims))


def _reduce(func, op, x, dim, args, kwargs):
    """A reduction (``op`` of core/reduction.py) over ``dim`` (all dims when None or empty),
    output shape and dtype from PyTorch's meta kernel: a bool sum counts in int64."""
    m = meta_result(func, *args, **kwargs)
    out = empty(m.shape, m.dtype, x._ocl_storage.index)
    if out.numel() == 0:
        return out
    axes = _dims(x, dim)
    keep = tuple(1 if k in axes else n for k, n in enumerate(x.shape)) or (1,)
    count = int(np.prod([x.shape[k] for k in axes])) if x.dim() else 1
    if count == 0:
        return handle(aten.fill_.Scalar, (out, float("nan") if op == "mean" else 0), {})
    xs = as_dlprim(x) if x.dim() else as_dlprim(x).view((1,))
    code, init, red = op_code(op, _ctype(m.dtype))
    pointwise_reduce(x._ocl_storage.ctx, [xs], [as_dlprim(out).view(keep)], code, init, red,
                     alpha=1.0 / count if op == "mean" else 1.0)
    return out


@register(aten.sum.default)
def _sum(x, dtype=None):
    return _reduce(aten.sum.default, "sum", x, None, (x,), {"dtype": dtype})


@register(aten.sum.dim_IntList)
def _sum_dim(x, dim, keepdim=False, dtype=None):
    return _reduce(aten.sum.dim_IntList, "sum", x, dim, (x, dim, keepdim), {"dtype": dtype})


@register(aten.mean.default)
def _mean(x, dtype=None):
    return _reduce(aten.mean.default, "mean", x, None, (x,), {"dtype": dtype})


@register(aten.mean.dim)
def _mean_dim(x, dim, keepdim=False, dtype=None):
    return _reduce(aten.mean.dim, "mean", x, dim, (x, dim, keepdim), {"dtype": dtype})


@register(aten.amax.default)
def _amax(x, dim=(), keepdim=False):
    return _reduce(aten.amax.default, "max", x, dim, (x, dim, keepdim), {})


@register(aten.amin.default)
def _amin(x, dim=(), keepdim=False):
    return _reduce(aten.amin.default, "min", x, dim, (x, dim, keepdim), {})


def _extreme_of_all(name, reduce_all):
    def run(x):
        if x.numel() == 0:
            raise RuntimeError("%s(): Expected reduction dim to be specified for "
                               "input.numel() == 0" % name)
        return reduce_all(x)
    return run


register(aten.max.default)(_extreme_of_all("max", _amax))
register(aten.min.default)(_extreme_of_all("min", _amin))


@register(aten.max.dim)
def _max_dim(x, dim, keepdim=False):
    return _amax(x, [dim], keepdim), _argmax(x, dim, keepdim)


@register(aten.argmax.default)
def _argmax(x, dim=None, keepdim=False):
    m = meta_result(aten.argmax.default, x, dim, keepdim)
    out = empty(m.shape, torch.int64, x._ocl_storage.index)
    ctx = x._ocl_storage.ctx
    src = as_dlprim(x)
    if dim is None:
        src, axis = src.view((x.numel(),)), 0
    else:
        axis = dim % x.dim()
    op = memo(ctx, ("torch_argmax", src.shape, axis, src.dtype),
               lambda: ArgMax(ctx, src.shape, axis, keepdims=False, dtype=src.dtype,
                              index_dtype="int64"))
    for launch in op.launches(src, as_dlprim(out).view(op.out_shape)):
        launch(ctx.queue)
    return out


# ----- tril / triu over the last two dims: the element's row and column from two small
# index tensors (made once per size), broadcast against x
def _indices(ctx, rows, cols):
    def make():
        r = Tensor.from_numpy(ctx, np.arange(rows, dtype=np.int64).reshape(rows, 1))
        c = Tensor.from_numpy(ctx, np.arange(cols, dtype=np.int64).reshape(1, cols))
        return r, c
    return memo(ctx, ("torch_tri_indices", rows, cols), make)


def _triangle(x, diagonal, keep):
    if x.dim() < 2:
        raise RuntimeError("tril/triu: input tensor must have at least 2 dimensions")
    out = empty(x.shape, x.dtype, x._ocl_storage.index)
    if out.numel():
        ctx = x._ocl_storage.ctx
        r, c = _indices(ctx, x.shape[-2], x.shape[-1])
        lead = (1,) * (x.dim() - 2)
        pointwise(ctx, [as_dlprim(x), r.view(lead + r.shape), c.view(lead + c.shape)],
                  [as_dlprim(out)], "y0 = (x2 - x1 %s w0) ? x0 : 0;" % keep,
                  [np.int64(diagonal)])
    return out


register(aten.tril.default)(lambda x, diagonal=0: _triangle(x, diagonal, "<="))
register(aten.triu.default)(lambda x, diagonal=0: _triangle(x, diagonal, ">="))
