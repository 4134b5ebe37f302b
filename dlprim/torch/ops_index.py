"""Indexing reads on ocl devices, on dlprim's index kernels (``core/indexing.py``):
``index_select``, ``gather``, ``take``, ``x[indices]`` (``index.Tensor``: integer index
tensors, broadcast together, and boolean masks), ``embedding``, and the operators whose
output size depends on the data (``nonzero``, ``nonzero_static``, ``masked_select``), plus
``isin``. The writes (scatter, index_put, ...) are in ``ops_index_put.py``.

Output shapes and PyTorch's argument checks come from running the operator on meta
tensors. Indices stay on the device; an index outside its axis is reported by the kernel
and raised here as PyTorch raises it (one small read-back per operator)."""
import math

import torch

from ..core import indexing as kernels
from .dispatch import register
from .ops_tensor import assign, convert, meta_of
from .tensor import OclTensor, as_dlprim, empty, enqueue, from_numpy

aten = torch.ops.aten

__all__ = ["advanced", "around", "checked", "device_tensor", "linear_index", "meta",
           "narrowed", "nonzero", "on_device"]


# ----- the shared pieces (ops_index_put.py uses them too)
def meta(a):
    """Meta tensors for the tensors in a (nested) argument (a CPU one: a wrapped scalar)."""
    if isinstance(a, OclTensor):
        return meta_of(a)
    if isinstance(a, torch.Tensor):
        return a.to("meta")
    if isinstance(a, (list, tuple)):
        return type(a)(meta(x) for x in a)
    return a


def on_device(op, x, *others):
    """PyTorch's error where a tensor of the call is not on x's ocl device."""
    for t in others:
        if isinstance(t, torch.Tensor) and (not isinstance(t, OclTensor) or t.device != x.device):
            raise RuntimeError("%s: expected all tensors to be on the same device, but found "
                               "at least two devices, %s and %s" % (op, x.device, t.device))


def around(shape, dim):
    """(outer, n, inner): a shape seen around axis ``dim`` (a 0-d shape as (1, 1, 1))."""
    shape = list(shape) or [1]
    return math.prod(shape[:dim]), shape[dim], math.prod(shape[dim + 1:])


def checked(ctx, launches, error, message):
    """Enqueue the launches, then raise ``error(message % bad index)`` if one met an index
    outside its axis."""
    enqueue(ctx, launches)
    bad = kernels.fault(ctx).take()
    if bad is not None:
        raise error(message % bad)


def device_tensor(t, like):
    """t on like's ocl device: an ocl tensor as it is, a CPU tensor or a number copied."""
    if isinstance(t, OclTensor):
        return t
    t = torch.as_tensor(t)
    return from_numpy(t.numpy(), like._ocl_storage.index, t.dtype)


def narrowed(t, shape, dim):
    """The view of t over ``shape`` from its start, except along dim (kept whole): the part
    of t that gather and scatter pair with an index smaller than t."""
    shape = list(shape)
    if t.dim() != len(shape) or not shape:  # a 0-d t: nothing to cut
        return t
    shape[dim] = t.shape[dim]
    if tuple(shape) == tuple(t.shape):
        return t
    return t.as_strided(shape, t.stride(), t.storage_offset())


def _ctx(t):
    return t._ocl_storage.ctx


def _new(shape, dtype, like):
    return empty(shape, dtype, like._ocl_storage.index)


# ----- gathers
def _take_along(x, dim, index, out_shape, error, message, per_element, wrap=False):
    """out = x[..., index, ...] along dim, over (outer, n, inner) views."""
    out = _new(out_shape, x.dtype, x)
    if out.numel() == 0:
        return out
    src = narrowed(x, index.shape, dim) if per_element else x
    outer, n, inner = around(src.shape, dim)
    m = (list(index.shape) or [1])[dim] if per_element else index.numel()
    launches = kernels.take(_ctx(x), as_dlprim(src), as_dlprim(index), as_dlprim(out),
                            outer, n, m, inner, per_element=per_element, wrap=wrap)
    checked(_ctx(x), launches, error, message)
    return out


def _index_select(x, dim, index):
    on_device("index_select", x, index)
    shape = aten.index_select(meta(x), dim, meta(index)).shape
    dim = dim % max(x.dim(), 1)
    return _take_along(x, dim, index.reshape(-1), shape, IndexError,
                       "index %%d is out of range in self (dimension %d of size %d)"
                       % (dim, (list(x.shape) or [1])[dim]), False)


