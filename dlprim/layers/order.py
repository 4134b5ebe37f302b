"""Scans, sorts and arg-extremes along one axis, for tensors of any numeric dtype (ONNX's
CumSum, TopK, ArgMax, ArgMin), on the ocl device's launchers (core/scan.py,
core/sort.py, the pointwise reduction).

    CumSum    y[i] = sum of x[j] for j <= i (``exclusive``: j < i; ``reverse``: from the end)
    TopK      the ``k`` largest (``largest`` true) or smallest values along ``axis``, sorted,
              and their int64 indices; equal values keep their order (the lower index first)
    ArgMax    int64 index of the largest value along ``axis`` (the first one on ties, the
              last with ``select_last_index``); ``keepdims`` keeps the axis as size 1
    ArgMin    the same for the smallest value

Integer sums are computed in int64 and stored in the input's dtype (wrapping as ONNX's
kernels do); float32 sums in double where the device has it. None of them has a backward
(their results are indices, or, for CumSum and TopK, not yet differentiated here).
"""
import math

import numpy as np

from ..core.copy import Fill, StridedCopy, contiguous_strides
from ..core.pointwise import PointwiseBroadcastReduce
from ..core.scan import scan_launches
from ..core.shape_remap import FLIP
from ..core.sort import sorter_for
from ..dtypes import cl_type
from ..tensor import Tensor, ws_view
from ..utils import is_int, round_up
from .base import Layer, Setup, TensorSpec, register
from .broadcast import remap_launch
from .gather import around

__all__ = ["flip_launch"]

_LOWEST = {"float": "-INFINITY", "half": "-INFINITY", "bfloat16": "-INFINITY",
           "double": "-INFINITY", "char": "CHAR_MIN", "short": "SHRT_MIN", "int": "INT_MIN",
           "long": "LONG_MIN", "uchar": "0"}
_HIGHEST = {"float": "INFINITY", "half": "INFINITY", "bfloat16": "INFINITY",
            "double": "INFINITY", "char": "CHAR_MAX", "short": "SHRT_MAX", "int": "INT_MAX",
            "long": "LONG_MAX", "uchar": "UCHAR_MAX"}
_I64 = np.dtype(np.int64)


def flip_launch(ctx, x, y, outer, n, inner):
    """A prepared launch of y = x reversed along the middle axis of (outer, n, inner)."""
    return remap_launch(ctx, x, y, outer, n, inner, n, 0, FLIP)


class _AxisOp(Layer):
    HALF_STORAGE = "follows"
    HAS_BACKWARD = False
    BACKWARD_READS_INPUTS = False

    def one_input(self, in_specs):
        spec = self.single_input(in_specs, float32=False)
        if not spec.shape:
            self.fail("input must have at least one axis, got a scalar")
        a = self.options["axis"]
        if not is_int(a) or not -len(spec.shape) <= a < len(spec.shape):
            self.fail("option 'axis' %r is out of range for input %s" % (a, spec.shape))
        self.axis = a % len(spec.shape)
        self.dims = around(spec.shape, self.axis)
        return spec

    def flags_check(self, *names):
        for key in names:
            if not isinstance(self.options[key], bool):
                self.fail("option %r must be true or false, got %r" % (key, self.options[key]))


@register("CumSum")
class CumSum(_AxisOp):
    """Cumulative sum along ``axis`` (ONNX CumSum: ``exclusive``, ``reverse``)."""
    OPTIONS = {"axis": 0, "exclusive": False, "reverse": False}

    def build(self, in_specs):
        self.flags_check("exclusive", "reverse")
        spec = self.one_input(in_specs)
        if spec.dtype == np.bool_:
            self.fail("input dtype bool does not sum (cast it to an integer type first)")
        outer, n, inner = self.dims
        size = math.prod(spec.shape)
        self.size = size
        self.step = round_up(size * spec.dtype.itemsize, 256)
        # exclusive: the input shifted one step along the axis, a 0 in front
        shape = (outer, n - 1, inner)
        st = contiguous_strides((outer, n, inner))
        self.shift = StridedCopy(self.ctx, shape, st, st, spec.dtype) if n > 1 else None
        self.zero = Fill(self.ctx, (size,), spec.dtype)
        buffers = int(self.options["exclusive"]) + int(self.options["reverse"])
        return Setup([TensorSpec(spec.shape, spec.dtype)], workspace=self.step * buffers)

    def forward(self, x, y, params, ws, saved):
        outer, n, inner = self.dims
        dtype = x[0].dtype
        bufs = [ws_view(ws, i * self.step, self.size, dtype) for i in
                range(int(self.options["exclusive"]) + int(self.options["reverse"]))]
        out, src = [], x[0].view((self.size,))
        if self.options["reverse"]:
            out.append(flip_launch(self.ctx, src, bufs[0], outer, n, inner))
            src = bufs[0]
        if self.options["exclusive"]:
            dst = bufs[-1]
            out += self.zero.launches(dst, 0)
            if self.shift is not None:
                out += self.shift.launches(src, dst.view((self.size - inner,), inner))
            src = dst
        if not self.options["reverse"]:
            return out + scan_launches(self.ctx, "sum", src, y[0].view((self.size,)), None,
                                       outer, n, inner)
        tmp = bufs[0] if src is not bufs[0] else bufs[-1]
        out += scan_launches(self.ctx, "sum", src, tmp, None, outer, n, inner)
        return out + [flip_launch(self.ctx, tmp, y[0].view((self.size,)), outer, n, inner)]


