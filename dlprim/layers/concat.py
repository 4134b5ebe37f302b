"""Concat and Slice along one axis, as strided copies.

    Concat  y = concatenate(x0, x1, ..., axis=dim); dx_i = the matching part of dy
    Slice   y = x[..., begin:end, ...] on axis ``dim``; dx = dy inside that range, 0 outside

Axes and Slice bounds may be negative (counted from the end, as Python); Slice's ``end``
defaults to the end of the axis. A Slice must be non-empty and inside the axis.
"""
from ..core.copy import Fill, StridedCopy, contiguous_strides
from ..utils import is_int as _is_int
from .base import Layer, Setup, TensorSpec, register


def _at(t, element):
    """A view of ``t`` starting ``element`` elements further in (for strided copies)."""
    return t.view((max(t.size - element, 0),), offset=element)


class _AxisLayer(Layer):
    BACKWARD_READS_INPUTS = False

    def check_dim(self):
        if not _is_int(self.options["dim"]):
            self.fail("option 'dim' must be an integer, got %r" % (self.options["dim"],))

    def axis(self, shape):
        d = self.options["dim"]
        if not -len(shape) <= d < len(shape):
            self.fail("option 'dim' %d is out of range for input shape %s" % (d, shape))
        return d % len(shape)


@register("Concat")
class Concat(_AxisLayer):
    """Joins its inputs along axis ``dim`` (all other sizes equal)."""
    OPTIONS = {"dim": 1}

    def __init__(self, ctx, name=None, **options):
        super().__init__(ctx, name, **options)
        self.check_dim()

    def build(self, in_specs):
        if not in_specs:
            self.fail("expects at least 1 input")
        first = in_specs[0]
        axis = self.axis(first.shape)
        for i, s in enumerate(in_specs):
            if s.dtype != first.dtype:
                self.fail("input %d has dtype %s, input 0 has %s" % (i, s.dtype.name, first.dtype.name))
            if len(s.shape) != len(first.shape) or any(
                    n != m for k, (n, m) in enumerate(zip(s.shape, first.shape)) if k != axis):
                self.fail("input %d of shape %s does not match input 0 of shape %s outside "
                          "option 'dim' %d" % (i, s.shape, first.shape, self.options["dim"]))
        shape = list(first.shape)
        shape[axis] = sum(s.shape[axis] for s in in_specs)
        out_strides = contiguous_strides(shape)
        self.starts, self.fwd, self.bwd = [], [], []
        start = 0
        for s in in_specs:
            own = contiguous_strides(s.shape)
            self.starts.append(start * out_strides[axis])
            self.fwd.append(StridedCopy(self.ctx, s.shape, own, out_strides, s.dtype))
            self.bwd.append(StridedCopy(self.ctx, s.shape, out_strides, own, s.dtype))
            start += s.shape[axis]
        return Setup([TensorSpec(shape, first.dtype)])

    def forward(self, x, y, params, ws, saved):
        out = []
        for op, xi, start in zip(self.fwd, x, self.starts):
            out += op.launches(xi, _at(y[0], start))
        return out

    def backward(self, x, dx, y, dy, params, dparams, ws, saved, accumulate):
        out = []
        for op, dxi, start, acc in zip(self.bwd, dx, self.starts, accumulate):
            if dxi is not None:
                out += op.launches(_at(dy[0], start), dxi, beta=float(acc))
        return out


@register("Slice")
class Slice(_AxisLayer):
    """Elements ``[begin, end)`` of axis ``dim`` (negative indices count from the end)."""
    OPTIONS = {"dim": 1, "begin": 0, "end": None}

    def __init__(self, ctx, name=None, **options):
        super().__init__(ctx, name, **options)
        self.check_dim()
        if not _is_int(self.options["begin"]):
            self.fail("option 'begin' must be an integer, got %r" % (self.options["begin"],))
        if self.options["end"] is not None and not _is_int(self.options["end"]):
            self.fail("option 'end' must be an integer or null, got %r" % (self.options["end"],))

    def bounds(self, size):
        """The checked ``(begin, end)`` on an axis of ``size`` elements."""
        begin, end = self.options["begin"], self.options["end"]
        b = begin + size if begin < 0 else begin
        e = size if end is None else (end + size if end < 0 else end)
        if not 0 <= b < e <= size:
            self.fail("options 'begin' %d and 'end' %s select [%d:%d], outside or empty on an "
                      "axis of size %d" % (begin, end, b, e, size))
        return b, e

    def build(self, in_specs):
        spec = self.single_input(in_specs, float32=False)
        axis = self.axis(spec.shape)
        b, e = self.bounds(spec.shape[axis])
        shape = list(spec.shape)
        shape[axis] = e - b
        in_strides = contiguous_strides(spec.shape)
        own = contiguous_strides(shape)
        self.start = b * in_strides[axis]
        self.fwd = StridedCopy(self.ctx, shape, in_strides, own, spec.dtype)
        self.bwd = StridedCopy(self.ctx, shape, own, in_strides, spec.dtype)
        self.zero = Fill(self.ctx, spec.shape, spec.dtype)
        return Setup([TensorSpec(shape, spec.dtype)])

    def forward(self, x, y, params, ws, saved):
        return self.fwd.launches(_at(x[0], self.start), y[0])

    def backward(self, x, dx, y, dy, params, dparams, ws, saved, accumulate):
        if dx[0] is None:
            return []
        # outside the slice the gradient is 0: clear dx first unless accumulating into it
        out = [] if accumulate[0] else self.zero.launches(dx[0], 0.0)
        return out + self.bwd.launches(dy[0], _at(dx[0], self.start), beta=1.0)
