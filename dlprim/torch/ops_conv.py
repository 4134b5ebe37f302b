"""Convolutions on ocl devices, 1-D to 3-D, plain and transposed.

- 2-D (and 1-D, seen as 2-D with a unit height: a view, no copy) run on dlprim's 2-D
  launchers (``core/conv.py``: the algorithm table of a Net's layers); a transposed
  convolution is the backward-data pass of the convolution that goes the other way, and
  its gradients are that convolution's forward and filter passes.
- 3-D ones run on column unrolling + GEMM (``core/conv_nd.py``), plain and transposed.

float32, float16 and bfloat16 inputs (the 2-D launchers keep the weights in float32:
16-bit weights are widened for them and their gradient rounded back). The output shape,
and every error about shapes, is PyTorch's own (the operator run on meta tensors).
"""
import math

import torch

from ..core.conv import ConvBackwardData, ConvBackwardFilter, ConvForward, ConvGeometry
from ..core.conv_nd import conv_nd
from ..tensor import Tensor
from .dispatch import handle, register
from .ops_tensor import convert, meta_of
from .tensor import as_dlprim, empty, enqueue, enqueue_recorded, numpy_dtype

aten = torch.ops.aten

__all__ = []

_FLOATS = (torch.float32, torch.float16, torch.bfloat16)
_FAST_2D = (torch.float32, torch.float16, torch.bfloat16)  # the 2-D launchers' activations


def _ctx(t):
    return t._ocl_storage.ctx


def _unsupported(op, why):
    raise NotImplementedError("dlprim.torch: %s on ocl devices: %s" % (op, why))


def _check_dtypes(op, *ts):
    for t in ts:
        if t is not None and t.dtype not in _FLOATS:
            _unsupported(op, "float32, float16 or bfloat16 tensors only, got %s" % t.dtype)


def _workspace(ctx, nbytes):
    return Tensor(ctx, (max(int(nbytes), 1),), "uint8")


class _Problem:
    """A convolution seen from its plain side: ``src`` the input of the plain
    convolution (the transposed one's output), ``dst`` its output, as 2-D or 3-D shapes
    (1-D made 2-D); the weights are (dst channels, src channels / groups, *kernel)."""

    def __init__(self, src_shape, dst_shape, w_shape, stride, padding, dilation, groups):
        lift = len(w_shape) == 3
        unit = (lambda v, one: (one,) + tuple(v)) if lift else (lambda v, one: tuple(v))
        self.lift = lift
        self.src = tuple(src_shape[:2]) + unit(src_shape[2:], 1)
        self.dst = tuple(dst_shape[:2]) + unit(dst_shape[2:], 1)
        self.kernel = unit(w_shape[2:], 1)
        self.w_shape = tuple(w_shape[:2]) + self.kernel
        self.stride, self.padding = unit(stride, 1), unit(padding, 0)
        self.dilation, self.groups = unit(dilation, 1), groups
        self.spatial = len(self.kernel)

    def key(self):
        return (self.src, self.dst, self.kernel, self.stride, self.padding, self.dilation,
                self.groups)

    def geometry(self):
        p = self.padding
        return ConvGeometry(self.src[1], self.dst[1], self.src[2:], self.kernel, self.stride,
                            (p[0], p[1], p[0], p[1]), self.dilation, self.groups)

    def nd(self, ctx, dtype):
        return conv_nd(ctx, self.src[0], self.src[1], self.dst[1], self.groups, self.src[2:],
                       self.dst[2:], self.kernel, self.stride, self.padding, self.dilation,
                       numpy_dtype(dtype))


def _plan_2d(ctx, cls, problem, dtype, **kw):
    """(op, workspace bytes) of a 2-D launcher for this problem, made once."""
    key = ("torch_conv2d_plan", cls, problem.key(), dtype, tuple(kw.items()))
    plan = ctx.ops.get(key)
    if plan is None:
        geom = problem.geometry()
        if tuple(geom.out_shape(problem.src[0])) != problem.dst:
            _unsupported("convolution", "the 2-D geometry %s does not give %s"
                         % (geom, problem.dst))
        op = cls(ctx, geom, batch=problem.src[0], dtype=numpy_dtype(dtype), **kw)
        plan = ctx.ops[key] = (op, op.workspace_bytes(problem.src[0]))
    return plan


def _float_weights(w):
    return as_dlprim(w if w.dtype == torch.float32 else convert(w, torch.float32))


def _fast(problem, dtype):
    return problem.spatial == 2 and dtype in _FAST_2D


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
              None if bias is None else as_dlprim(convert(bias, torch.float32)),
              _workspace(ctx, ws))
        enqueue_recorded(ctx, op, ts, lambda: op.launches(*ts))
        return
    op = problem.nd(ctx, src.dtype)
    enqueue(ctx, op.forward(_dlp(src, problem), _dlp(w, problem), _dlp(dst, problem)))
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
              None if bias is None else as_dlprim(convert(bias, torch.float32)),
              _workspace(ctx, ws))
        enqueue_recorded(ctx, op, ts, lambda: op.launches(*ts, beta=0.0))
        return
    op = problem.nd(ctx, dst_grad.dtype)
    enqueue(ctx, op.backward_data(_channels_first(dst_grad, problem), _dlp(w, problem),
                                  _dlp(src_grad, problem)))
    if bias is not None:
        _add_bias(src_grad, bias)


def _run_backward_filter(problem, src, dst_grad, w_grad):
    ctx = _ctx(src)
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
    op = problem.nd(ctx, src.dtype)
    enqueue(ctx, op.backward_filter(_dlp(src, problem), _channels_first(dst_grad, problem),
                                    _dlp(w_grad, problem)))


def _add_bias(out, bias):
    shape = [1, -1] + [1] * (out.dim() - 2)
    b = handle(aten.view.default, (bias, shape), {})
    handle(aten.add_.Tensor, (out, b), {})


def _unbatched(x, w):
    return x.dim() == w.dim() - 1


@register(aten.convolution.default)
def _convolution(x, w, bias, stride, padding, dilation, transposed, output_padding, groups):
    _check_dtypes("convolution", x, w, bias)
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
        problem = _Problem(out.shape, x.shape, w.shape, stride, padding, dilation, groups)
        _run_backward_data(problem, x, w, out, bias)
    else:
        problem = _Problem(x.shape, out.shape, w.shape, stride, padding, dilation, groups)
        _run_forward(problem, x, w, out, bias)
    return out


@register(aten.convolution_backward.default)
def _convolution_backward(grad, x, w, bias_sizes, stride, padding, dilation, transposed,
                          output_padding, groups, output_mask):
    _check_dtypes("convolution_backward", grad, x, w)
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
        problem = _Problem(grad.shape, x.shape, w.shape, stride, padding, dilation, groups)
    else:
        problem = _Problem(x.shape, grad.shape, w.shape, stride, padding, dilation, groups)
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


