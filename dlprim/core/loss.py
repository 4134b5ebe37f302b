"""Classification losses over (N, C) scores with integer (or float-coded) labels.

``SoftmaxCrossEntropy``: loss = scale * sum_n (log sum_c exp(x_nc) - x_n,label_n), with the
per-row terms computed by one work-group per row (``loss.cl``) and summed by the
pointwise-broadcast-reduce generator. ``NLLLoss``: the same over log-probabilities,
-x_n,label_n per row, optionally summed. Labels outside [0, C) are ignored.
"""
import numpy as np
import pyopencl as cl

from ..kernels import program
from ..kernels.program import Launch
from ..dtypes import cl_type
from .pointwise import PointwiseBroadcastReduce
from .softmax import row_work_group
from ..utils import round_up

__all__ = ["SoftmaxCrossEntropy", "NLLLossOps", "LABEL_DTYPES"]

LABEL_DTYPES = ("int32", "int64", "float32")


def _label_type(dtype):
    dtype = np.dtype(dtype)
    if dtype.name not in LABEL_DTYPES:
        raise TypeError("labels must be one of %s, got %s" % (", ".join(LABEL_DTYPES), dtype.name))
    return cl_type(dtype)


def _check(what, t, shape, dtype):
    if tuple(t.shape) != tuple(shape) or t.dtype != np.dtype(dtype):
        raise ValueError("%s is %s %s, expected %s %s"
                         % (what, t.shape, t.dtype.name, tuple(shape), np.dtype(dtype).name))


class _RowSum:
    """y[0] = scale * sum(rows): the batch reduction shared by both losses."""

    def __init__(self, ctx, n):
        self.op = PointwiseBroadcastReduce(ctx, [((n,), "float32")], [((1,), "float32")],
                                           "y0 = x0;", name="loss_sum")

    def launches(self, rows, y, scale):
        return self.op.launches([rows], [y], alpha=scale)


class SoftmaxCrossEntropy:
    """Mean (``scale = 1/N``) or scaled-sum cross entropy of logits ``(N, C)``."""

    def __init__(self, ctx, n, c, label_dtype="int32", scale=None):
        self.ctx, self.n, self.c = ctx, int(n), int(c)
        self.label_dtype = np.dtype(label_dtype)
        self.scale = 1.0 / max(self.n, 1) if scale is None else float(scale)
        self.wg = row_work_group(ctx, self.c)
        self.prg = program.get(ctx, "loss", LABEL=_label_type(label_dtype))
        self.sum = _RowSum(ctx, self.n)

    def _check(self, x, label):
        _check("SoftmaxCrossEntropy: x", x, (self.n, self.c), np.float32)
        _check("SoftmaxCrossEntropy: labels", label, (self.n,), self.label_dtype)

    def launches(self, x, label, rows, y):
        """``rows``: (N,) float scratch for the per-row losses; ``y``: (1,) loss."""
        self._check(x, label)
        _check("SoftmaxCrossEntropy: rows", rows, (self.n,), np.float32)
        _check("SoftmaxCrossEntropy: y", y, (1,), np.float32)
        if self.n == 0:
            return []
        return [Launch(self.prg, "xent_forward_rows", (self.n * self.wg,), (self.wg,),
                       [np.uint64(self.c), x, label, rows, cl.LocalMemory(4 * self.wg)])] \
            + self.sum.launches(rows, y, self.scale)

    def backward_launches(self, x, label, dy, dx, beta=0.0):
        """dx = beta * dx + dy * scale * (softmax(x) - onehot(label))."""
        self._check(x, label)
        _check("SoftmaxCrossEntropy: dy", dy, (1,), np.float32)
        _check("SoftmaxCrossEntropy: dx", dx, (self.n, self.c), np.float32)
        if self.n == 0:
            return []
        return [Launch(self.prg, "xent_backward_rows", (self.n * self.wg,), (self.wg,),
                       [np.uint64(self.c), x, label, dy, dx, np.float32(self.scale),
                        np.float32(beta), cl.LocalMemory(4 * self.wg)])]


class NLLLossOps:
    """-x[n, label[n]] per row (``reduce="none"``) or summed (``"sum"``) / averaged over N."""

    def __init__(self, ctx, n, c, label_dtype="int32", reduce="mean"):
        if reduce not in ("none", "sum", "mean"):
            raise ValueError("NLLLossOps: reduce must be none, sum or mean, got %r" % (reduce,))
        self.ctx, self.n, self.c, self.reduce = ctx, int(n), int(c), reduce
        self.label_dtype = np.dtype(label_dtype)
        self.scale = 1.0 / max(self.n, 1) if reduce == "mean" else 1.0
        self.prg = program.get(ctx, "loss", LABEL=_label_type(label_dtype))
        self.sum = None if reduce == "none" else _RowSum(ctx, self.n)
        self.out_shape = (self.n,) if reduce == "none" else (1,)

    def _check(self, x, label):
        _check("NLLLossOps: x", x, (self.n, self.c), np.float32)
        _check("NLLLossOps: labels", label, (self.n,), self.label_dtype)

    def launches(self, x, label, y, rows=None):
        """``rows``: (N,) float scratch, needed unless ``reduce == "none"``."""
        self._check(x, label)
        _check("NLLLossOps: y", y, self.out_shape, np.float32)
        if self.n == 0:
            return []
        if self.sum is not None:
            if rows is None:
                raise ValueError("NLLLossOps: a reduced loss needs an (N,) scratch tensor 'rows'")
            _check("NLLLossOps: rows", rows, (self.n,), np.float32)
        target = y if self.sum is None else rows
        out = [Launch(self.prg, "nll_forward", (round_up(self.n, 64),), None,
                      [np.uint64(self.n), np.uint64(self.c), x, label, target])]
        if self.sum is not None:
            out += self.sum.launches(rows, y, self.scale)
        return out

    def backward_launches(self, label, dy, dx, beta=0.0):
        """dx = beta * dx - dy (scaled as the reduction) at each label, 0 elsewhere."""
        _check("NLLLossOps: labels", label, (self.n,), self.label_dtype)
        _check("NLLLossOps: dy", dy, self.out_shape, np.float32)
        _check("NLLLossOps: dx", dx, (self.n, self.c), np.float32)
        if dx.size == 0:
            return []
        stride = 1 if self.reduce == "none" else 0
        return [Launch(self.prg, "nll_backward", (round_up(dx.size, 64),), None,
                       [np.uint64(self.n), np.uint64(self.c), label, dy, np.uint64(stride), dx,
                        np.float32(self.scale), np.float32(beta)])]
