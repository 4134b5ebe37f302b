"""Classification losses over (N, C) scores with integer (or float-coded) labels.

``SoftmaxCrossEntropy``: the mean over counted rows of log sum_c exp(x_nc) - x_n,label_n,
the per-row terms computed by one work-group per row (``loss.cl``) and summed by the
pointwise-broadcast-reduce generator. ``NLLLossOps``: the same over log-probabilities,
-x_n,label_n per row, summed, averaged or kept per row.

A row counts when its label is in [0, C) and differs from ``ignore_index`` (PyTorch's
convention, default -100); other rows add no loss and no gradient, and a mean divides by
the rows that count (PyTorch's ``reduction='mean'``: no row counting gives NaN). The mean's
factor is found on the device in the forward pass and kept in ``norm`` (a (1,) float
tensor) for the backward pass, so nothing waits for the host. When every row counts it is
the host's 1/N, bit for bit what a fixed 1/N scale gives.
"""
import numpy as np
import pyopencl as cl

from ..kernels import program
from ..kernels.program import Launch
from ..dtypes import HALF_TYPES, as_dtype, cl_type, dtype_name
from .pointwise import PointwiseBroadcast, PointwiseBroadcastReduce
from .softmax import row_work_group
from ..utils import round_up

__all__ = ["SoftmaxCrossEntropy", "NLLLossOps", "LABEL_DTYPES", "IGNORE_INDEX"]

LABEL_DTYPES = ("int32", "int64", "float32")
IGNORE_INDEX = -100  # PyTorch's default ignore_index


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
    """y[0] = sum(rows): the batch reduction shared by both losses."""

    def __init__(self, ctx, n):
        self.op = PointwiseBroadcastReduce(ctx, [((n,), "float32")], [((1,), "float32")],
                                           "y0 = x0;", name="loss_sum")

    def launches(self, rows, y):
        return self.op.launches([rows], [y])


class _RowMean:
    """y[0] = sum(rows) / (rows that count), and norm[0] = the factor used, for backward.

    One reduce gives the sum and the count (a float: exact up to 2^24 rows), then one
    element-wise step scales in place. A count of N takes the host's 1/N, so valid labels
    give the numbers a fixed 1/N scale gives."""

    def __init__(self, ctx, n, c, label_dtype, ignore_index):
        self.n, self.c, self.ignore = int(n), int(c), int(ignore_index)
        self.scale = np.float32(1.0 / max(self.n, 1))
        self.sum = PointwiseBroadcastReduce(
            ctx, [((n,), "float32"), ((n,), label_dtype)], [((1,), "float32")] * 2,
            "y0 = x0; long k = (long)x1; y1 = (k >= 0 && k < w0 && k != w1) ? 1.0f : 0.0f;",
            reduce_init="reduce_y0 = 0; reduce_y1 = 0;",
            reduce="reduce_y0 += y0; reduce_y1 += y1;", params=["int64", "int64"],
            name="loss_sum_count")
        self.scale_op = PointwiseBroadcast(
            ctx, [((1,), "float32")] * 2, [((1,), "float32")] * 2,
            "float s = (x1 == w1) ? w0 : 1.0f / x1; y0 = x0 * s; y1 = s;",
            params=["float32", "float32"], name="loss_mean")

    def launches(self, rows, label, y, norm):
        _check("loss: norm", norm, (1,), np.float32)
        return (self.sum.launches([rows, label], [y, norm], [self.c, self.ignore])
                + self.scale_op.launches([y, norm], [y, norm], [self.scale, float(self.n)]))


class SoftmaxCrossEntropy:
    """Cross entropy of logits ``(N, C)``, the mean over the rows that count. ``dtype``:
    the logits' storage and their gradient's (float32, or float16 / bfloat16: widened as
    they load, the gradient rounded once as it stores; the loss stays float32)."""

    def __init__(self, ctx, n, c, label_dtype="int32", ignore_index=IGNORE_INDEX,
                 dtype=np.float32):
        self.ctx, self.n, self.c = ctx, int(n), int(c)
        self.label_dtype = np.dtype(label_dtype)
        self.dtype = as_dtype(dtype)
        if self.dtype != np.float32 and self.dtype not in HALF_TYPES:
            raise ValueError("SoftmaxCrossEntropy: logits are float32, float16 or bfloat16, "
                             "got %s" % dtype_name(self.dtype))
        self.ignore = int(ignore_index)
        self.wg = row_work_group(ctx, self.c)
        self.prg = program.get(ctx, "loss", LABEL=_label_type(label_dtype),
                               X_T=cl_type(self.dtype))
        self.mean = _RowMean(ctx, self.n, self.c, self.label_dtype, self.ignore)

    def _check(self, x, label):
        _check("SoftmaxCrossEntropy: x", x, (self.n, self.c), self.dtype)
        _check("SoftmaxCrossEntropy: labels", label, (self.n,), self.label_dtype)

    def launches(self, x, label, rows, y, norm, lse=None):
        """``rows``: (N,) float scratch for the per-row losses; ``y``: (1,) loss;
        ``norm``: (1,) float the backward pass reads (the factor of the mean); ``lse``:
        (N,) float, each row's log sum exp kept for the backward pass (which then reads
        the logits once instead of twice), or None."""
        self._check(x, label)
        _check("SoftmaxCrossEntropy: rows", rows, (self.n,), np.float32)
        _check("SoftmaxCrossEntropy: y", y, (1,), np.float32)
        if lse is not None:
            _check("SoftmaxCrossEntropy: lse", lse, (self.n,), np.float32)
        if self.n == 0:
            return []
        kept = [] if lse is None else [lse]
        return [Launch(self.prg, "xent_forward_rows" + ("_lse" if kept else ""),
                       (self.n * self.wg,), (self.wg,),
                       [np.uint64(self.c), np.int64(self.ignore), x, label, rows, *kept,
                        cl.LocalMemory(4 * self.wg)])] \
            + self.mean.launches(rows, label, y, norm)

    def backward_launches(self, x, label, dy, dx, norm, beta=0.0, lse=None):
        """dx = beta * dx + dy * norm * (softmax(x) - onehot(label)) on rows that count;
        ``norm`` (and ``lse``, where the forward pass kept it) as the forward pass left
        it."""
        self._check(x, label)
        _check("SoftmaxCrossEntropy: dy", dy, (1,), np.float32)
        _check("SoftmaxCrossEntropy: dx", dx, (self.n, self.c), self.dtype)
        _check("SoftmaxCrossEntropy: norm", norm, (1,), np.float32)
        if lse is not None:
            _check("SoftmaxCrossEntropy: lse", lse, (self.n,), np.float32)
        if self.n == 0:
            return []
        args = [np.uint64(self.c), np.int64(self.ignore), x, label, dy, dx, norm,
                np.float32(beta)]
        if lse is not None:
            return [Launch(self.prg, "xent_backward_rows_lse", (self.n * self.wg,),
                           (self.wg,), args + [lse])]
        return [Launch(self.prg, "xent_backward_rows", (self.n * self.wg,), (self.wg,),
                       args + [cl.LocalMemory(4 * self.wg)])]


