"""Loss layers: SoftmaxWithLoss, NLLLoss, MSELoss.

A reduced loss is a tensor of shape (1,); backpropagation starts from its ``dy`` (the
Net fills it with the operator's ``loss_weight``). Labels never receive a gradient: the
Net asks for none (``NO_GRAD_INPUTS``).

    SoftmaxWithLoss  L = 1/M sum_n (log sum_c exp(x_nc) - x_n,t_n)
                     dL/dx_nc = dy/M * (softmax(x_n)_c - [c == t_n])
    NLLLoss          l_n = -x_n,t_n;     L = l (none), sum_n l_n (sum), 1/M sum_n l_n (mean)
    MSELoss          l_i = (a_i - b_i)^2; L = l (none), sum l (sum), 1/size sum l (mean)
                     dL/da = 2 dy (a - b) * s = -dL/db, s = 1 or 1/size
The sums run over the rows that count and M is their number: a row whose label equals the
option ``ignore_index`` (PyTorch's, default -100) adds no loss and no gradient, as in
PyTorch's CrossEntropyLoss and NLLLoss with reduction='mean'. Labels given to ``net(...)``
are checked on the host (integers, in [0, C) or ignore_index: ``check_input_data``).
"""
import numpy as np

from ..core.loss import IGNORE_INDEX, LABEL_DTYPES, NLLLossOps, SoftmaxCrossEntropy
from ..core.pointwise import PointwiseBroadcast, PointwiseBroadcastReduce
from ..dtypes import HALF_TYPES, dtype_name
from ..errors import LabelError
from ..tensor import Tensor
from ..utils import is_int
from .base import HALF_TAKERS, TRAIN, Layer, Setup, TensorSpec, register

REDUCTIONS = ("none", "sum", "mean")


