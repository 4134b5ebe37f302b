"""Pooling over 1 to 3 spatial dims on the N-D pooling launcher (core/pooling_nd.py), the
kernels the ``ocl`` PyTorch device runs for max_pool1d..3d, avg_pool1d..3d and
max_unpool2d/3d.

    PoolingND   max or average over (N, C, *spatial) windows with a kernel, stride,
                leading padding and dilation per spatial dim; the output size may be given
                (``out_size``: windows past the input's end read only what lies inside it,
                as a trailing padding would); max optionally writes the int64 position of
                each window's pick in its input plane (row-major), a second output
    MaxUnpool   y.flat[indices[j]] = x.flat[j] over the whole tensor, zeros elsewhere
                (ONNX's MaxUnpool: the indices count over N, C and the spatial dims)

Forward only (inference): no backward.
"""
import math

import numpy as np

from ..core.copy import fill_launches
from ..core.pooling_nd import PoolWindows, pooling_nd
from ..dtypes import dtype_name, is_float
from ..tensor import ws_view
from ..utils import is_int, round_up
from .base import Layer, Setup, TensorSpec, register

_I64 = np.dtype(np.int64)


def _ints(layer, option, n, default, least):
    """Option ``option`` as ``n`` ints (None: ``default`` each), each at least ``least``."""
    value = layer.options[option]
    if value is None:
        return (default,) * n
    if is_int(value):
        value = [value] * n
    if not isinstance(value, (list, tuple)) or len(value) != n or \
            not all(is_int(v) and v >= least for v in value):
        layer.fail("option %r must be %d integers >= %d (one per spatial dim), got %r"
                   % (option, n, least, value))
    return tuple(int(v) for v in value)


def _taps_inside(o, size, k, s, p, d):
    """How many taps of window ``o`` along one dim read the input."""
    lo = o * s - p
    return sum(1 for j in range(k) if 0 <= lo + j * d < size)


@register("PoolingND")
class PoolingND(Layer):
    """y[n, c, o] = max or mean of x[n, c] over the taps o * stride - pad + j * dilation."""
    OPTIONS = {"mode": "max", "kernel": None, "stride": None, "pad": None, "dilation": None,
               "out_size": None, "count_include_pad": False, "divisor": 0, "indices": False}
    HAS_BACKWARD = False

    def build(self, in_specs):
        if len(in_specs) != 1:
            self.fail("expects 1 input, got %d" % len(in_specs))
        spec = in_specs[0]
        dims = len(spec.shape) - 2
        if not 1 <= dims <= 3:
            self.fail("input must be (N, C, *spatial) with 1 to 3 spatial dims, got shape %s"
                      % (spec.shape,))
        mode = self.options["mode"]
        if mode not in ("max", "avg"):
            self.fail("option 'mode' must be 'max' or 'avg', got %r" % (mode,))
        if mode == "avg" and not is_float(spec.dtype):
            self.fail("average of input dtype %s (floats only)" % dtype_name(spec.dtype))
        if self.options["indices"] and mode != "max":
            self.fail("option 'indices' needs mode 'max'")
        kernel = _ints(self, "kernel", dims, 1, 1)
        stride = _ints(self, "stride", dims, 1, 1)
        pad = _ints(self, "pad", dims, 0, 0)
        dilation = _ints(self, "dilation", dims, 1, 1)
        divisor = self.options["divisor"]
        if not is_int(divisor) or divisor < 0:
            self.fail("option 'divisor' must be an integer >= 0 (0: none), got %r" % (divisor,))
        size = spec.shape[2:]
        if self.options["out_size"] is None:
            out = tuple((i + 2 * p - d * (k - 1) - 1) // s + 1
                        for i, k, s, p, d in zip(size, kernel, stride, pad, dilation))
        else:
            out = _ints(self, "out_size", dims, 1, 1)
        for axis, (i, o, k, s, p, d) in enumerate(zip(size, out, kernel, stride, pad, dilation)):
            empty = [w for w in range(o) if _taps_inside(w, i, k, s, p, d) == 0]
            if empty:
                self.fail("spatial dim %d: window %d reads no input element (size %d, kernel %d, "
                          "stride %d, pad %d, dilation %d, %d outputs)"
                          % (axis, empty[0], i, k, s, p, d, o))
        self.win = PoolWindows(size, out, kernel, stride, pad, dilation,
                               self.options["count_include_pad"], divisor or None)
        self.op = pooling_nd(self.ctx, mode, spec.dtype)
        self.planes = spec.shape[0] * spec.shape[1]
        shape = tuple(spec.shape[:2]) + tuple(out)
        outputs = [TensorSpec(shape, spec.dtype)]
        self.count = math.prod(shape)
        ws = 0
        if mode == "max":
            if self.options["indices"]:
                outputs.append(TensorSpec(shape, _I64))
            else:
                ws = round_up(self.count * 8, 256)  # the kernel writes the picks somewhere
        return Setup(outputs, workspace=ws)

    def forward(self, x, y, params, ws, saved):
        idx = None
        if self.options["mode"] == "max":
            idx = y[1] if self.options["indices"] else ws_view(ws, 0, self.count, _I64)
        return self.op.forward(self.win, self.planes, x[0], y[0], idx)


@register("MaxUnpool")
class MaxUnpool(Layer):
    """y (``shape``) = zeros, then y.flat[indices.flat[j]] = x.flat[j]; an index outside y
    writes nothing."""
    OPTIONS = {"shape": None}
    HAS_BACKWARD = False

    def build(self, in_specs):
        if len(in_specs) != 2:
            self.fail("expects 2 inputs (x, indices), got %d" % len(in_specs))
        x, idx = in_specs
        if idx.dtype != _I64 or idx.shape != x.shape:
            self.fail("indices must be int64 of the input's shape %s, got %s %s"
                      % (x.shape, dtype_name(idx.dtype), idx.shape))
        shape = self.options["shape"]
        if not isinstance(shape, (list, tuple)) or not all(is_int(s) and s >= 0 for s in shape):
            self.fail("option 'shape' must list the output's sizes, got %r" % (shape,))
        self.op = pooling_nd(self.ctx, "max", x.dtype)
        self.in_count, self.out_count = math.prod(x.shape), math.prod(shape)
        return Setup([TensorSpec(tuple(shape), x.dtype)])

    def forward(self, x, y, params, ws, saved):
        # one "plane" holding the whole tensor: the indices are positions in all of y
        return fill_launches(self.ctx, y[0], 0) + \
            self.op.unpool(1, self.in_count, self.out_count, x[0], x[1], y[0])