@register("TopK")
class TopK(_AxisOp):
    """The ``k`` largest (or smallest) values along ``axis`` and their int64 indices."""
    OPTIONS = {"k": None, "axis": -1, "largest": True, "sorted": True}

    def build(self, in_specs):
        self.flags_check("largest", "sorted")
        spec = self.one_input(in_specs)
        outer, n, inner = self.dims
        k = self.options["k"]
        if not is_int(k) or not 0 <= k <= n:
            self.fail("option 'k' %r must be an integer in [0, %d] (the axis' size)" % (k, n))
        self.k = int(k)
        shape = list(spec.shape)
        shape[self.axis] = self.k
        self.sorter = sorter_for(self.ctx, spec.dtype)
        size = math.prod(spec.shape)
        self.size = size
        self.full = self.k == n
        ws = 0
        if not self.full:
            self.vbytes = round_up(size * spec.dtype.itemsize, 256)
            ws = self.vbytes + size * 8
            src = contiguous_strides((outer, n, inner))
            dst = contiguous_strides((outer, self.k, inner))
            self.take_v = StridedCopy(self.ctx, (outer, self.k, inner), src, dst, spec.dtype)
            self.take_i = StridedCopy(self.ctx, (outer, self.k, inner), src, dst, _I64)
        return Setup([TensorSpec(shape, spec.dtype), TensorSpec(shape, _I64)], workspace=ws)

    def forward(self, x, y, params, ws, saved):
        outer, n, inner = self.dims
        src = x[0].view((self.size,))
        if self.full:
            return self.sorter.launches(src, y[0].view((self.size,)), y[1].view((self.size,)),
                                        outer, n, inner, descending=self.options["largest"])
        values = ws_view(ws, 0, self.size, x[0].dtype)
        indices = ws_view(ws, self.vbytes, self.size, _I64)
        out = self.sorter.launches(src, values, indices, outer, n, inner,
                                   descending=self.options["largest"])
        count = outer * self.k * inner
        return out + self.take_v.launches(values, y[0].view((count,))) + \
            self.take_i.launches(indices, y[1].view((count,)))


class _ArgExtreme(_AxisOp):
    """The index of the extreme value along ``axis``: one reduction of (value, index) pairs
    over x and an arange of the axis (a NaN wins, as in PyTorch)."""
    OPTIONS = {"axis": 0, "keepdims": True, "select_last_index": False}
    LARGEST = True

    def build(self, in_specs):
        self.flags_check("keepdims", "select_last_index")
        spec = self.one_input(in_specs)
        outer, n, inner = self.dims
        if n == 0:
            self.fail("axis %d of input %s is empty" % (self.axis, spec.shape))
        ct = cl_type(spec.dtype)
        self.keep = tuple(1 if k == self.axis else s for k, s in enumerate(spec.shape))
        out = self.keep if self.options["keepdims"] else \
            tuple(s for k, s in enumerate(spec.shape) if k != self.axis)
        ishape = (n,) + (1,) * (len(spec.shape) - self.axis - 1)
        self.index = Tensor.from_numpy(self.ctx, np.arange(n, dtype=np.int64).reshape(ishape))
        cmp, init = (">", _LOWEST[ct]) if self.LARGEST else ("<", _HIGHEST[ct])
        tie = ">" if self.options["select_last_index"] else "<"
        self.op = PointwiseBroadcastReduce(
            self.ctx, [(spec.shape, spec.dtype), (ishape, _I64)],
            [(self.keep, spec.dtype), (self.keep, _I64)], "y0 = x0; y1 = x1;",
            "reduce_y0 = %s; reduce_y1 = -1;" % init,
            # an index -1 is an empty partial result (a work-item with no elements)
            "if (y1 >= 0 && (reduce_y1 < 0 || (y0 != y0 ? (reduce_y0 == reduce_y0 || "
            "y1 %s reduce_y1) : (y0 %s reduce_y0 || (y0 == reduce_y0 && y1 %s reduce_y1))))) "
            "{ reduce_y0 = y0; reduce_y1 = y1; }" % (tie, cmp, tie),
            name="arg_extreme")
        self.vbytes = round_up(math.prod(self.keep) * spec.dtype.itemsize, 256)
        return Setup([TensorSpec(out, _I64)], workspace=self.vbytes)

    def forward(self, x, y, params, ws, saved):
        values = ws_view(ws, 0, math.prod(self.keep), x[0].dtype).view(self.keep)
        return self.op.launches([x[0], self.index], [values, y[0].view(self.keep)])


@register("ArgMax")
class ArgMax(_ArgExtreme):
    """int64 index of the largest value along ``axis``."""
    LARGEST = True


@register("ArgMin")
class ArgMin(_ArgExtreme):
    """int64 index of the smallest value along ``axis``."""
    LARGEST = False
