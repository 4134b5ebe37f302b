"""The ONNX training operators SoftmaxCrossEntropyLoss and NegativeLogLikelihoodLoss, onto
dlprim's loss layers (``dlprim.layers.loss``); and ``without_losses``, a training model's
prediction part.

ONNX's definition (opset 12 on), scores x of shape (N, C) or (N, C, D1..Dk), labels t of
(N) or (N, D1..Dk), optional class weights w (C), ignore_index i (absent: none):

    l_j = -w[t_j] * logp_j,t_j  over the M = N*D1*..*Dk positions j (0 where t_j = i)
    none: l (N, D1..Dk);  sum: sum_j l_j;  mean: sum_j l_j / sum_{j: t_j != i} w[t_j]

with logp = x for NegativeLogLikelihoodLoss and log_softmax(x) over C (the optional second
output, log_prob) for SoftmaxCrossEntropyLoss. dlprim's layers take (M, C) rows, so the
class axis is moved last and the positions flattened into rows (Transpose, Reshape). Class
weights scale the rows' log-probabilities (an Elementwise product); a weighted mean is the
weighted sum divided by an NLLLoss of -w broadcast to (M, C), which sums w[t_j] over the
positions that count. The plain mean of SoftmaxCrossEntropyLoss is dlprim's fused
SoftmaxWithLoss (what ``dlprim.onnx.save`` writes it from). A reduced loss is ONNX's scalar
(dlprim's (1,) loss reshaped).
"""
import logging

import numpy as np

from ..core.loss import IGNORE_INDEX
from .errors import OnnxImportError
from .model_reader import DEFAULT_DOMAINS
from .registry import Unsupported, converts

__all__ = ["LOSS_OPS", "without_losses"]

log = logging.getLogger(__name__)

LOSS_OPS = ("SoftmaxCrossEntropyLoss", "NegativeLogLikelihoodLoss")
REDUCTIONS = ("none", "sum", "mean")


