"""Shape and view operators on ocl devices (the creation operators: ops_creation.py).

Shapes, dtypes and errors come from PyTorch's meta kernels (the operator run on meta
tensors first), so only the data movement is dlprim's: strided copies over views for
repeat, the ``*_copy`` and ``*_scatter`` operators, constant padding, pixel and channel
shuffles and im2col/col2im; ``core/shape_remap.py`` for flip, roll and the reflection,
replication and circular pads (and their gradients); ``core/sequence.py`` for arange,
linspace and logspace. In-place view operators (``unsqueeze_``, ``transpose_``,
``resize_`` ...) change the tensor's own sizes and strides.
"""
import math

import torch

from ..core import sequence as seq
from ..core.copy import StridedCopy
from ..core.pointwise import memo
from ..core.shape_remap import CIRCULAR, FLIP, REFLECT, REPLICATE, remap_axis, \
    remap_axis_backward
from ..tensor import Tensor
from .dispatch import register
from .ops_tensor import _fill, _view_via_meta, convert, device_index, meta_args
from .tensor import OclTensor, as_dlprim, assign, empty, numpy_dtype, strided_copy

aten = torch.ops.aten

__all__ = []


def _ctx(t):
    return t._ocl_storage.ctx


def _index(t):
    return t._ocl_storage.index


def _on_meta(op, *args, **kwargs):
    """PyTorch's answer on meta tensors: the output's shape and dtype, and its errors."""
    return op(*meta_args(args), **{k: meta_args(v) for k, v in kwargs.items()})


def _copy_of(view, stride=None):
    """A new tensor (contiguous unless ``stride`` is given) with the values of ``view``."""
    out = empty(view.shape, view.dtype, _index(view), stride)
    if out.numel():
        assign(out, view)
    return out


def _put(dst, src):
    """dst[...] = src (converted to dst's dtype), nothing done when empty."""
    if dst.numel():
        assign(dst, src if src.dtype == dst.dtype else convert(src, dst.dtype))
    return dst


def _reshaped(t, shape):
    """A contiguous t seen with another shape (same storage)."""
    return _view_via_meta(aten.view.default, t, list(shape))


def _accumulate(dst, src):
    """dst[...] += src, for views of one shape and dtype (the adjoint of a gather through
    overlapping views: col2im, unfold's gradient)."""
    if dst.numel() == 0:
        return
    ctx, shape = _ctx(dst), tuple(dst.shape)
    dt = numpy_dtype(dst.dtype)
    op = memo(ctx, ("torch_strided_add", shape, src.stride(), dst.stride(), dt),
               lambda: StridedCopy(ctx, shape, src.stride(), dst.stride(), dt))
    op(src._ocl_storage.at(src.storage_offset(), (1,)),
       dst._ocl_storage.at(dst.storage_offset(), (1,)), 1.0, 1.0)


def _with_out(fn):
    """The ``out=`` overload of a functional implementation."""
    def run(*args, out, **kwargs):
        return _into(out, fn(*args, **kwargs))
    return run


def _into(out, result):
    """PyTorch's out= contract: out resized to the result's shape, then written."""
    if out.dtype != result.dtype:
        raise RuntimeError("Expected out tensor to have dtype %s, but got %s instead"
                           % (result.dtype, out.dtype))
    if tuple(out.shape) != tuple(result.shape):
        _resize_(out, result.shape)
    return _put(out, result)


def _register(functional, out, fn):
    register(functional)(fn)
    if out is not None:
        register(out)(_with_out(fn))


# ----- in-place view operators: the tensor itself takes the view's sizes and strides
def _restride(t, view):
    """Make t (the caller's own tensor object) the view ``view``: PyTorch copies sizes,
    strides and offset into t; the storage is ours to move (OclTensor.data's setter)."""
    type(t).data.fset(t, view)
    return t


def _inplace_view(view_op):
    return lambda t, *a, **k: _restride(t, _view_via_meta(view_op, t, *a, **k))


