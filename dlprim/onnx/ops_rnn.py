"""Converters of ONNX's LSTM and GRU to dlprim's (one layer each; PyTorch exports a stack
as successive nodes), and of every variant those layers do not compute (the plain RNN,
a lone reverse pass, other activations, clip, peepholes, GRU's
``linear_before_reset=0``) to the unrolled graph of ``rnn_unrolled``.

ONNX stores per direction W (G*H, I), R (G*H, H) and B = [Wb, Rb] (2*G*H) with the gates
in its own order, LSTM i, o, f, c and GRU z, r, h; dlprim's layers have PyTorch's, LSTM
i, f, g, o and GRU r, z, n, so the blocks are reordered here and the parameters named as
PyTorch's state dict (``<op>.weight_ih_l0`` ...). The fused layers take ONNX's default
activations, no clip, no peepholes and a GRU with ``linear_before_reset=1`` (PyTorch's
formula); both forms need full-length sequences. Y is (L, D, N, H) (``layout=1``: (N, L, D, H)); dlprim writes
(L, N, D * H), so Y costs a Reshape and a Transpose unless the rewrite found the
Transpose/Reshape (or Squeeze) back to that shape that PyTorch puts after it.
"""
import numpy as np

from .fold import evaluate
from .registry import Unsupported, converts
from .rewrite import SEQUENCE
from .rnn_unrolled import ACTIVATIONS, unrolled

__all__ = ["ONNX_BLOCKS", "DEFAULT_ACTIVATIONS"]

# PyTorch's gate k is ONNX's block ONNX_BLOCKS[cell][k]
ONNX_BLOCKS = {"LSTM": (0, 2, 3, 1), "GRU": (1, 0, 2)}
DEFAULT_ACTIVATIONS = {"LSTM": ["sigmoid", "tanh", "tanh"], "GRU": ["sigmoid", "tanh"],
                       "RNN": ["tanh"]}
# the activations (library operators) of the fused layers
FUSED_ACTIVATIONS = {"LSTM": ["sigmoid", "tanh", "tanh"], "GRU": ["sigmoid", "tanh"]}


def _text(value):
    return value.decode() if isinstance(value, bytes) else str(value)


def to_pytorch_gates(cell: str, a: np.ndarray, hidden: int) -> np.ndarray:
    """Rows of ``a`` (gate blocks of ``hidden`` along axis 0) from ONNX's order to PyTorch's."""
    return np.concatenate([a[k * hidden:(k + 1) * hidden] for k in ONNX_BLOCKS[cell]], axis=0)


class _Spec:
    """The node's checked attributes (what ``rnn_unrolled`` reads), and whether the fused
    layer computes it."""

    def __init__(self, b, node, cell):
        self.hidden = int(node.attr("hidden_size"))
        direction = _text(node.attr("direction", "forward"))
        if direction not in ("forward", "reverse", "bidirectional"):
            raise Unsupported("direction %r" % direction)
        self.directions = 2 if direction == "bidirectional" else 1
        self.reverse = direction == "reverse"
        self.batch_first = bool(int(node.attr("layout", 0)))
        shape = b.shape(node.inputs[0])
        if len(shape) != 3:
            raise Unsupported("input of shape %s is not 3-D" % (shape,))
        if b.dtype(node.inputs[0]) != np.float32:
            raise Unsupported("input X of dtype %s (float32 only)" % b.dtype(node.inputs[0]))
        self.steps, self.batch, self.inputs = (shape[1], shape[0], shape[2]) \
            if self.batch_first else shape
        self.acts = self._activations(node, cell)
        self.sequence = bool(node.attr(SEQUENCE))
        clip = node.attr("clip")
        self.clip = None if clip is None else float(clip)
        if cell == "LSTM" and int(node.attr("input_forget", 0)):
            raise Unsupported("input_forget=1 (coupled input and forget gates)")
        self.lbr = cell == "GRU" and bool(int(node.attr("linear_before_reset", 0)))
        if node.input(4):
            lens = np.asarray(b.const(node.inputs[4], "sequence_lens"))
            if not np.all(lens == self.steps):
                raise Unsupported("sequence_lens other than the full length %d" % self.steps)
        peephole = cell == "LSTM" and node.input(7) and \
            np.any(b.const(node.inputs[7], "P (peepholes)"))
        self.fused = cell != "RNN" and not self.reverse and self.clip is None and \
            not peephole and all(a == FUSED_ACTIVATIONS[cell] for a in self.acts) and \
            (cell != "GRU" or self.lbr)

    def _activations(self, node, cell):
        """Per direction the library operators of the cell's activations."""
        for key in ("activation_alpha", "activation_beta"):
            if node.attr(key) is not None:
                raise Unsupported("%s (activations with parameters)" % key)
        count = len(DEFAULT_ACTIVATIONS[cell])
        acts = node.attr("activations")
        if acts is None:
            names = DEFAULT_ACTIVATIONS[cell] * self.directions
        else:
            names = [_text(a).lower() for a in acts]
            if len(names) != count * self.directions:
                raise Unsupported("activations %s: %d per direction expected" % (names, count))
        for a in names:
            if a not in ACTIVATIONS:
                raise Unsupported("activation %r (only %s)" % (a, ", ".join(sorted(ACTIVATIONS))))
        ops = [ACTIVATIONS[a] for a in names]
        return [ops[d * count:(d + 1) * count] for d in range(self.directions)]


