"""Indexing writes on ocl devices (the reads are in ``ops_index.py``): ``scatter`` (a
source or a value; ``reduce='add'/'multiply'``), ``scatter_add``, ``scatter_reduce``,
``index_add``, ``index_copy``, ``index_fill``, ``index_reduce``, ``index_put`` (integer
index tensors and boolean masks, ``accumulate=True``), ``put``, ``masked_scatter`` and
``embedding_dense_backward``, each in its functional, in-place and ``out=`` forms.

Writes that combine repeated indices run as atomic compare-and-swap loops in the
accumulate type (float for 16-bit floats, int for 8- and 16-bit integers and bool: no
device has narrower atomics), then convert back: float16 sums are float sums rounded
once. A write into a non-contiguous tensor goes through a contiguous copy."""
import numpy as np
import torch

from ..core import indexing as kernels
from ..core.pointwise import pointwise
from .dispatch import register
from .ops_index import (advanced, around, checked, device_tensor, linear_index, meta, narrowed,
                        on_device)
from .ops_tensor import assign, convert
from .tensor import as_dlprim, empty, enqueue, from_numpy

aten = torch.ops.aten

__all__ = []

_WIDER = {torch.float16: torch.float32, torch.bfloat16: torch.float32, torch.uint8: torch.int32,
          torch.bool: torch.int32, torch.int8: torch.int32, torch.int16: torch.int32}
_OPS = {"sum": "add", "add": "add", "mean": "add", "prod": "mul", "multiply": "mul",
        "amax": "max", "amin": "min"}


def _accumulate_dtype(dtype):
    return _WIDER.get(dtype, dtype)


def _identity(reduce, dtype):
    """What a position starts from when include_self=False leaves its own value out."""
    if reduce in ("sum", "mean"):
        return 0
    if reduce == "prod":
        return 1
    if dtype.is_floating_point:
        low, high = float("-inf"), float("inf")
    else:
        low, high = torch.iinfo(dtype).min, torch.iinfo(dtype).max
    return low if reduce == "amax" else high


_constants = {}  # (device, dtype, value) -> a 1-element tensor (identities, ones)


def _constant(value, dtype, like):
    key = (like._ocl_storage.index, dtype, value)
    t = _constants.get(key)
    if t is None:
        t = _constants[key] = from_numpy(np.array([value]), like._ocl_storage.index, dtype)
    return t


def _scalar_tensor(value, dtype, like):
    """A 1-element ocl tensor of ``dtype`` holding a number or a 0-d tensor's value."""
    t = device_tensor(value, like).reshape(1)
    return t if t.dtype == dtype else convert(t, dtype)


def _exactly(t, shape):
    """The view of t over ``shape`` from its start (a scatter's source, cut to the index)."""
    if tuple(t.shape) == tuple(shape):
        return t
    if t.dim() != len(shape):  # a 0-d source beside a 1-element index
        return t.reshape(shape)
    return t.as_strided(shape, t.stride(), t.storage_offset())


def _in_place(target, work, dtype=None):
    """work(contiguous dlprim tensor of target's values, as ``dtype``), then back into target."""
    dtype = dtype or target.dtype
    if dtype == target.dtype and target.is_contiguous():
        work(as_dlprim(target))
        return
    tmp = convert(target, dtype)
    work(as_dlprim(tmp))
    assign(target, tmp)


def _as(t, dtype):
    return as_dlprim(t if t.dtype == dtype else convert(t, dtype))


def _meta_check(op, self, *args, **kwargs):
    """PyTorch's device, shape and dtype checks of an operator (on meta tensors)."""
    on_device(op.__name__ if hasattr(op, "__name__") else str(op), self,
              *[a for a in args if isinstance(a, torch.Tensor) and a.dim()])
    args = (self,) + args
    try:
        op(*meta(list(args)), **{k: meta(v) for k, v in kwargs.items()})
    except NotImplementedError:
        pass


def _divide_by_count(ctx, values, count):
    """values /= max(count, 1): scatter_reduce's and index_reduce's mean (floor division
    for integers, as PyTorch)."""
    code = ("y0 = x0 / (x1 == 0 ? 1 : x1);" if values.dtype.kind == "f" else
            "long c = x1 == 0 ? 1 : x1; long q = x0 / c;"
            " y0 = q - ((q * c != x0) && ((x0 < 0) != (c < 0)));")
    pointwise(ctx, [values, count], [values], code)


