"""Tensor plumbing on ocl devices: creation, copies between host and device, dtype
conversion, views (metadata over the same storage, computed by PyTorch's own meta
kernels so that every view operator has PyTorch's semantics), fill and item()."""
import numpy as np
import torch

from ..core.copy import fill
from ..tensor import Tensor
from ..utils import BoundedCache
from . import device
from .dispatch import register
from .tensor import OclTensor, as_dlprim, assign, empty, from_numpy, host_array, numpy_dtype, \
    to_cpu, to_numpy, write_into

aten = torch.ops.aten

__all__ = ["device_index", "meta_of", "meta_args", "meta_result", "convert"]


def device_index(dev):
    """The ocl index a device argument names (the current device for a bare "ocl")."""
    dev = torch.device(dev)
    return device.current_device() if dev.index is None else dev.index


# ----- creation (these are also PrivateUse1 kernels: no ocl tensor among their arguments)
def empty_memory_format(size, dtype=None, layout=None, device=None, pin_memory=None,
                        memory_format=None):
    stride = None
    if memory_format not in (None, torch.contiguous_format, torch.preserve_format):
        stride = torch.empty(size, memory_format=memory_format, device="meta").stride()
    return empty(size, dtype or torch.get_default_dtype(), device_index(device or "ocl"), stride)


def empty_strided(size, stride, dtype=None, layout=None, device=None, pin_memory=None):
    return empty(size, dtype or torch.get_default_dtype(), device_index(device or "ocl"), stride)


register(aten.empty.memory_format)(empty_memory_format)
register(aten.empty_strided.default)(empty_strided)


def _strides_like(x, memory_format):
    """The strides PyTorch gives a new tensor like x (empty_like's rule: preserve_format
    keeps a dense layout such as a transpose's); None for contiguous ones."""
    if memory_format is torch.contiguous_format or (
            memory_format in (None, torch.preserve_format) and x.is_contiguous()):
        return None
    return torch.empty_like(meta_of(x), memory_format=memory_format or torch.preserve_format).stride()


