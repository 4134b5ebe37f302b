"""Layers that lay out copies of their input, for tensors of any dtype (ONNX's Expand,
Tile, Pad, Trilu, OneHot, Range), on the pointwise-broadcast generator and the copies.

    Expand   y = x broadcast with ``shape`` (numpy's rule: either side may stretch)
    Tile     y = x repeated ``repeats[d]`` times along each axis d
    Pad      ``pads`` = [begin_0, ..., begin_r, end_0, ..., end_r] (negative crops); ``mode``
             constant (``value``), reflect, edge or wrap (numpy's pad modes)
    Trilu    x with the elements below (``upper``) or above diagonal ``k`` of the last two
             axes set to 0
    OneHot   y[.., j, ..] = on if indices[..] == j else off, j in [0, depth) at ``axis``
             (a negative index counts from depth; ``values`` [off, on]; ``dtype`` of y)
    Range    y[i] = start + i * delta for i < ``size``: start a run-time scalar input

Gradients, for float inputs: Expand and Tile sum dy over the copies (a broadcasting
reduction), constant Pad and Trilu pass the kept elements of dy back; the other modes
and OneHot/Range have none.
"""
import math

import numpy as np

from ..core.copy import Fill, StridedCopy, contiguous_strides
from ..core.pointwise import PointwiseBroadcast, PointwiseBroadcastReduce, broadcast_shape
from ..core.shape_remap import CIRCULAR, REFLECT, REPLICATE
from ..dtypes import as_dtype, compute_type, dtype_name, is_float
from ..kernels import program
from ..tensor import Tensor, ws_view
from ..utils import is_int, round_up
from .base import Layer, Setup, TensorSpec, register
from .gather import around

_BITS = {1: "uchar", 2: "ushort", 4: "uint", 8: "ulong"}
PAD_MODES = {"constant": None, "reflect": REFLECT, "edge": REPLICATE, "wrap": CIRCULAR}


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


def remap_launch(ctx, x, y, outer, n_in, inner, n_out, lo, mode):
    """A prepared launch of the shape_remap kernel: y (outer, n_out, inner) from x
    (outer, n_in, inner) by ``mode``'s map along the middle axis (its own launcher,
    core.shape_remap.remap_axis, enqueues at once; a plan keeps launches)."""
    prog = program.get(ctx, "shape_remap", BITS=_BITS[x.dtype.itemsize], STORE=None)
    total = outer * n_out * inner
    wg = min(256, ctx.facts.max_work_group)
    u = np.uint64
    return program.Launch(prog, "remap_axis", (round_up(total, wg),), (wg,),
                          [u(total), u(n_out), u(inner), u(n_in), np.int64(lo), np.int32(mode),
                           x, y])


