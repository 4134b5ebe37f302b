"""Convolutions, pooling and resampling on ocl devices, in 1-D to 3-D.

Convolutions, plain and transposed:

- 2-D (and 1-D, seen as 2-D with a unit height: a view, no copy) run on dlprim's 2-D
  launchers (``core/conv.py``: the algorithm table of a Net's layers); a transposed
  convolution is the backward-data pass of the convolution that goes the other way, and
  its gradients are that convolution's forward and filter passes.
- 3-D ones run on column unrolling + GEMM (``core/conv_nd.py``), plain and transposed.

float32, float16 and bfloat16 inputs (the 2-D launchers keep the weights in float32:
16-bit weights are widened for them and their gradient rounded back), and float64 where
the device has cl_khr_fp64: direct kernels that sum in double (``conv_direct``,
``conv_direct_filter``), as integer convolutions run.

Pooling (max, average, adaptive, max_unpool: ``core/pooling_nd.py``), resampling (the
upsample_* operators of F.interpolate: ``core/resample_nd.py``), grid_sample
(``core/grid_sample.py``) and affine_grid run on kernels of their own over 1 to 3
spatial dims. Every output shape, and every error about shapes, is PyTorch's own (the
operator run on meta tensors).
"""
import math

import torch

from ..core.conv import ConvBackwardData, ConvBackwardFilter, ConvForward
from ..core.conv_nd import ConvProblem, conv_direct, conv_direct_filter
from ..core.grid_sample import INTERPOLATIONS, PADDINGS, affine_base, grid_sample_ops
from ..core.pooling_nd import PoolWindows, pooling_nd
from ..core.resample_nd import resample_nd
from ..tensor import Tensor
from . import ops_nn
from .dispatch import handle, register
from .ops_tensor import convert, meta_of
from .tensor import as_dlprim, empty, enqueue, enqueue_recorded, from_numpy, numpy_dtype

aten = torch.ops.aten

__all__ = []

_FLOATS = (torch.float32, torch.float16, torch.bfloat16)
_INTEGERS = (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8)
_FAST_2D = (torch.float32, torch.float16, torch.bfloat16)  # the 2-D launchers' activations
# what convolutions, pooling and resampling take (float64 tensors exist only where the
# device has cl_khr_fp64, and compute in double)
_ALL_FLOATS = _FLOATS + (torch.float64,)


def _ctx(t):
    return t._ocl_storage.ctx


def _unsupported(op, why):
    raise NotImplementedError("dlprim.torch: %s on ocl devices: %s" % (op, why))


def _check_dtypes(op, *ts, floats=_FLOATS):
    for t in ts:
        if t is not None and t.dtype not in floats:
            names = [str(f).split(".")[1] for f in floats]
            _unsupported(op, "%s or %s tensors only, got %s"
                         % (", ".join(names[:-1]), names[-1], t.dtype))


def _workspace(ctx, nbytes):
    return Tensor(ctx, (max(int(nbytes), 1),), "uint8")


def _rows(t, n0, nb):
    """Samples n0 .. n0 + nb of t (a view)."""
    return t if nb == t.shape[0] else handle(aten.slice.Tensor, (t, 0, n0, n0 + nb), {})


def _plan_2d(ctx, cls, problem, dtype, **kw):
    """(op, workspace bytes) of a 2-D launcher for this problem, made once. 16-bit
    activations take the precision of their type: the GEMM-based algorithms run their
    products on tensor cores where the device has them, as a Net in "fp16" or "bf16" does."""
    precision = ops_nn.gemm_precision(dtype, strict_float32=True)
    key = ("torch_conv2d_plan", cls, problem.key(), dtype, precision, tuple(kw.items()))
    plan = ctx.ops.get(key)
    if plan is None:
        geom = problem.geometry()
        op = cls(ctx, geom, batch=problem.src[0], dtype=numpy_dtype(dtype),
                 precision=precision, **kw)
        plan = ctx.ops[key] = (op, op.workspace_bytes(problem.src[0]))
    return plan


def _float_weights(w):
    return as_dlprim(w if w.dtype == torch.float32 else convert(w, torch.float32))