@register(aten.empty_like.default)
def _empty_like(x, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    index = x._ocl_storage.index if device is None else device_index(device)
    return empty(x.shape, dtype or x.dtype, index, _strides_like(x, memory_format))


@register(aten.new_empty.default)
def _new_empty(x, size, dtype=None, layout=None, device=None, pin_memory=None):
    index = x._ocl_storage.index if device is None else device_index(device)
    return empty(size, dtype or x.dtype, index)


@register(aten.new_empty_strided.default)
def _new_empty_strided(x, size, stride, dtype=None, layout=None, device=None, pin_memory=None):
    index = x._ocl_storage.index if device is None else device_index(device)
    return empty(size, dtype or x.dtype, index, stride)


def _fill_new(x, size, value, dtype, device, stride=None):
    index = x._ocl_storage.index if device is None else device_index(device)
    out = empty(size, dtype or x.dtype, index, stride)
    return _fill(out, value)


@register(aten.new_zeros.default)
def _new_zeros(x, size, dtype=None, layout=None, device=None, pin_memory=None):
    return _fill_new(x, size, 0, dtype, device)


@register(aten.new_ones.default)
def _new_ones(x, size, dtype=None, layout=None, device=None, pin_memory=None):
    return _fill_new(x, size, 1, dtype, device)


@register(aten.new_full.default)
def _new_full(x, size, value, dtype=None, layout=None, device=None, pin_memory=None):
    return _fill_new(x, size, value, dtype, device)


@register(aten.zeros_like.default)
def _zeros_like(x, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    return _fill_new(x, x.shape, 0, dtype, device, _strides_like(x, memory_format))


@register(aten.ones_like.default)
def _ones_like(x, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    return _fill_new(x, x.shape, 1, dtype, device, _strides_like(x, memory_format))


@register(aten.full_like.default)
def _full_like(x, value, dtype=None, layout=None, device=None, pin_memory=None,
               memory_format=None):
    return _fill_new(x, x.shape, value, dtype, device, _strides_like(x, memory_format))


# ----- fill
def _element(value, dtype):
    """``value`` as an element of ``dtype``, converted (and refused) as PyTorch converts a
    fill value; exact: an int64 beyond 2^53 never passes through a float."""
    if type(value) in (int, bool) and (value == 0 or value == 1):
        return int(value)  # the same in every dtype, bool included: nothing to convert
    return torch.full((), value, dtype=dtype).item()


def _dense(t):
    """Whether t's elements fill a run of its storage without gaps or overlaps (a
    permutation of a contiguous layout: a transpose, channels_last)."""
    step = 1
    for stride, size in sorted((s, n) for s, n in zip(t.stride(), t.shape) if n != 1):
        if stride != step:
            return False
        step *= size
    return True


def _fill(t, value):
    if isinstance(value, torch.Tensor):
        value = value.item()
    if t.numel() == 0:
        return t
    ctx = t._ocl_storage.ctx
    dt = numpy_dtype(t.dtype)
    value = _element(value, t.dtype)
    if t.is_contiguous() or _dense(t):  # its elements are one run of the storage
        fill(ctx, t._ocl_storage.at(t.storage_offset(), (t.numel(),)), value)
        return t
    tmp = Tensor(ctx, tuple(t.shape), dt)
    fill(ctx, tmp, value)
    return write_into(t, tmp)


@register(aten.select_backward.default)
def _select_backward(grad, input_sizes, dim, index):
    """select's gradient: zeros of the input's size, grad where the selection was (PyTorch
    has no decomposition of it that reaches a device)."""
    out = _fill_new(grad, input_sizes, 0, grad.dtype, grad.device)
    out.select(dim, index).copy_(grad)
    return out


@register(aten.fill_.Scalar, aten.fill_.Tensor)
def _fill_(t, value):
    return _fill(t, value)


@register(aten.fill.Scalar, aten.fill.Tensor)
def _fill_functional(t, value):
    """A new tensor like t (empty_like's strides) filled with value."""
    like = torch.empty_like(meta_of(t))
    return _fill(empty(t.shape, t.dtype, t._ocl_storage.index, like.stride()), value)


@register(aten.zero_.default)
def _zero_(t):
    return _fill(t, 0)


@register(aten._local_scalar_dense.default)
def _item(t):
    if t.dtype == torch.bfloat16:
        return to_cpu(t).reshape(()).item()
    value = to_numpy(t).reshape(()).item()
    return bool(value) if t.dtype == torch.bool else value


@register(aten.is_pinned.default)
def _is_pinned(t, device=None):
    return False


# ----- random fills: drawn by PyTorch's CPU generator (so torch.manual_seed governs them)
# and copied to the device
def _random_fill(t, draw):
    host = draw(torch.empty(tuple(t.shape), dtype=t.dtype))
    return _copy_(t, host)


@register(aten.normal_.default)
def _normal_(t, mean=0.0, std=1.0, generator=None):
    return _random_fill(t, lambda h: h.normal_(mean, std, generator=generator))


@register(aten.uniform_.default)
def _uniform_(t, from_=0.0, to=1.0, generator=None):
    return _random_fill(t, lambda h: h.uniform_(from_, to, generator=generator))


# ----- dtype conversion and copies
def convert(x, dtype):
    """A new contiguous tensor with x's values as ``dtype`` (PyTorch's conversion rules:
    bool is nonzero, floats truncate to integers), on x's device: one strided copy."""
    out = empty(x.shape, dtype, x._ocl_storage.index)
    if x.numel() == 0:
        return out
    return assign(out, x)


def _same(dst, src):
    """src broadcast to dst's shape (``assign`` converts its dtype on the way)."""
    if tuple(src.shape) != tuple(dst.shape):
        src = _view_via_meta(aten.expand.default, src, list(dst.shape))
    return src


# A host-to-device copy up to this size is queued from a private copy of the values (the
# caller may change its tensor at once): labels copied in the middle of a training step
# then do not wait for the forward pass queued before them. Larger copies wait.
_QUEUED_COPY_BYTES = 1 << 20


@register(aten.copy_.default)
def _copy_(dst, src, non_blocking=False):
    if isinstance(dst, OclTensor):
        if isinstance(src, OclTensor):
            if src._ocl_storage.index != dst._ocl_storage.index:
                src = from_numpy(to_numpy(src), dst._ocl_storage.index, src.dtype)
            return assign(dst, _same(dst, src))
        if dst.numel() == 0:
            return dst
        host = src.detach().to(dst.dtype).expand(dst.shape).contiguous()
        array = host_array(host)
        if dst.is_contiguous():  # straight into its storage
            if array.nbytes <= _QUEUED_COPY_BYTES:  # queued: no wait for the work before it
                as_dlprim(dst).to_device(np.array(array, copy=True), wait=False)
            else:
                as_dlprim(dst).to_device(array)
            return dst
        staged = Tensor(dst._ocl_storage.ctx, tuple(dst.shape), numpy_dtype(dst.dtype))
        staged.to_device(array)
        return write_into(dst, staged)
    dst.copy_(to_cpu(src))
    return dst


@register(aten._copy_from.default)
def copy_from(src, dst, non_blocking=False):
    """PyTorch's copy between devices (src into dst); also a PrivateUse1 kernel."""
    return _copy_(dst, src, non_blocking)


@register(aten._to_copy.default)
def _to_copy(x, dtype=None, layout=None, device=None, pin_memory=None, non_blocking=False,
             memory_format=None):
    target = torch.device(device) if device is not None else x.device
    dtype = dtype or x.dtype
    stride = _strides_like(x, memory_format)
    if target.type != "ocl":
        host = to_cpu(x).to(device=target, dtype=dtype)
        if stride is None:
            return host
        return torch.empty_strided(x.shape, stride, dtype=dtype, device=target).copy_(host)
    index = device_index(target)
    if index != x._ocl_storage.index:
        x = from_numpy(to_numpy(x), index, x.dtype)
    return assign(empty(x.shape, dtype, index, stride), x)


@register(aten.clone.default)
def _clone(x, memory_format=None):
    return assign(empty(x.shape, x.dtype, x._ocl_storage.index, _strides_like(x, memory_format)), x)


@register(aten._copy_from_and_resize.default)
def _copy_from_and_resize(src, dst):
    return dst.copy_(src)


# ----- views: PyTorch's meta kernels say what the view's sizes, strides and offset are
def meta_of(t):
    """A meta tensor with t's sizes, strides, storage offset and dtype."""
    base = torch.empty((t._ocl_storage.flat.size,), dtype=t.dtype, device="meta")
    return base.as_strided(t.shape, t.stride(), t.storage_offset())


def meta_args(a):
    """An argument with every ocl tensor in it replaced by its meta tensor (lists and
    tuples looked into)."""
    if isinstance(a, OclTensor):
        return meta_of(a)
    if isinstance(a, (list, tuple)):
        return type(a)(meta_args(x) for x in a)
    return a


_UNKEYED = object()  # _meta_key's answer for an argument a meta answer may depend on more


def _meta_key(a):
    """What a meta kernel's answer can depend on, for one argument: an ocl tensor's sizes,
    strides and dtype, a number's type and value, a list's elements; ``_UNKEYED`` where the
    answer may depend on more (a CPU tensor's values). (None is an argument like any other:
    ``dtype=None``, an absent bias.)"""
    kind = type(a)
    if kind is OclTensor:
        return (a.shape, a.stride(), a.dtype)
    if kind is int or kind is float or kind is bool:
        return (kind, a)
    if kind is list or kind is tuple:
        key = [kind]
        for x in a:
            k = _meta_key(x)
            if k is _UNKEYED:
                return _UNKEYED
            key.append(k)
        return tuple(key)
    if a is None or kind is str or kind is torch.dtype or kind is torch.memory_format \
            or kind is torch.device:
        return a
    return _UNKEYED


# (operator, argument keys) -> PyTorch's meta answer, the most recently used META_KEPT.
# A meta kernel is a function of the sizes, strides, dtypes and non-tensor arguments
# (nothing reads a meta tensor's values), so its answer for one key is its answer for
# any call with that key; an error is raised again, never kept. The answers are meta
# tensors nobody writes to (callers read shapes, dtypes and strides).
META_KEPT = 4096
_meta_answers = BoundedCache(META_KEPT)


def meta_result(func, *args, **kwargs):
    """``func`` run on the meta tensors of its arguments (PyTorch's checks, output sizes,
    strides and dtype), once per signature of its arguments: a non-view operator's meta
    kernel (the Python ones, addmm's say, take milliseconds)."""
    key = _meta_key(args)
    if key is not _UNKEYED and kwargs:
        kw = _meta_key(tuple(sorted(kwargs.items())))
        key = _UNKEYED if kw is _UNKEYED else (key, kw)
    if key is _UNKEYED:
        return func(*meta_args(args), **{k: meta_args(v) for k, v in kwargs.items()})
    key = (func, key, torch.get_default_dtype())  # (Python floats promote to it)
    answer = _meta_answers.get(key)
    if answer is None:
        answer = func(*meta_args(args), **{k: meta_args(v) for k, v in kwargs.items()})
        _meta_answers[key] = answer
    return answer


def _view_of(t, m):
    return OclTensor(t._ocl_storage, tuple(m.shape), tuple(m.stride()), m.storage_offset(),
                     t.dtype)


# ----- views computed directly: PyTorch's own rules for the common views, exactly as its
# C++ kernels apply them (the meta kernel answers anything else: errors, unusual
# arguments, empty tensors), so that a view costs no meta tensors
def _contiguous_layout(shape):
    """PyTorch's contiguous strides (a size-0 dimension counts as 1)."""
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= n if n > 1 else 1
    return tuple(reversed(strides))


def _view_rule(t, size):
    """view / _unsafe_view of a contiguous tensor with elements (PyTorch's computeStride
    gives the contiguous strides of the new sizes then); None otherwise."""
    shape = t.shape
    n = t.numel()
    if not n or t.stride() != _contiguous_layout(shape):
        return None
    size = list(size)
    known, infer = 1, None
    for k, s in enumerate(size):
        if type(s) is not int:
            return None
        if s == -1 and infer is None:
            infer = k
        elif s < 0:
            return None
        else:
            known *= s
    if infer is not None:
        if not known or n % known:
            return None
        size[infer] = n // known
    elif known != n:
        return None
    size = tuple(size)
    return size, _contiguous_layout(size), t.storage_offset()


def _wrap(dim, ndim):
    """dim in [0, ndim) for ndim >= 1, else None (the meta kernel raises the error)."""
    if type(dim) is not int or not -ndim <= dim < ndim:
        return None
    return dim + ndim if dim < 0 else dim


def _transpose_rule(t, dim0, dim1):
    ndim = t.dim()
    a, b = _wrap(dim0, ndim), _wrap(dim1, ndim)
    if a is None or b is None:
        return None
    shape, stride = list(t.shape), list(t.stride())
    shape[a], shape[b] = shape[b], shape[a]
    stride[a], stride[b] = stride[b], stride[a]
    return tuple(shape), tuple(stride), t.storage_offset()


def _t_rule(t):
    if t.dim() != 2:
        return None
    (n, m), (s, r) = t.shape, t.stride()
    return (m, n), (r, s), t.storage_offset()


def _permute_rule(t, dims):
    ndim = t.dim()
    if len(dims) != ndim:
        return None
    order = [_wrap(d, ndim) for d in dims]
    if None in order or len(set(order)) != ndim:
        return None
    shape, stride = t.shape, t.stride()
    return tuple(shape[d] for d in order), tuple(stride[d] for d in order), t.storage_offset()


def _unsqueeze_rule(t, dim):
    ndim = t.dim()
    d = _wrap(dim, ndim + 1)
    if d is None:
        return None
    shape, stride = list(t.shape), list(t.stride())
    new_stride = 1 if d >= ndim else shape[d] * stride[d]
    shape.insert(d, 1)
    stride.insert(d, new_stride)
    return tuple(shape), tuple(stride), t.storage_offset()


def _squeeze_dim_rule(t, dim):
    ndim = t.dim()
    d = _wrap(dim, ndim)
    if d is None:
        return None
    shape, stride = list(t.shape), list(t.stride())
    if shape[d] == 1:
        del shape[d], stride[d]
    return tuple(shape), tuple(stride), t.storage_offset()


def _expand_rule(t, size, implicit=False):
    """expand to as many dimensions as t has (new leading dimensions: the meta kernel)."""
    shape, stride = t.shape, t.stride()
    if len(size) != len(shape):
        return None
    new_shape, new_stride = [], []
    for n, s, want in zip(shape, stride, size):
        if type(want) is not int:
            return None
        if want == -1:
            want = n
        if want != n:
            if n != 1 or want < 0:
                return None
            s = 0
        new_shape.append(want)
        new_stride.append(s)
    return tuple(new_shape), tuple(new_stride), t.storage_offset()


_BIG = 2 ** 63 - 1


def _slice_rule(t, dim=0, start=None, end=None, step=1):
    """PyTorch's slice: start and end clamped into [0, size], end not below start."""
    ndim = t.dim()
    d = _wrap(dim, ndim)
    if d is None or type(step) is not int or step < 1:
        return None
    start = 0 if start is None else start
    end = _BIG if end is None else end
    if type(start) is not int or type(end) is not int:
        return None
    n = t.shape[d]
    if start < 0:
        start += n
    if end < 0:
        end += n
    start = 0 if start < 0 else (n if start > n else start)
    end = start if end < start else (n if end > n else end)
    shape, stride = list(t.shape), list(t.stride())
    shape[d] = (end - start + step - 1) // step
    offset = t.storage_offset() + start * stride[d]
    stride[d] *= step
    return tuple(shape), tuple(stride), offset


def _select_rule(t, dim, index):
    ndim = t.dim()
    d = _wrap(dim, ndim)
    if d is None or type(index) is not int:
        return None
    n = t.shape[d]
    if not -n <= index < n:
        return None
    if index < 0:
        index += n
    shape, stride = list(t.shape), list(t.stride())
    offset = t.storage_offset() + index * stride[d]
    del shape[d], stride[d]
    return tuple(shape), tuple(stride), offset


_VIEW_RULES = {aten.view.default: _view_rule, aten._unsafe_view.default: _view_rule,
               aten.transpose.int: _transpose_rule, aten.t.default: _t_rule,
               aten.permute.default: _permute_rule, aten.unsqueeze.default: _unsqueeze_rule,
               aten.squeeze.dim: _squeeze_dim_rule, aten.expand.default: _expand_rule,
               aten.slice.Tensor: _slice_rule, aten.select.int: _select_rule}


def _view_via_meta(func, t, *args, **kwargs):
    """The view ``func(t, ...)``: by its rule above where one answers, else by PyTorch's
    meta kernel."""
    rule = _VIEW_RULES.get(func)
    if rule is not None:
        layout = rule(t, *args, **kwargs)
        if layout is not None:
            return OclTensor(t._ocl_storage, layout[0], layout[1], layout[2], t.dtype)
    out = func(meta_of(t), *args, **kwargs)
    if isinstance(out, (list, tuple)):
        return type(out)(_view_of(t, m) for m in out)
    return _view_of(t, out)


_VIEWS = [aten.alias.default, aten.detach.default, aten.view.default, aten._unsafe_view.default,
          aten._reshape_alias.default, aten.as_strided.default, aten.t.default,
          aten.transpose.int, aten.permute.default, aten.expand.default, aten.slice.Tensor,
          aten.select.int, aten.unsqueeze.default, aten.squeeze.default, aten.squeeze.dim,
          aten.squeeze.dims, aten.split.Tensor, aten.split_with_sizes.default,
          aten.unbind.int, aten.narrow.default, aten.diagonal.default, aten.unfold.default,
          aten.chunk.default]

register(aten.lift_fresh.default)(lambda t: t)  # a fresh tensor: nothing to do

for _op in _VIEWS:
    register(_op)(lambda t, *a, _op=_op, **k: _view_via_meta(_op, t, *a, **k))


@register(aten.alias.default, aten.detach.default)
def _same_layout(t):
    """A new tensor over t's storage with t's layout (autograd detaches every gradient it
    stores: no meta kernel is needed to know the answer)."""
    return OclTensor(t._ocl_storage, t.shape, t.stride(), t.storage_offset(), t.dtype)


@register(aten.cat.default)
def _cat(tensors, dim=0):
    m = meta_result(aten.cat.default, tensors, dim)
    first = next(t for t in tensors if isinstance(t, OclTensor))
    out = empty(m.shape, m.dtype, first._ocl_storage.index)
    dim = dim % out.dim()
    start = 0
    for t in tensors:
        if t.dim() == 1 and t.numel() == 0 and out.dim() > 1:
            continue   # PyTorch skips 1-D empty tensors in cat
        size = t.shape[dim]
        if size:
            part = _view_via_meta(aten.slice.Tensor, out, dim, start, start + size)
            assign(part, _same(part, t))
        start += size
    return out


@register(aten.stack.default)
def _stack(tensors, dim=0):
    dim = dim % (tensors[0].dim() + 1)
    return _cat([_view_via_meta(aten.unsqueeze.default, t, dim) for t in tensors], dim)
