"""Resampling over 1 to 3 spatial dims (``kernels/resample_nd.cl``): PyTorch's upsample_*
operators (nearest, nearest-exact, linear / bilinear / trilinear, bicubic) and their
backward passes, on contiguous (N C, *spatial) dlprim Tensors of a float dtype.

The per-dim ratio is worked out here exactly as PyTorch does (``scale_of``: in float32,
in float64 for float64 but in the nearest modes, as PyTorch's ``opmath_t``); sizes and
ratios are run-time arguments: one program per (dtype, mode).
"""
import numpy as np

from ..dtypes import as_dtype, cl_type
from ..kernels import program
from ..utils import round_up
from .pointwise import memo

__all__ = ["MODES", "scale_of", "resample_nd"]

MODES = ("nearest", "nearest_exact", "linear", "cubic", "linear_aa", "cubic_aa")
_AA_SUPPORT = {"linear_aa": 1.0, "cubic_aa": 2.0}  # half the filter's width at ratio 1


def real_type(mode, dtype):
    """The type of positions and weights of ``mode`` over ``dtype`` (the kernels'
    ``real_t``): float64 for float64 but in the nearest modes, whose index PyTorch finds
    in float whatever the dtype; float32 otherwise."""
    nearest = mode in ("nearest", "nearest_exact")
    return np.float64 if as_dtype(dtype) == np.float64 and not nearest else np.float32


def scale_of(mode, n_in, n_out, align_corners, scale_factor, real=np.float32):
    """PyTorch's ratio of output to input positions along one dim, in ``real``
    (``UpSample.h``: ``compute_scales_value``, and ``area_pixel_compute_scale`` for
    linear and cubic): 1 / scale_factor where one is given, else n_in / n_out; with
    align_corners (n_in - 1) / (n_out - 1)."""
    f32 = real
    if mode != "nearest" and mode != "nearest_exact" and align_corners:
        return f32(n_in - 1) / f32(n_out - 1) if n_out > 1 else f32(0)
    if scale_factor is not None and scale_factor > 0:
        return f32(1.0 / scale_factor)
    return f32(n_in) / f32(n_out)


class ResampleND:
    """The resampling kernels of one mode for one dtype."""

    def __init__(self, ctx, mode, dtype):
        if mode not in MODES:
            raise ValueError("resampling: mode %r is not one of %s" % (mode, MODES))
        self.ctx, self.mode, self.dtype = ctx, mode, as_dtype(dtype)
        self.program = program.get(ctx, "resample_nd", T=cl_type(self.dtype), MODE=mode)
        self.real = real_type(mode, self.dtype)
        self._wg = min(256, ctx.facts.max_work_group)

    def _args(self, in_size, out_size, align_corners, scale_factors):
        pad = 3 - len(in_size)
        in3, out3 = (1,) * pad + tuple(in_size), (1,) * pad + tuple(out_size)
        real = self.real
        scales = (1.0,) * pad + tuple(
            scale_of(self.mode, i, o, align_corners, s, real)
            for i, o, s in zip(in_size, out_size, scale_factors))
        # antialiasing: the filter stretched by the ratio where it shrinks
        stretch = [max(float(s), 1.0) for s in scales]
        support = [real(_AA_SUPPORT.get(self.mode, 0.0) * f) for f in stretch]
        inverse = [real(1.0 / f) for f in stretch]
        return ([np.int32(v) for v in in3 + out3] + [real(s) for s in scales]
                + [np.int32(bool(align_corners))] + support + inverse)

    def _launch(self, name, total, args):
        return [program.Launch(self.program, name, (round_up(total, self._wg),), (self._wg,),
                               [np.uint64(total)] + args)] if total else []

    def forward(self, planes, in_size, out_size, align_corners, scale_factors, x, y):
        """y (planes, *out_size) resampled from x (planes, *in_size)."""
        total = planes * int(np.prod(out_size))
        return self._launch("resample_forward", total,
                            self._args(in_size, out_size, align_corners, scale_factors) + [x, y])

    def backward(self, planes, in_size, out_size, align_corners, scale_factors, dy, dx):
        """dx (planes, *in_size) from dy (planes, *out_size): every element written."""
        total = planes * int(np.prod(in_size))
        return self._launch("resample_backward", total,
                            self._args(in_size, out_size, align_corners, scale_factors)
                            + [dy, dx])


def resample_nd(ctx, mode, dtype):
    """The ``ResampleND`` of this mode and dtype on ctx (made once)."""
    return memo(ctx, ("resample_nd", mode, as_dtype(dtype)), lambda: ResampleND(ctx, mode, dtype))