class NLLLossOps:
    """-x[n, label[n]] per row (``reduce="none"``), summed (``"sum"``) or averaged over the
    rows that count (``"mean"``)."""

    def __init__(self, ctx, n, c, label_dtype="int32", reduce="mean", ignore_index=IGNORE_INDEX):
        if reduce not in ("none", "sum", "mean"):
            raise ValueError("NLLLossOps: reduce must be none, sum or mean, got %r" % (reduce,))
        self.ctx, self.n, self.c, self.reduce = ctx, int(n), int(c), reduce
        self.label_dtype = np.dtype(label_dtype)
        self.ignore = int(ignore_index)
        self.prg = program.get(ctx, "loss", LABEL=_label_type(label_dtype))
        self.sum = _RowSum(ctx, self.n) if reduce == "sum" else None
        self.mean = _RowMean(ctx, self.n, self.c, self.label_dtype, self.ignore) \
            if reduce == "mean" else None
        self.out_shape = (self.n,) if reduce == "none" else (1,)

    def _check(self, x, label):
        _check("NLLLossOps: x", x, (self.n, self.c), np.float32)
        _check("NLLLossOps: labels", label, (self.n,), self.label_dtype)

    def launches(self, x, label, y, rows=None, norm=None):
        """``rows``: (N,) float scratch, needed unless ``reduce == "none"``; ``norm``: (1,)
        float for the backward pass, needed for ``"mean"``."""
        self._check(x, label)
        _check("NLLLossOps: y", y, self.out_shape, np.float32)
        if self.n == 0:
            return []
        if self.reduce != "none":
            if rows is None:
                raise ValueError("NLLLossOps: a reduced loss needs an (N,) scratch tensor 'rows'")
            _check("NLLLossOps: rows", rows, (self.n,), np.float32)
        if self.reduce == "mean" and norm is None:
            raise ValueError("NLLLossOps: a mean needs a (1,) float tensor 'norm'")
        target = y if self.reduce == "none" else rows
        out = [Launch(self.prg, "nll_forward", (round_up(self.n, 64),), None,
                      [np.uint64(self.n), np.uint64(self.c), np.int64(self.ignore), x, label,
                       target])]
        if self.sum is not None:
            out += self.sum.launches(rows, y)
        if self.mean is not None:
            out += self.mean.launches(rows, label, y, norm)
        return out

    def backward_launches(self, label, dy, dx, beta=0.0, norm=None):
        """dx = beta * dx - dy (scaled as the reduction: ``norm`` from the forward pass for
        a mean) at each label of a row that counts, 0 elsewhere."""
        _check("NLLLossOps: labels", label, (self.n,), self.label_dtype)
        _check("NLLLossOps: dy", dy, self.out_shape, np.float32)
        _check("NLLLossOps: dx", dx, (self.n, self.c), np.float32)
        if dx.size == 0:
            return []
        stride = 1 if self.reduce == "none" else 0
        args = [np.uint64(self.n), np.uint64(self.c), np.int64(self.ignore), label, dy,
                np.uint64(stride), dx]
        if self.reduce == "mean":
            if norm is None:
                raise ValueError("NLLLossOps: the backward of a mean needs the forward's 'norm'")
            _check("NLLLossOps: norm", norm, (1,), np.float32)
            return [Launch(self.prg, "nll_backward_mean", (round_up(dx.size, 64),), None,
                           args + [norm, np.float32(beta)])]
        return [Launch(self.prg, "nll_backward", (round_up(dx.size, 64),), None,
                       args + [np.float32(1.0), np.float32(beta)])]
