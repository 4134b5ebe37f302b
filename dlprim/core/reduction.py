"""Reductions over axes (sum, mean, sum of squares, sum of |x|, max, min) and ArgMax.

Both are instances of the pointwise-broadcast-reduce generator: the output is the input
shape with the reduced axes set to 1, which is exactly what ``PointwiseBroadcastReduce``
reduces over. ArgMax carries (value, index) pairs; the index comes from a small arange
tensor that broadcasts along the other axes, and ties go to the smallest index.

A NaN propagates as in PyTorch: max and min of anything with a NaN are NaN, and ArgMax
answers the first NaN. OpenCL's fmax/fmin drop a NaN and max/min are undefined for one,
so the combining steps compare and select, with ``v != v`` (true for a NaN only, and valid
for the integer types too) deciding for the NaN.
"""
import numpy as np

from ..dtypes import as_dtype, cl_limits, cl_type, dtype_name, is_float
from ..tensor import Tensor
from .pointwise import PointwiseBroadcastReduce, memo

__all__ = ["Reduce", "ArgMax", "reduce", "argmax", "OPS", "op_code"]



def op_code(op, ctype):
    """(code, reduce_init, reduce) of a named reduction for OpenCL type ``ctype``."""
    if op in ("sum", "mean"):
        return "y0 = x0;", "reduce_y0 = 0;", "reduce_y0 += y0;"
    if op == "sumsq":
        return "y0 = x0 * x0;", "reduce_y0 = 0;", "reduce_y0 += y0;"
    if op == "abssum":
        return "y0 = x0 < 0 ? -x0 : x0;", "reduce_y0 = 0;", "reduce_y0 += y0;"
    if op == "max":
        return "y0 = x0;", "reduce_y0 = %s;" % cl_limits(ctype)[0], \
            "if (y0 > reduce_y0 || y0 != y0) reduce_y0 = y0;"
    if op == "min":
        return "y0 = x0;", "reduce_y0 = %s;" % cl_limits(ctype)[1], \
            "if (y0 < reduce_y0 || y0 != y0) reduce_y0 = y0;"
    raise ValueError("Reduce: unknown op %r; known: %s" % (op, ", ".join(OPS)))


OPS = ("sum", "mean", "sumsq", "abssum", "max", "min")


def _axes(shape, axes, what):
    ndim = len(shape)
    if axes is None:
        return tuple(range(ndim))
    if isinstance(axes, (int, np.integer)):
        axes = (axes,)
    out = []
    for a in axes:
        a = int(a)
        if not -ndim <= a < ndim:
            raise ValueError("%s: axis %d is out of range for shape %s" % (what, a, tuple(shape)))
        out.append(a % ndim)
    if len(set(out)) != len(out):
        raise ValueError("%s: repeated axis in %s" % (what, tuple(axes)))
    return tuple(sorted(out))


def _check(t, shape, dtype, what):
    if not isinstance(t, Tensor):
        raise ValueError("%s is not a Tensor" % what)
    if t.shape != tuple(shape) or t.dtype != dtype:
        raise ValueError("%s is %s %s, expected %s %s"
                         % (what, t.shape, t.dtype.name, tuple(shape), dtype.name))


class Reduce:
    """``y = alpha * op(x over axes) + beta * y``; ``keepdims`` keeps the reduced axes as 1."""

    def __init__(self, ctx, in_shape, axes, op="sum", keepdims=False, dtype="float"):
        self.ctx, self.op = ctx, op
        self.in_shape = tuple(int(n) for n in in_shape)
        self.dtype = as_dtype(dtype)
        self.axes = _axes(self.in_shape, axes, "Reduce")
        self.keep_shape = tuple(1 if k in self.axes else n for k, n in enumerate(self.in_shape))
        self.out_shape = self.keep_shape if keepdims else tuple(
            n for k, n in enumerate(self.in_shape) if k not in self.axes)
        if op == "mean" and not is_float(self.dtype):
            raise ValueError("Reduce: 'mean' needs a float dtype, got %s" % dtype_name(self.dtype))
        if op in ("max", "min") and any(self.in_shape[a] == 0 for a in self.axes):
            raise ValueError("Reduce: %s over an empty axis of shape %s" % (op, self.in_shape))
        self.count = int(np.prod([self.in_shape[a] for a in self.axes], dtype=np.int64))
        code, init, red = op_code(op, cl_type(self.dtype))
        self._op = PointwiseBroadcastReduce(ctx, [(self.in_shape, self.dtype)],
                                            [(self.keep_shape, self.dtype)], code, init, red,
                                            name="reduce_" + op)

    def launches(self, x, y, alpha=1.0, beta=0.0):
        """y = alpha * reduce(x) + beta * y."""
        _check(x, self.in_shape, self.dtype, "Reduce: x")
        _check(y, self.out_shape, self.dtype, "Reduce: y")
        if self.op == "mean":
            alpha = alpha / max(self.count, 1)
        return self._op.launches([x], [y.view(self.keep_shape)], alpha=alpha, beta=beta)

    def __call__(self, x, y, alpha=1.0, beta=0.0, queue=None):
        for launch in self.launches(x, y, alpha, beta):
            launch(queue if queue is not None else self.ctx.queue)


