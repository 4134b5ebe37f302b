"""Loss layers: SoftmaxWithLoss, NLLLoss, MSELoss.

A reduced loss is a tensor of shape (1,); backpropagation starts from its ``dy`` (the
Net fills it with the operator's ``loss_weight``). Labels never receive a gradient: the
Net asks for none (``NO_GRAD_INPUTS``).

    SoftmaxWithLoss  L = 1/N sum_n (log sum_c exp(x_nc) - x_n,t_n)
                     dL/dx_nc = dy/N * (softmax(x_n)_c - [c == t_n])
    NLLLoss          l_n = -x_n,t_n;     L = l (none), sum_n l_n (sum), 1/N sum_n l_n (mean)
    MSELoss          l_i = (a_i - b_i)^2; L = l (none), sum l (sum), 1/size sum l (mean)
                     dL/da = 2 dy (a - b) * s = -dL/db, s = 1 or 1/size
Labels outside [0, C) are ignored (no loss, no gradient); the mean still divides by N.
"""
import numpy as np

from ..core.loss import LABEL_DTYPES, NLLLossOps, SoftmaxCrossEntropy
from ..core.pointwise import PointwiseBroadcast, PointwiseBroadcastReduce
from ..tensor import Tensor
from .base import Layer, Setup, TensorSpec, register

REDUCTIONS = ("none", "sum", "mean")


