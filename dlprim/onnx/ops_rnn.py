"""Converters of ONNX's LSTM and GRU to dlprim's (one layer each; PyTorch exports a stack
as successive nodes).

ONNX stores per direction W (G*H, I), R (G*H, H) and B = [Wb, Rb] (2*G*H) with the gates
in its own order, LSTM i, o, f, c and GRU z, r, h; dlprim's layers have PyTorch's, LSTM
i, f, g, o and GRU r, z, n, so the blocks are reordered here and the parameters named as
PyTorch's state dict (``<op>.weight_ih_l0`` ...). Only ONNX's default activations, no
clip, no peepholes and full-length sequences; a GRU must have ``linear_before_reset=1``
(PyTorch's formula). Y is (L, D, N, H) (``layout=1``: (N, L, D, H)); dlprim writes
(L, N, D * H), so Y costs a Reshape and a Transpose unless the rewrite found the
Transpose/Reshape (or Squeeze) back to that shape that PyTorch puts after it.
"""
import numpy as np

from .registry import Unsupported, converts
from .rewrite import SEQUENCE

__all__ = ["ONNX_BLOCKS", "DEFAULT_ACTIVATIONS"]

# PyTorch's gate k is ONNX's block ONNX_BLOCKS[cell][k]
ONNX_BLOCKS = {"LSTM": (0, 2, 3, 1), "GRU": (1, 0, 2)}
DEFAULT_ACTIVATIONS = {"LSTM": ["sigmoid", "tanh", "tanh"], "GRU": ["sigmoid", "tanh"]}


def _text(value):
    return value.decode() if isinstance(value, bytes) else str(value)


def to_pytorch_gates(cell: str, a: np.ndarray, hidden: int) -> np.ndarray:
    """Rows of ``a`` (gate blocks of ``hidden`` along axis 0) from ONNX's order to PyTorch's."""
    return np.concatenate([a[k * hidden:(k + 1) * hidden] for k in ONNX_BLOCKS[cell]], axis=0)


def _check_variant(b, node, cell, directions, steps):
    acts = node.attr("activations")
    if acts is not None:
        got = [_text(a).lower() for a in acts]
        if got != DEFAULT_ACTIVATIONS[cell] * directions:
            raise Unsupported("activations %s (only ONNX's defaults %s)"
                              % (got, DEFAULT_ACTIVATIONS[cell]))
    if node.attr("clip") is not None:
        raise Unsupported("clip (cell values clipped)")
    if cell == "LSTM" and int(node.attr("input_forget", 0)):
        raise Unsupported("input_forget=1 (coupled input and forget gates)")
    if cell == "GRU" and int(node.attr("linear_before_reset", 0)) != 1:
        raise Unsupported("linear_before_reset=0 (dlprim's GRU is PyTorch's, which applies "
                          "the reset gate after the hidden projection: linear_before_reset=1)")
    if node.input(4):
        lens = b.is_const(node.inputs[4]) and np.asarray(b.consts[node.inputs[4]])
        if lens is False or not np.all(lens == steps):
            raise Unsupported("sequence_lens other than the full length %d" % steps)
    if cell == "LSTM" and node.input(7):
        p = b.const(node.inputs[7], "P (peepholes)")
        if np.any(p != 0):
            raise Unsupported("peephole weights P")


def _weights(b, node, cell, name, directions, hidden, inputs):
    """The layer's parameters, reordered and named as PyTorch's; and whether it has bias."""
    w = np.asarray(b.const(node.inputs[1], "W"), np.float32)
    r = np.asarray(b.const(node.inputs[2], "R"), np.float32)
    g = (4 if cell == "LSTM" else 3) * hidden
    if w.shape != (directions, g, inputs) or r.shape != (directions, g, hidden):
        raise Unsupported("W %s and R %s do not fit %d direction(s), hidden_size %d and %d inputs"
                          % (w.shape, r.shape, directions, hidden, inputs))
    bias = np.asarray(b.const(node.inputs[3], "B"), np.float32) if node.input(3) else None
    if bias is not None and bias.shape != (directions, 2 * g):
        raise Unsupported("B of shape %s is not (%d, %d)" % (bias.shape, directions, 2 * g))
    params = []
    for d in range(directions):
        tail = "_l0" + ("_reverse" if d else "")
        arrays = [("weight_ih", w[d]), ("weight_hh", r[d])]
        if bias is not None:
            arrays += [("bias_ih", bias[d, :g]), ("bias_hh", bias[d, g:])]
        params += [b.param("%s.%s%s" % (name, what, tail), to_pytorch_gates(cell, a, hidden))
                   for what, a in arrays]
    return params, bias is not None