for _inplace, _view in ((aten.unsqueeze_.default, aten.unsqueeze.default),
                        (aten.squeeze_.default, aten.squeeze.default),
                        (aten.squeeze_.dim, aten.squeeze.dim),
                        (aten.squeeze_.dims, aten.squeeze.dims),
                        (aten.transpose_.default, aten.transpose.int),
                        (aten.t_.default, aten.t.default),
                        (aten.as_strided_.default, aten.as_strided.default)):
    register(_inplace)(_inplace_view(_view))


@register(aten.resize_.default)
def _resize_(t, size, memory_format=None):
    """t's sizes become ``size`` (contiguous strides, or ``memory_format``'s), keeping its
    storage offset; the storage grows, values kept, when it is too small (every view of it
    sees the larger storage, as in PyTorch)."""
    size = [int(n) for n in size]
    if any(n < 0 for n in size):
        raise RuntimeError("Trying to create tensor with negative dimension %d: %s"
                           % (min(size), size))
    if memory_format is torch.preserve_format:
        raise RuntimeError("unsupported memory format option Preserve")
    if list(t.shape) == size and memory_format is None:
        return t
    stride = torch.empty(size, device="meta",
                         memory_format=memory_format or torch.contiguous_format).stride()
    storage = t._ocl_storage
    needed = t.storage_offset() + math.prod(size)
    if math.prod(size) and needed > storage.flat.size:
        old = storage.flat
        grown = Tensor(storage.ctx, (needed,), old.dtype)
        strided_copy(storage.ctx, (old.size,), old, (1,), grown, (1,))
        storage.flat = grown
    return _restride(t, OclTensor(storage, size, stride, t.storage_offset(), t.dtype))


@register(aten.resize_as_.default)
def _resize_as_(t, other, memory_format=None):
    return _resize_(t, other.shape, memory_format)


# ----- tril / triu in place and out= (the functional forms are ops_math's)
def _triangle(op):
    return lambda x, diagonal=0: op(x, diagonal)


register(aten.tril_.default)(lambda x, diagonal=0: _put(x, aten.tril.default(x, diagonal)))
register(aten.triu_.default)(lambda x, diagonal=0: _put(x, aten.triu.default(x, diagonal)))
register(aten.tril.out)(_with_out(_triangle(aten.tril.default)))
register(aten.triu.out)(_with_out(_triangle(aten.triu.default)))


# ----- copies of views: the view (by its meta kernel), then a contiguous copy
_COPIES = [
    ("as_strided_copy", "default", "as_strided", "default", "out"),
    ("expand_copy", "default", "expand", "default", "out"),
    ("diagonal_copy", "default", "diagonal", "default", "out"),
    ("narrow_copy", "default", "narrow", "default", "out"),
    ("squeeze_copy", "default", "squeeze", "default", "out"),
    ("squeeze_copy", "dim", "squeeze", "dim", "dim_out"),
    ("squeeze_copy", "dims", "squeeze", "dims", "dims_out"),
    ("unsqueeze_copy", "default", "unsqueeze", "default", "out"),
    ("t_copy", "default", "t", "default", "out"),
    ("transpose_copy", "int", "transpose", "int", "int_out"),
    ("permute_copy", "default", "permute", "default", "out"),
    ("unfold_copy", "default", "unfold", "default", "out"),
    ("select_copy", "int", "select", "int", "int_out"),
    ("slice_copy", "Tensor", "slice", "Tensor", "Tensor_out"),
    ("view_copy", "default", "view", "default", "out"),
    ("alias_copy", "default", "alias", "default", "out"),
]
COPY_PACKETS = tuple(sorted({row[0] for row in _COPIES}))

for _packet, _ovl, _vpacket, _vovl, _out in _COPIES:
    _vop = getattr(getattr(aten, _vpacket), _vovl)
    _register(getattr(getattr(aten, _packet), _ovl), getattr(getattr(aten, _packet), _out),
              lambda t, *a, _vop=_vop, **k: _copy_of(_view_via_meta(_vop, t, *a, **k)))


