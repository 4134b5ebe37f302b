"""Cast: one tensor converted to another floating type (float32, float16, bfloat16).

A net of precision "fp16" or "bf16" gets these where a layer that stores 16-bit values
meets one that does not (``net/mixed_precision.py``); in a JSON net it is ``{"type":
"Cast", "options": {"dtype": "float16"}}``. Forward rounds to nearest even on the way to
16 bits; backward
converts the gradient back to the input's type: ``dx = accumulate*dx + dy``.
"""
import numpy as np

from ..core.pointwise import PointwiseBroadcast
from ..dtypes import HALF_TYPES, as_dtype, dtype_name
from .base import Layer, Setup, TensorSpec, register

FLOAT_TYPES = (np.dtype(np.float32),) + HALF_TYPES


@register("Cast")
class Cast(Layer):
    """``y = x`` stored as ``dtype`` ("float32", "float16" or "bfloat16")."""
    OPTIONS = {"dtype": None}
    BACKWARD_READS_INPUTS = False
    HALF_STORAGE = "exact"  # both sides are what the options say: never cast around it

    def __init__(self, ctx, name=None, **options):
        super().__init__(ctx, name=name, **options)
        try:
            self.dtype = as_dtype(self.options["dtype"])
        except TypeError as err:
            self.fail("option 'dtype': %s" % err)
        if self.dtype not in FLOAT_TYPES:
            self.fail("option 'dtype' must be float32, float16 or bfloat16, got %s"
                      % dtype_name(self.dtype))

    def build(self, in_specs):
        spec = self.single_input(in_specs, float32=False)
        if spec.dtype not in FLOAT_TYPES:
            self.fail("input dtype %s: only float32, float16 and bfloat16 convert"
                      % dtype_name(spec.dtype))
        src, dst = (spec.shape, spec.dtype), (spec.shape, self.dtype)
        self._fwd = PointwiseBroadcast(self.ctx, [src], [dst], "y0 = x0;", name="cast")
        self._bwd = None  # built on first use: a net that only predicts needs none
        return Setup([TensorSpec(spec.shape, self.dtype)], flags=self.default_flags())

    def forward(self, x, y, params, ws, saved):
        return self._fwd.launches([x[0]], [y[0]])

    def backward(self, x, dx, y, dy, params, dparams, ws, saved, accumulate):
        if dx[0] is None:
            return []
        if self._bwd is None:
            shape = self.in_specs[0].shape
            self._bwd = PointwiseBroadcast(self.ctx, [(shape, self.dtype)],
                                           [(shape, self.in_specs[0].dtype)], "y0 = x0;",
                                           name="cast")
        return self._bwd.launches([dy[0]], [dx[0]], beta=float(accumulate[0]))