def _gather(x, dim, index, sparse_grad=False):
    on_device("gather", x, index)
    shape = aten.gather(meta(x), dim, meta(index)).shape
    dim = dim % max(x.dim(), 1)
    return _take_along(x, dim, index, shape, RuntimeError,
                       "index %%d is out of bounds for dimension %d with size %d"
                       % (dim, (list(x.shape) or [1])[dim]), True)


def _take(x, index):
    on_device("take", x, index)
    aten.take(meta(x), meta(index))
    out = _new(index.shape, x.dtype, x)
    if out.numel():
        launches = kernels.take(_ctx(x), as_dlprim(x).view((x.numel(),)), as_dlprim(index),
                                as_dlprim(out), 1, x.numel(), index.numel(), 1, wrap=True)
        checked(_ctx(x), launches, IndexError, "out of range: tried to access index %d on a "
                "tensor of " + str(x.numel()) + " elements.")
    return out


def _embedding(weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    on_device("embedding", weight, indices)
    shape = aten.embedding(meta(weight), meta(indices), padding_idx).shape
    rows = _take_along(weight, 0, indices.reshape(-1), (indices.numel(),)
                       + tuple(weight.shape[1:]), IndexError,
                       "index %d is out of range in self (embedding)", False)
    return rows.view(shape)


# (the out= overloads: dispatch.py runs them through these functional ones)
register(aten.index_select.default)(_index_select)
register(aten.gather.default)(_gather)
register(aten.take.default)(_take)
register(aten.embedding.default)(_embedding)


# ----- x[indices]: the index tensors broadcast together pick elements over their axes
def advanced(x, indices):
    """PyTorch's advanced indexing plan for x[indices] (None: a whole axis; a boolean mask
    stands for the index tensors of its nonzero coordinates): (xp, p, k, index tensors
    expanded to their common shape B, the indexed axes' sizes, their positions in x), with
    xp a view of x whose indexed axes are p .. p+k-1 (moved to the front where they are not
    adjacent, as PyTorch does). x[indices] has the shape xp.shape[:p] + B + xp.shape[p+k:]."""
    tensors = []
    for t in indices:
        if t is not None:
            t = device_tensor(t, x)
            if t.dtype in (torch.bool, torch.uint8):
                if t.dim() == 0:
                    raise NotImplementedError("dlprim.torch: index with a 0-d boolean mask on "
                                              "ocl devices")
                at = len(tensors)
                want = list(x.shape[at:at + t.dim()])
                if list(t.shape) != want:
                    raise IndexError("The shape of the mask %s at index %d does not match the "
                                     "shape of the indexed tensor %s at index %d"
                                     % (list(t.shape), at, list(x.shape), at))
                found = nonzero(t)
                tensors.extend(found.select(1, j) for j in range(t.dim()))
                continue
            if t.dtype not in (torch.int64, torch.int32):
                raise IndexError("tensors used as indices must be long, int, byte or bool "
                                 "tensors")
        tensors.append(t)
    if len(tensors) > x.dim():
        raise IndexError("too many indices for tensor of dimension %d" % x.dim())
    dims = [d for d, t in enumerate(tensors) if t is not None]
    if not dims:
        return x, 0, 0, [], [], []
    try:
        shape = torch.broadcast_shapes(*(tuple(tensors[d].shape) for d in dims))
    except RuntimeError:
        raise IndexError("shape mismatch: indexing tensors could not be broadcast together "
                         "with shapes %s" % ", ".join(str(list(tensors[d].shape))
                                                      for d in dims)) from None
    if dims == list(range(dims[0], dims[-1] + 1)):
        xp, p = x, dims[0]
    else:
        rest = [d for d in range(x.dim()) if d not in dims]
        xp, p = x.permute(dims + rest), 0
    return xp, p, len(dims), [tensors[d].expand(shape) for d in dims], [
        x.shape[d] for d in dims], dims


def linear_index(ctx, like, tensors, sizes):
    """One index over the indexed axes taken together (row-major), from the index tensors
    (one shape) and the axes' sizes, as a contiguous dlprim tensor: the index tensor itself
    where there is one (the kernel that reads it wraps and checks it), else an int64 one
    made, wrapped and checked here."""
    if len(tensors) == 1:
        return as_dlprim(tensors[0])
    lin = _new(tensors[0].shape, torch.int64, like)
    launches = []
    for i, (t, n) in enumerate(zip(tensors, sizes)):
        launches += kernels.combine(ctx, as_dlprim(t), as_dlprim(lin), n, first=i == 0)
    checked(ctx, launches, IndexError, "index %d is out of bounds for one of the indexed "
            "dimensions (sizes " + str(list(sizes)) + ")")
    return as_dlprim(lin)


def _bounds_message(dims, sizes):
    if len(dims) == 1:
        return "index %%d is out of bounds for dimension %d with size %d" % (dims[0], sizes[0])
    return "index %d is out of bounds"


def _index(x, indices):
    plan = advanced(x, indices)
    if not plan[3]:
        return x.clone()
    xp, p, k, tensors, sizes, dims = plan
    shape = tuple(xp.shape[:p]) + tuple(tensors[0].shape) + tuple(xp.shape[p + k:])
    out = _new(shape, x.dtype, x)
    if out.numel():
        ctx = _ctx(x)
        lin = linear_index(ctx, x, tensors, sizes)
        outer, n, inner = math.prod(xp.shape[:p]), math.prod(sizes), math.prod(xp.shape[p + k:])
        launches = kernels.take(ctx, as_dlprim(xp), lin, as_dlprim(out), outer, n, lin.size,
                                inner, wrap=True)
        checked(ctx, launches, IndexError, _bounds_message(dims, sizes))
    return out


register(aten.index.Tensor, aten._unsafe_index.Tensor)(_index)


# ----- outputs sized by the data: the kept positions of a mask, counted on the device
def _mask_of(x):
    """A contiguous uchar dlprim mask: x != 0."""
    return as_dlprim(x if x.dtype == torch.bool else aten.ne.Scalar(x, 0))


def nonzero(x):
    """The (count, x.dim()) int64 coordinates of x's nonzero elements, in row-major order."""
    ctx = _ctx(x)
    if x.numel() == 0:
        return _new((0, x.dim()), torch.int64, x)
    found = kernels.compact(ctx, _mask_of(x))
    out = _new((found.count(), x.dim()), torch.int64, x)
    if out.numel():
        found.positions(tuple(x.shape), as_dlprim(out))
    return out


def _nonzero_static(x, *, size, fill_value=-1):
    if size < 0:
        raise RuntimeError("nonzero_static: 'size' must be an non-negative integer")
    out = _new((size, x.dim()), torch.int64, x)
    aten.fill_.Scalar(out, fill_value)
    found = nonzero(x)
    rows = min(size, found.shape[0])
    if rows and x.dim():
        assign(out[:rows], found[:rows])
    return out


def _masked_select(x, mask):
    on_device("masked_select", x, mask)
    if mask.dtype != torch.bool:
        raise RuntimeError("masked_select: expected BoolTensor for mask")
    full = torch.broadcast_shapes(tuple(x.shape), tuple(mask.shape))
    ctx = _ctx(x)
    values = as_dlprim(x.expand(full))
    found = kernels.compact(ctx, as_dlprim(mask.expand(full)))
    out = _new((found.count(),), x.dtype, x)
    if out.numel():
        found.select(values, as_dlprim(out))
    return out


def _isin(elements, test_elements, *, assume_unique=False, invert=False):
    like = elements if isinstance(elements, OclTensor) else test_elements
    shape = elements.shape if isinstance(elements, torch.Tensor) else ()
    x, t = device_tensor(elements, like), device_tensor(test_elements, like)
    dtype = torch.result_type(elements, test_elements)
    if dtype in (torch.float16, torch.bfloat16):
        dtype = torch.float32  # compared widened: the 16-bit values are exact in float
    if dtype == torch.bool:
        dtype = torch.uint8
    out = _new(shape, torch.bool, like)
    x, t = (v if v.dtype == dtype else convert(v, dtype) for v in (x, t))
    enqueue(_ctx(like), kernels.isin(_ctx(like), as_dlprim(x), as_dlprim(t.reshape(-1)),
                                     as_dlprim(out), bool(invert)))
    return out


register(aten.nonzero.default)(nonzero)
register(aten.nonzero_static.default)(_nonzero_static)
register(aten.masked_select.default)(_masked_select)
for _overload in ("Tensor_Tensor", "Tensor_Scalar", "Scalar_Tensor"):
    register(getattr(aten.isin, _overload))(_isin)
