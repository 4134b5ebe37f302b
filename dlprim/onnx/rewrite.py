"""Patterns exporters spell in several nodes, folded into one before conversion.

    Mul(x, Sigmoid(x))                              -> silu activation
    Mul(x, HardSigmoid(x; alpha=1/6, beta=1/2))     -> hardswish activation
    Mul(Mul(x, Add(Erf(Div(x, sqrt 2)), 1)), 1/2)   -> gelu (PyTorch's export before opset 20)
    Pad(constant 0, spatial) -> Conv                -> the convolution's own padding
    Pad(constant 0, spatial) -> AveragePool          -> its padding, counted in the average
    Add(MatMul(x, W), b), W and b constant           -> an InnerProduct with bias

A pattern is folded only where its inner tensors are read by nothing else and are not
model outputs. The folded nodes keep the name of the node that writes the result; they
have no ONNX proto, so they are converted even when their inputs are all constant.
"""
import numpy as np

from .fold import constant_value
from .model_reader import Node

__all__ = ["rewrite", "ACTIVATION"]

ACTIVATION = "_Activation"  # internal op: attribute "activation" as dlprim's Activation


class _Graph:
    def __init__(self, nodes, consts, outputs):
        self.nodes, self.consts, self.outputs = list(nodes), consts, set(outputs)
        self.refresh()

    def refresh(self):
        self.producer, self.readers = {}, {}
        for n in self.nodes:
            for o in n.outputs:
                self.producer[o] = n
            for i in n.inputs:
                if i:
                    self.readers.setdefault(i, []).append(n)

    def only_reader(self, name, node):
        """``name`` is read only by ``node`` and is not a model output."""
        return name not in self.outputs and self.readers.get(name) == [node]

    def made_by(self, name, op_type):
        n = self.producer.get(name)
        return n if n is not None and n.op_type == op_type else None

    def const(self, name):
        """The value of an initializer or a Constant node's output, else None."""
        if name in self.consts:
            return self.consts[name]
        n = self.made_by(name, "Constant")
        return None if n is None else constant_value(n)

    def scalar(self, name):
        a = self.const(name)
        if a is None or a.size != 1:
            return None
        return float(a.reshape(()))

    def replace(self, old, new):
        """Drop ``old`` nodes; ``new`` takes the place of the last of them."""
        idx = max(self.nodes.index(n) for n in old)
        self.nodes[idx] = new
        for n in old:
            if n in self.nodes:
                self.nodes.remove(n)
        self.refresh()


def _act(name, node, x, act):
    return Node(ACTIVATION, node.name, [x], node.outputs, {"activation": act})


def _gated(g, node):
    """Mul(x, f(x)) with f a Sigmoid or HardSigmoid(1/6, 1/2): silu / hardswish."""
    for k in (0, 1):
        gate, x = node.inputs[k], node.inputs[1 - k]
        for op_type, act in (("Sigmoid", "silu"), ("HardSigmoid", "hardswish")):
            f = g.made_by(gate, op_type)
            if f is None or f.inputs[0] != x or not g.only_reader(gate, node):
                continue
            if op_type == "HardSigmoid" and not (
                    np.isclose(f.attr("alpha", 0.2), 1 / 6) and np.isclose(f.attr("beta", 0.5), 0.5)):
                continue
            g.replace([f, node], _act(act, node, x, act))
            return True
    return False


def _gelu(g, node):
    """Mul(Mul(x, Add(Erf(Div(x, sqrt2)), 1)), 0.5), operands in either order."""
    for k in (0, 1):
        inner, half = node.inputs[k], node.inputs[1 - k]
        m = g.made_by(inner, "Mul")
        if g.scalar(half) != 0.5 or m is None or not g.only_reader(inner, node):
            continue
        for j in (0, 1):
            x, plus = m.inputs[j], m.inputs[1 - j]
            add = g.made_by(plus, "Add")
            if add is None or not g.only_reader(plus, m):
                continue
            for i in (0, 1):
                erf = g.made_by(add.inputs[i], "Erf")
                if erf is None or g.scalar(add.inputs[1 - i]) != 1.0 or \
                        not g.only_reader(add.inputs[i], add):
                    continue
                div = g.made_by(erf.inputs[0], "Div")
                if div is None or div.inputs[0] != x or not g.only_reader(erf.inputs[0], erf):
                    continue
                s = g.scalar(div.inputs[1])
                if s is None or not np.isclose(s, np.sqrt(2.0), rtol=1e-5):
                    continue
                g.replace([div, erf, add, m, node], _act("gelu", node, x, "gelu"))
                return True
    return False


