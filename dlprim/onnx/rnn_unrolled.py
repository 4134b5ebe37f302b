"""ONNX's RNN, GRU and LSTM unrolled over the time steps, every formula of the standard as
written (onnx/defs/rnn/defs.cc): the variants the fused LSTM and GRU layers do not
compute (PyTorch's formulas) and the plain RNN.

Per direction the input projection of every step is one InnerProduct per gate block,
``X W^T + Wb (+ Rb)``; per step an InnerProduct of the previous h per gate block and
pointwise LibraryOps. The gates (ONNX's order and formulas, ``f``, ``g``, ``h`` the
activations of each direction, ``clip`` limiting every activation's input):

- RNN:  ``H = f(X W^T + H' R^T + Wb + Rb)``
- GRU:  ``z = f(.. z), r = f(.. r)``; ``linear_before_reset=0``:
  ``n = g(X Wh^T + (r H') Rh^T + Rbh + Wbh)``, else ``n = g(X Wh^T + r (H' Rh^T + Rbh) + Wbh)``;
  ``H = (1 - z) n + z H'``
- LSTM: ``i = f(.. i + Pi C')``, ``f_t = f(.. f + Pf C')``, ``c = g(.. c)``,
  ``C = f_t C' + i c``, ``o = f(.. o + Po C)``, ``H = o h(C)``

A graph of O(steps) layers: the fused layers remain the way for long sequences.
"""
import numpy as np

from .steps import Steps
from .registry import Unsupported

__all__ = ["unrolled", "ACTIVATIONS"]

# ONNX activation name -> the library operator computing it (those without alpha/beta)
ACTIVATIONS = {"tanh": "tanh", "sigmoid": "sigmoid", "relu": "relu"}
GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}


def _act(s, op, x, tag, clip):
    if clip is not None:
        x = s.lib("clamp_min", [x, s.const(np.float32(-clip), tag + "_lo")], tag + "_clip_lo")
        x = s.lib("clamp_max", [x, s.const(np.float32(clip), tag + "_hi")], tag + "_clip_hi")
    return s.lib(op, [x], tag)


def _add(s, operands, tag):
    return s.lib("add", operands, tag, attrs={"alpha": 1})


def _sub(s, operands, tag):
    return s.lib("sub", operands, tag, attrs={"alpha": 1})


def _ip(s, x, w, bias, tag):
    """x (rows, in) times w^T (w: out x in) plus bias (None: none)."""
    b = s.b
    params = [b.param("%s/%s_w" % (s.node.name, tag), w)]
    if bias is not None:
        params.append(b.param("%s/%s_b" % (s.node.name, tag), bias))
    rows = b.shape(x)[0]
    t = b.add("InnerProduct", [b.value(x)], (rows, w.shape[0]), output=s._out(tag),
              name="%s/%s" % (s.node.name, tag), params=params,
              options={"outputs": int(w.shape[0]), "inputs": int(w.shape[1]),
                       "bias": bias is not None})
    b.alias[t] = t
    return t


def _stack(s, parts, shape, dim, tag, output=None):
    """Concat of ``parts`` along ``dim`` (one part: a Reshape), of ``shape``."""
    if len(parts) == 1:
        return s.reshape(parts[0], shape, tag, output=output)
    return s.add("Concat", parts, shape, tag, output=output, dim=dim)


class _Cell:
    """One direction's weights in ONNX's gate order, sliced per gate block."""

    def __init__(self, cell, w, r, bias, peep, hidden):
        g, H = GATES[cell], hidden
        self.w = [w[k * H:(k + 1) * H] for k in range(g)]
        self.r = [r[k * H:(k + 1) * H] for k in range(g)]
        self.wb = [bias[k * H:(k + 1) * H] for k in range(g)] if bias is not None else None
        self.rb = [bias[(g + k) * H:(g + k + 1) * H] for k in range(g)] \
            if bias is not None else None
        self.p = [peep[k * H:(k + 1) * H] for k in range(3)] if peep is not None else None


