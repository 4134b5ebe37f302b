"""2-D pooling launchers over NCHW tensors: max / avg windows, and global max backward.

Window, stride and padding are fixed when the op is built (they are template constants);
the batch, channel and spatial sizes are read from the tensors at ``launches`` time.
Backward gathers each input element's gradient from the windows that contain it, so it
needs no atomics and gives the same bits on every run; max pooling's training forward
keeps each window's argmax (int32, as PyTorch keeps its int64 indices), so backward reads
neither x nor y. Global average / max *forward* and
global average backward are plain pointwise reductions (dlprim/core/pointwise.py).
"""
import numpy as np

from ..kernels import program
from ..dtypes import cl_type
from ..utils import ceil_div, round_up

__all__ = ["Pool2D", "GlobalMaxBackward", "pool_output_size", "MODES"]

MODES = ("max", "avg")
LOCAL = 128


def pool_output_size(size, kernel, stride, pad, ceil_mode):
    """Output length along one axis, PyTorch's rule: with ``ceil_mode`` the last window
    must still start inside the input or its left padding."""
    span = size + 2 * pad - kernel
    if span < 0:
        return 0
    if ceil_mode:
        out = ceil_div(span, stride) + 1
        if (out - 1) * stride >= size + pad:
            out -= 1
    else:
        out = span // stride + 1
    return out


def _check_tensor(what, t, ndim, dtype):
    if t.ndim != ndim:
        raise ValueError("%s: expected a %d-D tensor, got shape %s" % (what, ndim, t.shape))
    if t.dtype != dtype:
        raise TypeError("%s: dtype %s, expected %s" % (what, t.dtype, dtype))


