"""grid_sampler_2d / grid_sampler_3d and their backward (``kernels/grid_sample.cl``):
bilinear (trilinear), nearest or (2-D) bicubic sampling of (N, C, [D,] H, W) inputs at
a (N, [Do,] Ho, Wo, dims) grid of normalised coordinates, padding by zeros, the border
or reflection, PyTorch's align_corners rule. Contiguous dlprim Tensors of a float dtype; the input's
gradient is summed in float32 with atomics. ``affine_base``: the coordinates
F.affine_grid maps.
"""
import numpy as np

from ..dtypes import as_dtype, cl_type
from ..kernels import program
from ..utils import round_up
from .pointwise import memo

__all__ = ["INTERPOLATIONS", "PADDINGS", "grid_sample_ops", "affine_base"]

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
    return memo(ctx, ("grid_sample", dims, interpolation, as_dtype(dtype)),
                 lambda: GridSample(ctx, dims, interpolation, dtype))


def _linspace_from_neg_one(n, align_corners):
    """PyTorch's float32 values of linspace(-1, 1, n) (its CPU kernel fills the halves
    from each end), scaled by (n - 1) / n without align_corners."""
    f32 = np.float32
    if n <= 1:
        return np.zeros(1, f32)
    i = np.arange(n)
    step = f32(2) / f32(n - 1)
    r = np.where(i < n // 2, f32(-1) + step * i.astype(f32),
                 f32(1) - step * (n - 1 - i).astype(f32)).astype(f32)
    return r if align_corners else r * f32(n - 1) / f32(n)


def affine_base(spatial, align_corners):
    """The (positions, dims + 1) float32 matrix of F.affine_grid's output coordinates over
    ``spatial`` ((H, W) or (D, H, W)): [x, y, (z,) 1] per position, x along the last dim,
    so that the grid is base · thetaᵀ."""
    spatial = tuple(int(n) for n in spatial)
    axes = np.meshgrid(*[_linspace_from_neg_one(n, align_corners) for n in spatial],
                       indexing="ij")[::-1]
    cols = list(axes) + [np.ones(spatial, np.float32)]
    return np.stack(cols, axis=-1).reshape(int(np.prod(spatial)), len(spatial) + 1)
