"""Pooling over 1 to 3 spatial dims (``kernels/pooling_nd.cl``): max (with the indices
PyTorch returns), average (padding counted or not, a divisor override), adaptive max and
adaptive average, their backward passes, and max_unpool.

Tensors are contiguous (N C, *spatial) dlprim Tensors, the spatial dims padded to 3 with
unit dims; indices are int64 positions in the input plane. Shapes and windows are
run-time arguments: one program per (dtype, mode).
"""
import numpy as np

from ..dtypes import as_dtype, cl_type, is_float
from ..kernels import program
from ..utils import round_up
from .pointwise import memo

__all__ = ["MODES", "PoolWindows", "pooling_nd"]

MODES = ("max", "avg", "adaptive_max", "adaptive_avg")


def _three(values, fill):
    values = tuple(int(v) for v in values)
    return (fill,) * (3 - len(values)) + values


class PoolWindows:
    """The windows of one pooling: spatial sizes in and out, kernel, stride, padding,
    dilation (1 to 3 dims each; the adaptive modes use only the sizes), whether padding
    counts in an average and the divisor override (None: none)."""

    def __init__(self, in_size, out_size, kernel=(), stride=(), padding=(), dilation=(),
                 count_include_pad=True, divisor=None):
        self.in_size, self.out_size = _three(in_size, 1), _three(out_size, 1)
        self.kernel, self.stride = _three(kernel, 1), _three(stride, 1)
        self.padding, self.dilation = _three(padding, 0), _three(dilation, 1)
        self.count_include_pad = bool(count_include_pad)
        self.divisor = 0 if divisor is None else int(divisor)

    def args(self):
        """The window geometry as the kernels' int arguments."""
        i32 = np.int32
        return [i32(v) for v in self.in_size + self.out_size + self.kernel + self.stride
                + self.padding + self.dilation] + [i32(self.count_include_pad),
                                                   np.int64(self.divisor)]


class PoolND:
    """The pooling kernels of one mode for one dtype."""

    def __init__(self, ctx, mode, dtype):
        if mode not in MODES:
            raise ValueError("pooling: mode %r is not one of %s" % (mode, MODES))
        self.ctx, self.mode, self.dtype = ctx, mode, as_dtype(dtype)
        self.program = program.get(ctx, "pooling_nd", T=cl_type(self.dtype), MODE=mode)
        self._wg = min(256, ctx.facts.max_work_group)

    def _launch(self, name, total, args):
        return [program.Launch(self.program, name, (round_up(total, self._wg),), (self._wg,),
                               [np.uint64(total)] + args)] if total else []

    def forward(self, win, planes, x, y, idx=None):
        """y (and idx for the max modes) from x, over ``planes`` = N C planes."""
        total = planes * int(np.prod(win.out_size))
        extra = [idx] if self.mode.endswith("max") else []
        return self._launch("pool_forward", total, win.args() + [x, y] + extra)

    def backward(self, win, planes, dy, dx, idx=None):
        """dx from dy (and the max modes' idx): every element of dx is written."""
        if not is_float(self.dtype):
            raise TypeError("pooling backward: float tensors only, got %s" % self.dtype)
        total = planes * int(np.prod(win.in_size))
        extra = [idx] if self.mode.endswith("max") else []
        return self._launch("pool_backward", total, win.args() + [dy] + extra + [dx])

    def unpool(self, planes, in_plane, out_plane, x, idx, y):
        """y[p, idx[p, j]] = x[p, j] (y zeroed by the caller); indices outside the plane
        write nothing (the torch side raises PyTorch's error first)."""
        return self._launch("unpool", planes * in_plane,
                            [np.uint64(in_plane), np.uint64(out_plane), x, idx, y])


def pooling_nd(ctx, mode, dtype):
    """The ``PoolND`` of this mode and dtype on ctx (made once)."""
    return memo(ctx, ("pooling_nd", mode, as_dtype(dtype)), lambda: PoolND(ctx, mode, dtype))
