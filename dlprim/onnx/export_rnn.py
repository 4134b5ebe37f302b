"""dlprim's LSTM and GRU as ONNX nodes, written as PyTorch's exporter writes them: one
ONNX LSTM/GRU node per layer (its W, R and B = [Wb, Rb] in ONNX's gate order), each
Y (L, D, N, H) turned back into (L, N, D * H) for the next layer, transposes around a
batch-first stack, the final states of the layers concatenated. Dropout between layers
is left out (an exported model predicts)."""
from typing import List

import numpy as np

from .export_ops import exports
from .ops_rnn import ONNX_BLOCKS

__all__ = ["recurrent"]


def to_onnx_gates(cell: str, a: np.ndarray, hidden: int) -> np.ndarray:
    """Rows of ``a`` (gate blocks of ``hidden`` along axis 0) from PyTorch's order to ONNX's."""
    order = np.argsort(ONNX_BLOCKS[cell])  # ONNX block j is PyTorch's block order[j]
    return np.concatenate([a[k * hidden:(k + 1) * hidden] for k in order], axis=0)


def _stacked(e, cell, params, hidden, name):
    """(W, R, B or "") initializers of one layer from its per-direction parameters
    [(w_ih, w_hh[, b_ih, b_hh]) per direction]."""
    w = np.stack([to_onnx_gates(cell, e.params[p[0]], hidden) for p in params])
    r = np.stack([to_onnx_gates(cell, e.params[p[1]], hidden) for p in params])
    names = [e.const(w.astype(np.float32), name + ".W"), e.const(r.astype(np.float32), name + ".R")]
    if len(params[0]) == 4:
        b = np.stack([np.concatenate([to_onnx_gates(cell, e.params[p[2]], hidden),
                                      to_onnx_gates(cell, e.params[p[3]], hidden)])
                      for p in params])
        names.append(e.const(b.astype(np.float32), name + ".B"))
    else:
        names.append("")
    return names


@exports("LSTM", "GRU")
def recurrent(e, op, layer, ins: List[str], outs: List[str], params: List[str]) -> None:
    """Nodes computing dlprim's LSTM or GRU ``layer`` from ``ins`` into ``outs``."""
    cell, hidden, layers, dirs = op.type, layer.H, layer.K, layer.D
    for p in params:  # the layer's own (PyTorch-order) weights go in as W, R, B below
        e.initializers.pop(p, None)
    per = 4 if layer.bias else 2
    x = ins[0]
    if layer.batch_first:
        x = e.node("Transpose", [x], name=op.name + "/time_major", perm=[1, 0, 2])
    attrs = dict(hidden_size=hidden, direction="bidirectional" if dirs == 2 else "forward")
    if cell == "GRU":
        attrs["linear_before_reset"] = 1
    finals = [[] for _ in outs[1:]]
    for l in range(layers):
        name = "%s/l%d" % (op.name, l)
        mine = [params[(l * dirs + d) * per:(l * dirs + d + 1) * per] for d in range(dirs)]
        inputs = [x] + _stacked(e, cell, mine, hidden, name) + [""]
        for state in ins[1:]:
            inputs.append(e.node("Slice", [state, e.ints([l * dirs]), e.ints([(l + 1) * dirs]),
                                           e.ints([0])], name=name + "/initial"))
        while inputs[-1] == "":
            inputs.pop()
        state_names = [outs[1 + i] if layers == 1 else e.fresh(name + "/Y_" + "hc"[i])
                       for i in range(len(finals))]
        y = e.fresh(name + "/Y")
        e.node(cell, inputs, [y] + state_names, name, **attrs)
        for i, s in enumerate(state_names):
            finals[i].append(s)
        last = l == layers - 1
        seq = outs[0] if last and not layer.batch_first else None
        if dirs == 1:
            x = e.node("Squeeze", [y, e.ints([1])], [seq] if seq else None, name + "/sequence")
        else:
            t = e.node("Transpose", [y], name=name + "/sequence", perm=[0, 2, 1, 3])
            x = e.node("Reshape", [t, e.ints([0, 0, -1])], [seq] if seq else None,
                       name + "/sequence_shape")
    if layer.batch_first:
        e.node("Transpose", [x], [outs[0]], op.name + "/batch_first", perm=[1, 0, 2])
    if layers > 1:
        for i, parts in enumerate(finals):
            e.node("Concat", parts, [outs[1 + i]], "%s/%s_n" % (op.name, "hc"[i]), axis=0)
