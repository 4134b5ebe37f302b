"""grid_sampler_2d / grid_sampler_3d and their backward (``kernels/grid_sample.cl``):
bilinear (trilinear), nearest or (2-D) bicubic sampling of (N, C, [D,] H, W) inputs at
a (N, [Do,] Ho, Wo, dims) grid of normalised coordinates, padding by zeros, the border
or reflection, PyTorch's align_corners rule. Contiguous dlprim Tensors of a float dtype; the input's
gradient is summed in float32 with atomics.
"""
import numpy as np

from ..dtypes import as_dtype, cl_type
from ..kernels import program
from ..utils import round_up
from .pointwise import _memo

__all__ = ["INTERPOLATIONS", "PADDINGS", "grid_sample_ops"]

INTERPOLATIONS = ("bilinear", "nearest", "bicubic")  # PyTorch's interpolation_mode 0, 1, 2
PADDINGS = ("zeros", "border", "reflection")  # padding_mode 0, 1, 2


class GridSample:
    """The grid sampling kernels of one interpolation for one dtype."""

    def __init__(self, ctx, dims, interpolation, dtype):
        if interpolation not in INTERPOLATIONS:
            raise ValueError("grid_sample: interpolation %r is not one of %s"
                             % (interpolation, INTERPOLATIONS))
        self.ctx, self.dtype = ctx, as_dtype(dtype)
        if dims not in (2, 3) or (interpolation == "bicubic" and dims != 2):
            raise ValueError("grid_sample: 2 or 3 spatial dims (bicubic: 2), got %r" % (dims,))
        self.dims = dims
        self.program = program.get(ctx, "grid_sample", T=cl_type(self.dtype),
                                   INTERP=interpolation, DIMS=dims)
        self._wg = min(256, ctx.facts.max_work_group)

    def _launch(self, name, total, args):
        return [program.Launch(self.program, name, (round_up(total, self._wg),), (self._wg,),
                               [np.uint64(total)] + args)] if total else []

    def _sizes(self, x_shape, grid_shape, padding, align_corners):
        unit = (1,) * (3 - self.dims)
        spatial_in = unit + tuple(x_shape[2:])
        spatial_out = unit + tuple(grid_shape[1:-1])
        return [np.int32(v) for v in (x_shape[1],) + spatial_in + spatial_out
                + (PADDINGS.index(padding), bool(align_corners))]

    def forward(self, x, grid, y, padding, align_corners):
        """y (N, C, *out) sampled from x (N, C, *in) at grid (N, *out, dims)."""
        total = int(np.prod(grid.shape[:-1]))
        return self._launch("grid_sample_forward", total,
                            self._sizes(x.shape, grid.shape, padding, align_corners)
                            + [x, grid, y])

    def backward(self, dy, x, grid, dx, dgrid, padding, align_corners):
        """dx (float32, zeroed by the caller; None: not wanted) += the input's gradient,
        dgrid = the grid's."""
        total = int(np.prod(grid.shape[:-1]))
        want = dx is not None
        return self._launch("grid_sample_backward", total,
                            self._sizes(x.shape, grid.shape, padding, align_corners)
                            + [np.int32(want), dy, x, grid, dx if want else dgrid, dgrid])


def grid_sample_ops(ctx, dims, interpolation, dtype):
    """The ``GridSample`` of these dims, interpolation and dtype on ctx (made once)."""
    return _memo(ctx, ("grid_sample", dims, interpolation, as_dtype(dtype)),
                 lambda: GridSample(ctx, dims, interpolation, dtype))
