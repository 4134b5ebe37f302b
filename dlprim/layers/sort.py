"""Order statistics along one axis for tensors of any numeric dtype (ONNX TopK, ArgMax,
ArgMin), on the sort launcher (core/sort.py) and the pointwise reduction.

    TopK      the ``k`` largest (``largest`` true) or smallest values along ``axis``, sorted,
              and their int64 indices; equal values keep their order (the lower index first)
    ArgMax    int64 index of the largest value along ``axis`` (the first one on ties, the
              last with ``select_last_index``); ``keepdims`` keeps the axis as size 1
    ArgMin    the same for the smallest value

No backward (the results are indices, or, for TopK's values, not differentiated here).
"""
import math

import numpy as np

from ..core.copy import StridedCopy, contiguous_strides
from ..core.pointwise import PointwiseBroadcastReduce
from ..core.sort import sorter_for
from ..dtypes import cl_limits, cl_type
from ..tensor import Tensor, ws_view
from ..utils import is_int, round_up
from .base import Setup, TensorSpec, register
from .scan import AxisLayer

_I64 = np.dtype(np.int64)


@register("TopK")
class TopK(AxisLayer):
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


class _ArgExtreme(AxisLayer):
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
        cmp, init = (">", cl_limits(ct)[0]) if self.LARGEST else ("<", cl_limits(ct)[1])
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