def float_scratch(ws, n, start=0):
    """An (n,) float32 view of a byte workspace tensor, ``start`` floats in."""
    if ws is None or ws.nbytes < 4 * (start + n) or ws.byte_offset % 4:
        raise ValueError("loss: needs a 4-byte aligned workspace of %d bytes, got %r"
                         % (4 * (start + n), ws))
    return Tensor(ws.ctx, (n,), "float32", buffer=ws.buffer, offset=ws.byte_offset // 4 + start)


class _LabelLoss(Layer):
    """Common checks of (scores (N, C), labels (N,)) losses with an ``ignore_index``.

    A mean keeps its factor (``norm``, one float) from forward to backward: a saved tensor
    when training, the end of the workspace when predicting."""
    BACKWARD_READS_INPUTS = True
    NO_GRAD_INPUTS = (1,)   # the labels

    def __init__(self, ctx, name=None, **options):
        super().__init__(ctx, name, **options)
        if not is_int(self.options["ignore_index"]):
            self.fail("option 'ignore_index' must be an integer, got %r"
                      % (self.options["ignore_index"],))
        self.ignore_index = int(self.options["ignore_index"])

    def check_inputs(self, in_specs):
        if len(in_specs) != 2:
            self.fail("expects 2 inputs (scores, labels), got %d" % len(in_specs))
        x, label = in_specs
        if len(x.shape) != 2:
            self.fail("input 0 must be (batch, classes), got shape %s" % (x.shape,))
        takes_half = self.HALF_STORAGE in HALF_TAKERS
        if x.dtype.name != "float32" and not (takes_half and x.dtype in HALF_TYPES):
            self.fail("input 0 must be float32%s, got %s" % (
                " (or float16 or bfloat16)" if takes_half else "", dtype_name(x.dtype)))
        n = x.shape[0]
        if not label.shape or label.shape[0] != n or int(np.prod(label.shape)) != n:
            self.fail("labels must have shape (%d,) to match the batch of input 0 %s, got %s"
                      % (n, x.shape, label.shape))
        if label.dtype.name not in LABEL_DTYPES:
            self.fail("labels must be int32 or int64 (or float32 holding class indices), got %s"
                      % label.dtype.name)
        return x.shape

    def check_input_data(self, index, array, where):
        """Labels from the host: integers (integral values for a float32 label input), each
        in [0, C) or equal to ignore_index; else a LabelError naming the first bad one."""
        if index != 1:
            return
        declared = self.in_specs[1].dtype
        kind = array.dtype.kind
        if kind not in "iuf" or (kind == "f" and declared.kind != "f"):
            raise LabelError("%s '%s': labels (net input '%s') must be integers, got %s data; "
                             "the input is %s" % (self.type_name, self.name, where,
                                                  array.dtype.name, declared.name))
        classes = self.in_specs[0].shape[1]
        bad = (array < 0) | (array >= classes)
        if kind == "f":
            bad |= array != np.floor(array)  # NaN too
        bad &= array != self.ignore_index
        if bad.any():
            pos = np.unravel_index(int(np.flatnonzero(bad)[0]), array.shape)
            pos = pos[0] if len(pos) == 1 else tuple(int(p) for p in pos)
            raise LabelError("%s '%s': label %r at position %s of net input '%s' is not a "
                             "class: the labels must be integers in [0, %d) or ignore_index "
                             "(%d)" % (self.type_name, self.name, array[bad][0].item(), pos,
                                       where, classes, self.ignore_index))

    def memory(self, n):
        """(workspace bytes, saved specs) of a mean: N floats of per-row scratch, then the
        one float ``norm``."""
        if self.mode == TRAIN:
            return 4 * n, [TensorSpec((1,), "float32")]
        return 4 * (n + 1), []

    def norm(self, ws, saved):
        """Where the mean's factor lives (see ``memory``)."""
        return saved[0] if saved else float_scratch(ws, 1, start=self.n)

    @staticmethod
    def flat(label):
        return label if label.ndim == 1 else label.view((label.shape[0],))


@register("SoftmaxWithLoss")
class SoftmaxWithLoss(_LabelLoss):
    """Mean cross entropy of logits (N, C) against integer class labels (N,), over the rows
    whose label is not ``ignore_index``. 16-bit logits (an fp16 or bf16 net's) are read as
    they are stored and their gradient written so, the loss float32: the same values as
    a conversion to float32 before the loss, without its passes over the logits."""
    OPTIONS = {"ignore_index": IGNORE_INDEX}
    HALF_STORAGE = "reads"

    def build(self, in_specs):
        n, c = self.check_inputs(in_specs)
        self.op = SoftmaxCrossEntropy(self.ctx, n, c, in_specs[1].dtype, self.ignore_index,
                                      in_specs[0].dtype)
        self.n = n
        ws, saved = self.memory(n)
        # training: each row's log sum exp too, so that the backward pass reads the
        # logits once (a vocabulary's logits are the largest tensor of a language model)
        saved = saved + ([TensorSpec((n,), "float32")] if saved else [])
        return Setup([TensorSpec((1,), "float32")], workspace=ws, saved=saved)

    @staticmethod
    def _lse(saved):
        return saved[1] if saved else None

    def forward(self, x, y, params, ws, saved):
        return self.op.launches(x[0], self.flat(x[1]), float_scratch(ws, self.n), y[0],
                                self.norm(ws, saved), lse=self._lse(saved))

    def backward(self, x, dx, y, dy, params, dparams, ws, saved, accumulate):
        if dx[0] is None:
            return []
        return self.op.backward_launches(x[0], self.flat(x[1]), dy[0], dx[0],
                                         self.norm(ws, saved), beta=float(accumulate[0]),
                                         lse=self._lse(saved))


def _check_reduce(layer):
    if layer.options["reduce"] not in REDUCTIONS:
        layer.fail("option 'reduce' must be one of %s, got %r"
                   % (", ".join(REDUCTIONS), layer.options["reduce"]))


@register("NLLLoss")
class NLLLoss(_LabelLoss):
    """Negative log-likelihood of log-probabilities (N, C) at the labels; mean, sum or none;
    rows whose label is ``ignore_index`` add nothing."""
    OPTIONS = {"reduce": "mean", "ignore_index": IGNORE_INDEX}
    BACKWARD_READS_INPUTS = True  # the labels

    def __init__(self, ctx, name=None, **options):
        super().__init__(ctx, name, **options)
        _check_reduce(self)

    def build(self, in_specs):
        n, c = self.check_inputs(in_specs)
        self.n = n
        reduce = self.options["reduce"]
        self.op = NLLLossOps(self.ctx, n, c, in_specs[1].dtype, reduce, self.ignore_index)
        if reduce == "mean":
            ws, saved = self.memory(n)
        else:
            ws, saved = (0 if reduce == "none" else 4 * n), []
        return Setup([TensorSpec(self.op.out_shape, "float32")], workspace=ws, saved=saved)

    def _norm(self, ws, saved):
        return self.norm(ws, saved) if self.options["reduce"] == "mean" else None

    def forward(self, x, y, params, ws, saved):
        rows = None if self.options["reduce"] == "none" else float_scratch(ws, self.n)
        return self.op.launches(x[0], self.flat(x[1]), y[0], rows, self._norm(ws, saved))

    def backward(self, x, dx, y, dy, params, dparams, ws, saved, accumulate):
        if dx[0] is None:
            return []
        return self.op.backward_launches(self.flat(x[1]), dy[0], dx[0], beta=float(accumulate[0]),
                                         norm=self._norm(ws, saved))


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
