"""From a model's forward pass to a NetConfig.

``netconfig`` traces the model once over an input Value, then writes the recorded
operators in call order. Two things make the graph the one dlprim's builders write by
hand:

* the graph passes run over it (``dlprim.net.passes``): an activation whose input is read
  by nothing else is folded into the Convolution2D, InnerProduct or Elementwise before it
  (their ``activation`` option: one kernel, the same numbers), so ``relu(conv(x))`` costs
  no pass of its own; the folded value keeps the producer's tensor name (its module path);
* an in-place operator (``nn.ReLU(inplace=True)``, ``nn.Dropout(p, inplace=True)``) writes
  under its input's tensor name, as PyTorch's in-place ops overwrite their input.
"""
from typing import Any, Optional, Sequence, Tuple

from ..dtypes import dlp_name
from ..net.graph import GraphError
from ..net import passes
from ..net.netconfig import NetConfig
from ..utils import shape_problem
from .losses import add_loss, check_loss
from .trace import Trace

__all__ = ["netconfig", "run"]


def netconfig(model: Any, input_shape: Sequence[int], loss: Optional[str] = None,
              dtype: Any = "float") -> NetConfig:
    """The NetConfig of ``model`` (a dlprim.nn Module) on an input ``data`` of
    ``input_shape`` and ``dtype``, ended by ``loss`` (see ``Module.netconfig``)."""
    check_loss(loss)
    trace, outputs = run(model, input_shape, dtype)
    if any(v.node is None for v in outputs):
        raise GraphError("%s: the model's output is its input; it computes nothing"
                         % type(model).__name__)
    if loss is not None and len(outputs) != 1:
        raise GraphError("loss=%r needs one model output, the model returns %d"
                         % (loss, len(outputs)))
    cfg = _write(trace)
    cfg.set_outputs(list(dict.fromkeys(v.name for v in outputs)))
    cfg, names = _keep_producer_names(cfg, passes.run(cfg))
    if loss is None:
        return cfg
    cfg.set_outputs([])
    add_loss(cfg, loss, names.get(outputs[0].name, outputs[0].name), outputs[0].shape)
    return cfg


def run(model: Any, input_shape: Sequence[int], dtype: Any = "float") -> Tuple[Trace, list]:
    """Trace ``model``'s forward over an input ``data``: (the Trace, the output Values)."""
    shape = _checked_shape(input_shape)
    try:
        dtype = dlp_name(dtype)
    except TypeError as err:
        raise GraphError("netconfig: input dtype %s" % err) from None
    trace = Trace({id(m): path for path, m in model.named_modules()})
    return trace, _outputs(model(trace.input("data", shape, dtype)), trace, model)


def _checked_shape(shape):
    if not isinstance(shape, (list, tuple, str)) and hasattr(shape, "__iter__"):
        shape = tuple(shape)    # a numpy shape or a torch.Size
    problem = shape_problem(shape, "input_shape")
    if problem is None and (not shape or 0 in shape):
        problem = "input_shape %s must hold one or more positive sizes, batch first" % (shape,)
    if problem:
        raise GraphError("netconfig: " + problem)
    return tuple(int(n) for n in shape)


def _outputs(out, trace, model):
    """The model's output Values, checked."""
    outputs = list(out) if isinstance(out, (list, tuple)) else [out]
    for v in outputs:
        if getattr(v, "trace", None) is not trace:
            raise GraphError("%s.forward must return the Value(s) it computed, got %s %r"
                             % (type(model).__name__, type(v).__name__, v))
    return outputs


def _keep_producer_names(written, folded):
    """``folded`` (the passes' result over ``written``) with each folded activation's
    value named as its producer's output was: the module path, not the activation's.
    Returns it and {old name: new name}."""
    kept = {op["name"] for op in folded.operators}
    names = {op["outputs"][0]: op["inputs"][0] for op in written.operators
             if op["name"] not in kept and op["outputs"][0] != op["inputs"][0]}
    if not names:
        return folded, names
    for op in folded.operators:
        op["inputs"] = [names.get(n, n) for n in op["inputs"]]
        op["outputs"] = [names.get(n, n) for n in op["outputs"]]
    folded.set_outputs([names.get(n, n) for n in folded.outputs])
    return folded, names


def _write(trace):
    """The NetConfig of the trace's inputs and nodes, tensor names given on the way."""
    cfg = NetConfig()
    for v in trace.inputs:
        cfg.add_input(v.name, list(v.shape), v.dtype)
    for node in trace.nodes:
        inputs = [v.name for v in node.inputs]
        out = inputs[0] if node.inplace else node.name
        node.outputs[0].name = out
        cfg.add(node.type, name=node.name, inputs=inputs, outputs=[out],
                options=node.options, params=node.params)
    return cfg