# ----- scatters: a copy of the input with a view of it overwritten by src
def _scatter(view_op, scatter_op):
    def run(x, src, *args, **kwargs):
        m = _on_meta(scatter_op, x, src, *args, **kwargs)
        out = _copy_of(x, m.stride())
        _put(_view_via_meta(view_op, out, *args, **kwargs), src)
        return out
    return run


for _packet, _view in (("diagonal_scatter", aten.diagonal.default),
                       ("select_scatter", aten.select.int),
                       ("slice_scatter", aten.slice.Tensor),
                       ("as_strided_scatter", aten.as_strided.default)):
    _op = getattr(aten, _packet)
    _register(_op.default, _op.out, _scatter(_view, _op.default))


def _into_zeros(view_op):
    """A view's gradient: zeros of the input's sizes with the view's place set to grad."""
    def run(grad, input_sizes, *args):
        out = _fill(empty(input_sizes, grad.dtype, _index(grad)), 0)
        _put(_view_via_meta(view_op, out, *args), grad)
        return out
    return run


_register(aten.slice_backward.default, aten.slice_backward.out, _into_zeros(aten.slice.Tensor))
_register(aten.diagonal_backward.default, aten.diagonal_backward.out,
          _into_zeros(aten.diagonal.default))


@register(aten.diag_embed.default)
def _diag_embed(x, offset=0, dim1=-2, dim2=-1):
    m = _on_meta(aten.diag_embed.default, x, offset, dim1, dim2)
    out = _fill(empty(m.shape, x.dtype, _index(x)), 0)
    _put(_view_via_meta(aten.diagonal.default, out, offset, dim1, dim2), x)
    return out


register(aten.diag_embed.out)(_with_out(_diag_embed))


# ----- repeat: x seen with a zero stride per repeat, copied once
@register(aten.repeat.default)
def _repeat(x, repeats):
    m = _on_meta(aten.repeat.default, x, repeats)
    out = empty(m.shape, x.dtype, _index(x))
    if out.numel() == 0:
        return out
    lead = len(repeats) - x.dim()
    sizes, strides = [], []
    for k, r in enumerate(repeats):
        n, s = (1, 0) if k < lead else (x.shape[k - lead], x.stride(k - lead))
        sizes += [int(r), n]
        strides += [0, s]
    spread = OclTensor(x._ocl_storage, sizes, strides, x.storage_offset(), x.dtype)
    assign(_reshaped(out, sizes), spread)
    return out


register(aten.repeat.out)(_with_out(_repeat))


# ----- gathers along axes (core/shape_remap.py): flip, roll, reflection / replication pads
def _remap(x, steps):
    """x gathered along one axis after another; steps are (dim, n_out, lo, mode)."""
    shape = list(x.shape)
    final = list(shape)
    for d, n_out, _, _ in steps:
        final[d] = n_out
    out = empty(final, x.dtype, _index(x))
    if out.numel() == 0:
        return out
    if not steps:
        return _put(out, x)
    ctx, src = _ctx(x), as_dlprim(x)
    for k, (d, n_out, lo, mode) in enumerate(steps):
        outer, n_in, inner = math.prod(shape[:d]), shape[d], math.prod(shape[d + 1:])
        shape[d] = n_out
        dst = as_dlprim(out) if k == len(steps) - 1 else Tensor(ctx, tuple(shape), src.dtype)
        remap_axis(ctx, src, dst, outer, n_in, inner, n_out, lo, mode)
        src = dst
    return out


def _remap_backward(dy, in_shape, steps):
    """The gradient of ``_remap(x, steps)`` for x of ``in_shape``: the steps undone in
    reverse, each summing what its gather read twice."""
    shapes = [list(in_shape)]
    for d, n_out, _, _ in steps:
        shapes.append(list(shapes[-1]))
        shapes[-1][d] = n_out
    dx = empty(in_shape, dy.dtype, _index(dy))
    if dx.numel() == 0:
        return dx
    if dy.numel() == 0:
        return _fill(dx, 0)
    ctx, src = _ctx(dy), as_dlprim(dy)
    for k in reversed(range(len(steps))):
        d, n_out, lo, mode = steps[k]
        shape = shapes[k]
        outer, n_in, inner = math.prod(shape[:d]), shape[d], math.prod(shape[d + 1:])
        dst = as_dlprim(dx) if k == 0 else Tensor(ctx, tuple(shape), src.dtype)
        remap_axis_backward(ctx, src, dst, outer, n_out, inner, n_in, lo, mode)
        src = dst
    return dx


