"""torchvision's detection operators on ocl devices (``core/detection.py``): nms,
roi_align, roi_pool and their gradients, as ``torch.ops.torchvision`` defines them.

The operators exist only once torchvision is imported, so they are registered by their
qualified names (``register_by_name``); batched_nms and torchvision.ops.RoIAlign /
RoIPool reach them through torchvision's own Python code, and their gradients through
torchvision's autograd kernels (which call ``_roi_align_backward`` /
``_roi_pool_backward``). Checks and error messages are torchvision's CPU kernels'.
The namespace's other operators (ps_roi_align, ps_roi_pool, deform_conv2d) are not
implemented: the dispatcher's refusal names them.
"""
import torch

from ..core.detection import BITS, detection_ops, nms_threshold
from ..tensor import Tensor
from .dispatch import handle, register_by_name
from .ops_tensor import convert
from .tensor import accumulate_dtype, as_dlprim, empty, enqueue, numpy_dtype

aten = torch.ops.aten

__all__ = ["nms", "roi_align", "roi_align_backward", "roi_pool", "roi_pool_backward"]

_FLOATS = (torch.float32, torch.float16, torch.float64)


def _ctx(t):
    return t._ocl_storage.ctx


def _check(ok, message):
    if not ok:
        raise RuntimeError(message)


def _check_float(op, t):
    if t.dtype not in _FLOATS:
        raise NotImplementedError("dlprim.torch: torchvision.%s on ocl devices: float32, "
                                  "float16 or float64 tensors only, got %s" % (op, t.dtype))


def _zeros(shape, dtype, like):
    return handle(aten.zeros.default, (shape,), {"dtype": dtype, "device": like.device})


# ----- nms
@register_by_name("torchvision.nms.default")
def nms(dets, scores, iou_threshold):
    """The indices of the boxes kept, int64, by descending score (ties: by index)."""
    _check(dets.dim() == 2, "boxes should be a 2d tensor, got %dD" % dets.dim())
    _check(dets.size(1) == 4, "boxes should have 4 elements in dimension 1, got %d"
           % dets.size(1))
    _check(scores.dim() == 1, "scores should be a 1d tensor, got %dD" % scores.dim())
    _check(dets.size(0) == scores.size(0), "boxes and scores should have same number of "
           "elements in dimension 0, got %d and %d" % (dets.size(0), scores.size(0)))
    _check(dets.dtype == scores.dtype, "dets should have the same type as scores")
    _check_float("nms", dets)
    index = dets._ocl_storage.index
    n = int(dets.size(0))
    if n == 0:
        return empty((0,), torch.int64, index)
    order = handle(aten.sort.stable, (scores,), {"stable": True, "dim": 0,
                                                  "descending": True})[1]
    ctx, ops = _ctx(dets), detection_ops(_ctx(dets), numpy_dtype(dets.dtype))
    blocks = -(-n // BITS)
    mask = Tensor(ctx, (n * blocks,), "int64")  # (bit words: ulong in the kernel)
    removed = Tensor(ctx, (blocks,), "int64")
    count = Tensor(ctx, (1,), "int32")
    keep = empty((n,), torch.int64, index)
    enqueue(ctx, ops.nms(as_dlprim(dets), as_dlprim(order),
                         nms_threshold(iou_threshold, ops.compute), mask, removed,
                         as_dlprim(keep), count))
    kept = int(count.to_host()[0])  # (the one value the host waits for)
    return keep if kept == n else handle(aten.slice.Tensor, (keep, 0, 0, kept), {})


# ----- roi_align / roi_pool
def _check_rois(op, x, rois):
    _check(rois.dim() == 2 and rois.size(1) == 5, "rois must have shape as Tensor[K, 5]")
    _check(x.dtype == rois.dtype, "torchvision.%s: Expected tensor for argument #1 'input' "
           "to have the same type as tensor for argument #2 'rois'; but type %s does not "
           "equal %s" % (op, x.dtype, rois.dtype))
    _check_float(op, x)


@register_by_name("torchvision.roi_align.default")
def roi_align(x, rois, spatial_scale, pooled_height, pooled_width, sampling_ratio, aligned):
    _check_rois("roi_align", x, rois)
    _check(x.dim() == 4, "torchvision.roi_align: input must be (N, C, H, W), got %dD"
           % x.dim())
    shape = (rois.size(0), x.size(1), int(pooled_height), int(pooled_width))
    y = empty(shape, x.dtype, x._ocl_storage.index)
    if y.numel() and x.numel():
        ops = detection_ops(_ctx(x), numpy_dtype(x.dtype))
        enqueue(_ctx(x), ops.roi_align_forward(as_dlprim(x), as_dlprim(rois), as_dlprim(y),
                                               spatial_scale, sampling_ratio, aligned))
    elif y.numel():
        handle(aten.zero_.default, (y,), {})
    return y


@register_by_name("torchvision._roi_align_backward.default")
def roi_align_backward(grad, rois, spatial_scale, pooled_height, pooled_width, batch_size,
                       channels, height, width, sampling_ratio, aligned):
    _check_rois("_roi_align_backward", grad, rois)
    ops = detection_ops(_ctx(grad), numpy_dtype(grad.dtype))
    dx = _zeros((batch_size, channels, height, width), accumulate_dtype(grad.dtype), grad)
    if grad.numel() and dx.numel():
        enqueue(_ctx(grad), ops.roi_align_backward(as_dlprim(grad), as_dlprim(rois),
                                                   as_dlprim(dx), spatial_scale,
                                                   sampling_ratio, aligned))
    return dx if dx.dtype == grad.dtype else convert(dx, grad.dtype)


@register_by_name("torchvision.roi_pool.default")
def roi_pool(x, rois, spatial_scale, pooled_height, pooled_width):
    _check_rois("roi_pool", x, rois)
    _check(x.dim() == 4, "torchvision.roi_pool: input must be (N, C, H, W), got %dD"
           % x.dim())
    shape = (rois.size(0), x.size(1), int(pooled_height), int(pooled_width))
    index = x._ocl_storage.index
    y, argmax = empty(shape, x.dtype, index), empty(shape, torch.int32, index)
    if y.numel() and x.numel():
        ops = detection_ops(_ctx(x), numpy_dtype(x.dtype))
        enqueue(_ctx(x), ops.roi_pool_forward(as_dlprim(x), as_dlprim(rois), as_dlprim(y),
                                              as_dlprim(argmax), spatial_scale))
    elif y.numel():
        handle(aten.zero_.default, (y,), {})
        handle(aten.fill_.Scalar, (argmax, -1), {})
    return y, argmax


@register_by_name("torchvision._roi_pool_backward.default")
def roi_pool_backward(grad, rois, argmax, spatial_scale, pooled_height, pooled_width,
                      batch_size, channels, height, width):
    _check_rois("_roi_pool_backward", grad, rois)
    _check(argmax.dtype == torch.int32, "torchvision._roi_pool_backward: argmax must be "
           "int32, got %s" % argmax.dtype)
    ops = detection_ops(_ctx(grad), numpy_dtype(grad.dtype))
    dx = _zeros((batch_size, channels, height, width), accumulate_dtype(grad.dtype), grad)
    if grad.numel() and dx.numel():
        enqueue(_ctx(grad), ops.roi_pool_backward(as_dlprim(grad), as_dlprim(rois),
                                                  as_dlprim(argmax), as_dlprim(dx)))
    return dx if dx.dtype == grad.dtype else convert(dx, grad.dtype)