def unrolled(b, node, cell, spec):
    """Add the unrolled graph of ``node``; ``spec`` holds the checked attributes
    (``hidden``, ``directions``, ``reverse``, ``batch_first``, ``steps``, ``batch``,
    ``inputs``, ``acts`` (per direction, library op names), ``clip``, ``lbr``, ``sequence``:
    Y is written (L, N, D * H), the rewrite having folded its reshape)."""
    s = Steps(b, node)
    L, N, H, D = spec.steps, spec.batch, spec.hidden, spec.directions
    x = node.inputs[0]
    if spec.batch_first:
        x = s.transpose(x, (1, 0, 2), "time_major")
    x2 = s.reshape(x, (L * N, spec.inputs), "rows")
    w = np.asarray(b.const(node.inputs[1], "W"), np.float32)
    r = np.asarray(b.const(node.inputs[2], "R"), np.float32)
    g = GATES[cell] * H
    if w.shape != (D, g, spec.inputs) or r.shape != (D, g, H):
        raise Unsupported("W %s and R %s do not fit %d direction(s), hidden_size %d and %d inputs"
                          % (w.shape, r.shape, D, H, spec.inputs))
    bias = np.asarray(b.const(node.inputs[3], "B"), np.float32) if node.input(3) else None
    if bias is not None and bias.shape != (D, 2 * g):
        raise Unsupported("B of shape %s is not (%d, %d)" % (bias.shape, D, 2 * g))
    peep = None
    if cell == "LSTM" and node.input(7):
        peep = np.asarray(b.const(node.inputs[7], "P (peepholes)"), np.float32)
        if peep.shape != (D, 3 * H):
            raise Unsupported("P of shape %s is not (%d, %d)" % (peep.shape, D, 3 * H))
    ys, finals = [], []
    for d in range(D):
        c = _Cell(cell, w[d], r[d], None if bias is None else bias[d],
                  None if peep is None else peep[d], H)
        states = [_initial(s, node, i, d, spec) for i in ((5, 6) if cell == "LSTM" else (5,))]
        seq, last = _direction(s, cell, c, x2, states, d, spec)
        ys.append(seq)
        finals.append(last)
    _outputs(s, node, ys, finals, spec)


def _initial(s, node, i, d, spec):
    """Direction d's initial state from input i (N, H), or a zero constant."""
    b, N, H = s.b, spec.batch, spec.hidden
    t = node.input(i)
    if t is None:
        return s.const(np.zeros((N, H), np.float32), "zero_state%d" % i)
    if b.is_const(t):
        a = np.asarray(b.consts[t], np.float32)
        a = a[:, d] if spec.batch_first else a[d]
        return s.const(np.ascontiguousarray(a), "state%d_%d" % (i, d))
    dim = 1 if spec.batch_first else 0
    one = s.add("Slice", [t], (N, 1, H) if spec.batch_first else (1, N, H),
                "state%d_%d_slice" % (i, d), dim=dim, start=d, stop=d + 1)
    return s.reshape(one, (N, H), "state%d_%d" % (i, d))


def _peephole(s, v, cs, weights, tag):
    """v + weights * C (the LSTM's peephole term), or v where the weights are all zero."""
    if weights is None or not np.any(weights):
        return v
    return _add(s, [v, s.lib("mul", [cs, s.const(weights, tag)], tag + "_c")], tag + "_sum")