def _reduce_into(self, dim, index, src, reduce, include_self, per_element, error, message,
                 fill=False):
    """self[... index ...] (reduce)= src along dim: the scatter and index_* families."""
    ctx = self._ocl_storage.ctx
    dim = dim % max(self.dim(), 1)
    if index.numel() == 0:
        return self
    target = narrowed(self, index.shape, dim) if per_element else self
    outer, n, inner = around(target.shape, dim)
    m = (list(index.shape) or [1])[dim] if per_element else index.numel()
    idx = as_dlprim(index.reshape(-1) if not per_element else index)
    dtype = _accumulate_dtype(self.dtype)
    values = _as(src, dtype)
    kw = dict(per_element=per_element, fill=fill)
    count = None

    def work(d):
        launches = []
        if not include_self:
            launches += kernels.put(ctx, as_dlprim(_constant(_identity(reduce, dtype), dtype,
                                                             self)),
                                    idx, d, outer, n, m, inner, per_element=per_element,
                                    fill=True)
        launches += kernels.put_reduce(ctx, values, idx, d, outer, n, m, inner, _OPS[reduce],
                                       **kw)
        if count is not None:
            launches += kernels.put_reduce(ctx, as_dlprim(_constant(1, torch.int32, self)), idx,
                                           as_dlprim(count), outer, n, m, inner, "add",
                                           per_element=per_element, fill=True)
        checked(ctx, launches, error, message)

    if reduce == "mean":
        count = empty(target.shape, torch.int32, self._ocl_storage.index)
        aten.fill_.Scalar(count, 1 if include_self else 0)
    _in_place(target, work, dtype)
    if count is not None:  # the sum wraps (or rounds) in self's dtype first, as in PyTorch
        _in_place(target, lambda d: _divide_by_count(ctx, d, as_dlprim(count)), dtype)
    return self


def _scatter_message(self, dim):
    dim = dim % max(self.dim(), 1)
    return "index %%d is out of bounds for dimension %d with size %d" % (
        dim, (list(self.shape) or [1])[dim])


# ----- scatter: one index per source element
def _scatter_(self, dim, index, src=None, value=None, reduce=None):
    fill = src is None
    if fill:
        src = _scalar_tensor(value, self.dtype, self)
    elif src.numel() and index.numel():
        src = _exactly(src, index.shape)
    message = _scatter_message(self, dim)
    if reduce is not None:
        return _reduce_into(self, dim, index, src, reduce, True, True, RuntimeError, message,
                            fill)
    return _write(self, dim, index, src, True, fill, False, RuntimeError, message)


def _scatter_src_(self, dim, index, src, *, reduce=None):
    _meta_check(aten.scatter_.src, self, dim, index, src)
    return _scatter_(self, dim, index, src=src, reduce=reduce)


def _scatter_value_(self, dim, index, value, *, reduce=None):
    _meta_check(aten.scatter_.value, self, dim, index, value)
    return _scatter_(self, dim, index, value=value, reduce=reduce)


def _scatter_add_(self, dim, index, src):
    _meta_check(aten.scatter_add_, self, dim, index, src)
    return _scatter_(self, dim, index, src=src, reduce="sum")


def _scatter_reduce_(self, dim, index, src, reduce, *, include_self=True):
    _meta_check(aten.scatter_reduce_.two, self, dim, index, src, reduce,
                include_self=include_self)
    src = _exactly(src, index.shape) if index.numel() else src
    return _reduce_into(self, dim, index, src, reduce, include_self, True, RuntimeError,
                        _scatter_message(self, dim))


# ----- index_*: one index per slice along dim
def _index_add_(self, dim, index, source, *, alpha=1):
    _meta_check(aten.index_add_, self, dim, index, source, alpha=alpha)
    if alpha != 1:
        source = aten.mul.Scalar(source, alpha)
    return _reduce_into(self, dim, index, source, "sum", True, False, RuntimeError,
                        _scatter_message(self, dim))


def _index_reduce_(self, dim, index, source, reduce, *, include_self=True):
    _meta_check(aten.index_reduce_, self, dim, index, source, reduce,
                include_self=include_self)
    return _reduce_into(self, dim, index, source, reduce, include_self, False, IndexError,
                        "index %d is out of range in self")


