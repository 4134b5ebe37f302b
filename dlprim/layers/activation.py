"""One-input pointwise layers: Activation, Threshold, Hardtanh, Abs.

All of them are ``PointwiseBroadcast`` code over one tensor: forward ``y0 = f(x0)``,
backward ``dx = accumulate*dx + f'(.) dy``. Where the derivative follows from the output
alone (the activations marked ``from_y`` in ``core.activation``, Hardtanh, Threshold)
the layer may run in place and backward reads ``y``; otherwise backward reads ``x``.
"""
import numpy as np

from ..core.activation import ACTIVATIONS, PARAMS, backward_code, forward_code
from ..core.pointwise import PointwiseBroadcast
from .base import Layer, TensorSpec, register


class PointwiseLayer(Layer):
    """A layer computing ``y = f(x)`` elementwise. Subclasses give the code fragments
    (over ``x0`` -> ``y0`` forward; over ``dy``/``src`` -> grad backward) and params."""
    BACKWARD_FROM_Y = True

    def __init__(self, ctx, name=None, **options):
        super().__init__(ctx, name=name, **options)
        self.check_options()
        self._set_io_flags(self.BACKWARD_FROM_Y)

    def _set_io_flags(self, from_y):
        self.BACKWARD_READS_INPUTS = not from_y
        self.BACKWARD_READS_OUTPUTS = from_y
        self.INPLACE = from_y

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

    def setup(self, in_specs):
        spec = self.single_input(in_specs)
        self.in_specs = list(in_specs)
        io = [(spec.shape, spec.dtype)]
        types = ["float"] * len(self.param_values())
        self._fwd = PointwiseBroadcast(self.ctx, io, io, self.forward_statements(), types,
                                       name=self.type_name.lower() + "_forward")
        self._bwd = {}
        return [TensorSpec(spec.shape, spec.dtype)], [], 0

    def forward(self, x, y, params, ws):
        return self._fwd.launches([x[0]], [y[0]], self.param_values())

    def _backward_op(self, accumulate):
        op = self._bwd.get(accumulate)
        if op is None:
            spec = self.in_specs[0]
            io = (spec.shape, spec.dtype)
            grad = self.backward_statements()
            if grad is None:   # zero derivative: dx = accumulate*dx + 0
                code, xs = "y0 = 0.0f;", []
            elif accumulate:
                code, xs = "%s y0 += x2;" % grad, [io, io, io]
            else:
                code, xs = grad, [io, io]
            types = ["float"] * len(self.param_values())
            op = self._bwd[accumulate] = PointwiseBroadcast(
                self.ctx, xs, [io], code, types if xs else [],
                name=self.type_name.lower() + "_backward")
        return op

    def backward(self, x, dx, y, dy, params, dparams, ws, accumulate):
        if dx[0] is None:
            return []
        op = self._backward_op(bool(accumulate[0]))
        if not op.x_specs:
            return [] if accumulate[0] else op.launches([], [dx[0]])
        src = y[0] if self.BACKWARD_READS_OUTPUTS else x[0]
        xs = [dy[0], src] + ([dx[0]] if accumulate[0] else [])
        return op.launches(xs, [dx[0]], self.param_values())


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

    def _set_io_flags(self, from_y):
        super()._set_io_flags(ACTIVATIONS[self.options["activation"]].from_y)

    def param_values(self):
        return [self._number(p) for p in self.act.params]

    def forward_statements(self):
        return forward_code(self.options["activation"], "x0", "y0")

    def backward_statements(self):
        return backward_code(self.options["activation"], "x0", "x1", "y0")


@register("Threshold")
class Threshold(PointwiseLayer):
    """DLPrimitives' Threshold: ``y = x > threshold ? 1 : 0``; its gradient is zero."""
    OPTIONS = {"threshold": 0.0}
    BACKWARD_FROM_Y = True

    def check_options(self):
        self._number("threshold")

    def _set_io_flags(self, from_y):
        self.BACKWARD_READS_INPUTS = self.BACKWARD_READS_OUTPUTS = False
        self.INPLACE = True

    def param_values(self):
        return [self._number("threshold")]

    def forward_statements(self):
        return "y0 = x0 > w0 ? 1.0f : 0.0f;"

    def backward_statements(self):
        return None


@register("Hardtanh")
class Hardtanh(PointwiseLayer):
    """``y = min(max(x, min_val), max_val)``; dx = dy strictly inside (min_val, max_val),
    which the output shows as well as the input, so it runs in place."""
    OPTIONS = {"min_val": -1.0, "max_val": 1.0}

    def check_options(self):
        if self._number("min_val") >= self._number("max_val"):
            self.fail("option 'min_val' (%r) must be below 'max_val' (%r)"
                      % (self.options["min_val"], self.options["max_val"]))

    def param_values(self):
        return [self._number("min_val"), self._number("max_val")]

    def forward_statements(self):
        return "y0 = min(max(x0, w0), w1);"

    def backward_statements(self):
        return "y0 = (x1 > w0 && x1 < w1) ? x0 : 0.0f;"


@register("Abs")
class Abs(PointwiseLayer):
    """``y = |x|``; dx = sign(x) dy with sign(0) = +1 (as DLPrimitives)."""
    OPTIONS = {}
    BACKWARD_FROM_Y = False

    def forward_statements(self):
        return "y0 = fabs(x0);"

    def backward_statements(self):
        return "y0 = x1 >= 0.0f ? x0 : -x0;"
