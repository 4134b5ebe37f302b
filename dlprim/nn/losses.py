"""The losses ``Module.netconfig(loss=...)`` can end a net with.

Each adds the inputs the loss reads after the model's own input ``data``, and one
operator whose output ``loss`` is the net's only output, as ``dlprim.models`` spells its
training nets (an int ``label`` of shape (batch,) and a SoftmaxWithLoss for
"cross_entropy").
"""
from typing import Optional, Sequence

from ..net.graph import GraphError
from ..net.netconfig import NetConfig

__all__ = ["LOSSES", "check_loss", "add_loss"]


def _class_scores(name, shape, loss):
    if len(shape) != 2:
        raise GraphError("loss=%r needs (batch, classes) scores, but the model's output '%s' "
                         "has shape %s" % (loss, name, tuple(shape)))


def _cross_entropy(cfg, name, shape):
    _class_scores(name, shape, "cross_entropy")
    cfg.add_input("label", [shape[0]], dtype="int")
    cfg.add("SoftmaxWithLoss", name="loss", inputs=[name, "label"], outputs=["loss"])


def _nll(cfg, name, shape):
    _class_scores(name, shape, "nll")
    cfg.add_input("label", [shape[0]], dtype="int")
    cfg.add("NLLLoss", name="loss", inputs=[name, "label"], outputs=["loss"])


def _mse(cfg, name, shape):
    cfg.add_input("target", list(shape))
    cfg.add("MSELoss", name="loss", inputs=[name, "target"], outputs=["loss"])


# name -> (what it adds, the net inputs it adds)
LOSSES = {
    "cross_entropy": (_cross_entropy, ("label",)),   # logits (N, C), int labels (N,)
    "nll": (_nll, ("label",)),                       # log-probabilities (N, C), int labels (N,)
    "mse": (_mse, ("target",)),                      # mean squared error to a float target
}


def check_loss(loss: Optional[str]) -> None:
    """Raise a GraphError unless ``loss`` is None or a name of LOSSES."""
    if loss is not None and loss not in LOSSES:
        raise GraphError("unknown loss %r; accepted: %s, or None for the model's own output"
                         % (loss, ", ".join(sorted(LOSSES))))


def add_loss(cfg: NetConfig, loss: str, name: str, shape: Sequence[int]) -> None:
    """End NetConfig ``cfg`` with ``loss`` over the model's output tensor ``name`` of
    ``shape``: its inputs, the operator, and ``loss`` as the only net output."""
    check_loss(loss)
    add, inputs = LOSSES[loss]
    taken = {op["name"] for op in cfg.operators} | {o for op in cfg.operators for o in op["outputs"]}
    for clash in sorted(taken & ({"loss"} | set(inputs))):
        raise GraphError("loss=%r adds '%s', which the model already names an operator or "
                         "tensor: rename that module" % (loss, clash))
    add(cfg, name, shape)
    cfg.set_outputs(["loss"])
