"""Softmax and log-softmax along axis 1, forward and backward.

The input is viewed as (outer, C, inner): axis 1 is reduced, every other axis is a batch
of independent rows. With ``inner == 1`` each row gets one work-group that reduces over C
in local memory; otherwise each work item owns one (outer, inner) position and loops over
C, so neighbouring items touch neighbouring addresses.
"""
import numpy as np
import pyopencl as cl

from ..kernels import program
from ..kernels.program import Launch
from ..utils import round_up

__all__ = ["SoftmaxOps", "axis_split", "row_work_group"]


def axis_split(shape, axis=1):
    """(outer, C, inner) of ``shape`` around ``axis``."""
    shape = tuple(int(s) for s in shape)
    outer = int(np.prod(shape[:axis], dtype=np.int64))
    inner = int(np.prod(shape[axis + 1:], dtype=np.int64))
    return outer, shape[axis], inner


def row_work_group(ctx, n):
    """Power-of-two work-group size for reducing a row of ``n`` elements: about 8
    elements per work item, 32 to 1024 items (long rows need many to hide latency)."""
    wg = 32
    while wg * 8 < n and wg < 1024:
        wg *= 2
    while wg > ctx.facts.max_work_group:
        wg //= 2
    return wg


def _check(name, t, shape):
    if tuple(t.shape) != tuple(shape):
        raise ValueError("SoftmaxOps: %s has shape %s, expected %s" % (name, t.shape, tuple(shape)))
    if t.dtype != np.float32:
        raise TypeError("SoftmaxOps: %s has dtype %s, expected float32" % (name, t.dtype))


class SoftmaxOps:
    """``y = softmax(x)`` (or ``log_softmax`` with ``log=True``) over axis 1 of ``shape``."""

    def __init__(self, ctx, shape, log=False):
        if len(shape) < 2:
            raise ValueError("SoftmaxOps: input must have at least 2 dimensions, got shape %s"
                             % (tuple(shape),))
        self.ctx = ctx
        self.shape = tuple(int(s) for s in shape)
        self.log = bool(log)
        self.outer, self.C, self.inner = axis_split(self.shape)
        self.wg = row_work_group(ctx, self.C)
        self.prg = program.get(ctx, "softmax", LOG=self.log)

    def _dims(self):
        if self.inner == 1:
            return (self.outer * self.wg,), (self.wg,), [np.uint64(self.C)]
        positions = self.outer * self.inner
        return ((round_up(max(positions, 1), 64),), None,
                [np.uint64(positions), np.uint64(self.C), np.uint64(self.inner)])

    def launches(self, x, y):
        """y = softmax (or log-softmax) of x over axis 1."""
        _check("x", x, self.shape)
        _check("y", y, self.shape)
        if x.size == 0:
            return []
        gsize, lsize, dims = self._dims()
        if self.inner == 1:
            return [Launch(self.prg, "softmax_forward_rows", gsize, lsize,
                           dims + [x, y, cl.LocalMemory(4 * self.wg)])]
        return [Launch(self.prg, "softmax_forward_cols", gsize, lsize, dims + [x, y])]

    def backward_launches(self, y, dy, dx, beta=0.0):
        """``dx = beta * dx + d softmax``; ``dx`` is not read when ``beta == 0``."""
        for name, t in (("y", y), ("dy", dy), ("dx", dx)):
            _check(name, t, self.shape)
        if y.size == 0:
            return []
        gsize, lsize, dims = self._dims()
        args = dims + [y, dy, dx, np.float32(beta)]
        if self.inner == 1:
            return [Launch(self.prg, "softmax_backward_rows", gsize, lsize,
                           args + [cl.LocalMemory(4 * self.wg)])]
        return [Launch(self.prg, "softmax_backward_cols", gsize, lsize, args)]

    def __call__(self, x, y, queue=None):
        for launch in self.launches(x, y):
            launch(queue or self.ctx.queue)