class Pool2D:
    """Max or average pooling with a fixed window; ``launches(x, y, index)`` and
    ``backward_launches(dx, dy, index, beta)`` (``dx = beta*dx + grad``)."""

    def __init__(self, ctx, mode, kernel, stride, pad=(0, 0), count_include_pad=False,
                 ceil_mode=False, dtype="float32"):
        if mode not in MODES:
            raise ValueError("pooling mode %r; expected one of %s" % (mode, ", ".join(MODES)))
        kernel, stride, pad = (tuple(int(v) for v in a) for a in (kernel, stride, pad))
        if min(kernel) < 1 or min(stride) < 1 or min(pad) < 0:
            raise ValueError("pooling: kernel %s and stride %s must be >= 1, pad %s >= 0"
                             % (kernel, stride, pad))
        if pad[0] * 2 > kernel[0] or pad[1] * 2 > kernel[1]:
            raise ValueError("pooling: pad %s must be at most half of kernel %s" % (pad, kernel))
        self.ctx, self.mode = ctx, mode
        self.kernel, self.stride, self.pad = kernel, stride, pad
        self.ceil_mode = bool(ceil_mode)
        self.dtype = np.dtype(dtype)
        self._params = dict(dtype=cl_type(self.dtype), MODE=mode, KH=kernel[0], KW=kernel[1],
                            SH=stride[0], SW=stride[1], PH=pad[0], PW=pad[1],
                            COUNT_INCLUDE_PAD=bool(count_include_pad) and mode == "avg",
                            CPU=ctx.facts.is_cpu)
        self.program = self._program(0)

    def _program(self, size):
        """The program for tensors of up to ``size`` elements (32-bit indices when they fit)."""
        return program.get(self.ctx, "pooling", IDX="uint" if size < 2 ** 31 else "ulong",
                           **self._params)

    def output_shape(self, in_shape):
        """The (N, C, OH, OW) output for an (N, C, H, W) input."""
        if len(in_shape) != 4:
            raise ValueError("pooling: input must be N,C,H,W; got shape %s" % (tuple(in_shape),))
        n, c, h, w = in_shape
        oh = pool_output_size(h, self.kernel[0], self.stride[0], self.pad[0], self.ceil_mode)
        ow = pool_output_size(w, self.kernel[1], self.stride[1], self.pad[1], self.ceil_mode)
        if oh < 1 or ow < 1:
            raise ValueError("pooling: input %dx%d with pad %s is smaller than kernel %s"
                             % (h, w, self.pad, self.kernel))
        return (n, c, oh, ow)

    def _sizes(self, x, y):
        _check_tensor("pooling input", x, 4, self.dtype)
        _check_tensor("pooling output", y, 4, self.dtype)
        if y.shape != self.output_shape(x.shape):
            raise ValueError("pooling: output shape %s, expected %s for input %s"
                             % (y.shape, self.output_shape(x.shape), x.shape))
        return [np.int32(v) for v in (x.shape[2], x.shape[3], y.shape[2], y.shape[3])]

    def launches(self, x, y, index=None):
        """y = pooling of x; max mode may also keep each window's argmax in ``index``
        (int32, y's shape), which its backward needs."""
        sizes = self._sizes(x, y)
        args = [np.uint64(y.size)] + sizes + [x, y]
        name = "pooling_forward"
        if index is not None:
            if self.mode != "max" or index.shape != y.shape or index.dtype != np.int32:
                raise ValueError("pooling: an index (int32, shape %s) is kept by max pooling only"
                                 % (y.shape,))
            args.append(index)
            name = "pooling_forward_index"
        if self.ctx.facts.is_cpu:  # a work-item per output row
            planes = y.shape[0] * y.shape[1]
            return [program.Launch(self._program(x.size), name, (y.shape[2], planes), None, args)
                    ] if planes else []
        return [program.Launch(self._program(x.size), name,
                               (round_up(max(y.size, 1), LOCAL),), (LOCAL,), args)]

    def backward_launches(self, dx, dy, index=None, beta=0.0):
        """dx = beta*dx + grad; max needs the ``index`` its forward kept, avg nothing."""
        if dx.ndim != 4 or dy.shape != self.output_shape(dx.shape):
            raise ValueError("pooling: dy shape %s does not match dx shape %s" % (dy.shape, dx.shape))
        if (self.mode == "max") != (index is not None):
            raise ValueError("pooling: backward of max pooling needs its forward's index, avg none")
        if index is not None and (index.shape != dy.shape or index.dtype != np.int32):
            raise ValueError("pooling: index %s %s, expected int32 %s" % (index.shape, index.dtype, dy.shape))
        sizes = [np.int32(v) for v in (dx.shape[2], dx.shape[3], dy.shape[2], dy.shape[3])]
        args = [np.uint64(dx.size)] + sizes + ([index] if index is not None else []) + \
            [dy, dx, np.float32(beta)]
        if self.ctx.facts.is_cpu:  # a work-item per plane
            planes = dx.shape[0] * dx.shape[1]
            return [program.Launch(self._program(dx.size), "pooling_backward", (planes,), None,
                                   args)] if planes else []
        return [program.Launch(self._program(dx.size), "pooling_backward",
                               (round_up(max(dx.size, 1), LOCAL),), (LOCAL,), args)]

    def __call__(self, x, y, queue=None):
        for launch in self.launches(x, y):
            launch(queue or self.ctx.queue)


class GlobalMaxBackward:
    """Route each plane's dy to the first maximum of that plane of x: dx = beta*dx + grad."""

    def __init__(self, ctx, dtype="float32"):
        self.ctx, self.dtype = ctx, np.dtype(dtype)
        # any window works: only the global kernel of the family is used
        self.program = program.get(ctx, "pooling", dtype=cl_type(self.dtype), MODE="max", IDX="ulong",
                                   KH=1, KW=1, SH=1, SW=1, PH=0, PW=0, COUNT_INCLUDE_PAD=False,
                                   CPU=False)

    def launches(self, x, dx, dy, beta=0.0):
        """dx = beta * dx + dy at the first maximum of each plane of x, 0 elsewhere."""
        _check_tensor("global pooling input", x, 4, self.dtype)
        if dx.shape != x.shape or dy.shape != x.shape[:2] + (1, 1):
            raise ValueError("global max backward: x %s, dx %s, dy %s" % (x.shape, dx.shape, dy.shape))
        planes = x.shape[0] * x.shape[1]
        hw = x.shape[2] * x.shape[3]
        return [program.Launch(self.program, "global_max_backward",
                               (round_up(max(planes, 1), 64),), (64,),
                               [np.uint64(planes), np.uint64(hw), x, dy, dx, np.float32(beta)])]