def _spatial_zero_pad(g, pad):
    """[top, left, bottom, right] of a constant-zero Pad of N, C, H, W on H and W only."""
    if pad.attr("mode", "constant") != "constant":
        return None
    pads = pad.attr("pads") if pad.input(1) is None else g.const(pad.input(1))
    value = pad.attr("value", 0.0)
    if pad.input(2) is not None:
        value = g.scalar(pad.input(2))
    if pads is None or value != 0.0 or (len(pad.inputs) > 3 and pad.input(3)):
        return None
    pads = [int(p) for p in np.asarray(pads).reshape(-1)]
    if len(pads) != 8 or any(pads[i] for i in (0, 1, 4, 5)) or min(pads) < 0:
        return None
    return [pads[2], pads[3], pads[6], pads[7]]


def _pad_into(g, node):
    """Pad -> Conv or AveragePool: add the Pad's zeros to the consumer's pads."""
    pad = g.made_by(node.inputs[0], "Pad")
    if pad is None or not g.only_reader(node.inputs[0], node) or \
            node.attr("auto_pad", "NOTSET") != "NOTSET":
        return False
    extra = _spatial_zero_pad(g, pad)
    if extra is None:
        return False
    attrs = dict(node.attrs)
    if node.op_type == "AveragePool":
        own = attrs.get("pads", [0, 0, 0, 0])
        if any(own) and not attrs.get("count_include_pad", 0):
            return False  # the pool's own padding would then be counted too
        attrs["count_include_pad"] = 1
    own = list(attrs.get("pads", [0, 0, 0, 0]))
    attrs["pads"] = [a + b for a, b in zip(own, extra)]
    if node.op_type == "AveragePool":
        p, k = attrs["pads"], attrs.get("kernel_shape", [1, 1])
        if p[:2] != p[2:] or any(2 * a > b for a, b in zip(p, k)):
            return False  # dlprim's pooling pads symmetrically, at most half the window
    new = Node(node.op_type, node.name, [pad.inputs[0]] + node.inputs[1:], node.outputs, attrs,
               node.domain)
    g.replace([pad, node], new)
    return True


def _matmul_bias(g, node):
    """Add(MatMul(x, W), b) with W a constant matrix and b a constant vector: MatMul with
    b as a third input (the InnerProduct's bias)."""
    for k in (0, 1):
        mm = g.made_by(node.inputs[k], "MatMul")
        if mm is None or len(mm.inputs) != 2 or not g.only_reader(node.inputs[k], node):
            continue
        w, bias = g.const(mm.inputs[1]), g.const(node.inputs[1 - k])
        if w is None or bias is None or w.ndim != 2 or bias.ndim != 1 or bias.shape[0] != w.shape[1]:
            continue
        g.replace([mm, node], Node("MatMul", mm.name, mm.inputs + [node.inputs[1 - k]],
                                   node.outputs, {}, mm.domain))
        return True
    return False


RULES = {"Mul": (_gated, _gelu), "Conv": (_pad_into,), "AveragePool": (_pad_into,),
         "Add": (_matmul_bias,)}


def rewrite(nodes, consts, outputs=()):
    g = _Graph(nodes, consts, outputs)
    changed = True
    while changed:
        changed = False
        for node in list(g.nodes):
            if node not in g.nodes:
                continue
            for rule in RULES.get(node.op_type, ()):
                if rule(g, node):
                    changed = True
                    break
    return g.nodes
