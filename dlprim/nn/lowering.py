"""From a model's forward pass to a NetConfig.

``netconfig`` traces the model once over an input Value, then writes the recorded
operators in call order. Two things make the graph the one dlprim's builders write by
hand:

* an activation whose input is read by nothing else is folded into the Convolution2D,
  InnerProduct or Elementwise before it (their ``activation`` option: one kernel, the same
  numbers), so ``relu(conv(x))`` costs no pass of its own;
* an in-place operator (``nn.ReLU(inplace=True)``, ``nn.Dropout(p, inplace=True)``) writes
  under its input's tensor name, as PyTorch's in-place ops overwrite their input.
"""
from typing import Any, Optional, Sequence, Tuple

from ..core.activation import FUSABLE, Y_ACTIVATIONS
from ..dtypes import dlp_name
from ..net.graph import GraphError
from ..net.netconfig import NetConfig
from ..utils import shape_problem
from .losses import add_loss, check_loss
from .trace import Trace

__all__ = ["netconfig", "run", "FUSE_INTO"]

# operator type -> the activations its kernels apply as an epilogue
FUSE_INTO = {"Convolution2D": FUSABLE, "InnerProduct": FUSABLE, "Elementwise": Y_ACTIVATIONS}


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
    _fuse_activations(trace.nodes, outputs)
    cfg = _write(trace)
    if loss is None:
        cfg.set_outputs(list(dict.fromkeys(v.name for v in outputs)))
    else:
        add_loss(cfg, loss, outputs[0].name, outputs[0].shape)
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


def _fuse_activations(nodes, outputs):
    """Fold each Activation into its producer where the producer's kernel applies it and
    nothing else reads the value in between (or is given it as a net output)."""
    readers = {}
    for v in [v for node in nodes for v in node.inputs] + outputs:
        readers[id(v)] = readers.get(id(v), 0) + 1
    for node in nodes:
        kind = node.options.get("activation")
        # activations with parameters (leaky_relu's slope ...) have no epilogue form
        if node.type != "Activation" or kind == "identity" or set(node.options) != {"activation"}:
            continue
        value = node.inputs[0]
        producer = value.node
        if producer is None or producer.fused or readers[id(value)] != 1:
            continue
        if kind in FUSE_INTO.get(producer.type, ()) and \
                producer.options.get("activation", "identity") == "identity":
            producer.options["activation"] = kind
            node.fused = True


def _write(trace):
    """The NetConfig of the trace's inputs and nodes, tensor names given on the way."""
    cfg = NetConfig()
    for v in trace.inputs:
        cfg.add_input(v.name, list(v.shape), v.dtype)
    for node in trace.nodes:
        inputs = [v.name for v in node.inputs]
        if node.fused:      # its producer computes it: same tensor
            node.outputs[0].name = inputs[0]
            continue
        out = inputs[0] if node.inplace else node.name
        node.outputs[0].name = out
        cfg.add(node.type, name=node.name, inputs=inputs, outputs=[out],
                options=node.options, params=node.params)
    return cfg
