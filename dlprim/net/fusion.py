"""Predict-mode folds: a convolution, the BatchNorm that alone reads it, and an activation
that alone reads that, run as one convolution.

In predict mode BatchNorm is a per-channel affine map of its input, so it folds into the
convolution before it: w'[k] = w[k] s[k] and b'[k] = (b[k] - mean[k]) s[k] + beta[k]
with s = gamma / sqrt(running_var + eps); an activation the convolution's epilogue can
apply (``core.activation.FUSABLE``) joins it. The graph and the layers stay as they are
(a Net switches modes, and parameters change between forwards): the execution plan runs
the convolution layer's ``folded_forward`` -- the folding kernels, then the convolution
into the last folded operator's output -- in place of the three operators' launches.
The folding pass reads and writes the weights at every forward, the passes it saves read
and write the output: a chain is folded where the weights are no larger than the output
(on two PoCL cores resnet18 at batch 4, whose late layers hold far more weights than
outputs, ran 1-7% slower with every chain folded, mobilenet_v2 6-15% faster).
The folded output is then written while the convolution's input and workspace are
alive, so its block's lifetime is stretched back to the convolution (``stretch``) and
the memory plan keeps them apart.

In train mode (``train_folds``) a BatchNorm's kernels run the activation that alone
reads its output, in place, right after it (relu and the others of
``core.batchnorm.BN_ACTIVATIONS``): the BatchNorm's forward writes act(y) where the
activation would have, and its backward takes the activation's gradient and recomputes y
from x for the activation's derivative. The activation's own launches, a read and a
write of the whole tensor each way, are gone. The in-place activation already shares the
BatchNorm output's memory and gradient, so the memory plan stays as it is.

``ENABLED`` turns the folds off (the tests compare both).
"""
from collections import namedtuple

from ..core.activation import FUSABLE

__all__ = ["Fold", "ActivationFold", "predict_folds", "train_folds", "stretch", "ENABLED"]

ENABLED = True


class Fold(namedtuple("Fold", "conv bn act out activation")):
    """Operator indices of the convolution, its BatchNorm and the activation (None when
    none joins); ``out``: the value the folded convolution writes; ``activation``: the
    epilogue's activation name."""
    __slots__ = ()


class ActivationFold(namedtuple("ActivationFold", "bn act activation")):
    """A train-mode fold: operator indices of the BatchNorm and the activation it runs,
    and the activation's name."""
    __slots__ = ()


def _sole_reader(graph, vid, outputs):
    """The one operator reading value ``vid`` (None if several, none, or a net output)."""
    readers = graph.values[vid].consumers
    if vid in outputs or len(readers) != 1:
        return None
    return graph.ops[readers[0][0]]


def predict_folds(graph, layers, workspaces):
    """{convolution op index: Fold} for every foldable chain of ``graph``; ``layers`` the
    set-up layers (predict mode), ``workspaces`` their planned workspace bytes."""
    if not ENABLED:
        return {}
    outputs = {graph.latest[name] for name in graph.outputs}
    folds = {}
    for op in graph.ops:
        conv = layers[op.index]
        if op.type != "Convolution2D" or conv.activation != "identity" or len(op.out_values) != 1:
            continue
        bn = _sole_reader(graph, op.out_values[0], outputs)
        if bn is None or bn.type != "BatchNorm":
            continue
        out, act, activation = bn.out_values[0], None, "identity"
        reader = _sole_reader(graph, out, outputs)
        if reader is not None and reader.type == "Activation" \
                and layers[reader.index].options["activation"] in FUSABLE:
            act, out = reader.index, reader.out_values[0]
            activation = layers[reader.index].options["activation"]
        if conv.weight_elements > conv.output_elements:
            continue  # refolding the weights each forward would cost more than it saves
        if conv.fold_workspace(activation) > workspaces[op.index]:
            continue  # the folded convolution would need more scratch than was planned
        folds[op.index] = Fold(op.index, bn.index, act, out, activation)
    return folds


def train_folds(graph, layers, autograd):
    """{BatchNorm op index: ActivationFold} for every BatchNorm whose output only an
    activation it can run reads, that activation next in the graph, in place on it
    (``autograd``: the same memory and gradient), with no options of its own."""
    if not ENABLED:
        return {}
    outputs = {graph.latest[name] for name in graph.outputs}
    folds = {}
    for op in graph.ops:
        if op.type != "BatchNorm" or len(op.out_values) != 1:
            continue
        act = _sole_reader(graph, op.out_values[0], outputs)
        if act is None or act.type != "Activation" or act.index != op.index + 1:
            continue
        layer = layers[act.index]
        name = layer.options["activation"]
        if layer.param_values() or not layers[op.index].fuses_activation(name):
            continue
        src, out = op.out_values[0], act.out_values[0]
        if autograd.storage[src] != autograd.storage[out]:
            continue  # not in place: the activation's output lives elsewhere
        if autograd.backward[op.index] and \
                autograd.grad_storage[src] != autograd.grad_storage[out]:
            continue  # the BatchNorm's backward would read another gradient
        folds[op.index] = ActivationFold(op.index, act.index, name)
    return folds


def stretch(blocks, folds, autograd):
    """``blocks`` with each folded output's lifetime starting at its convolution."""
    starts = {}
    for f in folds.values():
        name, t = "a:%d" % autograd.storage[f.out], autograd.t_fwd(f.conv)
        starts[name] = min(starts.get(name, t), t)
    for block in blocks:
        if block.name in starts:
            block.intervals = [(min(a, starts[block.name]), b) for a, b in block.intervals]
    return blocks