def _fast(problem, dtype):
    """Whether the 2-D launchers serve: 2-D, their dtypes, and a plain side whose output
    is what the geometry gives (a transposed convolution's output_padding can add rows
    that no tap of the plain convolution reaches: conv_nd serves those)."""
    return problem.spatial == 2 and dtype in _FAST_2D and problem.consistent()


def _lifted(t, problem):
    """t as the problem's 4-D or 5-D tensor (a unit dim for 1-D: a view)."""
    return handle(aten.unsqueeze.default, (t, 2), {}) if problem.lift else t


def _dlp(t, problem):
    return as_dlprim(_lifted(t, problem))


def _channels_first(t, problem):
    """t (N, C, ...) laid out (C, N, ...): the column GEMMs' view of a gradient."""
    return as_dlprim(handle(aten.transpose.int, (_lifted(t, problem), 0, 1), {}))


# ----- the three passes of the plain convolution src -> dst
def _run_forward(problem, src, w, dst, bias=None):
    ctx = _ctx(src)
    if _fast(problem, src.dtype):
        op, ws = _plan_2d(ctx, ConvForward, problem, src.dtype, bias=bias is not None)
        ts = (_dlp(src, problem), _float_weights(_lifted(w, problem)), _dlp(dst, problem),
              None if bias is None else _float_weights(bias),
              _workspace(ctx, ws))
        enqueue_recorded(ctx, op, ts, lambda: op.launches(*ts))
        return
    if src.dtype == torch.float64:
        _direct(ctx, problem, src, w, dst, transposed=False)
    else:
        for n0, nb in problem.chunks():
            op = problem.nd(ctx, numpy_dtype(src.dtype), nb)
            enqueue(ctx, op.forward(_dlp(_rows(src, n0, nb), problem), _dlp(w, problem),
                                    _dlp(_rows(dst, n0, nb), problem)))
    if bias is not None:
        _add_bias(dst, bias)


def _run_backward_data(problem, dst_grad, w, src_grad, bias=None):
    """src_grad = the adjoint of the convolution applied to dst_grad (+ bias per src
    channel: the forward pass of a transposed convolution)."""
    ctx = _ctx(dst_grad)
    if _fast(problem, dst_grad.dtype):
        op, ws = _plan_2d(ctx, ConvBackwardData, problem, dst_grad.dtype, bias=bias is not None)
        ts = (_dlp(dst_grad, problem), _float_weights(_lifted(w, problem)),
              _dlp(src_grad, problem),
              None if bias is None else _float_weights(bias),
              _workspace(ctx, ws))
        enqueue_recorded(ctx, op, ts, lambda: op.launches(*ts, beta=0.0))
        return
    if dst_grad.dtype == torch.float64:
        _direct(ctx, problem, dst_grad, w, src_grad, transposed=True)
    else:
        for n0, nb in problem.chunks():
            op = problem.nd(ctx, numpy_dtype(dst_grad.dtype), nb)
            enqueue(ctx, op.backward_data(_channels_first(_rows(dst_grad, n0, nb), problem),
                                          _dlp(w, problem),
                                          _dlp(_rows(src_grad, n0, nb), problem)))
    if bias is not None:
        _add_bias(src_grad, bias)


def _run_backward_filter(problem, src, dst_grad, w_grad):
    ctx = _ctx(src)
    if src.dtype == torch.float64:
        enqueue(ctx, conv_direct_filter(ctx, as_dlprim(src), as_dlprim(dst_grad),
                                        as_dlprim(w_grad), *_steps(problem)))
        return
    if _fast(problem, src.dtype):
        op, ws = _plan_2d(ctx, ConvBackwardFilter, problem, src.dtype)
        dw = w_grad if w_grad.dtype == torch.float32 else empty(w_grad.shape, torch.float32,
                                                                w_grad._ocl_storage.index)
        ts = (_dlp(src, problem), _dlp(dst_grad, problem), _dlp(dw, problem),
              _workspace(ctx, ws))
        enqueue_recorded(ctx, op, ts, lambda: op.launches(*ts, beta=0.0))
        if dw is not w_grad:
            handle(aten.copy_.default, (w_grad, dw), {})
        return
    for n0, nb in problem.chunks():   # the chunks' filter gradients add up
        op = problem.nd(ctx, numpy_dtype(src.dtype), nb)
        enqueue(ctx, op.backward_filter(_dlp(_rows(src, n0, nb), problem),
                                        _channels_first(_rows(dst_grad, n0, nb), problem),
                                        _dlp(w_grad, problem), beta=0.0 if n0 == 0 else 1.0))


