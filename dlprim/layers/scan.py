"""Cumulative sums and products along one axis for tensors of any numeric dtype (ONNX
CumSum, CumProd), on the scan launcher (core/scan.py).

    CumSum    y[i] = sum of x[j] for j <= i (``exclusive``: j < i; ``reverse``: from the end)
    CumProd   y[i] = product of x[j], the same way (an exclusive product starts from 1)

Integer sums are computed in int64 and stored in the input's dtype (wrapping as ONNX's
kernels do); float32 sums in double where the device has it. ``exclusive`` sums the input
shifted one step (a 0 in front), ``reverse`` the input reversed, reversing the result back
(exact: no subtraction). No backward.
"""
import math

import numpy as np

from ..core.copy import Fill, StridedCopy, contiguous_strides
from ..core.scan import scan_launches
from ..tensor import ws_view
from ..utils import is_int, round_up
from .base import Layer, Setup, TensorSpec, register
from .index_map import Reversal, around

__all__ = ["AxisLayer"]


class AxisLayer(Layer):
    """One input and an ``axis`` option; no backward."""
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
class CumSum(AxisLayer):
    """Cumulative sum along ``axis`` (ONNX CumSum: ``exclusive``, ``reverse``)."""
    OPTIONS = {"axis": 0, "exclusive": False, "reverse": False}
    SCAN, START = "sum", 0  # the scan and what an exclusive one starts from

    def build(self, in_specs):
        self.flags_check("exclusive", "reverse")
        spec = self.one_input(in_specs)
        if spec.dtype == np.bool_:
            self.fail("input dtype bool does not %s (cast it to an integer type first)"
                      % self.SCAN)
        outer, n, inner = self.dims
        size = math.prod(spec.shape)
        self.size = size
        self.step = round_up(size * spec.dtype.itemsize, 256)
        # exclusive: the input shifted one step along the axis, a 0 in front
        shape = (outer, n - 1, inner)
        st = contiguous_strides((outer, n, inner))
        self.shift = StridedCopy(self.ctx, shape, st, st, spec.dtype) if n > 1 else None
        self.zero = Fill(self.ctx, (size,), spec.dtype)
        self.reversal = Reversal(self.ctx, outer, n, inner) if self.options["reverse"] else None
        buffers = int(self.options["exclusive"]) + int(self.options["reverse"])
        return Setup([TensorSpec(spec.shape, spec.dtype)], workspace=self.step * buffers)

    def forward(self, x, y, params, ws, saved):
        outer, n, inner = self.dims
        dtype = x[0].dtype
        bufs = [ws_view(ws, i * self.step, self.size, dtype) for i in
                range(int(self.options["exclusive"]) + int(self.options["reverse"]))]
        out, src = [], x[0].view((self.size,))
        if self.options["reverse"]:
            out += self.reversal.launches(src, bufs[0])
            src = bufs[0]
        if self.options["exclusive"]:
            dst = bufs[-1]
            out += self.zero.launches(dst, self.START)
            if self.shift is not None:
                out += self.shift.launches(src, dst.view((self.size - inner,), inner))
            src = dst
        if not self.options["reverse"]:
            return out + scan_launches(self.ctx, self.SCAN, src, y[0].view((self.size,)), None,
                                       outer, n, inner)
        tmp = bufs[0] if src is not bufs[0] else bufs[-1]
        out += scan_launches(self.ctx, self.SCAN, src, tmp, None, outer, n, inner)
        return out + self.reversal.launches(tmp, y[0].view((self.size,)))




@register("CumProd")
class CumProd(CumSum):
    """Cumulative product along ``axis`` (ONNX CumProd: ``exclusive``, ``reverse``)."""
    SCAN, START = "prod", 1