def _state_input(b, node, i, batch_first, state_shape, name):
    """The dlprim tensor of initial state input i (D, N, H), or None when absent or zero."""
    t = node.input(i)
    if t is None or (b.is_const(t) and not np.any(b.consts[t])):
        return None
    if batch_first:  # (N, D, H) -> (D, N, H)
        return b.add("Transpose", [b.value(t)], state_shape, output=b.fresh(t + "/time_major"),
                     name=name + "/state%d" % i, options={"dims": [1, 0, 2]})
    return b.value(t)


def _used(b, name):
    return bool(name) and (bool(b.consumers.get(name)) or name in b.graph_outputs)


@converts("LSTM", "GRU")
def recurrent(b, node) -> None:
    """An ONNX LSTM or GRU node -> dlprim's layer of that name (and a Reshape/Transpose
    for a Y read as ONNX lays it out, Transposes for layout=1 states)."""
    cell = node.op_type
    hidden = int(node.attr("hidden_size"))
    direction = _text(node.attr("direction", "forward"))
    if direction not in ("forward", "bidirectional"):
        raise Unsupported("direction %r (a lone reverse pass)" % direction)
    directions = 2 if direction == "bidirectional" else 1
    batch_first = bool(int(node.attr("layout", 0)))
    shape = b.shape(node.inputs[0])
    if len(shape) != 3:
        raise Unsupported("input of shape %s is not 3-D" % (shape,))
    steps, batch, inputs = (shape[1], shape[0], shape[2]) if batch_first else shape
    _check_variant(b, node, cell, directions, steps)
    name = b.fresh_op(node.name or cell)
    params, bias = _weights(b, node, cell, name, directions, hidden, inputs)
    state_shape = (directions, batch, hidden)
    states = [_state_input(b, node, i, batch_first, state_shape, name)
              for i in ((5, 6) if cell == "LSTM" else (5,))]
    ins = [b.value(node.inputs[0])]
    if any(s is not None for s in states):  # the layer takes all initial states or none
        zeros = np.zeros(state_shape, np.float32)
        ins += [s if s is not None else b.value(b.constant(zeros, name + "/zero_state"))
                for s in states]
    outs = list(node.outputs) + [""] * (3 - len(node.outputs))
    count = 1 + max([i for i in (1, 2) if _used(b, outs[i])], default=0)
    if cell == "GRU":
        count = min(count, 2)
    sequence = bool(node.attr(SEQUENCE))
    seq_shape = (batch, steps, directions * hidden) if batch_first else \
        (steps, batch, directions * hidden)
    names = [outs[0] if sequence else b.fresh((outs[0] or name) + "/sequence")]
    names += [outs[i] if outs[i] and not batch_first else b.fresh("%s/state%d" % (name, i))
              for i in range(1, count)]
    b.cfg.add(cell, name=name, inputs=ins, outputs=names, params=params, options={
        "hidden_size": hidden, "input_size": int(inputs), "bias": bias,
        "batch_first": batch_first, "bidirectional": directions == 2})
    for i, (t, s) in enumerate(zip(names, [seq_shape] + [state_shape] * (count - 1))):
        b.shapes[t] = tuple(int(d) for d in s)
        b.producer[t] = b.cfg.operators[-1]
        b.alias[t] = t
        if t == outs[i]:
            b.out(node, t, i)
    if not sequence and _used(b, outs[0]):
        _onnx_y(b, node, names[0], seq_shape, directions, hidden, batch_first)
    for i in range(1, count):
        if batch_first and _used(b, outs[i]):  # (D, N, H) -> ONNX's (N, D, H)
            b.add("Transpose", [names[i]], (batch, directions, hidden), output=outs[i],
                  name=name + "/Y%s" % "_hc"[i], options={"dims": [1, 0, 2]})
            b.out(node, outs[i], i)


def _onnx_y(b, node, seq, seq_shape, directions, hidden, batch_first):
    """ONNX's Y from dlprim's sequence: (L, N, D*H) -> (L, D, N, H); batch-first
    (N, L, D*H) -> (N, L, D, H)."""
    a, c = seq_shape[:2]
    y = node.outputs[0]
    split = b.add("Reshape", [seq], (a, c, directions, hidden),
                  output=y if batch_first else b.fresh(seq + "/split"),
                  name=node.name + "/split", options={"dims": [0, 0, directions, hidden]})
    if not batch_first:
        b.add("Transpose", [split], (a, directions, c, hidden), output=y,
              name=node.name + "/Y", options={"dims": [0, 2, 1, 3]})
    b.out(node, y, 0)