def _steps(problem):
    """(stride, padding, dilation, groups) of the problem as its own rank (a 1-D one
    without the unit height it was lifted to)."""
    k = 1 if problem.lift else 0
    return problem.stride[k:], problem.padding[k:], problem.dilation[k:], problem.groups


def _direct(ctx, problem, x, w, y, transposed):
    """y = the plain convolution of x (``transposed``: its adjoint) on the direct kernels
    (float64: they sum in double)."""
    enqueue(ctx, conv_direct(ctx, as_dlprim(x), as_dlprim(w), as_dlprim(y), *_steps(problem),
                             transposed))


def _add_bias(out, bias):
    shape = [1, -1] + [1] * (out.dim() - 2)
    b = handle(aten.view.default, (bias, shape), {})
    handle(aten.add_.Tensor, (out, b), {})


def _unbatched(x, w):
    return x.dim() == w.dim() - 1


@register(aten.convolution.default)
def _convolution(x, w, bias, stride, padding, dilation, transposed, output_padding, groups):
    if x.dtype in _INTEGERS and w.dtype == x.dtype and not _unbatched(x, w):
        return _integer_convolution(x, w, bias, stride, padding, dilation, transposed,
                                    output_padding, groups)
    _check_dtypes("convolution", x, w, bias, floats=_ALL_FLOATS)
    m = aten.convolution.default(meta_of(x), meta_of(w), None if bias is None else meta_of(bias),
                                 stride, padding, dilation, transposed, output_padding, groups)
    if x.dtype != w.dtype or (bias is not None and bias.dtype != x.dtype):
        raise RuntimeError("convolution: input type (%s), weight type (%s) and bias type (%s) "
                           "should be the same" % (x.dtype, w.dtype,
                                                   None if bias is None else bias.dtype))
    if _unbatched(x, w):
        y = _convolution(handle(aten.unsqueeze.default, (x, 0), {}), w, bias, stride, padding,
                         dilation, transposed, output_padding, groups)
        return handle(aten.squeeze.dim, (y, 0), {})
    out = empty(m.shape, x.dtype, x._ocl_storage.index)
    if out.numel() == 0:
        return out
    if x.numel() == 0 or w.numel() == 0:  # nothing to sum: the bias alone
        handle(aten.zero_.default, (out,), {})
        if bias is not None:
            _add_bias(out, bias)
        return out
    if transposed:
        problem = ConvProblem(out.shape, x.shape, w.shape, stride, padding, dilation, groups)
        _run_backward_data(problem, x, w, out, bias)
    else:
        problem = ConvProblem(x.shape, out.shape, w.shape, stride, padding, dilation, groups)
        _run_forward(problem, x, w, out, bias)
    return out


def _integer_convolution(x, w, bias, stride, padding, dilation, transposed, output_padding,
                         groups):
    m = aten.convolution.default(meta_of(x), meta_of(w), None if bias is None else meta_of(bias),
                                 stride, padding, dilation, transposed, output_padding, groups)
    out = empty(m.shape, x.dtype, x._ocl_storage.index)
    if out.numel():
        n = w.dim() - 2
        enqueue(_ctx(x), conv_direct(_ctx(x), as_dlprim(x), as_dlprim(w), as_dlprim(out),
                                     _spread(stride, n), _spread(padding, n),
                                     _spread(dilation, n), groups, transposed))
        if bias is not None:
            _add_bias(out, bias)
    return out