@register(aten.flip.default)
def _flip(x, dims):
    _on_meta(aten.flip.default, x, dims)
    axes = sorted({d % x.dim() for d in dims}) if x.dim() else []
    return _remap(x, [(d, x.shape[d], 0, FLIP) for d in axes if x.shape[d] > 1])


register(aten.flip.out)(_with_out(_flip))


@register(aten.roll.default)
def _roll(x, shifts, dims=()):
    _on_meta(aten.roll.default, x, shifts, dims)
    if not dims:  # the flattened tensor rolls, then takes x's shape again
        flat = _reshaped(_copy_of(x), [x.numel()])
        return _reshaped(_roll(flat, shifts, [0]), x.shape)
    steps = []
    for shift, d in zip(shifts, dims):
        d, n = d % x.dim(), x.shape[d % x.dim()]
        if n and shift % n:
            steps.append((d, n, shift % n, CIRCULAR))
    return _remap(x, steps)


register(aten.roll.out)(_with_out(_roll))


def _pad_steps(x, padding, mode):
    """The gather steps of a pad over the last len(padding) // 2 dims (last dim first)."""
    steps = []
    for k in range(len(padding) // 2):
        d = x.dim() - 1 - k
        lo, hi = int(padding[2 * k]), int(padding[2 * k + 1])
        if lo or hi:
            steps.append((d, x.shape[d] + lo + hi, lo, mode))
    return steps


def _register_pad(name, mode):
    forward, backward = getattr(aten, name), getattr(aten, name + "_backward")

    def pad(x, padding):
        _on_meta(forward.default, x, padding)
        return _remap(x, _pad_steps(x, padding, mode))

    def pad_backward(grad, x, padding):
        _on_meta(backward.default, grad, x, padding)
        return _remap_backward(grad, x.shape, _pad_steps(x, padding, mode))

    _register(forward.default, forward.out, pad)
    register(backward.default)(pad_backward)
    register(backward.grad_input)(lambda grad, x, padding, *, grad_input: _into(
        grad_input, pad_backward(grad, x, padding)))


PAD_PACKETS = []
for _n in (1, 2, 3):
    for _kind, _mode in (("reflection", REFLECT), ("replication", REPLICATE)):
        _register_pad("%s_pad%dd" % (_kind, _n), _mode)
        PAD_PACKETS += ["%s_pad%dd" % (_kind, _n), "%s_pad%dd_backward" % (_kind, _n)]


@register(aten.constant_pad_nd.default)
def _constant_pad_nd(x, pad, value=0):
    m = _on_meta(aten.constant_pad_nd.default, x, pad, value)
    out = _fill(empty(m.shape, x.dtype, _index(x)), value)
    src, dst = x, out
    for k in range(len(pad) // 2):
        d = x.dim() - 1 - k
        lo, hi = int(pad[2 * k]), int(pad[2 * k + 1])
        start, stop = max(-lo, 0), x.shape[d] - max(-hi, 0)
        if stop <= start:
            return out  # the input is cropped away: only the value remains
        src = _view_via_meta(aten.slice.Tensor, src, d, start, stop)
        dst = _view_via_meta(aten.slice.Tensor, dst, d, max(lo, 0), max(lo, 0) + stop - start)
    _put(dst, src)
    return out


register(aten.constant_pad_nd.out)(_with_out(_constant_pad_nd))


# ----- shuffles: a permuted view of x copied once
def _permuted_copy(x, split_shape, perm, out_shape):
    x = x if x.is_contiguous() else _copy_of(x)
    view = _view_via_meta(aten.permute.default, _reshaped(x, split_shape), perm)
    return _reshaped(_copy_of(view), out_shape)


@register(aten.pixel_shuffle.default)
def _pixel_shuffle(x, r):
    m = _on_meta(aten.pixel_shuffle.default, x, r)
    *lead, c, h, w = x.shape
    k = len(lead)
    perm = list(range(k)) + [k, k + 3, k + 1, k + 4, k + 2]
    return _permuted_copy(x, lead + [c // (r * r), r, r, h, w], perm, m.shape)


@register(aten.pixel_unshuffle.default)
def _pixel_unshuffle(x, r):
    m = _on_meta(aten.pixel_unshuffle.default, x, r)
    *lead, c, h, w = x.shape
    k = len(lead)
    perm = list(range(k)) + [k, k + 2, k + 4, k + 1, k + 3]
    return _permuted_copy(x, lead + [c, h // r, r, w // r, r], perm, m.shape)


def _channel_shuffle(x, groups):
    m = _on_meta(aten.native_channel_shuffle.default, x, groups)
    n, c, *rest = x.shape
    perm = [0, 2, 1] + list(range(3, 3 + len(rest)))
    return _permuted_copy(x, [n, groups, c // groups] + rest, perm, m.shape)


_register(aten.pixel_shuffle.default, aten.pixel_shuffle.out, _pixel_shuffle)
_register(aten.pixel_unshuffle.default, aten.pixel_unshuffle.out, _pixel_unshuffle)
_register(aten.channel_shuffle.default, aten.channel_shuffle.out, _channel_shuffle)
register(aten.native_channel_shuffle.default)(_channel_shuffle)


@register(aten.rot90.default)
def _rot90(x, k=1, dims=(0, 1)):
    _on_meta(aten.rot90.default, x, k, dims)
    k = k % 4
    a, b = dims
    if k == 0:
        return _copy_of(x)
    if k == 2:
        return _flip(x, [a, b])
    flipped = _flip(x, [b] if k == 1 else [a])
    return _view_via_meta(aten.transpose.int, flipped, a, b)


register(aten.rot90.out)(_with_out(_rot90))


# ----- im2col / col2im (F.unfold / F.fold) and unfold's gradient: strided views of a
# padded image, one copy out, or one accumulating copy in per kernel offset
def _window_view(img, kernel_size, dilation, stride, oh, ow, i=None, j=None):
    """img (N, C, H, W), any strides: the view (N, C, kh, kw, oh, ow) of every window
    element, or (N, C, oh, ow) of the one at kernel offset (i, j)."""
    sn, sc, sh, sw = img.stride()
    (kh, kw), (dh, dw), (th, tw) = kernel_size, dilation, stride
    if i is None:
        return OclTensor(img._ocl_storage, (img.shape[0], img.shape[1], kh, kw, oh, ow),
                         (sn, sc, dh * sh, dw * sw, th * sh, tw * sw), img.storage_offset(),
                         img.dtype)
    return OclTensor(img._ocl_storage, (img.shape[0], img.shape[1], oh, ow),
                     (sn, sc, th * sh, tw * sw), img.storage_offset() + i * dh * sh + j * dw * sw,
                     img.dtype)


@register(aten.im2col.default)
def _im2col(x, kernel_size, dilation, padding, stride):
    m = _on_meta(aten.im2col.default, x, kernel_size, dilation, padding, stride)
    batched = x.dim() == 4
    img = x if batched else _view_via_meta(aten.unsqueeze.default, x, 0)
    ph, pw = padding
    if ph or pw:  # (the window view takes any strides: an unpadded x is read in place)
        img = _constant_pad_nd(img, [pw, pw, ph, ph])
    (kh, kw), (dh, dw), (th, tw) = kernel_size, dilation, stride
    oh = (img.shape[2] - dh * (kh - 1) - 1) // th + 1
    ow = (img.shape[3] - dw * (kw - 1) - 1) // tw + 1
    if m.numel() == 0:
        return empty(m.shape, x.dtype, _index(x))
    cols = _copy_of(_window_view(img, kernel_size, dilation, stride, oh, ow))
    return _reshaped(cols, m.shape)


@register(aten.col2im.default)
def _col2im(cols, output_size, kernel_size, dilation, padding, stride):
    m = _on_meta(aten.col2im.default, cols, output_size, kernel_size, dilation, padding,
                 stride)
    batched = cols.dim() == 3
    n = cols.shape[0] if batched else 1
    (kh, kw), (dh, dw), (th, tw), (ph, pw) = kernel_size, dilation, stride, padding
    h, w = output_size
    c = m.shape[-3]
    img = _fill(empty((n, c, h + 2 * ph, w + 2 * pw), cols.dtype, _index(cols)), 0)
    oh = (h + 2 * ph - dh * (kh - 1) - 1) // th + 1
    ow = (w + 2 * pw - dw * (kw - 1) - 1) // tw + 1
    if img.numel() and oh > 0 and ow > 0:
        src = _reshaped(cols if cols.is_contiguous() else _copy_of(cols), (n, c, kh, kw, oh, ow))
        for i in range(kh):
            for j in range(kw):
                part = _view_via_meta(aten.select.int, _view_via_meta(aten.select.int, src, 2, i),
                                      2, j)
                _accumulate(_window_view(img, kernel_size, dilation, stride, oh, ow, i, j), part)
    crop = OclTensor(img._ocl_storage, (n, c, h, w), img.stride(),
                     ph * img.stride(2) + pw * img.stride(3), img.dtype)
    out = _copy_of(crop)
    return out if batched else _reshaped(out, m.shape)


_register(aten.im2col.default, aten.im2col.out, _im2col)
_register(aten.col2im.default, aten.col2im.out, _col2im)


@register(aten.unfold_backward.default)
def _unfold_backward(grad, input_sizes, dim, size, step):
    """Every window element's gradient added back at its input position: one accumulating
    copy per position within the window (windows of one position never overlap)."""
    _on_meta(aten.unfold_backward.default, grad, input_sizes, dim, size, step)
    out = _fill(empty(input_sizes, grad.dtype, _index(grad)), 0)
    dim = dim % max(len(input_sizes), 1)
    if out.numel() == 0 or grad.numel() == 0:
        return out
    strides = list(out.stride())
    windows = grad.shape[dim] if out.dim() else 1
    sizes = list(input_sizes)
    if out.dim():
        sizes[dim] = windows
        strides[dim] *= step
    base = out.stride(dim) if out.dim() else 0
    for k in range(size):
        part = _view_via_meta(aten.select.int, grad, -1, k)
        dst = OclTensor(out._ocl_storage, sizes, strides, k * base, out.dtype)
        _accumulate(dst, part)
    return out


register(aten.unfold_backward.out)(_with_out(_unfold_backward))


@register(aten.repeat_interleave.Tensor)
def _repeat_interleave_indices(repeats, output_size=None):
    """[0] * repeats[0] + [1] * repeats[1] + ...: each output position's index is the
    number of cumulative counts at or below it (a search of the running sum). The output's
    size depends on the counts, so their sum and minimum are read back (as PyTorch's CUDA
    kernel reads them)."""
    if repeats.dim() != 1:
        raise RuntimeError("repeat_interleave only accept 1D vector as repeat")
    if repeats.dtype not in (torch.int64, torch.int32):
        raise RuntimeError("repeats has to be Long or Int tensor")
    if repeats.numel() == 0:
        return empty((0,), repeats.dtype, _index(repeats))
    ends = aten.cumsum.default(repeats, 0)
    total, least = (int(v) for v in aten.stack.default(
        [ends[-1], aten.min.default(repeats).to(ends.dtype)]).cpu())
    if least < 0:
        raise RuntimeError("repeats can not be negative")
    if output_size is not None and total != output_size:
        raise RuntimeError("allocated size does not match required size")
    positions = empty((total,), ends.dtype, _index(repeats))
    if total:
        seq.sequence(_ctx(positions), as_dlprim(positions), seq.ARANGE, 0, 1)
    out = aten.searchsorted.Tensor(ends, positions, out_int32=repeats.dtype == torch.int32,
                                   right=True)
    return out if out.dtype == repeats.dtype else convert(out, repeats.dtype)