class _Loss:
    """One loss node's reading: shapes checked, attributes decoded, names for new tensors."""

    def __init__(self, b, node):
        self.b, self.node = b, node
        self.reduction = node.attr("reduction", "mean")
        if self.reduction not in REDUCTIONS:
            raise Unsupported("attribute reduction %r (ONNX defines none, sum, mean)"
                              % (self.reduction,))
        ignore = node.attr("ignore_index")
        # no ignore_index: every label is a class, and dlprim's default is none of them
        self.ignore = IGNORE_INDEX if ignore is None else int(ignore)
        self.shape = tuple(b.shape(node.inputs[0]))
        if len(self.shape) < 2:
            raise Unsupported("input scores of shape %s: ONNX needs (N, C) or (N, C, D1..Dk)"
                              % (self.shape,))
        self.n, self.c = self.shape[:2]
        self.rows = int(np.prod(self.shape, dtype=np.int64)) // max(self.c, 1)
        want = (self.n,) + self.shape[2:]
        got = tuple(b.shape(node.inputs[1]))
        if got != want:
            raise Unsupported("input labels of shape %s: scores %s need labels %s"
                              % (got, self.shape, want))
        self.weights = node.input(2)
        if self.weights is not None and tuple(b.shape(self.weights)) != (self.c,):
            raise Unsupported("input weights of shape %s: %d classes need (%d,)"
                              % (tuple(b.shape(self.weights)), self.c, self.c))

    def fresh(self, what):
        return self.b.fresh(self.node.outputs[0] + "/" + what)

    def add(self, type, inputs, shape, what, last=False, **kw):
        """A dlprim operator of this node writing a new tensor named after ``what``; the
        ``last`` one takes the node's name."""
        return self.b.add(type, inputs, shape, output=self.fresh(what),
                          name=self.node.name if last else self.node.name + "/" + what, **kw)

    # ----- the (M, C) rows and (M,) labels dlprim's layers read
    def score_rows(self, x):
        """dlprim tensor ``x`` of the scores' shape as (M, C) rows, the class axis last."""
        if len(self.shape) == 2:
            return x
        d = self.rows // max(self.n, 1)
        t = x if len(self.shape) == 3 else self.add("Reshape", [x], (self.n, self.c, d), "nc_d",
                                                    options={"dims": [0, self.c, d]})
        t = self.add("Transpose", [t], (self.n, d, self.c), "nd_c", options={"dims": [0, 2, 1]})
        return self.add("Reshape", [t], (self.rows, self.c), "rows",
                        options={"dims": [-1, self.c]})

    def labels(self):
        """The labels as an (M,) dlprim tensor (a constant as float32 class indices, which
        the loss layers take, as integer constants do not run)."""
        b, name = self.b, self.node.inputs[1]
        if b.is_const(name):
            array = np.asarray(b.consts[name]).reshape(-1)
            return b.value(b.constant(array.astype(np.float32), name + "/float"))
        t = b.value(name)
        if len(self.shape) == 2:
            return t
        return self.add("Reshape", [t], (self.rows,), "labels", options={"dims": [-1]},
                        dtype=b.dtype(name))

    # ----- the loss
    def nll(self, logp_rows, labels):
        """The node's loss (output 0) from (M, C) log-probabilities."""
        if self.weights is None:
            return self.finish(self.nll_layer(logp_rows, labels, self.reduction, "nll", True))
        w = self.class_weights()
        weighted = self.add("Elementwise", [logp_rows, w], (self.rows, self.c), "weighted",
                            options={"operation": "prod"})
        if self.reduction != "mean":
            return self.finish(self.nll_layer(weighted, labels, self.reduction, "nll", True))
        total = self.nll_layer(weighted, labels, "sum", "weighted_sum")
        # sum of w[t_j] over the positions that count: NLL of -w in every row
        zeros = self.frozen(np.zeros((self.rows, self.c), np.float32), "zeros")
        minus_w = self.add("Elementwise", [zeros, w], (self.rows, self.c), "minus_w",
                           options={"operation": "sum", "coef2": -1.0})
        count = self.nll_layer(minus_w, labels, "sum", "weight_sum")
        return self.finish(self.add("Elementwise", [total, count], (1,), "mean", True,
                                    options={"operation": "div"}))

    def nll_layer(self, logp_rows, labels, reduce, what, last=False):
        shape = (self.rows,) if reduce == "none" else (1,)
        return self.add("NLLLoss", [logp_rows, labels], shape, what, last,
                        options={"reduce": reduce, "ignore_index": self.ignore})

    def class_weights(self):
        """The (C,) weights: a constant one becomes a Parameter that training leaves alone."""
        name = self.weights
        if not self.b.is_const(name):
            return self.b.value(name)
        return self.frozen(np.asarray(self.b.consts[name], np.float32), "class_weights")

    def scalar(self, t):
        """Output 0 of the node: the reduced loss ``t`` of dlprim's shape (1,) as ONNX's
        scalar."""
        return self.b.add("Reshape", [t], (), self.node, options={"dims": []})

    def frozen(self, array, what):
        pname = self.b.param(self.fresh(what), array)
        return self.add("Parameter", [], array.shape, what, params=[pname],
                        options={"shape": list(array.shape), "is_trainable": False})

    def finish(self, t):
        """Output 0 of the node: ``t``, reshaped to (N, D1..Dk) for reduction none."""
        out = self.shape[:1] + self.shape[2:]
        if self.reduction != "none":
            return self.scalar(t)
        if len(self.shape) == 2:
            self.b.out(self.node, t)
            return t
        return self.b.add("Reshape", [t], out, self.node, options={"dims": [-1] + list(out[1:])})


@converts("NegativeLogLikelihoodLoss")
def nll_loss(b, node):
    loss = _Loss(b, node)
    loss.nll(loss.score_rows(b.value(node.inputs[0])), loss.labels())


@converts("SoftmaxCrossEntropyLoss")
def softmax_cross_entropy(b, node):
    loss = _Loss(b, node)
    wants_log_prob = len(node.outputs) > 1 and node.outputs[1] and _used(b, node.outputs[1])
    x = b.value(node.inputs[0])
    if loss.reduction == "mean" and loss.weights is None and not wants_log_prob:
        t = loss.add("SoftmaxWithLoss", [loss.score_rows(x), loss.labels()], (1,), "xent",
                     options={"ignore_index": loss.ignore})
        loss.scalar(t)
        return
    if wants_log_prob:
        # dlprim's Softmax runs over axis 1 of (N, C, D) with each position apart
        d = loss.rows // max(loss.n, 1)
        view = x if len(loss.shape) <= 3 else \
            loss.add("Reshape", [x], (loss.n, loss.c, d), "nc_d", options={"dims": [0, loss.c, d]})
        logp = loss.add("Softmax", [view], (loss.n, loss.c) + ((d,) if len(loss.shape) > 2 else ()),
                        "log_prob", options={"log": True})
        if len(loss.shape) > 3:
            logp = loss.add("Reshape", [logp], loss.shape, "log_prob_out",
                            options={"dims": [0] + list(loss.shape[1:])})
        b.out(node, logp, 1)
        rows = loss.score_rows(logp)
    else:
        rows = loss.add("Softmax", [loss.score_rows(x)], (loss.rows, loss.c), "log_softmax",
                        options={"log": True})
    loss.nll(rows, loss.labels())