@register(aten.convolution_backward.default)
def _convolution_backward(grad, x, w, bias_sizes, stride, padding, dilation, transposed,
                          output_padding, groups, output_mask):
    _check_dtypes("convolution_backward", grad, x, w, floats=_ALL_FLOATS)
    if _unbatched(x, w):
        g0, x0 = (handle(aten.unsqueeze.default, (t, 0), {}) for t in (grad, x))
        dx, dw, db = _convolution_backward(g0, x0, w, bias_sizes, stride, padding, dilation,
                                           transposed, output_padding, groups, output_mask)
        return (None if dx is None else handle(aten.squeeze.dim, (dx, 0), {})), dw, db
    index = x._ocl_storage.index
    dx = empty(x.shape, x.dtype, index) if output_mask[0] else None
    dw = empty(w.shape, w.dtype, index) if output_mask[1] else None
    db = None
    if output_mask[2]:
        dims = [d for d in range(grad.dim()) if d != 1]
        db = handle(aten.sum.dim_IntList, (grad, dims), {})
    if transposed:   # the plain convolution goes grad (the output's side) -> x
        problem = ConvProblem(grad.shape, x.shape, w.shape, stride, padding, dilation, groups)
    else:
        problem = ConvProblem(x.shape, grad.shape, w.shape, stride, padding, dilation, groups)
    empty_problem = grad.numel() == 0 or x.numel() == 0 or w.numel() == 0
    for t in (dx, dw):
        if t is not None and empty_problem and t.numel():
            handle(aten.zero_.default, (t,), {})
    if empty_problem:
        return dx, dw, db
    if dx is not None:
        if transposed:
            _run_forward(problem, grad, w, dx)
        else:
            _run_backward_data(problem, grad, w, dx)
    if dw is not None:
        if transposed:
            _run_backward_filter(problem, grad, x, dw)
        else:
            _run_backward_filter(problem, x, grad, dw)
    return dx, dw, db




_OWN = {}  # packet -> this module's implementation of it


def _register(packet, fn):
    """fn for the functional overload (dispatch.py routes the out= ones through it)."""
    _OWN[packet] = register(packet.default)(fn)
    return fn


# ----- pooling over 1 to 3 spatial dims (core/pooling_nd.py): the output shapes and the
# argument checks are PyTorch's own (the operator on meta tensors)
def _spread(v, n, default=None):
    """An int or a list of 1 or n ints as n ints (the empty list: ``default``)."""
    if isinstance(v, int):
        return (v,) * n
    v = tuple(int(e) for e in v)
    if not v:
        return tuple(default)
    return v * n if len(v) == 1 else v


def _planes(x, n):
    return x.numel() // max(1, math.prod(x.shape[-n:])) if x.numel() else 0


def _pool_launch(mode, x, out, win, n, idx=None):
    ops = pooling_nd(_ctx(x), mode, numpy_dtype(x.dtype))
    planes = _planes(x, n)
    enqueue(_ctx(x), ops.forward(win, planes, as_dlprim(x), as_dlprim(out),
                                 None if idx is None else as_dlprim(idx)))


def _pool_backward_launch(mode, grad, x, win, n, idx=None):
    _check_dtypes("pooling backward", grad, floats=_ALL_FLOATS)  # float64 sums in double
    dx = empty(x.shape, grad.dtype, x._ocl_storage.index)
    if dx.numel():
        ops = pooling_nd(_ctx(x), mode, numpy_dtype(grad.dtype))
        enqueue(_ctx(x), ops.backward(win, _planes(x, n), as_dlprim(grad), as_dlprim(dx),
                                      None if idx is None else as_dlprim(idx)))
    return dx


def _max_windows(x, out_shape, n, kernel_size, stride, padding, dilation):
    k = _spread(kernel_size, n)
    return PoolWindows(x.shape[-n:], out_shape[-n:], k, _spread(stride, n, k),
                       _spread(padding, n), _spread(dilation, n))


