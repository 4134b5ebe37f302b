"""torchvision's detection operators (``kernels/detection.cl``): non-maximum suppression,
RoIAlign and RoIPool with their gradients, with torchvision's CPU kernels' arithmetic.

- nms: boxes (x1, y1, x2, y2) visited in descending score order; a box is kept unless a
  kept box overlaps it by IoU > threshold. As torchvision's CUDA kernel: one launch marks,
  for every box, the later boxes it would remove (a 64-bit word per 64 boxes); then one
  work-group walks that bitmask in order (``nms_keep``), so nothing but the count of kept
  boxes comes back to the host.
- roi_align (He et al., "Mask R-CNN", 2017): each output bin is the mean of a grid of
  bilinear samples; ``aligned`` shifts the roi by half a pixel, sampling_ratio <= 0 picks
  ceil(bin size) samples per bin.
- roi_pool (Girshick, "Fast R-CNN", 2015): the max over each bin of the roi rounded to
  whole pixels, with the flat position of the max (-1 for an empty bin).

Gradients are scattered into dx with compare-and-swap atomics (float32 for float32 and
float16 inputs, float64 for float64: that needs cl_khr_int64_base_atomics).
"""
import numpy as np

from ..dtypes import as_dtype, cl_type
from ..kernels import program
from ..utils import round_up
from .pointwise import memo

__all__ = ["detection_ops", "nms_threshold"]

BITS = 64  # boxes per word of the nms bitmask


class Detection:
    """The detection kernels for one storage dtype."""

    def __init__(self, ctx, dtype):
        self.ctx, self.dtype = ctx, as_dtype(dtype)
        T = cl_type(self.dtype)
        if T not in ("float", "half", "double"):
            raise TypeError("detection operators: float32, float16 or float64 tensors, got %s"
                            % self.dtype)
        self.compute = np.dtype(np.float64 if T == "double" else np.float32)
        self.grad_dtype = self.compute
        if T == "double" and not ctx.facts.int64_atomics:
            self.grad_dtype = None  # (backward refused, naming the extension)
        D = "double" if T == "double" else "float"
        self.program = program.get(ctx, "detection", T=T, A=cl_type(self.compute), D=D)
        self._wg = min(256, ctx.facts.max_work_group)

    def _launch(self, name, total, args):
        return [program.Launch(self.program, name, (round_up(total, self._wg),), (self._wg,),
                               [np.uint64(total)] + args)] if total else []

    def _need_grad(self, what):
        if self.grad_dtype is None:
            raise NotImplementedError("%s of float64 tensors sums with 64-bit atomics: "
                                      "cl_khr_int64_base_atomics, which %s lacks"
                                      % (what, self.ctx.name))

    # ----- nms
    def nms(self, dets, order, threshold, mask, removed, keep, count):
        """keep[:count] = the indices (into dets) nms keeps, in score order. dets (n, 4);
        order (n,) int64: dets' rows by descending score; mask (n, blocks) and removed
        (blocks,) int64 scratch (ulong words), blocks = ceil(n / 64); keep (n,) int64; count (1,) int32.
        threshold: from ``nms_threshold``."""
        n = int(dets.shape[0])
        blocks = -(-n // BITS)
        rows = round_up(n, min(64, self._wg))
        return [
            program.Launch(self.program, "nms_mask", (rows, blocks), (min(64, self._wg), 1),
                           [np.int32(n), np.int32(blocks), threshold, dets, order, mask]),
            program.Launch(self.program, "nms_keep", (self._wg,), (self._wg,),
                           [np.int32(n), np.int32(blocks), mask, order, removed, keep,
                            count])]

    # ----- roi_align
    def _sizes(self, shape, pooled):
        n, c, h, w = (int(v) for v in shape)
        return [np.int32(c), np.int32(h), np.int32(w), np.int32(pooled[0]),
                np.int32(pooled[1]), np.int32(n)]

    def roi_align_forward(self, x, rois, y, spatial_scale, sampling_ratio, aligned):
        """y (R, C, PH, PW) from x (N, C, H, W) and rois (R, 5): (batch, x1, y1, x2, y2)."""
        return self._launch("roi_align_forward", y.size,
                            self._sizes(x.shape, y.shape[2:])
                            + [self.compute.type(spatial_scale), np.int32(sampling_ratio),
                               np.int32(bool(aligned)), x, rois, y])

    def roi_align_backward(self, dy, rois, dx, spatial_scale, sampling_ratio, aligned):
        """dx (N, C, H, W), zeroed by the caller, in ``grad_dtype`` += the gradient of
        roi_align's input for dy (R, C, PH, PW)."""
        self._need_grad("roi_align's gradient")
        return self._launch("roi_align_backward", dy.size,
                            self._sizes(dx.shape, dy.shape[2:])
                            + [self.compute.type(spatial_scale), np.int32(sampling_ratio),
                               np.int32(bool(aligned)), dy, rois, dx])

    # ----- roi_pool
    def roi_pool_forward(self, x, rois, y, argmax, spatial_scale):
        """y (R, C, PH, PW) and argmax (int32, same shape) from x (N, C, H, W) and rois."""
        return self._launch("roi_pool_forward", y.size,
                            self._sizes(x.shape, y.shape[2:])
                            + [self.compute.type(spatial_scale), x, rois, y, argmax])

    def roi_pool_backward(self, dy, rois, argmax, dx):
        """dx (N, C, H, W), zeroed by the caller, in ``grad_dtype`` += dy at argmax."""
        self._need_grad("roi_pool's gradient")
        return self._launch("roi_pool_backward", dy.size,
                            self._sizes(dx.shape, dy.shape[2:]) + [dy, rois, argmax, dx])


def detection_ops(ctx, dtype):
    """The ``Detection`` kernels of this dtype on ctx (made once)."""
    return memo(ctx, ("detection", as_dtype(dtype)), lambda: Detection(ctx, dtype))


def nms_threshold(threshold, compute):
    """The threshold t of the compute dtype with iou > t exactly when iou > threshold for
    every iou of that dtype (torchvision compares its float IoU to the double threshold;
    rounding the threshold up to a float would keep a box whose IoU equals it)."""
    t = compute.type(threshold)
    if float(t) > float(threshold):
        t = np.nextafter(t, compute.type(-np.inf))
    return t
