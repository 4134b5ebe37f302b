"""2-D pooling launchers over NCHW tensors: max / avg windows, and global max backward.

Window, stride and padding are fixed when the op is built (they are template constants);
the batch, channel and spatial sizes are read from the tensors at ``launches`` time.
Backward gathers each input element's gradient from the windows that contain it, so it
needs no atomics and gives the same bits on every run. Global average / max *forward* and
global average backward are plain pointwise reductions (dlprim/core/pointwise.py).
"""
import numpy as np

from ..kernels import program
from ..tensor import cl_type

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
        out = -(-span // stride) + 1
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
    """Max or average pooling with a fixed window; ``launches(x, y)`` and
    ``backward_launches(x, y, dx, dy, beta)`` (``dx = beta*dx + grad``)."""

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
        self.program = program.get(
            ctx, "pooling", dtype=cl_type(self.dtype), MODE=mode,
            KH=kernel[0], KW=kernel[1], SH=stride[0], SW=stride[1], PH=pad[0], PW=pad[1],
            COUNT_INCLUDE_PAD=bool(count_include_pad) and mode == "avg")

    def output_shape(self, in_shape):
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

    def launches(self, x, y):
        sizes = self._sizes(x, y)
        total = y.size
        return [program.Launch(self.program, "pooling_forward",
                               (program.round_up(max(total, 1), LOCAL),), (LOCAL,),
                               [np.uint64(total)] + sizes + [x, y])]

    def backward_launches(self, x, y, dx, dy, beta=0.0):
        """dx = beta*dx + grad; max reads x and the forward output y, avg neither (any
        tensors of those shapes fill the slots)."""
        sizes = self._sizes(x, dy)
        if dx.shape != x.shape or y.shape != dy.shape:
            raise ValueError("pooling: dx %s / x %s, y %s / dy %s must match"
                             % (dx.shape, x.shape, y.shape, dy.shape))
        total = dx.size
        return [program.Launch(self.program, "pooling_backward",
                               (program.round_up(max(total, 1), LOCAL),), (LOCAL,),
                               [np.uint64(total)] + sizes + [x, y, dy, dx, np.float32(beta)])]

    def __call__(self, x, y, queue=None):
        for launch in self.launches(x, y):
            launch(queue or self.ctx.queue)


class GlobalMaxBackward:
    """Route each plane's dy to the first maximum of that plane of x: dx = beta*dx + grad."""

    def __init__(self, ctx, dtype="float32"):
        self.ctx, self.dtype = ctx, np.dtype(dtype)
        # any window works: only the global kernel of the family is used
        self.program = program.get(ctx, "pooling", dtype=cl_type(self.dtype), MODE="max",
                                   KH=1, KW=1, SH=1, SW=1, PH=0, PW=0, COUNT_INCLUDE_PAD=False)

    def launches(self, x, dx, dy, beta=0.0):
        _check_tensor("global pooling input", x, 4, self.dtype)
        if dx.shape != x.shape or dy.shape != x.shape[:2] + (1, 1):
            raise ValueError("global max backward: x %s, dx %s, dy %s" % (x.shape, dx.shape, dy.shape))
        planes = x.shape[0] * x.shape[1]
        hw = x.shape[2] * x.shape[3]
        return [program.Launch(self.program, "global_max_backward",
                               (program.round_up(max(planes, 1), 64),), (64,),
                               [np.uint64(planes), np.uint64(hw), x, dy, dx, np.float32(beta)])]