class ArgMax:
    """Index of the largest value along ``axis`` (the first one on ties, the first NaN if
    any), as int32/int64."""

    def __init__(self, ctx, in_shape, axis, keepdims=False, dtype="float", index_dtype="int32"):
        self.ctx = ctx
        self.in_shape = tuple(int(n) for n in in_shape)
        self.dtype, self.index_dtype = as_dtype(dtype), as_dtype(index_dtype)
        if self.index_dtype not in (np.dtype(np.int32), np.dtype(np.int64)):
            raise ValueError("ArgMax: index_dtype must be int32 or int64, got %s" % self.index_dtype)
        (self.axis,) = _axes(self.in_shape, (axis,), "ArgMax")
        if self.in_shape[self.axis] == 0:
            raise ValueError("ArgMax: axis %d of shape %s is empty" % (self.axis, self.in_shape))
        self.keep_shape = tuple(1 if k == self.axis else n for k, n in enumerate(self.in_shape))
        self.out_shape = self.keep_shape if keepdims else tuple(
            n for k, n in enumerate(self.in_shape) if k != self.axis)
        n = self.in_shape[self.axis]
        index_shape = (n,) + (1,) * (len(self.in_shape) - self.axis - 1)
        self._index = Tensor.from_numpy(ctx, np.arange(n, dtype=self.index_dtype).reshape(index_shape))
        self._values = Tensor(ctx, self.keep_shape, self.dtype)
        lowest = cl_limits(cl_type(self.dtype))[0]
        self._op = PointwiseBroadcastReduce(
            ctx, [(self.in_shape, self.dtype), (index_shape, self.index_dtype)],
            [(self.keep_shape, self.dtype), (self.keep_shape, self.index_dtype)],
            "y0 = x0; y1 = x1;", "reduce_y0 = %s; reduce_y1 = 0;" % lowest,
            # a NaN beats every number, and among NaNs (as among equals) the lower index wins
            "if (y0 != y0 ? (reduce_y0 == reduce_y0 || y1 < reduce_y1) "
            ": (y0 > reduce_y0 || (y0 == reduce_y0 && y1 < reduce_y1))) "
            "{ reduce_y0 = y0; reduce_y1 = y1; }", name="argmax")

    def launches(self, x, y):
        """y = the index of the first maximum of x along the axis."""
        _check(x, self.in_shape, self.dtype, "ArgMax: x")
        _check(y, self.out_shape, self.index_dtype, "ArgMax: y")
        return self._op.launches([x, self._index], [self._values, y.view(self.keep_shape)])

    def __call__(self, x, y, queue=None):
        for launch in self.launches(x, y):
            launch(queue if queue is not None else self.ctx.queue)


def reduce(ctx, x, axes=None, op="sum", keepdims=False, queue=None):
    """A new tensor: ``op`` of ``x`` over ``axes`` (all when None)."""
    axes = _axes(x.shape, axes, "reduce")
    r = memo(ctx, ("reduce", x.shape, x.dtype.name, axes, op, keepdims),
              lambda: Reduce(ctx, x.shape, axes, op, keepdims, x.dtype))
    y = Tensor(ctx, r.out_shape, x.dtype)
    r(x, y, queue=queue)
    return y


def argmax(ctx, x, axis, keepdims=False, index_dtype="int32", queue=None):
    """A new int tensor: the index of the largest value of ``x`` along ``axis``."""
    a = memo(ctx, ("argmax", x.shape, x.dtype.name, int(axis), keepdims, str(index_dtype)),
              lambda: ArgMax(ctx, x.shape, axis, keepdims, x.dtype, index_dtype))
    y = Tensor(ctx, a.out_shape, a.index_dtype)
    a(x, y, queue=queue)
    return y