def _direction(s, cell, c, x2, states, d, spec):
    """The step outputs (L, N, H) and final states of direction d."""
    L, N, H = spec.steps, spec.batch, spec.hidden
    tag = "d%d" % d
    acts = spec.acts[d]
    gates = GATES[cell]
    lbr = cell == "GRU" and spec.lbr
    xw = []
    for k in range(gates):
        # the hidden bias joins the input one except GRU's n block (inside r (...) or
        # after the product with r H')
        with_rb = c.rb is not None and not (cell == "GRU" and k == 2)
        bias = None if c.wb is None else (c.wb[k] + c.rb[k] if with_rb else c.wb[k])
        xw.append(_ip(s, x2, c.w[k], bias, "%s_xw%d" % (tag, k)))
    h, cs = states[0], states[1] if cell == "LSTM" else None
    outs = [None] * L
    order = range(L - 1, -1, -1) if spec.reverse or d == 1 else range(L)
    for t in order:
        p = "%s_t%d" % (tag, t)
        xs = [s.add("Slice", [xw[k]], (N, H), "%s_x%d" % (p, k), dim=0, start=t * N,
                    stop=(t + 1) * N) for k in range(gates)]

        def rh(k, hh, bias=None):
            return _ip(s, hh, c.r[k], bias, "%s_rh%d" % (p, k))

        def pre(k):  # the input and hidden parts of gate block k
            return _add(s, [xs[k], rh(k, h)], "%s_pre%d" % (p, k))
        if cell == "RNN":
            h = _act(s, acts[0], pre(0), p + "_h", spec.clip)
        elif cell == "GRU":
            z = _act(s, acts[0], pre(0), p + "_z", spec.clip)
            rr = _act(s, acts[0], pre(1), p + "_r", spec.clip)
            rbh = None if c.rb is None else c.rb[2]
            if lbr:
                hid = s.lib("mul", [rr, rh(2, h, rbh)], p + "_rhn")
            else:
                hid = rh(2, s.lib("mul", [rr, h], p + "_rh"), rbh)
            n = _act(s, acts[1], _add(s, [xs[2], hid], p + "_npre"), p + "_n", spec.clip)
            # (1 - z) n + z H'
            one_minus = _sub(s, [s.const(np.float32(1.0), p + "_one"), z], p + "_1mz")
            h = _add(s, [s.lib("mul", [one_minus, n], p + "_a"),
                              s.lib("mul", [z, h], p + "_b")], p + "_h")
        else:
            pi, po, pf = (None, None, None) if c.p is None else c.p
            i_pre = _peephole(s, pre(0), cs, pi, p + "_pi")
            f_pre = _peephole(s, pre(2), cs, pf, p + "_pf")
            i = _act(s, acts[0], i_pre, p + "_i", spec.clip)
            f = _act(s, acts[0], f_pre, p + "_f", spec.clip)
            gg = _act(s, acts[1], pre(3), p + "_g", spec.clip)
            cs = _add(s, [s.lib("mul", [f, cs], p + "_fc"), s.lib("mul", [i, gg], p + "_ig")],
                       p + "_c")
            o_pre = _peephole(s, pre(1), cs, po, p + "_po")
            o = _act(s, acts[0], o_pre, p + "_o", spec.clip)
            h = s.lib("mul", [o, _act(s, acts[2], cs, p + "_hc", None)], p + "_h")
        outs[t] = s.reshape(h, (1, N, H), p + "_y")
    seq = _stack(s, outs, (L, N, H), 0, tag + "_seq")
    return seq, [h] + ([cs] if cell == "LSTM" else [])


def _outputs(s, node, ys, finals, spec):
    """Y (L, D, N, H) (layout 1: (N, L, D, H)), Y_h and Y_c (D, N, H) (layout 1: (N, D, H))."""
    L, N, H, D = spec.steps, spec.batch, spec.hidden, spec.directions
    outs = list(node.outputs)
    if outs and outs[0] and spec.sequence:  # the rewrite folded Y's reshape to (L, N, D*H)
        s.finish(0, _stack(s, ys, (L, N, D * H), 2, "y", output=outs[0]))
    elif outs and outs[0]:
        parts = [s.reshape(y, (L, 1, N, H), "y%d" % d) for d, y in enumerate(ys)]
        if spec.batch_first:
            y = _stack(s, parts, (L, D, N, H), 1, "y")
            y = s.transpose(y, (2, 0, 1, 3), "y_batch_first", output=outs[0])
        else:
            y = _stack(s, parts, (L, D, N, H), 1, "y", output=outs[0])
        s.finish(0, y)
    for i in (1, 2):
        if len(outs) <= i or not outs[i]:
            continue
        if i - 1 >= len(finals[0]):
            raise Unsupported("output %d (a %s has %d outputs)"
                              % (i, node.op_type, 1 + len(finals[0])))
        parts = [s.reshape(f[i - 1], (1, N, H), "final%d_%d" % (i, d)) for d, f in enumerate(finals)]
        if spec.batch_first:
            t = _stack(s, parts, (D, N, H), 0, "final%d" % i)
            t = s.transpose(t, (1, 0, 2), "final%d_batch_first" % i, output=outs[i])
        else:
            t = _stack(s, parts, (D, N, H), 0, "final%d" % i, output=outs[i])
        s.finish(i, t)
