"""LRN: local response normalisation across channels (AlexNet, GoogLeNet; ONNX's LRN).

    y = x * (k + alpha/size * sum over a window of ``size`` channels of x^2) ^ -beta

The window of channel c is [c - floor((size-1)/2), c + ceil((size-1)/2)], clipped to the
channels. Options as PyTorch's LocalResponseNorm: ``size`` (required), ``alpha`` 1e-4,
``beta`` 0.75, ``k`` 1. Backward reads x (``core/lrn.py`` has the formula).
"""
import numpy as np

from ..core.lrn import LRNOps
from ..utils import is_int
from .base import Layer, Setup, TensorSpec, register


@register("LRN")
class LRN(Layer):
    """Local response normalisation across channels (see the module docstring)."""
    OPTIONS = {"size": None, "alpha": 1e-4, "beta": 0.75, "k": 1.0}
    BACKWARD_READS_INPUTS = True

    def __init__(self, ctx, name=None, **options):
        super().__init__(ctx, name, **options)
        o = self.options
        if o["size"] is None:
            self.fail("option 'size' is required (channels in the window)")
        if not is_int(o["size"]) or o["size"] < 1:
            self.fail("option 'size' must be a positive integer, got %r" % (o["size"],))
        for key in ("alpha", "beta", "k"):
            if isinstance(o[key], bool) or not isinstance(o[key], (int, float, np.number)):
                self.fail("option %r must be a number, got %r" % (key, o[key]))
        if o["k"] <= 0 and o["alpha"] >= 0:
            self.fail("option 'k' must be positive (the base of a power), got %r" % (o["k"],))

    def build(self, in_specs):
        spec = self.single_input(in_specs, "(N, C, ...)", min_ndim=2)
        o = self.options
        self.op = LRNOps(self.ctx, spec.shape[1], int(o["size"]), o["alpha"], o["beta"], o["k"])
        return Setup([TensorSpec(spec.shape, spec.dtype)])

    def forward(self, x, y, params, ws, saved):
        return self.op.launches(x[0], y[0])

    def backward(self, x, dx, y, dy, params, dparams, ws, saved, accumulate):
        if dx[0] is None:
            return []
        return self.op.backward_launches(x[0], dy[0], dx[0], beta=float(accumulate[0]))
