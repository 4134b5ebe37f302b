"""Network operators on ocl devices, each on the dlprim kernel that serves the same layer
in a Net: matrix products on ``Gemm``, convolutions on ``ConvForward`` / ``ConvBackwardData``
/ ``ConvBackwardFilter`` (the algorithm table picks Winograd, depthwise, direct, im2col or
implicit GEMM as for a Net), pooling, softmax and the negative log-likelihood. Operators
and kernels are built once per shape and kept on the device's context."""
import numpy as np
import torch

from ..core.conv import ConvBackwardData, ConvBackwardFilter, ConvForward, ConvGeometry
from ..core.gemm import Gemm
from ..core.interpolation import Interpolate2D
from ..core.loss import NLLLossOps
from ..core.pointwise import memo, pointwise
from ..core.pooling import Pool2D
from ..core.random import uniform
from ..core.softmax import SoftmaxOps
from ..tensor import Tensor
from .dispatch import handle, register
from .ops_tensor import convert, meta_of
from .tensor import as_dlprim, empty, enqueue, enqueue_recorded, write_into

aten = torch.ops.aten

__all__ = []


def _ctx(t):
    return t._ocl_storage.ctx


def _unsupported(op, why):
    raise NotImplementedError("dlprim.torch: %s on ocl devices: %s" % (op, why))


# ----- matrix products
def _operand(t):
    """(dlprim tensor, transposed, leading dimension, batch stride) of a matrix operand
    (2-D, or 3-D with a batch): read in place where each matrix is contiguous or the
    transpose of a contiguous one (k.transpose(-1, -2) in attention) and the batch stride
    is regular or 0 (an expanded batch), else from a contiguous copy."""
    rows, cols = t.shape[-2:]
    batch_stride = t.stride()[0] if t.dim() == 3 else 0
    inner = t.stride()[-2:]
    whole = t.dim() == 2 or batch_stride in (0, rows * cols) or t.shape[0] == 1
    if whole and (inner == (cols, 1) or rows == 1 and inner[1] == 1 or cols == 1 and inner[0] == 1):
        return _span(t, rows * cols), False, cols, batch_stride
    if whole and inner == (1, rows):
        return _span(t, rows * cols), True, rows, batch_stride
    c = as_dlprim(t)
    return c, False, cols, rows * cols if t.dim() == 3 else 0


def _span(t, per_matrix):
    """The storage from t's first element over every matrix of it (a view, no copy)."""
    count = (t.shape[0] - 1) * t.stride()[0] + per_matrix if t.dim() == 3 else per_matrix
    return t._ocl_storage.at(t.storage_offset(), (count,))


def _check_float(op, *ts):
    for t in ts:
        if t.dtype != torch.float32:
            _unsupported(op, "float32 operands only, got %s" % t.dtype)


# 16-bit operands run the Gemm of their own type: tensor cores where the device has them
# (products of the 16-bit values, sums in float32, one rounding of the result), the tiled
# kernels widening as they load elsewhere
_HALF_PRECISION = {torch.float16: "fp16", torch.bfloat16: "bf16"}
_GEMM_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _check_gemm_dtypes(op, *ts):
    for t in ts:
        if t.dtype not in _GEMM_DTYPES or t.dtype != ts[0].dtype:
            _unsupported(op, "float32, float16 or bfloat16 operands of one dtype only, got %s"
                         % ", ".join(str(t.dtype) for t in ts))


def gemm_precision(dtype, strict_float32=False):
    """The Gemm precision of products of ``dtype`` operands: their own 16-bit type's, and
    for float32 ``matmul_precision()`` (or "fp32" where ``strict_float32``)."""
    return _HALF_PRECISION.get(dtype) or ("fp32" if strict_float32 else matmul_precision())


def matmul_precision():
    """dlprim's precision for PyTorch's float32 matrix products on ocl:
    ``torch.set_float32_matmul_precision("high")`` or ``"medium"`` allow TF32 ("tf32":
    tensor cores where the device has them), the default ``"highest"`` does not."""
    return "fp32" if torch.get_float32_matmul_precision() == "highest" else "tf32"


