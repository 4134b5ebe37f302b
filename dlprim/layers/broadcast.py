"""Layers that lay out copies of their input, for tensors of any dtype (ONNX's Expand,
Tile, Trilu, OneHot, Range), on the pointwise-broadcast generator and the copies.

    Expand   y = x broadcast with ``shape`` (numpy's rule: either side may stretch)
    Tile     y = x repeated ``repeats[d]`` times along each axis d
    Trilu    x with the elements below (``upper``) or above diagonal ``k`` of the last two
             axes set to 0
    OneHot   y[.., j, ..] = on if indices[..] == j else off, j in [0, depth) at ``axis``
             (a negative index counts from depth; ``values`` [off, on]; ``dtype`` of y)
    Range    y[i] = start + i * delta for i < ``size``: start a run-time scalar input

Gradients, for float inputs: Expand and Tile sum dy over the copies (a broadcasting
reduction), Trilu masks dy alike; OneHot and Range have none.
"""
import math

import numpy as np

from ..core.pointwise import PointwiseBroadcast, PointwiseBroadcastReduce, broadcast_shape
from ..dtypes import as_dtype, compute_type, dtype_name, is_float
from ..tensor import Tensor
from ..utils import is_int
from .base import Layer, Setup, TensorSpec, register



def _int_list(layer, key, low=None):
    v = layer.options[key]
    if not isinstance(v, (list, tuple)) or not all(map(is_int, v)) or \
            (low is not None and any(n < low for n in v)):
        layer.fail("option %r must be a list of integers%s, got %r"
                   % (key, "" if low is None else " >= %d" % low, v))
    return [int(n) for n in v]


def literal(value, dtype):
    """``value`` as an OpenCL C constant of ``dtype``'s compute type."""
    ct = compute_type(dtype)
    if not is_float(dtype):
        return "((%s)%dL)" % (ct, int(value))
    v = float(value)
    if v != v:
        return "((%s)NAN)" % ct
    if v in (math.inf, -math.inf):
        return "((%s)%sINFINITY)" % (ct, "-" if v < 0 else "")
    return "((%s)%r)" % (ct, v)


class _Copies(Layer):
    """x laid out again (Expand, Tile): forward is a broadcast ``y = x`` over a view of y in
    which x's axes stretch; backward sums dy over the stretched axes into dx."""
    HALF_STORAGE = "follows"
    BACKWARD_READS_INPUTS = False

    def views(self, shape):
        """(x's view shape, y's view shape, y's shape) for an input of ``shape``."""
        raise NotImplementedError

    def build(self, in_specs):
        spec = self.single_input(in_specs, float32=False)
        self.xv, self.yv, out = self.views(spec.shape)
        self.fwd = PointwiseBroadcast(self.ctx, [(self.xv, spec.dtype)], [(self.yv, spec.dtype)],
                                      "y0 = x0;", name="copies")
        self.bwd = None
        return Setup([TensorSpec(out, spec.dtype)],
                     flags=self.default_flags(has_backward=is_float(spec.dtype)))

    def forward(self, x, y, params, ws, saved):
        return self.fwd.launches([x[0].view(self.xv)], [y[0].view(self.yv)])

    def backward(self, x, dx, y, dy, params, dparams, ws, saved, accumulate):
        if dx[0] is None:
            return []
        dtype = self.in_specs[0].dtype
        if self.bwd is None:
            self.bwd = PointwiseBroadcastReduce(self.ctx, [(self.yv, dtype)], [(self.xv, dtype)],
                                                "y0 = x0;", name="copies_sum")
        return self.bwd.launches([dy[0].view(self.yv)], [dx[0].view(self.xv)],
                                 beta=float(accumulate[0]))


@register("Expand")
class Expand(_Copies):
    """x broadcast with ``shape`` (numpy's rule, as ONNX Expand)."""
    OPTIONS = {"shape": None}

    def views(self, shape):
        want = _int_list(self, "shape", 0)
        try:
            out = broadcast_shape([shape, want], "Expand")
        except ValueError:
            self.fail("input %s does not broadcast with option 'shape' %s" % (shape, want))
        xv = (1,) * (len(out) - len(shape)) + tuple(shape)
        return xv, out, out


@register("Tile")
class Tile(_Copies):
    """x repeated ``repeats[d]`` times along axis d (ONNX Tile, numpy.tile)."""
    OPTIONS = {"repeats": None}

    def views(self, shape):
        reps = _int_list(self, "repeats", 0)
        if len(reps) != len(shape):
            self.fail("option 'repeats' %s needs one count per axis of input %s" % (reps, shape))
        xv, yv = [], []
        for r, n in zip(reps, shape):
            xv += [1, n]
            yv += [r, n]
        return tuple(xv), tuple(yv), tuple(r * n for r, n in zip(reps, shape))