def _write(self, dim, index, src, per_element, fill, wrap, error, message):
    """self[... index ...] = src along dim (src[0] everywhere when ``fill``): scatter,
    index_copy, index_fill; with repeated indices one write wins, as in PyTorch."""
    ctx = self._ocl_storage.ctx
    dim = dim % max(self.dim(), 1)
    if index.numel() == 0 or self.numel() == 0:
        return self
    target = narrowed(self, index.shape, dim) if per_element else self
    outer, n, inner = around(target.shape, dim)
    m = (list(index.shape) or [1])[dim] if per_element else index.numel()
    idx = as_dlprim(index if per_element else index.reshape(-1))

    def work(d):
        checked(ctx, kernels.put(ctx, _as(src, self.dtype), idx, d, outer, n, m, inner,
                                 per_element=per_element, wrap=wrap, fill=fill), error, message)
    _in_place(target, work)
    return self


def _index_copy_(self, dim, index, source):
    _meta_check(aten.index_copy_, self, dim, index, source)
    return _write(self, dim, index, source, False, False, False, IndexError,
                  "index_copy_(): " + _scatter_message(self, dim))


def _index_fill_(self, dim, index, value):
    _meta_check(aten.index_fill_.int_Tensor if isinstance(value, torch.Tensor)
                else aten.index_fill_.int_Scalar, self, dim, index, value)
    return _write(self, dim, index, _scalar_tensor(value, self.dtype, self), False, True, True,
                  IndexError, _scatter_message(self, dim))


# ----- flat and advanced indexing
def _put_(self, index, source, accumulate=False):
    _meta_check(aten.put_, self, index, source, accumulate)
    flat = self.view(-1) if self.is_contiguous() else None
    message = "out of range: tried to access index %%d on a tensor of %d elements." % (
        self.numel())
    if flat is None:
        tmp = convert(self, self.dtype)
        _put_(tmp, index, source, accumulate)
        assign(self, tmp)
        return self
    return _write_at(self, flat, 0, 1, [index.reshape(-1)], [self.numel()],
                     source.reshape(-1), accumulate, message)


def _write_at(self, xp, p, k, tensors, sizes, values, accumulate, message):
    """xp[:p..., lin, ...] = values (or += with accumulate): values of the indexed shape."""
    ctx = self._ocl_storage.ctx
    if values.numel() == 0:
        return self
    lin = linear_index(ctx, self, tensors, sizes)
    outer = int(np.prod(xp.shape[:p], dtype=np.int64))
    inner = int(np.prod(xp.shape[p + k:], dtype=np.int64))
    n = int(np.prod(sizes, dtype=np.int64))
    dtype = _accumulate_dtype(self.dtype) if accumulate else self.dtype

    def work(d):
        if accumulate:
            launches = kernels.put_reduce(ctx, _as(values, dtype), lin, d, outer, n, lin.size,
                                          inner, "add", wrap=True)
        else:
            launches = kernels.put(ctx, _as(values, dtype), lin, d, outer, n, lin.size, inner,
                                   wrap=True)
        checked(ctx, launches, IndexError, message)
    _in_place(xp, work, dtype)
    return self


def _type_name(dtype):
    """PyTorch's name for a dtype in its messages ('Float', 'Long')."""
    return torch.empty((), dtype=dtype).type()[len("torch."):-len("Tensor")]


def _index_put_(self, indices, values, accumulate=False, unsafe=False):
    on_device("index_put_", self, *[t for t in indices if t is not None and t.dim()])
    values = device_tensor(values, self)
    if values.dtype != self.dtype:
        raise RuntimeError("Index put requires the source and destination dtypes match, got "
                           "%s for the destination and %s for the source."
                           % (_type_name(self.dtype), _type_name(values.dtype)))
    xp, p, k, tensors, sizes, dims = advanced(self, indices)
    if not tensors:
        return assign(self, values.expand(self.shape))
    shape = tuple(xp.shape[:p]) + tuple(tensors[0].shape) + tuple(xp.shape[p + k:])
    try:
        values = values.expand(shape)
    except RuntimeError:
        raise RuntimeError("shape mismatch: value tensor of shape %s cannot be broadcast to "
                           "indexing result of shape %s" % (list(values.shape), list(shape))
                           ) from None
    message = ("index %%d is out of bounds for dimension %d with size %d" % (dims[0], sizes[0])
               if k == 1 else "index %d is out of bounds")
    return _write_at(self, xp, p, k, tensors, sizes, values, accumulate, message)


def _masked_scatter_(self, mask, source):
    _meta_check(aten.masked_scatter_, self, mask, source)
    ctx = self._ocl_storage.ctx
    if self.numel() == 0:
        return self
    found = kernels.compact(ctx, as_dlprim(mask.expand(self.shape)))
    count = found.count()
    if count > source.numel():
        raise RuntimeError("masked_scatter: expected source to have at least %d elements "
                           "(the mask's number of True), got %d" % (count, source.numel()))
    _in_place(self, lambda d: found.scatter(_as(source.reshape(-1), self.dtype), d))
    return self