def _gemm(a, b, out, bias=None, alpha=1.0, beta=0.0):
    """out = alpha * a @ b (+ bias per column) + beta * out, a batch of them for 3-D
    operands; out is new and contiguous."""
    ctx = _ctx(a)
    (A, ta, lda, sa), (B, tb, ldb, sb) = _operand(a), _operand(b)
    M, K = a.shape[-2:]
    N = b.shape[-1]
    batch = out.shape[0] if out.dim() == 3 else 1
    mode = "col" if bias is not None else None
    precision = gemm_precision(a.dtype)
    stored = A.dtype
    op = memo(ctx, ("torch_gemm", M, N, K, ta, tb, mode, batch, precision, stored),
               lambda: Gemm(ctx, M, N, K, ta, tb, bias=mode, batch=batch, precision=precision,
                            dtypes=(stored,) * 3))
    # the launches are recorded per signature and replayed over later calls' tensors
    # (program.Recording): a repeated product prepares nothing; everything the launches
    # depend on besides the tensors is in the key (the Gemm's own, the scalars, the layout)
    C = as_dlprim(out)
    tensors = (A, B, C, bias)
    key = ("torch_gemm_launches", M, N, K, ta, tb, mode, batch, precision, stored,
           float(alpha), float(beta), lda, ldb, sa, sb)
    enqueue_recorded(ctx, key, tensors, lambda: op.launches(
        A, B, C, bias=bias, alpha=alpha, beta=beta, lda=lda, ldb=ldb, ldc=N, stride_a=sa,
        stride_b=sb, stride_c=M * N))
    return out


@register(aten.mm.default)
def _mm(a, b):
    _check_gemm_dtypes("mm", a, b)
    out = empty((a.shape[0], b.shape[1]), a.dtype, a._ocl_storage.index)
    return _gemm(a, b, out) if out.numel() else out


@register(aten.addmm.default)
def _addmm(bias, a, b, beta=1, alpha=1):
    """bias (one value per output column: a linear layer's) added in the Gemm's epilogue, in
    float32 before the result is rounded; any other bias through beta * C (float32)."""
    _check_gemm_dtypes("addmm", bias, a, b)
    N = b.shape[1]
    out = empty((a.shape[0], N), a.dtype, a._ocl_storage.index)
    if out.numel() == 0:
        return out
    if beta == 1 and bias.numel() == N and bias.shape[-1] == N:
        column = bias if bias.dtype == torch.float32 else convert(bias, torch.float32)
        return _gemm(a, b, out, bias=as_dlprim(column).view((N,)), alpha=alpha)
    if a.dtype != torch.float32:
        _unsupported("addmm", "a 16-bit bias other than one value per column")
    handle(aten.copy_.default, (out, bias), {})
    return _gemm(a, b, out, alpha=alpha, beta=beta)


@register(aten.bmm.default)
def _bmm(a, b):
    _check_gemm_dtypes("bmm", a, b)
    out = empty((a.shape[0], a.shape[1], b.shape[2]), a.dtype, a._ocl_storage.index)
    return _gemm(a, b, out) if out.numel() else out


# ----- convolution
def _geometry(x, w, stride, padding, dilation, groups):
    if x.dim() != 4 or len(stride) != 2:
        _unsupported("convolution", "2-D convolutions of 4-D inputs only, got input %s"
                     % (list(x.shape),))
    return ConvGeometry(x.shape[1], w.shape[0], x.shape[2:], w.shape[2:], tuple(stride),
                        (padding[0], padding[1], padding[0], padding[1]), tuple(dilation), groups)


def _workspace(ctx, nbytes):
    return Tensor(ctx, (max(int(nbytes), 1),), "uint8")


def _conv_plan(cls, x, w, stride, padding, dilation, groups, **kw):
    """(op, workspace bytes, output shape) of a convolution direction over these shapes:
    worked out once per shape and arguments, as a step repeats the same calls."""
    ctx = _ctx(x)
    key = ("torch_conv_plan", cls, tuple(x.shape), tuple(w.shape), tuple(stride),
           tuple(padding), tuple(dilation), groups, tuple(kw.items()))
    plan = ctx.ops.get(key)
    if plan is None:
        geom = _geometry(x, w, stride, padding, dilation, groups)
        batch = x.shape[0]
        op = cls(ctx, geom, batch=batch, **kw)
        plan = ctx.ops[key] = (op, op.workspace_bytes(batch), geom.out_shape(batch))
    return plan