@register("Pad")
class Pad(Layer):
    """x padded (or cropped, by negative pads) along every axis, as ONNX Pad."""
    OPTIONS = {"pads": None, "mode": "constant", "value": 0.0}
    HALF_STORAGE = "follows"
    BACKWARD_READS_INPUTS = False

    def build(self, in_specs):
        spec = self.single_input(in_specs, float32=False)
        r = len(spec.shape)
        pads = _int_list(self, "pads")
        mode = self.options["mode"]
        if mode not in PAD_MODES:
            self.fail("option 'mode' %r is not one of %s" % (mode, ", ".join(PAD_MODES)))
        if len(pads) != 2 * r:
            self.fail("option 'pads' %s needs 2 x %d entries for input %s" % (pads, r, spec.shape))
        lo, hi = pads[:r], pads[r:]
        out = tuple(n + a + b for n, a, b in zip(spec.shape, lo, hi))
        if any(n < 0 for n in out):
            self.fail("pads %s crop more than input %s holds" % (pads, spec.shape))
        if mode != "constant" and any(n == 0 and (a or b) for n, a, b in zip(spec.shape, lo, hi)):
            self.fail("mode %r cannot pad an empty axis of input %s" % (mode, spec.shape))
        if mode == "reflect" and any((a > n - 1 or b > n - 1) for n, a, b in zip(spec.shape, lo, hi)):
            self.fail("mode 'reflect': pads %s must be below the axes' sizes %s"
                      % (pads, spec.shape))
        self.lo, self.hi, self.out = lo, hi, out
        self.constant = mode == "constant"
        grads = is_float(spec.dtype) and self.constant
        flags = self.default_flags(has_backward=grads)
        if self.constant:
            keep, xs, ys, _, _ = self._block()
            self.fill = Fill(self.ctx, out, spec.dtype)
            self.copy_in = StridedCopy(self.ctx, keep, xs, ys, spec.dtype)
            self.copy_back = StridedCopy(self.ctx, keep, ys, xs, spec.dtype)
            self.zero = Fill(self.ctx, spec.shape, spec.dtype)
            return Setup([TensorSpec(out, spec.dtype)], flags=flags)
        # one axis at a time, through two scratch tensors as large as the largest step
        self.steps, shape = [], list(spec.shape)
        for axis in range(r):
            if lo[axis] or hi[axis]:
                outer, n, inner = around(shape, axis)
                shape[axis] = out[axis]
                self.steps.append((outer, n, inner, out[axis], lo[axis]))
        biggest = max([math.prod(spec.shape)] + [s[0] * s[3] * s[2] for s in self.steps])
        self.step_bytes = round_up(biggest * spec.dtype.itemsize, 256)
        self.copy = StridedCopy(self.ctx, (math.prod(spec.shape),), (1,), (1,), spec.dtype)
        return Setup([TensorSpec(out, spec.dtype)], workspace=2 * self.step_bytes, flags=flags)

    def _block(self):
        """(shape, x's strides, y's strides, element offset in x, element offset in y) of
        the block of x that y keeps."""
        shape = self.in_specs[0].shape
        keep = [n - max(-a, 0) - max(-b, 0) for n, a, b in zip(shape, self.lo, self.hi)]
        xs, ys = contiguous_strides(shape), contiguous_strides(self.out)
        x0 = sum(max(-a, 0) * s for a, s in zip(self.lo, xs))
        y0 = sum(max(a, 0) * s for a, s in zip(self.lo, ys))
        return keep, xs, ys, x0, y0

    def forward(self, x, y, params, ws, saved):
        dtype = x[0].dtype
        if self.constant:
            _, _, _, x0, y0 = self._block()
            return self.fill.launches(y[0], self.options["value"]) + \
                self.copy_in.launches(_at(x[0], x0), _at(y[0], y0))
        if not self.steps:
            return self.copy.launches(x[0].view((x[0].size,)), y[0].view((y[0].size,)))
        bufs = [ws_view(ws, i * self.step_bytes, self.step_bytes // dtype.itemsize, dtype)
                for i in range(2)]
        out, src = [], x[0]
        for i, (outer, n, inner, n_out, lo) in enumerate(self.steps):
            dst = y[0] if i == len(self.steps) - 1 else bufs[i % 2]
            out.append(remap_launch(self.ctx, src, dst, outer, n, inner, n_out, lo,
                              PAD_MODES[self.options["mode"]]))
            src = dst
        return out

    def backward(self, x, dx, y, dy, params, dparams, ws, saved, accumulate):
        if dx[0] is None:
            return []
        keep, _, _, x0, y0 = self._block()
        cropped = keep != list(self.in_specs[0].shape)
        out = self.zero.launches(dx[0], 0) if cropped and not accumulate[0] else []
        beta = 1.0 if cropped else float(accumulate[0])
        return out + self.copy_back.launches(_at(dy[0], y0), _at(dx[0], x0), beta=beta)


def _at(t, element):
    """``t`` seen from ``element`` elements further in (for strided copies)."""
    return t.view((max(t.size - element, 0),), offset=element)


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