def _max_pool(n, packet):
    def forward(x, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
        m = packet.default(meta_of(x), kernel_size, stride, padding, dilation, ceil_mode)[0]
        index = x._ocl_storage.index
        out, idx = empty(m.shape, x.dtype, index), empty(m.shape, torch.int64, index)
        if out.numel():
            win = _max_windows(x, m.shape, n, kernel_size, stride, padding, dilation)
            _pool_launch("max", x, out, win, n, idx)
        return out, idx

    def backward(grad, x, kernel_size, stride, padding, dilation, ceil_mode, indices):
        win = _max_windows(x, grad.shape, n, kernel_size, stride, padding, dilation)
        return _pool_backward_launch("max", grad, x, win, n, as_contiguous(indices))
    return forward, backward


def _avg_windows(x, out_shape, n, kernel_size, stride, padding, count_include_pad, divisor):
    k = _spread(kernel_size, n)
    return PoolWindows(x.shape[-n:], out_shape[-n:], k, _spread(stride, n, k),
                       _spread(padding, n), (), count_include_pad, divisor)


def _avg_pool(n, packet):
    def forward(x, kernel_size, stride=(), padding=0, ceil_mode=False, count_include_pad=True,
                divisor_override=None):
        m = packet.default(meta_of(x), kernel_size, stride, padding, ceil_mode,
                           count_include_pad, divisor_override)
        out = empty(m.shape, x.dtype, x._ocl_storage.index)
        if out.numel():
            win = _avg_windows(x, m.shape, n, kernel_size, stride, padding, count_include_pad,
                               divisor_override)
            _pool_launch("avg", x, out, win, n)
        return out

    def backward(grad, x, kernel_size, stride, padding, ceil_mode, count_include_pad,
                 divisor_override):
        win = _avg_windows(x, grad.shape, n, kernel_size, stride, padding, count_include_pad,
                           divisor_override)
        return _pool_backward_launch("avg", grad, x, win, n)
    return forward, backward


def _adaptive(n, max_packet, avg_packet):
    def max_forward(x, output_size):
        m = max_packet.default(meta_of(x), output_size)[0]
        index = x._ocl_storage.index
        out, idx = empty(m.shape, x.dtype, index), empty(m.shape, torch.int64, index)
        if out.numel():
            _pool_launch("adaptive_max", x, out, PoolWindows(x.shape[-n:], m.shape[-n:]), n, idx)
        return out, idx

    def max_backward(grad, x, indices):
        return _pool_backward_launch("adaptive_max", grad, x,
                                     PoolWindows(x.shape[-n:], grad.shape[-n:]), n,
                                     as_contiguous(indices))

    def avg_forward(x, output_size):
        m = avg_packet.default(meta_of(x), output_size)
        out = empty(m.shape, x.dtype, x._ocl_storage.index)
        if out.numel():
            _pool_launch("adaptive_avg", x, out, PoolWindows(x.shape[-n:], m.shape[-n:]), n)
        return out

    def avg_backward(grad, x):
        return _pool_backward_launch("adaptive_avg", grad, x,
                                     PoolWindows(x.shape[-n:], grad.shape[-n:]), n)
    return max_forward, max_backward, avg_forward, avg_backward


def as_contiguous(t):
    return t if t.is_contiguous() else handle(aten.clone.default, (t,),
                                              {"memory_format": torch.contiguous_format})


for _n, _fw, _bw in ((2, aten.max_pool2d_with_indices, aten.max_pool2d_with_indices_backward),
                     (3, aten.max_pool3d_with_indices, aten.max_pool3d_with_indices_backward)):
    _f, _b = _max_pool(_n, _fw)
    _register(_fw, _f)
    _register(_bw, _b)
for _n, _fw, _bw in ((2, aten.avg_pool2d, aten.avg_pool2d_backward),
                     (3, aten.avg_pool3d, aten.avg_pool3d_backward)):
    _f, _b = _avg_pool(_n, _fw)
    _register(_fw, _f)
    _register(_bw, _b)
for _n, _mf, _mb, _af, _ab in (
        (2, aten.adaptive_max_pool2d, aten.adaptive_max_pool2d_backward,
         aten._adaptive_avg_pool2d, aten._adaptive_avg_pool2d_backward),
        (3, aten.adaptive_max_pool3d, aten.adaptive_max_pool3d_backward,
         aten._adaptive_avg_pool3d, aten._adaptive_avg_pool3d_backward)):
    for _packet, _fn in zip((_mf, _mb, _af, _ab), _adaptive(_n, _mf, _af)):
        _register(_packet, _fn)


def _check_unpool_indices(indices, out_size, out_plane):
    """PyTorch's error for an index outside the output plane (one read of two numbers:
    writing it anyway would drop a value silently)."""
    lo, hi = handle(aten.aminmax.default, (indices,), {})
    lo, hi = int(lo.cpu()), int(hi.cpu())
    if lo < 0 or hi >= out_plane:
        raise RuntimeError("Found an invalid max index: %d (output volumes are of size %s)"
                           % (lo if lo < 0 else hi, "x".join(str(int(s)) for s in out_size)))


def _max_unpool(n, packet):
    def forward(x, indices, output_size, *stride_padding):
        m = packet.default(meta_of(x), meta_of(indices), output_size, *stride_padding)
        out = empty(m.shape, x.dtype, x._ocl_storage.index)
        handle(aten.zero_.default, (out,), {})
        if x.numel():
            ops = pooling_nd(_ctx(x), "max", numpy_dtype(x.dtype))
            in_plane, out_plane = math.prod(x.shape[-n:]), math.prod(out.shape[-n:])
            _check_unpool_indices(indices, out.shape[-n:], out_plane)
            enqueue(_ctx(x), ops.unpool(x.numel() // in_plane, in_plane, out_plane,
                                        as_dlprim(x), as_dlprim(as_contiguous(indices)),
                                        as_dlprim(out)))
        return out
    return forward


_register(aten.max_unpool2d, _max_unpool(2, aten.max_unpool2d))
_register(aten.max_unpool3d, _max_unpool(3, aten.max_unpool3d))


# ----- resampling over 1 to 3 spatial dims (core/resample_nd.py): F.interpolate's
# nearest, nearest-exact, (bi/tri)linear and bicubic modes; "area" is adaptive average
# pooling, above
def _scales(n, scales):
    scales = tuple(scales) + (None,) * (n - len(scales))
    return scales[:n]


def _resample(mode, n, packet, aligned):
    def forward(x, output_size, *rest):
        align, scales = (bool(rest[0]), rest[1:]) if aligned else (False, rest)
        if x.dim() != n + 2:   # (the meta kernel's error would be a ValueError)
            raise RuntimeError("It is expected input_size equals to %d, but got size %d"
                               % (n + 2, x.dim()))
        if x.dtype not in _ALL_FLOATS and not (mode.startswith("nearest")
                                                and x.dtype in _INTEGERS):
            _unsupported(str(packet), "float tensors (and integers for nearest resampling) "
                         "only, got %s" % x.dtype)
        m = packet.default(meta_of(x), output_size, *rest)
        out = empty(m.shape, x.dtype, x._ocl_storage.index)
        if out.numel():
            ops = resample_nd(_ctx(x), mode, numpy_dtype(x.dtype))
            enqueue(_ctx(x), ops.forward(_planes(x, n), x.shape[-n:], out.shape[-n:], align,
                                         _scales(n, scales), as_dlprim(x), as_dlprim(out)))
        return out

    def backward(grad, output_size, input_size, *rest):
        align, scales = (bool(rest[0]), rest[1:]) if aligned else (False, rest)
        _check_dtypes(str(packet) + "_backward", grad, floats=_ALL_FLOATS)
        dx = empty(input_size, grad.dtype, grad._ocl_storage.index)
        if dx.numel():
            ops = resample_nd(_ctx(grad), mode, numpy_dtype(grad.dtype))
            enqueue(_ctx(grad), ops.backward(_planes(dx, n), tuple(input_size)[-n:],
                                             grad.shape[-n:], align, _scales(n, scales),
                                             as_dlprim(grad), as_dlprim(dx)))
        return dx
    return forward, backward


for _mode, _n, _name, _aligned in (
        ("nearest", 1, "upsample_nearest1d", False),
        ("nearest", 2, "upsample_nearest2d", False),
        ("nearest", 3, "upsample_nearest3d", False),
        ("nearest_exact", 1, "_upsample_nearest_exact1d", False),
        ("nearest_exact", 2, "_upsample_nearest_exact2d", False),
        ("nearest_exact", 3, "_upsample_nearest_exact3d", False),
        ("linear", 1, "upsample_linear1d", True),
        ("linear", 2, "upsample_bilinear2d", True),
        ("linear", 3, "upsample_trilinear3d", True),
        ("cubic", 2, "upsample_bicubic2d", True),
        ("linear_aa", 2, "_upsample_bilinear2d_aa", True),
        ("cubic_aa", 2, "_upsample_bicubic2d_aa", True)):
    _f, _b = _resample(_mode, _n, getattr(aten, _name), _aligned)
    _register(getattr(aten, _name), _f)
    _register(getattr(aten, _name + "_backward"), _b)


# ----- grid_sampler_2d / _3d (F.grid_sample; core/grid_sample.py)
def _grid_modes(op, interpolation_mode, padding_mode):
    return INTERPOLATIONS[interpolation_mode], PADDINGS[padding_mode]


def _grid_sampler(dims, packet):
    def forward(x, grid, interpolation_mode, padding_mode, align_corners):
        m = packet.default(meta_of(x), meta_of(grid), interpolation_mode, padding_mode,
                           align_corners)
        _check_dtypes(str(packet), x, grid)
        interp, padding = _grid_modes(str(packet), interpolation_mode, padding_mode)
        out = empty(m.shape, x.dtype, x._ocl_storage.index)
        if out.numel():
            ops = grid_sample_ops(_ctx(x), dims, interp, numpy_dtype(x.dtype))
            enqueue(_ctx(x), ops.forward(as_dlprim(x), as_dlprim(grid), as_dlprim(out),
                                         padding, align_corners))
        return out

    def backward(grad, x, grid, interpolation_mode, padding_mode, align_corners, output_mask):
        _check_dtypes(str(packet) + "_backward", grad, x, grid)
        interp, padding = _grid_modes(str(packet) + "_backward", interpolation_mode,
                                      padding_mode)
        index = x._ocl_storage.index
        dx = empty(x.shape, torch.float32, index) if output_mask[0] else None
        if dx is not None:
            handle(aten.zero_.default, (dx,), {})
        dgrid = empty(grid.shape, grid.dtype, index)
        if dgrid.numel():
            ops = grid_sample_ops(_ctx(x), dims, interp, numpy_dtype(x.dtype))
            enqueue(_ctx(x), ops.backward(as_dlprim(grad), as_dlprim(x), as_dlprim(grid),
                                          None if dx is None else as_dlprim(dx),
                                          as_dlprim(dgrid), padding, align_corners))
        if dx is not None and x.dtype != torch.float32:
            dx = convert(dx, x.dtype)
        return dx, (dgrid if output_mask[1] else None)
    return forward, backward


for _dims, _name in ((2, "grid_sampler_2d"), (3, "grid_sampler_3d")):
    _f, _b = _grid_sampler(_dims, getattr(aten, _name))
    _register(getattr(aten, _name), _f)
    _register(getattr(aten, _name + "_backward"), _b)


# ----- affine_grid_generator (F.affine_grid): the grid = base · thetaᵀ, base the
# (positions, [x, y, (z,) 1]) matrix of the output's normalised coordinates (its backward,
# affine_grid_generator_backward, is a composite of PyTorch's that never reaches here)
def _affine_base(theta, size, align_corners):
    """``affine_base`` of the output's spatial size on theta's device, made once."""
    size = tuple(int(s) for s in size)
    key = ("torch_affine_base", size, bool(align_corners))
    ctx = _ctx(theta)
    base = ctx.ops.get(key)
    if base is None:
        host = affine_base(size[2:], align_corners)
        base = ctx.ops[key] = from_numpy(host, theta._ocl_storage.index, torch.float32)
    return base


def _float32(t):
    return t if t.dtype == torch.float32 else convert(t, torch.float32)


@register(aten.affine_grid_generator.default)
def _affine_grid_generator(theta, size, align_corners):
    meta = aten.affine_grid_generator.default(meta_of(theta), size, align_corners)
    _check_dtypes("affine_grid_generator", theta)
    base = (_affine_base(theta, size, align_corners))
    n = int(size[0])
    b = handle(aten.expand.default, (handle(aten.unsqueeze.default, (base, 0), {}),
                                     [n] + list(base.shape)), {})
    t = handle(aten.transpose.int, (_float32(theta), 1, 2), {})
    grid = handle(aten.bmm.default, (b, t), {})
    grid = handle(aten.view.default, (grid, list(meta.shape)), {})
    return grid if theta.dtype == torch.float32 else convert(grid, theta.dtype)


# ----- 2-D float32 pooling and resampling keep the Net's kernels (ops_nn's handlers on
# Pool2D, Interpolate2D and the adaptive GEMMs), which build the window into the program:
# about 3x faster on a CPU driver than the run-time windows above, which serve the cases
# those do not take (dilation, divisor_override, other dtypes and ranks)
def _net_kernels_take(x, dilation=(1,), divisor=None):
    dilation = dilation if isinstance(dilation, (list, tuple)) else (dilation,)
    return x.dim() == 4 and x.dtype == torch.float32 and all(d == 1 for d in dilation) \
        and divisor is None


def _prefer_net_kernels(packet, net_kernels, takes):
    """packet on net_kernels where ``takes`` says they serve its arguments, else ours."""
    own = _OWN[packet]

    def run(*args, **kwargs):
        if not takes(*args, **kwargs):
            return own(*args, **kwargs)
        # PyTorch's checks first (the meta kernel), so that errors are PyTorch's own
        packet.default(*[meta_of(a) if isinstance(a, torch.Tensor) else a for a in args],
                       **kwargs)
        return net_kernels(*args, **kwargs)
    register(packet.default)(run)


_prefer_net_kernels(aten.max_pool2d_with_indices, ops_nn._max_pool2d_with_indices,
                    lambda x, k, s=(), p=0, d=1, c=False: _net_kernels_take(x, d))
_prefer_net_kernels(aten.max_pool2d_with_indices_backward, ops_nn._max_pool2d_backward,
                    lambda g, x, k, s, p, d, c, i: _net_kernels_take(x, d))
_prefer_net_kernels(aten.avg_pool2d, ops_nn._avg_pool2d,
                    lambda x, k, s=(), p=0, c=False, cip=True, div=None:
                    _net_kernels_take(x, divisor=div))
_prefer_net_kernels(aten.avg_pool2d_backward, ops_nn._avg_pool2d_backward,
                    lambda g, x, k, s, p, c, cip, div: _net_kernels_take(x, divisor=div))
_prefer_net_kernels(aten._adaptive_avg_pool2d, ops_nn._adaptive_avg_pool2d,
                    lambda x, size: _net_kernels_take(x))
_prefer_net_kernels(aten._adaptive_avg_pool2d_backward, ops_nn._adaptive_avg_pool2d_backward,
                    lambda g, x: _net_kernels_take(x))
for _method, _name, _aligned in (("bilinear", "upsample_bilinear2d", True),
                                 ("nearest", "upsample_nearest2d", False),
                                 ("nearest-exact", "_upsample_nearest_exact2d", False)):
    def _forward(x, size, *rest, _method=_method, _aligned=_aligned):
        align, scales = (rest[0], rest[1:]) if _aligned else (False, rest)
        return ops_nn._interp(_method, x, size, align, *scales)

    def _backward(g, size, in_size, *rest, _method=_method, _aligned=_aligned):
        align, scales = (rest[0], rest[1:]) if _aligned else (False, rest)
        return ops_nn._interp_backward(_method, g, size, in_size, align, *scales)
    _prefer_net_kernels(getattr(aten, _name), _forward, lambda x, *a: _net_kernels_take(x))
    _prefer_net_kernels(getattr(aten, _name + "_backward"), _backward,
                        lambda g, *a: _net_kernels_take(g))