@register(aten.convolution.default)
def _convolution(x, w, bias, stride, padding, dilation, transposed, output_padding, groups):
    _check_float("convolution", x, w)
    if transposed:
        _unsupported("convolution", "transposed convolutions are not implemented yet")
    op, ws_bytes, out_shape = _conv_plan(ConvForward, x, w, stride, padding, dilation, groups,
                                         bias=bias is not None)
    out = empty(out_shape, x.dtype, x._ocl_storage.index)
    if out.numel() == 0:
        return out
    ctx = _ctx(x)
    ts = (as_dlprim(x), as_dlprim(w), as_dlprim(out),
          as_dlprim(bias) if bias is not None else None, _workspace(ctx, ws_bytes))
    enqueue_recorded(ctx, op, ts, lambda: op.launches(*ts))
    return out


@register(aten.convolution_backward.default)
def _convolution_backward(grad, x, w, bias_sizes, stride, padding, dilation, transposed,
                          output_padding, groups, output_mask):
    if transposed:
        _unsupported("convolution_backward", "transposed convolutions are not implemented yet")
    ctx, index = _ctx(x), x._ocl_storage.index
    dy = as_dlprim(grad)
    dx = dw = db = None
    if output_mask[0]:
        dx = empty(x.shape, x.dtype, index)
        if dx.numel():
            op, ws_bytes, _ = _conv_plan(ConvBackwardData, x, w, stride, padding, dilation,
                                         groups)
            ts = (dy, as_dlprim(w), as_dlprim(dx), _workspace(ctx, ws_bytes))
            enqueue_recorded(ctx, op, ts,
                             lambda: op.launches(ts[0], ts[1], ts[2], None, ts[3], beta=0.0))
    if output_mask[1]:
        dw = empty(w.shape, w.dtype, index)
        op, ws_bytes, _ = _conv_plan(ConvBackwardFilter, x, w, stride, padding, dilation, groups)
        ts = (as_dlprim(x), dy, as_dlprim(dw), _workspace(ctx, ws_bytes))
        enqueue_recorded(ctx, op, ts, lambda: op.launches(*ts, beta=0.0))
    if output_mask[2]:
        db = handle(aten.sum.dim_IntList, (grad, [0, 2, 3]), {})
    return dx, dw, db


# ----- interpolation (F.interpolate: nearest, nearest-exact, bilinear), on the kernels
# of dlprim's Interpolate layer
def _interp_op(x, out_hw, method, scales, align_corners):
    ctx = _ctx(x)
    scale = tuple(-1.0 if v is None else float(v) for v in scales)
    key = ("torch_interp", tuple(x.shape), tuple(out_hw), method, scale, bool(align_corners))
    return memo(ctx, key, lambda: Interpolate2D(ctx, tuple(x.shape), tuple(out_hw), method,
                                                 scale, bool(align_corners)))


def _interp(method, x, output_size, align_corners=False, scales_h=None, scales_w=None):
    _check_float("upsample", x)
    if x.dim() != 4:
        _unsupported("upsample", "2-D resampling of 4-D inputs only, got %s" % (list(x.shape),))
    op = _interp_op(x, output_size, method, (scales_h, scales_w), align_corners)
    out = empty(op.out_shape, x.dtype, x._ocl_storage.index)
    enqueue(_ctx(x), op.launches(as_dlprim(x), as_dlprim(out)))
    return out


def _interp_backward(method, grad, output_size, input_size, align_corners=False,
                     scales_h=None, scales_w=None):
    dx = empty(input_size, grad.dtype, grad._ocl_storage.index)
    op = _interp_op(dx, output_size, method, (scales_h, scales_w), align_corners)
    enqueue(_ctx(grad), op.backward_launches(as_dlprim(grad), as_dlprim(dx)))
    return dx


register(aten.upsample_bilinear2d.default)(
    lambda x, size, align, sh=None, sw=None: _interp("bilinear", x, size, align, sh, sw))
register(aten.upsample_nearest2d.default)(
    lambda x, size, sh=None, sw=None: _interp("nearest", x, size, False, sh, sw))
register(aten._upsample_nearest_exact2d.default)(
    lambda x, size, sh=None, sw=None: _interp("nearest-exact", x, size, False, sh, sw))
register(aten.upsample_bilinear2d_backward.default)(
    lambda g, size, in_size, align, sh=None, sw=None:
    _interp_backward("bilinear", g, size, in_size, align, sh, sw))
