"""grid_sampler_2d and its backward (``kernels/grid_sample.cl``): bilinear or nearest
sampling of (N, C, H, W) inputs at a (N, Ho, Wo, 2) grid of normalised coordinates,
padding by zeros, the border or reflection, PyTorch's align_corners rule. Contiguous
dlprim Tensors of a float dtype; the input's gradient is summed in float32 with atomics.
"""
import numpy as np

from ..dtypes import as_dtype, cl_type
from ..kernels import program
from ..utils import round_up
from .pointwise import _memo

__all__ = ["INTERPOLATIONS", "PADDINGS", "grid_sample_ops"]

INTERPOLATIONS = ("bilinear", "nearest")  # PyTorch's interpolation_mode 0, 1
PADDINGS = ("zeros", "border", "reflection")  # padding_mode 0, 1, 2


class GridSample:
    """The grid sampling kernels of one interpolation for one dtype."""

    def __init__(self, ctx, interpolation, dtype):
        if interpolation not in INTERPOLATIONS:
            raise ValueError("grid_sample: interpolation %r is not one of %s"
                             % (interpolation, INTERPOLATIONS))
        self.ctx, self.dtype = ctx, as_dtype(dtype)
        self.program = program.get(ctx, "grid_sample", T=cl_type(self.dtype),
                                   INTERP=interpolation)
        self._wg = min(256, ctx.facts.max_work_group)

    def _launch(self, name, total, args):
        return [program.Launch(self.program, name, (round_up(total, self._wg),), (self._wg,),
                               [np.uint64(total)] + args)] if total else []

    @staticmethod
    def _sizes(x_shape, out_hw, padding, align_corners):
        n, c, h, w = x_shape
        return [np.int32(v) for v in (c, h, w, out_hw[0], out_hw[1], PADDINGS.index(padding),
                                      bool(align_corners))]

    def forward(self, x, grid, y, padding, align_corners):
        """y (N, C, Ho, Wo) sampled from x (N, C, H, W) at grid (N, Ho, Wo, 2)."""
        n, ho, wo = grid.shape[:3]
        return self._launch("grid_sample_forward", n * ho * wo,
                            self._sizes(x.shape, (ho, wo), padding, align_corners)
                            + [x, grid, y])

    def backward(self, dy, x, grid, dx, dgrid, padding, align_corners):
        """dx (float32, zeroed by the caller; None: not wanted) += the input's gradient,
        dgrid = the grid's."""
        n, ho, wo = grid.shape[:3]
        want = dx is not None
        return self._launch("grid_sample_backward", n * ho * wo,
                            self._sizes(x.shape, (ho, wo), padding, align_corners)
                            + [np.int32(want), dy, x, grid, dx if want else dgrid, dgrid])


def grid_sample_ops(ctx, interpolation, dtype):
    """The ``GridSample`` of this interpolation and dtype on ctx (made once)."""
    return _memo(ctx, ("grid_sample", interpolation, as_dtype(dtype)),
                 lambda: GridSample(ctx, interpolation, dtype))