def _masked_scatter(self, mask, source):
    shape = torch.broadcast_shapes(tuple(self.shape), tuple(mask.shape))
    return _masked_scatter_(convert(self.expand(shape), self.dtype), mask, source)


def _masked_scatter_backward(grad, mask, sizes):
    """The source's gradient: grad's elements where mask is true, in order, zero after."""
    picked = aten.masked_select(grad, mask)
    out = empty((int(np.prod(sizes, dtype=np.int64)),), grad.dtype, grad._ocl_storage.index)
    as_dlprim(out).zero_()
    if picked.numel():
        assign(out[:picked.numel()], picked)
    return out.view(sizes)


def _embedding_dense_backward(grad, indices, num_weights, padding_idx, scale_grad_by_freq):
    on_device("embedding_dense_backward", grad, indices)
    ctx = grad._ocl_storage.ctx
    width = grad.shape[-1]
    rows, idx = grad.reshape(-1, width), as_dlprim(indices.reshape(-1))
    dtype = _accumulate_dtype(grad.dtype)
    out = empty((num_weights, width), dtype, grad._ocl_storage.index)
    as_dlprim(out).zero_()
    if scale_grad_by_freq and indices.numel():
        count = empty((num_weights,), torch.int32, grad._ocl_storage.index)
        as_dlprim(count).zero_()
        per_index = empty((indices.numel(), 1), torch.int32, grad._ocl_storage.index)
        launches = kernels.put_reduce(ctx, as_dlprim(_constant(1, torch.int32, grad)), idx,
                                      as_dlprim(count), 1, num_weights, indices.numel(), 1,
                                      "add", fill=True)
        launches += kernels.take(ctx, as_dlprim(count), idx, as_dlprim(per_index), 1,
                                 num_weights, indices.numel(), 1)
        enqueue(ctx, launches)
        rows = aten.div.Tensor(convert(rows, dtype), per_index)
    checked(ctx, kernels.put_reduce(ctx, _as(rows, dtype), idx, as_dlprim(out), 1, num_weights,
                                    indices.numel(), width, "add", skip=padding_idx),
            IndexError, "index %d is out of range in self (embedding)")
    return out if dtype == grad.dtype else convert(out, grad.dtype)


def _embedding_renorm_(weight, indices, max_norm, norm_type):
    """embedding(max_norm=): the rows that indices name, each once, scaled down to norm
    max_norm where their norm exceeds it (PyTorch's 1e-7 in the divisor)."""
    rows = torch.unique(indices.reshape(-1))
    picked = weight.index_select(0, rows)
    norms = torch.linalg.vector_norm(picked.float(), norm_type, dim=1, keepdim=True)
    scale = torch.where(norms > max_norm, max_norm / (norms + 1e-7), 1.0)
    return weight.index_copy_(0, rows, (picked * scale).to(weight.dtype))


# ----- the table: each in-place implementation gives its functional form (the out= forms
# run through the functional ones: dispatch.py)
def _functional(inplace):
    return lambda self, *args, **kwargs: inplace(convert(self, self.dtype), *args, **kwargs)


def _family(name, overloads, inplace):
    for overload in overloads:
        functional = _functional(inplace)
        register(getattr(getattr(aten, name + "_"), overload))(inplace)
        register(getattr(getattr(aten, name), overload))(functional)


_family("scatter", ("src", "reduce"), _scatter_src_)
_family("scatter", ("value", "value_reduce"), _scatter_value_)
_family("scatter_add", ("default",), _scatter_add_)
_family("scatter_reduce", ("two",), _scatter_reduce_)
_family("index_add", ("default",), _index_add_)
_family("index_reduce", ("default",), _index_reduce_)
_family("index_copy", ("default",), _index_copy_)
_family("index_fill", ("int_Scalar", "int_Tensor"), _index_fill_)
_family("index_put", ("default",), _index_put_)
_family("put", ("default",), _put_)
register(aten._index_put_impl_.default)(_index_put_)
register(aten._unsafe_index_put.default)(_functional(_index_put_))
register(aten.masked_scatter_.default)(_masked_scatter_)
register(aten.masked_scatter.default)(_masked_scatter)
register(aten.embedding_renorm_.default)(_embedding_renorm_)
register(aten.embedding_renorm.default)(_functional(_embedding_renorm_))
register(aten.masked_scatter_backward.default)(_masked_scatter_backward)
register(aten.embedding_dense_backward.default)(_embedding_dense_backward)
