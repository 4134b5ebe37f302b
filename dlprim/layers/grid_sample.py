"""GridSample on the grid sampling launcher (core/grid_sample.py), the kernels the ``ocl``
PyTorch device runs for F.grid_sample.

    GridSample  y[n, c, *p] = x[n, c] sampled at grid[n, *p] (normalised coordinates in
                [-1, 1], x along the last spatial dim first), for (N, C, H, W) inputs and
                (N, Ho, Wo, 2) grids or (N, C, D, H, W) and (N, Do, Ho, Wo, 3): bilinear
                (trilinear), nearest (round half to even) or (2-D) bicubic (Keys, A =
                -0.75); positions outside read zeros, the border or the reflection;
                PyTorch's align_corners rule

Forward only (inference): no backward.
"""
from ..core.grid_sample import INTERPOLATIONS, PADDINGS, grid_sample_ops
from ..dtypes import dtype_name, is_float
from .base import Layer, Setup, TensorSpec, register


@register("GridSample")
class GridSample(Layer):
    """y = x sampled at the grid's points (F.grid_sample)."""
    OPTIONS = {"mode": "bilinear", "padding_mode": "zeros", "align_corners": False}
    HAS_BACKWARD = False

    def build(self, in_specs):
        if len(in_specs) != 2:
            self.fail("expects 2 inputs (x, grid), got %d" % len(in_specs))
        x, grid = in_specs
        dims = len(x.shape) - 2
        mode, padding = self.options["mode"], self.options["padding_mode"]
        if mode not in INTERPOLATIONS:
            self.fail("option 'mode' must be one of %s, got %r" % (INTERPOLATIONS, mode))
        if padding not in PADDINGS:
            self.fail("option 'padding_mode' must be one of %s, got %r" % (PADDINGS, padding))
        if self.options["align_corners"] not in (True, False, 0, 1):
            self.fail("option 'align_corners' must be true/false, got %r"
                      % (self.options["align_corners"],))
        if dims not in (2, 3) or (mode == "bicubic" and dims != 2):
            self.fail("input %s: 2 or 3 spatial dims (bicubic: 2)" % (x.shape,))
        if len(grid.shape) != dims + 2 or grid.shape[0] != x.shape[0] or grid.shape[-1] != dims:
            self.fail("grid %s for input %s: expected (N, *out, %d)" % (grid.shape, x.shape, dims))
        if not is_float(x.dtype) or grid.dtype != x.dtype:
            self.fail("x and grid of one float dtype, got %s and %s"
                      % (dtype_name(x.dtype), dtype_name(grid.dtype)))
        self.op = grid_sample_ops(self.ctx, dims, mode, x.dtype)
        return Setup([TensorSpec(tuple(x.shape[:2]) + tuple(grid.shape[1:-1]), x.dtype)])

    def forward(self, x, y, params, ws, saved):
        return self.op.forward(x[0], x[1], y[0], self.options["padding_mode"],
                               bool(self.options["align_corners"]))