def _weight(b, name, what):
    """W, R or B: a constant, or computed from trained parameters (``live`` initializers:
    torch.compile's, which PyTorch's exporter writes as Slices of the parameters in ONNX's
    gate order, Concatenated and Unsqueezed) with their current values, and then the
    initializers it reads (``_live_sources`` names the layer's parameters after them)."""
    if b.is_const(name):
        return np.asarray(b.consts[name], np.float32), ()
    value, leaves = _computed(b, name, {})
    if value is None or not any(n in b.live for n in leaves):
        b.const(name, what)  # the Unsupported that names it
    return np.asarray(value, np.float32), leaves


def _computed(b, name, memo, depth=0):
    """(value of ONNX tensor ``name`` from initializers and constants alone, the
    initializers read), or (None, ()) where a runtime input or a deep chain is reached."""
    if name in memo:
        return memo[name]
    if name in b.info.initializers:  # (first: a live one is among the constants too)
        return np.asarray(b.info.initializers[name]), (name,)
    if b.is_const(name) and name not in b.live:
        return np.asarray(b.consts[name]), ()
    node = b.node_of.get(name)
    if node is None or depth > 16 or node.op_type not in _WEIGHT_STEPS:
        return None, ()
    values, leaves = [], ()
    for i in node.inputs:
        if not i:
            values.append(None)
            continue
        v, more = _computed(b, i, memo, depth + 1)
        if v is None:
            return None, ()
        values.append(v)
        leaves += more
    out = evaluate(node, values, b.info.opsets)
    for o, v in zip(node.outputs, out):
        memo[o] = (v, leaves)
    return memo[name]


# what PyTorch's exporter puts between an LSTM's or GRU's parameters and the node's W, R, B
_WEIGHT_STEPS = ("Slice", "Concat", "Unsqueeze", "Reshape", "Identity", "Constant", "Squeeze",
                 "Transpose", "Gather", "Split")


def _live_source(b, leaves, value, fallback):
    """The initializer among ``leaves`` that holds ``value`` (PyTorch's gate order) as it
    is: the layer's parameter takes its name, so that torch.compile binds the model's
    parameter to it; else ``fallback``."""
    for leaf in dict.fromkeys(leaves):
        init = np.asarray(b.info.initializers[leaf])
        if init.shape == value.shape and np.array_equal(init, value):
            return leaf
    return fallback


def _weights(b, node, cell, name, directions, hidden, inputs):
    """The layer's parameters, reordered and named as PyTorch's (after the trained
    parameters they are, where they are); and whether it has bias."""
    w, w_from = _weight(b, node.inputs[1], "W")
    r, r_from = _weight(b, node.inputs[2], "R")
    g = (4 if cell == "LSTM" else 3) * hidden
    if w.shape != (directions, g, inputs) or r.shape != (directions, g, hidden):
        raise Unsupported("W %s and R %s do not fit %d direction(s), hidden_size %d and %d inputs"
                          % (w.shape, r.shape, directions, hidden, inputs))
    bias, b_from = _weight(b, node.inputs[3], "B") if node.input(3) else (None, ())
    if bias is not None and bias.shape != (directions, 2 * g):
        raise Unsupported("B of shape %s is not (%d, %d)" % (bias.shape, directions, 2 * g))
    params = []
    for d in range(directions):
        tail = "_l0" + ("_reverse" if d else "")
        arrays = [("weight_ih", w[d], w_from), ("weight_hh", r[d], r_from)]
        if bias is not None:
            arrays += [("bias_ih", bias[d, :g], b_from), ("bias_hh", bias[d, g:], b_from)]
        for what, a, leaves in arrays:
            value = to_pytorch_gates(cell, a, hidden)
            own = "%s.%s%s" % (name, what, tail)
            params.append(b.param(_live_source(b, leaves, value, own), value))
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


@converts("LSTM", "GRU", "RNN")
def recurrent(b, node) -> None:
    """An ONNX LSTM or GRU node that PyTorch's formulas compute -> dlprim's layer of that
    name (and a Reshape/Transpose for a Y read as ONNX lays it out, Transposes for
    layout=1 states); every other variant, and the RNN, unrolled (``rnn_unrolled``)."""
    cell = node.op_type
    spec = _Spec(b, node, cell)
    if not spec.fused:
        unrolled(b, node, cell, spec)
        return
    hidden, directions, batch_first = spec.hidden, spec.directions, spec.batch_first
    steps, batch, inputs = spec.steps, spec.batch, spec.inputs
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