def _used(b, name):
    """Whether some node or the model's outputs read ONNX tensor ``name``."""
    return name in b.graph_outputs or bool(b.consumers.get(name))


# ----- a training model's prediction part
def without_losses(model):
    """``model`` (a ModelProto) without its loss nodes and the label inputs that only they
    read, for predictions: its outputs that need neither labels nor a loss, or where every
    output does, the scores each loss reads (the logits of a SoftmaxCrossEntropyLoss, the
    log-probabilities of a NegativeLogLikelihoodLoss). ``model`` itself when it has no
    loss node; otherwise a copy, and a log record of what was left out."""
    g = model.graph
    at = [i for i, n in enumerate(g.node) if n.op_type in LOSS_OPS and n.domain in DEFAULT_DOMAINS]
    if not at:
        return model
    losses = [g.node[i] for i in at]
    sources, after_loss = _lineage(g, set(at))
    scores = [n.input[0] for n in losses]
    predicted = set().union(*(sources.get(s, set()) for s in scores))
    labels = set().union(*(sources.get(i, set()) for n in losses for i in n.input[1:] if i))
    labels -= predicted
    wanted = [o.name for o in g.output
              if o.name not in after_loss and not sources.get(o.name, set()) & labels]
    if not wanted:
        wanted = [s for s in dict.fromkeys(scores)
                  if s not in after_loss and not sources.get(s, set()) & labels]
    if not wanted:
        raise OnnxImportError("every output of the model is a loss or needs its labels (%s), "
                              "and no loss reads scores computed without them"
                              % ", ".join(sorted(labels)))
    out, need = _pruned(model, wanted, labels)
    dropped = [n.name or n.op_type for n in losses if not any(o in need for o in n.output)]
    left_out = [i.name for i in g.input if i.name not in {j.name for j in out.graph.input}]
    log.info("predicting without the loss %s (%s)%s; outputs: %s",
             "node" if len(dropped) == 1 else "nodes", ", ".join(dropped),
             " and the label input%s %s" % ("" if len(left_out) == 1 else "s",
                                            ", ".join(left_out)) if left_out else "",
             ", ".join(wanted))
    return out


def _lineage(g, losses):
    """({tensor: the model inputs it is computed from}, the tensors computed from a loss);
    ``losses``: the indices of the loss nodes."""
    inits = {t.name for t in g.initializer}
    sources = {vi.name: {vi.name} for vi in g.input if vi.name not in inits}
    after = set()
    for k, n in enumerate(g.node):
        ins = [i for i in n.input if i]
        came = set().union(*(sources.get(i, set()) for i in ins))
        downstream = k in losses or any(i in after for i in ins)
        for o in n.output:
            if o:
                sources[o] = came
                if downstream:
                    after.add(o)
    return sources, after


def _pruned(model, outputs, labels):
    """(a copy of ``model`` with ``outputs`` as its outputs, only the nodes they need, and
    without the ``labels`` inputs those nodes do not read; the tensors they read)."""
    from onnx import ModelProto, helper
    g = model.graph
    need, keep = set(outputs), []
    for n in reversed(g.node):
        if any(o in need for o in n.output if o):
            keep.append(n)
            need.update(i for i in n.input if i)
    info = {vi.name: vi for vi in list(g.input) + list(g.value_info) + list(g.output)}
    out = ModelProto()
    out.CopyFrom(model)
    new = out.graph
    del new.node[:], new.output[:], new.input[:]
    new.node.extend(reversed(keep))
    new.output.extend(info[o] if o in info else helper.make_empty_tensor_value_info(o)
                      for o in outputs)
    new.input.extend(vi for vi in g.input if vi.name not in labels or vi.name in need)
    return out, need