@register("Trilu")
class Trilu(Layer):
    """The upper (``upper``) or lower triangle of the last two axes from diagonal ``k``."""
    OPTIONS = {"upper": True, "k": 0}
    HALF_STORAGE = "follows"
    BACKWARD_READS_INPUTS = False

    def build(self, in_specs):
        spec = self.single_input(in_specs, min_ndim=2, float32=False)
        if not isinstance(self.options["upper"], bool) or not is_int(self.options["k"]):
            self.fail("options 'upper' (true/false) and 'k' (an integer) are %r, %r"
                      % (self.options["upper"], self.options["k"]))
        n, m = spec.shape[-2:]
        # the diagonal of each element, j - i, compared with k in the kernel
        diag = np.arange(m, dtype=np.int64)[None, :] - np.arange(n, dtype=np.int64)[:, None]
        self.diag = Tensor.from_numpy(self.ctx, diag)
        keep = "x1 %s %dL" % (">=" if self.options["upper"] else "<=", int(self.options["k"]))
        zero = literal(0, spec.dtype)
        io = [(spec.shape, spec.dtype), ((n, m), np.int64)]
        self.code = "y0 = (%s) ? x0 : %s;" % (keep, zero)
        self.op = PointwiseBroadcast(self.ctx, io, [(spec.shape, spec.dtype)], self.code,
                                     name="trilu")
        return Setup([TensorSpec(spec.shape, spec.dtype)],
                     flags=self.default_flags(has_backward=is_float(spec.dtype)))

    def forward(self, x, y, params, ws, saved):
        return self.op.launches([x[0], self.diag], [y[0]])

    def backward(self, x, dx, y, dy, params, dparams, ws, saved, accumulate):
        if dx[0] is None:
            return []
        return self.op.launches([dy[0], self.diag], [dx[0]], beta=float(accumulate[0]))


@register("OneHot")
class OneHot(Layer):
    """One-hot vectors of ``depth`` at ``axis`` from integer (or float) indices."""
    OPTIONS = {"depth": None, "axis": -1, "values": [0, 1], "dtype": "float"}
    HAS_BACKWARD = False
    BACKWARD_READS_INPUTS = False

    def build(self, in_specs):
        spec = self.single_input(in_specs, float32=False)
        depth, axis = self.options["depth"], self.options["axis"]
        if not is_int(depth) or depth < 1:
            self.fail("option 'depth' must be a positive integer, got %r" % (depth,))
        r = len(spec.shape) + 1
        if not is_int(axis) or not -r <= axis < r:
            self.fail("option 'axis' %r is out of range for an output of rank %d" % (axis, r))
        values = self.options["values"]
        if not isinstance(values, (list, tuple)) or len(values) != 2:
            self.fail("option 'values' must be [off, on], got %r" % (values,))
        try:
            dtype = as_dtype(self.options["dtype"])
        except TypeError as err:
            self.fail("option 'dtype': %s" % err)
        axis %= r
        out = spec.shape[:axis] + (depth,) + spec.shape[axis:]
        self.xv = spec.shape[:axis] + (1,) + spec.shape[axis:]
        jv = (depth,) + (1,) * (r - axis - 1)
        self.j = Tensor.from_numpy(self.ctx, np.arange(depth, dtype=np.int64).reshape(jv))
        # ONNX: a float index is cast to an integer (toward zero), a negative one counts
        # from depth; one outside [-depth, depth) matches nothing
        code = ("{ long i = (long)x0; if (i < 0) i += %dL; y0 = (i == x1) ? %s : %s; }"
                % (depth, literal(values[1], dtype), literal(values[0], dtype)))
        self.op = PointwiseBroadcast(self.ctx, [(self.xv, spec.dtype), (jv, np.int64)],
                                     [(out, dtype)], code, name="one_hot")
        return Setup([TensorSpec(out, dtype)])

    def forward(self, x, y, params, ws, saved):
        return self.op.launches([x[0].view(self.xv), self.j], [y[0]])


@register("Range")
class Range(Layer):
    """y[i] = start + i * ``delta``, ``size`` elements, start the one (scalar) input."""
    OPTIONS = {"size": None, "delta": 1}
    HAS_BACKWARD = False
    BACKWARD_READS_INPUTS = False

    def build(self, in_specs):
        spec = self.single_input(in_specs, float32=False)
        size, delta = self.options["size"], self.options["delta"]
        if math.prod(spec.shape) != 1:
            self.fail("start must be one value, got shape %s" % (spec.shape,))
        if not is_int(size) or size < 0:
            self.fail("option 'size' must be a non-negative integer, got %r" % (size,))
        if not isinstance(delta, (int, float)) or isinstance(delta, bool) or \
                (not is_float(spec.dtype) and not is_int(delta)):
            self.fail("option 'delta' %r must be a number (an integer for %s start)"
                      % (delta, dtype_name(spec.dtype)))
        self.size = int(size)
        self.i = Tensor.from_numpy(self.ctx, np.arange(max(self.size, 1), dtype=np.int64))
        ct = compute_type(spec.dtype)
        self.op = PointwiseBroadcast(
            self.ctx, [((1,), spec.dtype), ((size,), np.int64)], [((size,), spec.dtype)],
            "y0 = x0 + (%s)x1 * %s;" % (ct, literal(delta, spec.dtype)), name="range")
        return Setup([TensorSpec((size,), spec.dtype)])

    def forward(self, x, y, params, ws, saved):
        return self.op.launches([x[0].view((1,)), self.i.view((self.size,))], [y[0]])
