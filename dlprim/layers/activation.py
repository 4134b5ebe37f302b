"""One-input pointwise layers: Activation, Threshold, Hardtanh, Abs.

All of them are ``PointwiseBroadcast`` code over one tensor: forward ``y0 = f(x0)``,
backward ``dx = accumulate*dx + f'(.) dy``. Where the derivative follows from the output
alone (the activations marked ``from_y`` in ``core.activation``, Hardtanh, Threshold)
the layer may run in place and backward reads ``y``; otherwise backward reads ``x``.

A NaN input gives a NaN output, as in PyTorch: the comparisons are ordered so that each
is false for a NaN (OpenCL's max/min are undefined for one, fmax/fmin drop it).
"""
import numpy as np

from ..core.activation import ACTIVATIONS, PARAMS, backward_code, forward_code
from ..core.pointwise import PointwiseBroadcast
from .base import Layer, Setup, TensorSpec, register


class PointwiseLayer(Layer):
    """A layer computing ``y = f(x)`` elementwise. Subclasses give the code fragments
    (over ``x0`` -> ``y0`` forward; over ``dy``/``src`` -> grad backward) and params.

    By default the derivative follows from y: backward reads y, so y may overwrite x."""
    BACKWARD_READS_INPUTS = False
    BACKWARD_READS_OUTPUTS = True
    INPLACE = True
    HALF_STORAGE = "follows"

    def __init__(self, ctx, name=None, **options):
        super().__init__(ctx, name=name, **options)
        self.check_options()

    def io_flags(self):
        """The LayerFlags of this layer's options (the class attributes' unless they vary)."""
        return self.default_flags()

    def check_options(self):
        """Check the layer's options once, at construction (``self.fail`` on a bad one)."""
        pass

    def param_values(self):
        """The scalar parameters ``w0, w1, ...`` of the code, as floats."""
        return []

    def forward_statements(self):
        """OpenCL statements setting ``y0`` from ``x0`` (and the ``w`` scalars)."""
        raise NotImplementedError

    def backward_statements(self):
        """Code setting ``y0`` from ``x0`` (dy) and ``x1`` (x or y); None: zero gradient."""
        raise NotImplementedError

    def _number(self, option):
        value = self.options[option]
        if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
            self.fail("option %r must be a number, got %r" % (option, value))
        return float(value)

    def build(self, in_specs):
        spec = self.single_input(in_specs)
        io = [(spec.shape, spec.dtype)]
        types = ["float"] * len(self.param_values())
        self._fwd = PointwiseBroadcast(self.ctx, io, io, self.forward_statements(), types,
                                       name=self.type_name.lower() + "_forward")
        self._bwd = None
        return Setup([TensorSpec(spec.shape, spec.dtype)], flags=self.io_flags())

    def forward(self, x, y, params, ws, saved):
        return self._fwd.launches([x[0]], [y[0]], self.param_values())

    def _backward_op(self):
        # built on first use: a net that only predicts compiles no backward kernel
        if self._bwd is None:
            spec = self.in_specs[0]
            io = (spec.shape, spec.dtype)
            grad = self.backward_statements()
            if grad is None:   # zero derivative
                code, xs, types = "y0 = 0.0f;", [], []
            else:
                code, xs, types = grad, [io, io], ["float"] * len(self.param_values())
            self._bwd = PointwiseBroadcast(self.ctx, xs, [io], code, types,
                                           name=self.type_name.lower() + "_backward")
        return self._bwd

    def backward(self, x, dx, y, dy, params, dparams, ws, saved, accumulate):
        if dx[0] is None:
            return []
        op = self._backward_op()
        if not op.x_specs:   # dx = accumulate*dx + 0: only assigning writes anything
            return [] if accumulate[0] else op.launches([], [dx[0]])
        src = y[0] if self.flags.backward_reads_outputs else x[0]
        return op.launches([dy[0], src], [dx[0]], self.param_values(), beta=float(accumulate[0]))


@register("Activation")
class ActivationLayer(PointwiseLayer):
    """``y = f(x)`` for ``activation`` any name of the activation table
    (``core.activation.ACTIVATIONS``); the other options are the activations' parameters."""
    OPTIONS = dict({"activation": "identity"}, **PARAMS)

    def check_options(self):
        name = self.options["activation"]
        if name not in ACTIVATIONS:
            self.fail("option 'activation': unknown activation %r; known: %s"
                      % (name, ", ".join(sorted(ACTIVATIONS))))
        self.act = ACTIVATIONS[name]
        for p in PARAMS:
            self._number(p)
        if self._number("beta") == 0:
            self.fail("option 'beta' must not be 0")

    def io_flags(self):
        # whether f' follows from y depends on the activation
        from_y = self.act.from_y
        return self.default_flags(backward_reads_inputs=not from_y,
                                  backward_reads_outputs=from_y, inplace=from_y)

    def param_values(self):
        return [self._number(p) for p in self.act.params]

    def forward_statements(self):
        return forward_code(self.options["activation"], "x0", "y0")

    def backward_statements(self):
        return backward_code(self.options["activation"], "x0", "x1", "y0")


@register("Threshold")
class Threshold(PointwiseLayer):
    """DLPrimitives' Threshold: ``y = x > threshold ? 1 : 0``; its gradient is zero.
    A NaN stays NaN: neither side of the step would be its answer."""
    OPTIONS = {"threshold": 0.0}
    BACKWARD_READS_OUTPUTS = False  # a zero gradient reads nothing

    def check_options(self):
        self._number("threshold")

    def param_values(self):
        return [self._number("threshold")]

    def forward_statements(self):
        return "y0 = x0 > w0 ? 1.0f : (x0 <= w0 ? 0.0f : x0);"

    def backward_statements(self):
        return None


@register("Hardtanh")
class Hardtanh(PointwiseLayer):
    """``y = min(max(x, min_val), max_val)``; dx = dy strictly inside (min_val, max_val),
    which the output shows as well as the input, so it runs in place. A NaN passes
    forward, and passes dy backward (PyTorch's hardtanh_backward)."""
    OPTIONS = {"min_val": -1.0, "max_val": 1.0}

    def check_options(self):
        if self._number("min_val") >= self._number("max_val"):
            self.fail("option 'min_val' (%r) must be below 'max_val' (%r)"
                      % (self.options["min_val"], self.options["max_val"]))

    def param_values(self):
        return [self._number("min_val"), self._number("max_val")]

    def forward_statements(self):
        return "y0 = x0 <= w0 ? w0 : (x0 >= w1 ? w1 : x0);"

    def backward_statements(self):
        return "y0 = (x1 <= w0 || x1 >= w1) ? 0.0f : x0;"


@register("Abs")
class Abs(PointwiseLayer):
    """``y = |x|``; dx = sign(x) dy with sign(0) = +1 (as DLPrimitives) and sign(NaN) = 0
    (as PyTorch)."""
    OPTIONS = {}
    # |x| loses the sign the gradient needs: backward reads x, so y must not overwrite it
    BACKWARD_READS_INPUTS = True
    BACKWARD_READS_OUTPUTS = False
    INPLACE = False

    def forward_statements(self):
        return "y0 = fabs(x0);"

    def backward_statements(self):
        return "y0 = x1 >= 0.0f ? x0 : (x1 < 0.0f ? -x0 : 0.0f * x0);"
