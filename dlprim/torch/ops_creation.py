"""Creation operators on ocl devices: arange, linspace, logspace and eye computed on the
device (``core/sequence.py``), tril/triu_indices, and the factories PyTorch calls with no
ocl tensor among their arguments, which reach the device's backend key
(``register_factories``)."""
import math

import torch

from ..core import sequence as seq
from .dispatch import register
from .ops_shape import _ctx, _index, _into, _resize_
from .ops_tensor import _fill, _view_via_meta, convert, device_index, meta_of
from .tensor import OclTensor, as_dlprim, empty, numpy_dtype
from ..utils import BoundedCache

aten = torch.ops.aten

__all__ = ["register_factories", "efficient_zero_tensor"]


# ----- creation: arange / linspace / logspace / eye (their functional forms reach the
# device as these out= overloads)
# (operator, its number arguments, the output dtype) -> the result's shape: PyTorch's meta
# kernels of arange and linspace are Python (about 200 us), and a model asks for the same
# positions every step; an error (a zero step, say) is raised again, never kept
_SHAPES = BoundedCache(1024)


def _sequence(out, shape_of, mode, start, step, end=0, base=10.0, key=None):
    shape = _SHAPES.get(key) if key is not None else None
    if shape is None:
        shape = tuple(shape_of(torch.empty(0, dtype=out.dtype, device="meta")).shape)
        if key is not None:
            _SHAPES[key] = shape
    if tuple(out.shape) != shape:
        _resize_(out, shape)
    if out.numel() == 0:
        return out
    target = out if out.is_contiguous() else empty(out.shape, out.dtype, _index(out))
    seq.sequence(_ctx(out), as_dlprim(target), mode, start, step, end, base)
    return out if target is out else _put(out, target)


def _scalar(v):
    return v.item() if isinstance(v, torch.Tensor) else v


@register(aten.arange.start_out)
def _arange_out(start, end, step=1, *, out):
    start, end, step = _scalar(start), _scalar(end), _scalar(step)
    integral = not (out.dtype.is_floating_point or out.dtype.is_complex)
    cast = int if integral else float  # PyTorch computes in the output's accumulate type
    key = ("arange", (type(start), start), (type(end), end), (type(step), step), out.dtype)
    return _sequence(out, lambda m: aten.arange.start_out(start, end, step, out=m),
                     seq.ARANGE, cast(start), cast(step), key=key)


@register(aten.arange.out)
def _arange_end_out(end, *, out):
    return _arange_out(0, end, 1, out=out)


def _spaced(out, start, end, steps, mode, base=10.0):
    start, end = _scalar(start), _scalar(end)
    if not (out.dtype.is_floating_point or out.dtype.is_complex):
        start, end = int(start), int(end)  # PyTorch converts the ends to the dtype first
    if steps == 1:
        end = start  # the one value is start (the kernel counts from end past halfway)
    step = (float(end) - float(start)) / (steps - 1) if steps > 1 else 0.0
    if mode == seq.LINSPACE:
        shape_of = lambda m: aten.linspace.out(start, end, steps, out=m)  # noqa: E731
    else:
        shape_of = lambda m: aten.logspace.out(start, end, steps, base, out=m)  # noqa: E731
    return _sequence(out, shape_of, mode, float(start), step, float(end), float(base))


@register(aten.linspace.out, aten.linspace.Tensor_Tensor_out, aten.linspace.Tensor_Scalar_out,
          aten.linspace.Scalar_Tensor_out)
def _linspace_out(start, end, steps, *, out):
    return _spaced(out, start, end, steps, seq.LINSPACE)


@register(aten.logspace.out, aten.logspace.Tensor_Tensor_out, aten.logspace.Tensor_Scalar_out,
          aten.logspace.Scalar_Tensor_out)
def _logspace_out(start, end, steps, base=10.0, *, out):
    return _spaced(out, start, end, steps, seq.LOGSPACE, base)


def _factory_out(start, end, dtype, device):
    """The empty result of a tensor-overload factory, on the device of its tensors."""
    where = next((t for t in (start, end) if isinstance(t, OclTensor)), None)
    index = _index(where) if device is None else device_index(device)
    return empty((0,), dtype or torch.get_default_dtype(), index)


@register(aten.linspace.Tensor_Tensor, aten.linspace.Tensor_Scalar, aten.linspace.Scalar_Tensor)
def _linspace_tensors(start, end, steps, dtype=None, layout=None, device=None,
                      pin_memory=None):
    return _linspace_out(start, end, steps, out=_factory_out(start, end, dtype, device))


@register(aten.logspace.Tensor_Tensor, aten.logspace.Tensor_Scalar, aten.logspace.Scalar_Tensor)
def _logspace_tensors(start, end, steps, base=10.0, dtype=None, layout=None, device=None,
                      pin_memory=None):
    return _logspace_out(start, end, steps, base, out=_factory_out(start, end, dtype, device))


@register(aten.eye.m_out)
def _eye_out(n, m=None, *, out):
    m = n if m is None else m
    shape = aten.eye.m_out(n, m, out=torch.empty(0, dtype=out.dtype, device="meta")).shape
    if tuple(out.shape) != tuple(shape):
        _resize_(out, shape)
    if out.numel():
        _fill(out, 0)
        _fill(_view_via_meta(aten.diagonal.default, out), 1)
    return out


register(aten.eye.out)(lambda n, *, out: _eye_out(n, n, out=out))


def _triangle_indices(lower):
    factory = torch.tril_indices if lower else torch.triu_indices

    def run(row, col, offset=0, dtype=None, layout=None, device=None, pin_memory=None):
        """The (row, column) pairs of the triangle, row-major (2 x count)."""
        m = factory(row, col, offset, dtype=dtype or torch.int64, device="meta")
        out = empty(m.shape, m.dtype, device_index(device or "ocl"))
        if out.numel():
            seq.triangle_indices(_ctx(out), as_dlprim(out), row, col, offset, lower)
        return out
    return run


_tril_indices, _triu_indices = _triangle_indices(True), _triangle_indices(False)


def register_factories(lib):
    """The factories that reach the device's backend key (no ocl tensor among their
    arguments): ``lib`` is the ``aten`` IMPL library that registers the PrivateUse1 kernels."""
    lib.impl("tril_indices", _tril_indices, "PrivateUse1")
    lib.impl("triu_indices", _triu_indices, "PrivateUse1")
    lib.impl("_efficientzerotensor", efficient_zero_tensor, "PrivateUse1")


register(aten.tril_indices.out)(lambda r, c, offset=0, *, out: _into(
    out, _tril_indices(r, c, offset, out.dtype, device=out.device)))
register(aten.triu_indices.out)(lambda r, c, offset=0, *, out: _into(
    out, _triu_indices(r, c, offset, out.dtype, device=out.device)))


def efficient_zero_tensor(size, dtype=None, layout=None, device=None, pin_memory=None):
    """PyTorch's zero tensor of autograd's zero gradients (a plain zero-filled tensor
    here)."""
    out = empty(size, dtype or torch.get_default_dtype(), device_index(device or "ocl"))
    return _fill(out, 0)