def float_scratch(ws, n):
    """An (n,) float32 view of a byte workspace tensor."""
    if ws is None or ws.nbytes < 4 * n or ws.byte_offset % 4:
        raise ValueError("loss: needs a 4-byte aligned workspace of %d bytes, got %r" % (4 * n, ws))
    return Tensor(ws.ctx, (n,), "float32", buffer=ws.buffer, offset=ws.byte_offset // 4)


class _LabelLoss(Layer):
    """Common checks of (scores (N, C), labels (N,)) losses."""
    BACKWARD_READS_INPUTS = True
    NO_GRAD_INPUTS = (1,)   # the labels

    def check_inputs(self, in_specs):
        if len(in_specs) != 2:
            self.fail("expects 2 inputs (scores, labels), got %d" % len(in_specs))
        x, label = in_specs
        if len(x.shape) != 2:
            self.fail("input 0 must be (batch, classes), got shape %s" % (x.shape,))
        if x.dtype.name != "float32":
            self.fail("input 0 must be float32, got %s" % x.dtype.name)
        n = x.shape[0]
        if not label.shape or label.shape[0] != n or int(np.prod(label.shape)) != n:
            self.fail("labels must have shape (%d,) to match the batch of input 0 %s, got %s"
                      % (n, x.shape, label.shape))
        if label.dtype.name not in LABEL_DTYPES:
            self.fail("labels must be int32 or int64 (or float32 holding class indices), got %s"
                      % label.dtype.name)
        return x.shape

    @staticmethod
    def flat(label):
        return label if label.ndim == 1 else label.view((label.shape[0],))


@register("SoftmaxWithLoss")
class SoftmaxWithLoss(_LabelLoss):
    """Mean cross entropy of logits (N, C) against integer class labels (N,)."""
    OPTIONS = {}

    def build(self, in_specs):
        n, c = self.check_inputs(in_specs)
        self.op = SoftmaxCrossEntropy(self.ctx, n, c, in_specs[1].dtype)
        self.n = n
        return Setup([TensorSpec((1,), "float32")], workspace=4 * n)

    def forward(self, x, y, params, ws, saved):
        return self.op.launches(x[0], self.flat(x[1]), float_scratch(ws, self.n), y[0])

    def backward(self, x, dx, y, dy, params, dparams, ws, saved, accumulate):
        if dx[0] is None:
            return []
        return self.op.backward_launches(x[0], self.flat(x[1]), dy[0], dx[0],
                                         beta=float(accumulate[0]))


def _check_reduce(layer):
    if layer.options["reduce"] not in REDUCTIONS:
        layer.fail("option 'reduce' must be one of %s, got %r"
                   % (", ".join(REDUCTIONS), layer.options["reduce"]))


@register("NLLLoss")
class NLLLoss(_LabelLoss):
    """Negative log-likelihood of log-probabilities (N, C) at the labels; mean, sum or none."""
    OPTIONS = {"reduce": "mean"}
    BACKWARD_READS_INPUTS = True  # the labels

    def __init__(self, ctx, name=None, **options):
        super().__init__(ctx, name, **options)
        _check_reduce(self)

    def build(self, in_specs):
        n, c = self.check_inputs(in_specs)
        self.n = n
        self.op = NLLLossOps(self.ctx, n, c, in_specs[1].dtype, self.options["reduce"])
        ws = 0 if self.options["reduce"] == "none" else 4 * n
        return Setup([TensorSpec(self.op.out_shape, "float32")], workspace=ws)

    def forward(self, x, y, params, ws, saved):
        rows = None if self.options["reduce"] == "none" else float_scratch(ws, self.n)
        return self.op.launches(x[0], self.flat(x[1]), y[0], rows)

    def backward(self, x, dx, y, dy, params, dparams, ws, saved, accumulate):
        if dx[0] is None:
            return []
        return self.op.backward_launches(self.flat(x[1]), dy[0], dx[0], beta=float(accumulate[0]))


@register("MSELoss")
class MSELoss(Layer):
    """Squared error between two inputs of one shape; mean, sum or none."""
    OPTIONS = {"reduce": "mean"}
    BACKWARD_READS_INPUTS = True

    def __init__(self, ctx, name=None, **options):
        super().__init__(ctx, name, **options)
        _check_reduce(self)

    def build(self, in_specs):
        if len(in_specs) != 2:
            self.fail("expects 2 inputs, got %d" % len(in_specs))
        a, b = in_specs
        if a.shape != b.shape:
            self.fail("inputs must have the same shape, got %s and %s" % (a.shape, b.shape))
        if a.dtype.name != "float32" or b.dtype.name != "float32":
            self.fail("inputs must be float32, got %s and %s" % (a.dtype.name, b.dtype.name))
        self.shape = a.shape
        size = int(np.prod(a.shape, dtype=np.int64))
        reduce = self.options["reduce"]
        self.scale = 1.0 / max(size, 1) if reduce == "mean" else 1.0
        self.out_shape = a.shape if reduce == "none" else (1,)
        specs = [(a.shape, "float32")] * 2
        code = "y0 = x0 - x1; y0 = y0 * y0;"
        if reduce == "none":
            self.op = PointwiseBroadcast(self.ctx, specs, [(a.shape, "float32")], code,
                                         name="mse_forward")
        else:
            self.op = PointwiseBroadcastReduce(self.ctx, specs, [((1,), "float32")], code,
                                               name="mse_forward")
        self.grad_op = None
        return Setup([TensorSpec(self.out_shape, "float32")])

    def forward(self, x, y, params, ws, saved):
        if self.options["reduce"] == "none":
            return self.op.launches(x, y)
        return self.op.launches(x, y, alpha=self.scale)

    def _grad_op(self):
        # grad = w0 * dy * (a - b) with w0 = +-2 * scale; built on first use
        if self.grad_op is None:
            specs = [(self.out_shape, "float32"), (self.shape, "float32"), (self.shape, "float32")]
            self.grad_op = PointwiseBroadcast(self.ctx, specs, [(self.shape, "float32")],
                                              "y0 = w0 * x0 * (x1 - x2);", params=["float"],
                                              name="mse_backward")
        return self.grad_op

    def backward(self, x, dx, y, dy, params, dparams, ws, saved, accumulate):
        out = []
        for i, sign in ((0, 2.0), (1, -2.0)):
            if dx[i] is not None:
                out += self._grad_op().launches([dy[0], x[0], x[1]], [dx[i]], [sign * self.scale],
                                                beta=float(accumulate[i]))
        return out
