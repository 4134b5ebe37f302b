"""Concat and Slice along one axis, as strided copies.

    Concat  y = concatenate(x0, x1, ..., axis=dim); dx_i = the matching part of dy
    Slice   y = x[..., begin:end, ...] on axis ``dim``; dx = dy inside that range, 0 outside

Axes may be negative (counted from the end, as Python). Slice's bounds have two
spellings. ``begin``/``end`` mean what they mean in DLPrimitives (ops/concat.cpp), so its
JSON nets select the same elements here: ``begin >= 0``, and ``end`` is an index past the
last element or -1 (the default) for the end of the axis; no other value may be negative.
``start``/``stop`` are Python's ``x[start:stop]``: either may be negative (counted from the
end) and a missing or null ``stop`` is the end. A layer uses one spelling or the other.
Either way the range must be non-empty and inside the axis (nothing is clamped).
"""
from ..core.copy import Fill, StridedCopy, contiguous_strides
from ..utils import is_int as _is_int
from .base import Layer, Setup, TensorSpec, register


def _at(t, element):
    """A view of ``t`` starting ``element`` elements further in (for strided copies)."""
    return t.view((max(t.size - element, 0),), offset=element)


class _AxisLayer(Layer):
    HALF_STORAGE = "follows"
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
    """Elements ``[begin, end)`` of axis ``dim``, as DLPrimitives defines them (``end`` -1:
    to the end of the axis), or Python's ``[start:stop]`` (negative counts from the end)."""
    OPTIONS = {"dim": 1, "begin": 0, "end": -1, "start": None, "stop": None}
    DLPRIMITIVES_KEYS, PYTHON_KEYS = ("begin", "end"), ("start", "stop")

    def __init__(self, ctx, name=None, **options):
        super().__init__(ctx, name, **options)
        self.check_dim()
        self.python = any(k in options for k in self.PYTHON_KEYS)
        mixed = [k for k in self.DLPRIMITIVES_KEYS if k in options]
        if self.python and mixed:
            self.fail("option %s (DLPrimitives' bounds) cannot go with 'start'/'stop' "
                      "(Python's bounds); give one pair" % " and ".join(map(repr, mixed)))
        o = self.options
        for key, nullable in (("begin", False), ("end", True), ("start", True), ("stop", True)):
            if not (_is_int(o[key]) or (nullable and o[key] is None)):
                self.fail("option %r must be an integer%s, got %r"
                          % (key, " or null" if nullable else "", o[key]))
        if self.python:
            return
        # DLPrimitives refuses these; the same numbers mean something else to Python
        if o["begin"] < 0:
            self.fail("option 'begin' %d is negative; 'begin' counts from the start of the "
                      "axis (DLPrimitives' meaning): for an index counted from the end use "
                      "'start' and 'stop' (Python's meaning)" % o["begin"])
        if o["end"] is not None and o["end"] < -1:
            self.fail("option 'end' %d: the only negative 'end' is -1, the end of the axis "
                      "(DLPrimitives' meaning); for an index counted from the end use 'start' "
                      "and 'stop' (Python's meaning)" % o["end"])

    def config(self):
        """The options of the spelling this layer was given (``dim`` and two bounds)."""
        keys = ("dim",) + (self.PYTHON_KEYS if self.python else self.DLPRIMITIVES_KEYS)
        return {k: v for k, v in super().config().items() if k in keys}

    def bounds(self, size):
        """The checked ``(begin, end)`` on an axis of ``size`` elements, 0 <= begin < end."""
        o = self.options
        if self.python:
            first, last = o["start"] or 0, o["stop"]
            b = first + size if first < 0 else first
            e = size if last is None else (last + size if last < 0 else last)
            given = "options 'start' %d and 'stop' %s" % (first, last)
        else:
            b = o["begin"]
            e = size if o["end"] in (-1, None) else o["end"]
            given = "options 'begin' %d and 'end' %s" % (b, o["end"])
        if not 0 <= b < e <= size:
            self.fail("%s select [%d:%d], outside or empty on an axis of size %d"
                      % (given, b, e, size))
        return b, e

    def build(self, in_specs):
        spec = self.single_input(in_specs, float32=False)
        axis = self.axis(spec.shape)
        b, e = self.bounds(spec.shape[axis])
        shape = list(spec.shape)
        shape[axis] = e - b
        in_strides = contiguous_strides(spec.shape)
        own = contiguous_strides(shape)
        self.offset = b * in_strides[axis]  # of the slice's first element in x
        self.fwd = StridedCopy(self.ctx, shape, in_strides, own, spec.dtype)
        self.bwd = StridedCopy(self.ctx, shape, own, in_strides, spec.dtype)
        self.zero = Fill(self.ctx, spec.shape, spec.dtype)
        return Setup([TensorSpec(shape, spec.dtype)])

    def forward(self, x, y, params, ws, saved):
        return self.fwd.launches(_at(x[0], self.offset), y[0])

    def backward(self, x, dx, y, dy, params, dparams, ws, saved, accumulate):
        if dx[0] is None:
            return []
        # outside the slice the gradient is 0: clear dx first unless accumulating into it
        out = [] if accumulate[0] else self.zero.launches(dx[0], 0.0)
        return out + self.bwd.launches(dy[0], _at(dx[0], self.offset), beta=1.0)