register(aten.upsample_nearest2d_backward.default)(
    lambda g, size, in_size, sh=None, sw=None:
    _interp_backward("nearest", g, size, in_size, False, sh, sw))
register(aten._upsample_nearest_exact2d_backward.default)(
    lambda g, size, in_size, sh=None, sw=None:
    _interp_backward("nearest-exact", g, size, in_size, False, sh, sw))


# ----- pooling
def _pool(mode, x, kernel, stride, padding, ceil_mode, count_include_pad=True):
    if x.dim() != 4:
        _unsupported("pooling", "4-D (N, C, H, W) inputs only, got %s" % (list(x.shape),))
    kernel = tuple(kernel) * (2 // len(kernel))
    stride = tuple(stride) * (2 // len(stride)) if stride else kernel
    padding = tuple(padding) * (2 // len(padding))
    ctx = _ctx(x)
    key = ("torch_pool", mode, kernel, stride, padding, bool(ceil_mode), bool(count_include_pad))
    return memo(ctx, key, lambda: Pool2D(ctx, mode, kernel, stride, padding,
                                          count_include_pad=count_include_pad, ceil_mode=ceil_mode))


@register(aten.max_pool2d_with_indices.default)
def _max_pool2d_with_indices(x, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    if any(d != 1 for d in (dilation if isinstance(dilation, (list, tuple)) else [dilation])):
        _unsupported("max_pool2d", "dilation is not supported, got %s" % (dilation,))
    padding = padding if isinstance(padding, (list, tuple)) else [padding]
    m = aten.max_pool2d_with_indices.default(meta_of(x), kernel_size, stride, padding, dilation,
                                             ceil_mode)[0]
    index, ctx = x._ocl_storage.index, _ctx(x)
    out = empty(m.shape, x.dtype, index)
    indices = empty(m.shape, torch.int64, index)
    if out.numel():
        op = _pool("max", x, kernel_size, stride, padding, ceil_mode)
        kept = Tensor(ctx, tuple(m.shape), np.int32)
        enqueue(ctx, op.launches(as_dlprim(x), as_dlprim(out), kept))
        pointwise(ctx, [kept], [as_dlprim(indices)], "y0 = x0;")
    return out, indices


@register(aten.max_pool2d_with_indices_backward.default)
def _max_pool2d_backward(grad, x, kernel_size, stride, padding, dilation, ceil_mode, indices):
    ctx = _ctx(x)
    dx = empty(x.shape, x.dtype, x._ocl_storage.index)
    if dx.numel():
        op = _pool("max", x, kernel_size, stride, padding, ceil_mode)
        kept = as_dlprim(convert(indices, torch.int32))
        enqueue(ctx, op.backward_launches(as_dlprim(dx), as_dlprim(grad), kept, beta=0.0))
    return dx


@register(aten.avg_pool2d.default)
def _avg_pool2d(x, kernel_size, stride=(), padding=0, ceil_mode=False, count_include_pad=True,
                divisor_override=None):
    if divisor_override is not None:
        _unsupported("avg_pool2d", "divisor_override is not supported")
    padding = padding if isinstance(padding, (list, tuple)) else [padding]
    m = aten.avg_pool2d.default(meta_of(x), kernel_size, stride, padding, ceil_mode,
                                count_include_pad)
    out = empty(m.shape, x.dtype, x._ocl_storage.index)
    if out.numel():
        op = _pool("avg", x, kernel_size, stride, padding, ceil_mode, count_include_pad)
        enqueue(_ctx(x), op.launches(as_dlprim(x), as_dlprim(out)))
    return out


@register(aten.avg_pool2d_backward.default)
def _avg_pool2d_backward(grad, x, kernel_size, stride, padding, ceil_mode, count_include_pad,
                         divisor_override):
    if divisor_override is not None:
        _unsupported("avg_pool2d_backward", "divisor_override is not supported")
    dx = empty(x.shape, x.dtype, x._ocl_storage.index)
    if dx.numel():
        op = _pool("avg", x, kernel_size, stride, padding, ceil_mode, count_include_pad)
        enqueue(_ctx(x), op.backward_launches(as_dlprim(dx), as_dlprim(grad), beta=0.0))
    return dx


def _adaptive_matrix(ctx, n_in, n_out):
    """The (n_out, n_in) matrix of adaptive average pooling along one axis: row i averages
    inputs floor(i n_in / n_out) .. ceil((i + 1) n_in / n_out) - 1, PyTorch's windows."""
    def make():
        m = np.zeros((n_out, n_in), np.float32)
        for i in range(n_out):
            lo, hi = (i * n_in) // n_out, -((-(i + 1) * n_in) // n_out)
            m[i, lo:hi] = 1.0 / (hi - lo)
        return Tensor.from_numpy(ctx, m)
    return memo(ctx, ("torch_adaptive_matrix", n_in, n_out), make)


def _separable(ctx, t, in_hw, out_hw, adjoint):
    """Adaptive average pooling from in_hw to out_hw as two GEMMs over the planes of t:
    out[p] = Ph · t[p] · Pwᵀ, or with ``adjoint`` (t the gradient of the pooled output) its
    backward, Phᵀ · t[p] · Pw; Ph, Pw are ``_adaptive_matrix``es."""
    (h, w), (oh, ow) = in_hw, out_hw
    ph, pw = _adaptive_matrix(ctx, h, oh), _adaptive_matrix(ctx, w, ow)
    planes = t.shape[0] * t.shape[1]
    rows, k_w, n_w = (oh, ow, w) if adjoint else (h, w, ow)   # along W first
    mid = Tensor(ctx, (planes * rows * n_w,), np.float32)
    g1 = memo(ctx, ("torch_adaptive_w", planes * rows, n_w, k_w, adjoint),
               lambda: Gemm(ctx, planes * rows, n_w, k_w, trans_b=not adjoint))
    enqueue(ctx, g1.launches(as_dlprim(t), pw, mid))
    m, k = (h, oh) if adjoint else (oh, h)                   # then along H, plane by plane
    out = empty((t.shape[0], t.shape[1], m, n_w), t.dtype, t._ocl_storage.index)
    g2 = memo(ctx, ("torch_adaptive_h", m, n_w, k, planes, adjoint),
               lambda: Gemm(ctx, m, n_w, k, trans_a=adjoint, batch=planes))
    enqueue(ctx, g2.launches(ph, mid, as_dlprim(out), stride_a=0, stride_b=k * n_w,
                          stride_c=m * n_w))
    return out


@register(aten._adaptive_avg_pool2d.default)
def _adaptive_avg_pool2d(x, output_size):
    h, w = x.shape[-2:]
    oh, ow = output_size
    if (oh, ow) == (1, 1):
        return handle(aten.mean.dim, (x, [-2, -1], True), {})
    if x.dim() != 4:
        _unsupported("adaptive_avg_pool2d", "4-D inputs only, got %s" % (list(x.shape),))
    if h % oh == 0 and w % ow == 0:
        return _avg_pool2d(x, [h // oh, w // ow], [h // oh, w // ow], [0, 0])
    return _separable(_ctx(x), x, (h, w), (oh, ow), adjoint=False)


@register(aten._adaptive_avg_pool2d_backward.default)
def _adaptive_avg_pool2d_backward(grad, x):
    h, w = x.shape[-2:]
    oh, ow = grad.shape[-2:]
    if (oh, ow) == (1, 1):
        spread = handle(aten.expand.default, (grad, list(x.shape)), {})
        return handle(aten.mul.Scalar, (spread, 1.0 / (h * w)), {})
    if h % oh == 0 and w % ow == 0:
        return _avg_pool2d_backward(grad, x, [h // oh, w // ow], [h // oh, w // ow], [0, 0],
                                    False, True, None)
    return _separable(_ctx(x), grad, (h, w), (oh, ow), adjoint=True)


# ----- softmax and the negative log-likelihood
def _softmax_op(x, dim, log):
    shape = tuple(x.shape)
    dim = dim % len(shape)
    outer = int(np.prod(shape[:dim], dtype=np.int64))
    inner = int(np.prod(shape[dim + 1:], dtype=np.int64))
    rows = (outer, shape[dim], inner)
    ctx = _ctx(x)
    return memo(ctx, ("torch_softmax", rows, log), lambda: SoftmaxOps(ctx, rows, log)), rows


def _softmax_composed(x, dim, log):
    """Softmax of a float dtype the row kernel does not take (16-bit, float64), from the
    operator library's reductions and pointwise operators in that dtype."""
    shifted = x - torch.amax(x, dim, keepdim=True) if x.numel() else x
    if log:
        return shifted - torch.log(torch.sum(torch.exp(shifted), dim, keepdim=True))
    e = torch.exp(shifted)
    return e / torch.sum(e, dim, keepdim=True)


def _softmax_forward(x, dim, log, half_to_float=False):
    if half_to_float and x.dtype in (torch.float16, torch.bfloat16):
        x = x.float()
    if x.dtype != torch.float32 and x.is_floating_point():
        return _softmax_composed(x, dim, log)
    _check_float("softmax", x)
    out = empty(x.shape, x.dtype, x._ocl_storage.index)
    if out.numel():
        op, rows = _softmax_op(x, dim, log)
        enqueue(_ctx(x), op.launches(as_dlprim(x).view(rows), as_dlprim(out).view(rows)))
    return out


def _softmax_backward(grad, y, dim, log, input_dtype=None):
    if y.dtype != torch.float32 or grad.dtype != torch.float32:
        # d softmax: y (g - sum(g y)); d log_softmax: g - e^y sum(g)
        if log:
            dx = grad - torch.exp(y) * torch.sum(grad, dim, keepdim=True)
        else:
            dx = y * (grad - torch.sum(grad * y, dim, keepdim=True))
        return dx if input_dtype is None or dx.dtype == input_dtype else dx.to(input_dtype)
    dx = empty(y.shape, y.dtype, y._ocl_storage.index)
    if dx.numel():
        op, rows = _softmax_op(y, dim, log)
        enqueue(_ctx(y), op.backward_launches(as_dlprim(y).view(rows), as_dlprim(grad).view(rows),
                                           as_dlprim(dx).view(rows)))
    return dx


register(aten._log_softmax.default)(
    lambda x, dim, half_to_float=False: _softmax_forward(x, dim, True, half_to_float))
register(aten._softmax.default)(
    lambda x, dim, half_to_float=False: _softmax_forward(x, dim, False, half_to_float))
register(aten._log_softmax_backward_data.default)(
    lambda grad, y, dim, input_dtype: _softmax_backward(grad, y, dim, True, input_dtype))
register(aten._softmax_backward_data.default)(
    lambda grad, y, dim, input_dtype: _softmax_backward(grad, y, dim, False, input_dtype))


@register(aten._safe_softmax.default)
def _safe_softmax(x, dim, dtype=None):
    """Softmax whose rows of nothing but -inf (an attention row masked whole) are 0, not
    NaN (scaled_dot_product_attention's math path)."""
    if dtype is not None and dtype != x.dtype:
        x = convert(x, dtype)
    y = _softmax_forward(x, dim, False)
    if y.numel():
        top = handle(aten.amax.default, (x, [dim], True), {})
        pointwise(_ctx(x), [as_dlprim(y), as_dlprim(top)], [as_dlprim(y)],
                  "y0 = (isinf(x1) && x1 < 0) ? 0.0f : x0;")
    return y


_REDUCTIONS = {0: "none", 1: "mean", 2: "sum"}


def _nll_op(x, target, weight, reduction, ignore_index):
    if weight is not None:
        _unsupported("nll_loss", "class weights are not supported yet")
    if x.dim() != 2:
        _unsupported("nll_loss", "(N, C) inputs only, got %s" % (list(x.shape),))
    ctx = _ctx(x)
    n, c = x.shape
    reduce = _REDUCTIONS[reduction]
    dtype = np.dtype(np.int64 if target.dtype == torch.int64 else np.int32)
    return memo(ctx, ("torch_nll", n, c, dtype.name, reduce, int(ignore_index)),
                 lambda: NLLLossOps(ctx, n, c, dtype, reduce, ignore_index))


@register(aten.nll_loss_forward.default)
def _nll_loss_forward(x, target, weight, reduction, ignore_index):
    _check_float("nll_loss", x)
    op = _nll_op(x, target, weight, reduction, ignore_index)
    ctx, index = _ctx(x), x._ocl_storage.index
    out = empty((x.shape[0],) if op.reduce == "none" else (), x.dtype, index)
    total = empty((), x.dtype, index)
    norm = Tensor(ctx, (1,), np.float32)
    rows = Tensor(ctx, (max(x.shape[0], 1),), np.float32)
    enqueue(ctx, op.launches(as_dlprim(x), as_dlprim(target), as_dlprim(out).view(op.out_shape),
                          rows=rows if op.reduce != "none" else None,
                          norm=norm if op.reduce == "mean" else None))
    if op.reduce == "mean":  # total_weight: the rows that count, 1 / the mean's factor
        pointwise(ctx, [norm], [as_dlprim(total).view((1,))], "y0 = 1.0f / x0;")
    else:
        handle(aten.fill_.Scalar, (total, 0.0), {})
    return out, total


@register(aten.nll_loss_backward.default)
def _nll_loss_backward(grad, x, target, weight, reduction, ignore_index, total_weight):
    op = _nll_op(x, target, weight, reduction, ignore_index)
    ctx = _ctx(x)
    dx = empty(x.shape, x.dtype, x._ocl_storage.index)
    norm = None
    if op.reduce == "mean":
        norm = Tensor(ctx, (1,), np.float32)
        pointwise(ctx, [as_dlprim(total_weight).view((1,))], [norm], "y0 = 1.0f / x0;")
    enqueue(ctx, op.backward_launches(as_dlprim(target), as_dlprim(grad).view(op.out_shape),
                                   as_dlprim(dx), beta=0.0, norm=norm))
    return dx


# nll_loss2d: per-pixel classes of (N, C, H, W) scores (segmentation), as nll_loss over
# the (N*H*W, C) rows of the channels-last copy
def _pixel_rows(x):
    c = x.shape[1]
    return handle(aten.clone.default, (x.permute(0, 2, 3, 1),),
                  {"memory_format": torch.contiguous_format}).view(-1, c)


@register(aten.nll_loss2d_forward.default)
def _nll_loss2d_forward(x, target, weight, reduction, ignore_index):
    if x.dim() != 4:
        _unsupported("nll_loss2d", "(N, C, H, W) inputs only, got %s" % (list(x.shape),))
    out, total = _nll_loss_forward(_pixel_rows(x), target.reshape(-1), weight, reduction,
                                   ignore_index)
    return (out.view(target.shape) if out.dim() else out), total


@register(aten.nll_loss2d_backward.default)
def _nll_loss2d_backward(grad, x, target, weight, reduction, ignore_index, total_weight):
    rows = _pixel_rows(x)
    g = grad.reshape(-1) if grad.dim() else grad
    drows = _nll_loss_backward(g, rows, target.reshape(-1), weight, reduction, ignore_index,
                               total_weight)
    dx = empty(x.shape, x.dtype, x._ocl_storage.index)
    write_into(dx.permute(0, 2, 3, 1), as_dlprim(drows))
    return dx


# ----- dropout: the mask from dlprim's counter-based generator on the device, its seed
# drawn from PyTorch's CPU generator (so torch.manual_seed governs it)
@register(aten.native_dropout.default)
def _native_dropout(x, p, train):
    index, ctx = x._ocl_storage.index, _ctx(x)
    if not train or p == 0:
        return handle(aten.clone.default, (x,), {}), handle(
            aten.new_ones.default, (x, list(x.shape)), {"dtype": torch.bool})
    out = empty(x.shape, x.dtype, index)
    mask = empty(x.shape, torch.bool, index)
    if out.numel():
        u = Tensor(ctx, tuple(x.shape), np.float32)
        uniform(ctx, u, 0.0, 1.0, seed=int(torch.randint(0, 2 ** 62, (1,)).item()))
        scale = 0.0 if p >= 1 else 1.0 / (1.0 - p)
        # kept where u >= p (the Dropout layer's rule), scaled by 1 / (1 - p)
        pointwise(ctx, [as_dlprim(x), u], [as_dlprim(out), as_dlprim(mask)],
                  "y1 = x1 >= w0; y0 = y1 ? x0 * w1 : 0;", [np.float32(p), np.float32(scale)])
    return out, mask


@register(aten.native_dropout_backward.default)
def _native_dropout_backward(grad, mask, scale):
    # grad * mask * scale with a float scale: integer and bool gradients give the default
    # float type, as PyTorch's CPU kernel does
    dtype = grad.dtype if grad.is_floating_point() else torch.get_default_dtype()
    out = empty(grad.shape, dtype, grad._ocl_storage.index)
    if out.numel():
        pointwise(_ctx(grad), [as_dlprim(grad), as_dlprim(mask)], [as_dlprim(out)],
                  "y0 = x1 ? x0 * w0 : 0;", [np.float32(scale)])
    return out
