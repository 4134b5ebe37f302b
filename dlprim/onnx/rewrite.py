"""Patterns exporters spell in several nodes, folded into one before conversion.

    a tree the activation table spells one with     -> that activation (``spelling.trees()``:
                                                       Mul(x, Sigmoid(x)) silu, Mul(x,
                                                       HardSigmoid(x; 1/6, 1/2)) hardswish,
                                                       PyTorch's erf formula of gelu)
    Pad(constant 0, spatial) -> Conv                -> the convolution's own padding
    Pad(constant 0, spatial) -> AveragePool          -> its padding, counted in the average
    Add(MatMul(x, W), b), W (or W's Transpose) and b
    constant                                         -> an InnerProduct with bias
    MatMul(Softmax(MatMul(q, k^T) [+ mask]), v), k^T a Transpose of k or the dynamo
    exporter's Reshape, Transpose(0, 2, 1), Reshape of it, with Mul/Div by constants on
    q, on k^T or on the scores, Casts and a Dropout
    between the Softmax and the last MatMul          -> fused attention (``ATTENTION``;
                                                       its converter checks shapes, the
                                                       scale, the Casts and the dropout
                                                       ratio, else converts the nodes as
                                                       they were)
    and, around it, q, k and v each a Transpose(0, 2, 1, 3) of (N, L, H, D) and the
    result read only by one back                     -> the same, reading and writing
                                                       (N, L, H, D) ("nlhd"): the head
                                                       split of a transformer's Linears
                                                       with no transposes
    LSTM/GRU -> Y (L, D, N, H) -> Transpose(0, 2, 1, 3) -> Reshape(0, 0, -1), or
    -> Squeeze(axis 1)                               -> the node writing (L, N, D * H)
                                                       itself (attribute ``SEQUENCE``),
                                                       as dlprim's LSTM and GRU do

ONNX's own Attention node (opset 23 on) is not a pattern: its converter (``ops_attention``)
gives the fused ScaledDotProductAttention wherever that computes the node.

A pattern is folded only where its inner tensors are read by nothing else and are not
model outputs. The folded nodes keep the name of the node that writes the result; they
have no ONNX proto, so they are converted even when their inputs are all constant.
"""
import numpy as np

from ..core.activation import X, OnnxNode
from .fold import constant_value
from .model_reader import Node
from .spelling import import_options, match_attrs, match_value, trees

__all__ = ["rewrite", "ACTIVATION", "ATTENTION", "SEQUENCE"]

ACTIVATION = "_Activation"  # internal op: attributes "activation" and "options" of dlprim's Activation
# internal op: inputs q, k, v, mask ("" for none) and the scale factors; attributes
# "factors" (Mul or Div per factor), "perm" (of k's Transpose) or "reshapes" (of the
# Reshape, Transpose, Reshape writing k^T), "softmax_axis", "between" (the Casts and the
# Dropout between the Softmax and the MatMul by v) and "nodes" (the originals)
ATTENTION = "_Attention"
# attribute of an LSTM/GRU node whose first output is already (L, N, D * H)
SEQUENCE = "_sequence_output"


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
        self._static = None

    def static(self, name):
        """``name`` is known at import (a constant, a shape, or computed from those only),
        so the importer folds it before the nodes reading it are converted."""
        if self._static is None:
            known = set(self.consts)
            for n in self.nodes:
                ins = [i for i in n.inputs if i]
                if n.op_type in ("Constant", "Shape", "Size") or (ins and all(i in known for i in ins)):
                    known.update(o for o in n.outputs if o)
            self._static = known
        return name in self._static

    def only_reader(self, name, node):
        """``name`` is read only by ``node`` and is not a model output."""
        return name not in self.outputs and self.readers.get(name) == [node]

    def made_by(self, name, op_type):
        n = self.producer.get(name)
        return n if n is not None and n.op_type == op_type else None

    def const(self, name):
        """The value of an initializer or a Constant node's output, also through Identity
        nodes (PyTorch's exporter writes a parameter equal to another, such as the zero
        biases of a fresh model, as an Identity of the first), else None."""
        for _ in range(8):
            if name in self.consts:
                return self.consts[name]
            n = self.made_by(name, "Constant")
            if n is not None:
                return constant_value(n)
            n = self.made_by(name, "Identity")
            if n is None or not n.inputs:
                return None
            name = n.inputs[0]
        return None

    def const_or_transposed(self, name):
        """``const``, or the value of a Transpose of one (PyTorch writes a Linear over
        more than two dimensions as MatMul by its weight's Transpose), else None."""
        value = self.const(name)
        t = self.made_by(name, "Transpose")
        if value is None and t is not None:
            value = self.const(t.inputs[0])
            if value is not None:
                perm = t.attrs.get("perm")
                value = np.transpose(value, perm if perm is not None else None)
        return value

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


COMMUTATIVE = ("Add", "Mul")


def _match(g, tree, node, act, bound):
    """(the nodes from ``node`` down that spell ``tree``, ``bound`` with X and the options
    bound), or None."""
    bound = match_attrs(act, tree, node.op_type, node.attrs, dict(bound))
    ins = [i for i in node.inputs if i]
    if bound is None or len(ins) != len(tree.inputs):
        return None
    orders = [tree.inputs]
    if tree.op in COMMUTATIVE and len(ins) == 2:
        orders.append(tree.inputs[::-1])
    for order in orders:
        found = _match_inputs(g, order, ins, node, act, bound)
        if found is not None:
            return found
    return None


def _match_inputs(g, wants, ins, node, act, bound):
    nodes, bound = [node], dict(bound)
    for want, name in zip(wants, ins):
        if want == X:
            if bound.setdefault(X, name) != name:
                return None
        elif isinstance(want, OnnxNode):
            sub = g.made_by(name, want.op)
            # an inner result read elsewhere must stay
            inner = sub is not None and g.only_reader(name, node) and _match(g, want, sub, act, bound)
            if not inner:
                return None
            nodes, bound = nodes + inner[0], inner[1]
        else:
            bound = match_value(want, g.scalar(name), bound)
            if bound is None:
                return None
    return nodes, bound


def _spelled(g, node):
    """A tree of nodes the activation table spells an activation with -> that activation."""
    for name, act, sp in trees(node.op_type):
        found = _match(g, sp.tree, node, act, {})
        if found is not None:
            nodes, bound = found
            g.replace(nodes, Node(ACTIVATION, node.name, [bound[X]], node.outputs,
                                  {"activation": name, "options": import_options(act, sp, bound)}))
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
        w, bias = g.const_or_transposed(mm.inputs[1]), g.const(node.inputs[1 - k])
        if w is None or bias is None or w.ndim != 2 or bias.ndim != 1 or bias.shape[0] != w.shape[1]:
            continue
        g.replace([mm, node], Node("MatMul", mm.name, mm.inputs + [node.inputs[1 - k]],
                                   node.outputs, {}, mm.domain))
        return True
    return False


def _unscaled(g, name, reader, nodes, factors):
    """Follow ``name`` back through Mul or Div by import-time constants (each read only by
    the next step); returns (the tensor before them, its reader), recording the nodes and
    factors."""
    while True:
        n = g.producer.get(name)
        if n is None or n.op_type not in ("Mul", "Div") or not g.only_reader(name, reader):
            return name, reader
        a, b = n.inputs[:2]
        if g.static(b) and not g.static(a):
            source, factor = a, b
        elif n.op_type == "Mul" and g.static(a) and not g.static(b):
            source, factor = b, a
        else:
            return name, reader
        nodes.append(n)
        factors.append([n.op_type, factor])
        name, reader = source, n


def _safe_softmax(g, name, reader):
    """[Where, IsNaN] of Where(IsNaN(p), 0, p), as PyTorch exports softmax over a row that
    a boolean mask may drop whole (read only there), else None."""
    where = g.made_by(name, "Where")
    if where is None or not g.only_reader(name, reader) or len(where.inputs) != 3:
        return None
    isnan = g.made_by(where.inputs[0], "IsNaN")
    p = where.inputs[2]
    if isnan is None or isnan.inputs[0] != p or g.scalar(where.inputs[1]) != 0.0 or \
            not g.only_reader(where.inputs[0], where) or p in g.outputs or \
            sorted(map(id, g.readers.get(p, []))) != sorted([id(where), id(isnan)]):
        return None
    return [where, isnan]


def _attention(g, node):
    """MatMul(Softmax(scores), v), scores = [Mul/Div](MatMul([Mul/Div] q, [Mul/Div]
    Transpose(k))) [+ mask], as PyTorch's exporter spells scaled_dot_product_attention and
    attention modules are written by hand -> ATTENTION."""
    if len(node.inputs) != 2 or g.static(node.inputs[1]):
        return False
    probs, reader, between = _probability_path(g, node.inputs[0], node)
    nodes = [node] + between
    safe = _safe_softmax(g, probs, reader)
    if safe is not None:  # the fused kernels give a row masked whole zeros too
        nodes += safe
        probs = safe[0].inputs[2]
    softmax = g.made_by(probs, "Softmax")
    if softmax is None or (safe is None and not g.only_reader(probs, reader)):
        return False
    nodes.append(softmax)
    factors, mask, reader = [], "", softmax
    scores = softmax.inputs[0]
    add = g.made_by(scores, "Add")
    if add is not None and g.only_reader(scores, softmax):
        for i in (0, 1):  # the scores' side is the one a MatMul (maybe scaled) writes
            inner, _ = _unscaled(g, add.inputs[i], add, [], [])
            if g.made_by(inner, "MatMul") is not None:
                nodes.append(add)
                scores, mask, reader = add.inputs[i], add.inputs[1 - i], add
                break
    scores, reader = _unscaled(g, scores, reader, nodes, factors)
    product = g.made_by(scores, "MatMul")
    if product is None or len(product.inputs) != 2 or not g.only_reader(scores, reader):
        return False
    nodes.append(product)
    q, q_reader = _unscaled(g, product.inputs[0], product, nodes, factors)
    kt, reader = _unscaled(g, product.inputs[1], product, nodes, factors)
    found = _key_transposed(g, kt, reader)
    if found is None or g.static(q):
        return False
    k, transposing, how = found
    nodes += transposing
    v, outputs = node.inputs[1], node.outputs
    heads = _heads_in_place(g, q, q_reader, k, transposing, how, v, node)
    kept = []  # the shapes of Reshapes between the result and its Transpose back
    if heads is not None:  # (N, L, H, D) read and written in place: no head transposes
        (q, k, v), outputs, head_nodes, kept = heads
        nodes += head_nodes
        how = {"perm": None, "layout": "nlhd", "kept": len(kept)}
    ordered = [n for n in g.nodes if n in nodes]
    inputs = [q, k, v, mask] + [f for _, f in factors] + kept
    g.replace(ordered, Node(ATTENTION, node.name, inputs, outputs,
                            dict(how, factors=[kind for kind, _ in factors], nodes=ordered,
                                 softmax_axis=softmax.attr("axis"), between=between)))
    return True


HEADS = [0, 2, 1, 3]  # (N, L, H, D) <-> (N, H, L, D): the head split's transpose and back


def _head_transpose(g, name, reader):
    """The Transpose(HEADS) writing ``name``, read only by ``reader``, else None."""
    t = g.made_by(name, "Transpose")
    ok = t is not None and list(t.attr("perm") or []) == HEADS and g.only_reader(name, reader)
    return t if ok else None


def _heads_in_place(g, q, q_reader, k, k_nodes, how, v, product):
    """((q, k, v) as (N, L, H, D), the output (N, L, H, DV), the transposes they replace)
    where q and v are Transpose(HEADS) of rank-4 tensors, k^T the same tensor's
    Transpose(0, 2, 3, 1) (or its Transpose(HEADS) then (0, 1, 3, 2)), and the output is
    read only by a Transpose(HEADS) back, as the head split of a transformer's Linears
    is exported: the fused layer's "nlhd" layout reads and writes them in place; else
    None."""
    tq, tv = _head_transpose(g, q, q_reader), _head_transpose(g, v, product)
    if tq is None or tv is None:
        return None
    # the result, through Reshapes to shapes known at import (PyTorch's decomposition of
    # scaled_dot_product_attention reshapes its result to the batch axes it was given:
    # the converter checks they keep the shape), to the Transpose back
    between, name = [], product.outputs[0]
    while True:
        readers = g.readers.get(name, [])
        out = readers[0] if len(readers) == 1 and name not in g.outputs else None
        if out is None or out.op_type != "Reshape" or len(out.inputs) != 2 or \
                not g.static(out.inputs[1]) or out.attr("allowzero", 0) or len(between) == 2:
            break
        between.append(out)
        name = out.outputs[0]
    if out is None or out.op_type != "Transpose" or list(out.attr("perm") or []) != HEADS:
        return None
    perm = list(how.get("perm") or [])
    if perm == [0, 2, 3, 1]:
        tk, source = [], k
    elif perm == [0, 1, 3, 2]:
        inner = _head_transpose(g, k, k_nodes[0])
        if inner is None:
            return None
        tk, source = [inner], inner.inputs[0]
    else:
        return None
    return (tq.inputs[0], source, tv.inputs[0]), [out.outputs[0]], [tq, tv, out] + tk + between, \
        [r.inputs[1] for r in between]


# what may stand between the Softmax and the MatMul by v: PyTorch's exporter writes
# ``softmax(..., dtype=float32).to(q.dtype)`` as Casts, and attention-probability dropout
# (HuggingFace's attn_pdrop, attention_probs_dropout_prob) as a Dropout; the converter
# checks the Casts change no dtype and gives the fused layer the Dropout's ratio
_BETWEEN = ("Cast", "Identity", "Dropout")


def _probability_path(g, name, reader):
    """(the tensor before the ``_BETWEEN`` nodes writing ``name``, its reader, those nodes),
    each read only by the next; at most one Dropout, and one whose mask nothing reads."""
    between = []
    while True:
        n = g.producer.get(name)
        if n is None or n.op_type not in _BETWEEN or not g.only_reader(name, reader) or \
                not n.inputs or not n.inputs[0]:
            return name, reader, between
        if n.op_type == "Dropout" and (
                any(d.op_type == "Dropout" for d in between) or
                any(o and (o in g.outputs or g.readers.get(o)) for o in n.outputs[1:])):
            return name, reader, between
        between.append(n)
        name, reader = n.inputs[0], n


def _key_transposed(g, kt, reader):
    """(k, the nodes writing kt from it, how) where kt is k with its last two axes swapped
    as exporters write it, each node read only by the next; else None. ``how`` is
    {"perm": p} for Transpose(k, p) (the converter checks p, and gives k the layout
    (N, H, S, D) by the permutation p makes with the last two axes swapped back), or
    {"perm": None, "reshapes": [s1, s2]} for Reshape(Transpose(Reshape(k, s1), (0, 2, 1)),
    s2), the dynamo exporter's spelling of k.transpose(-2, -1) (the converter checks
    that s1 merges k's leading two axes and s2 splits them back)."""
    if not g.only_reader(kt, reader):
        return None
    transpose = g.made_by(kt, "Transpose")
    if transpose is not None:
        return transpose.inputs[0], [transpose], {"perm": transpose.attr("perm")}
    outer = g.made_by(kt, "Reshape")
    if outer is None or len(outer.inputs) != 2:
        return None
    transpose = g.made_by(outer.inputs[0], "Transpose")
    if transpose is None or list(transpose.attr("perm") or []) != [0, 2, 1] or \
            not g.only_reader(outer.inputs[0], outer):
        return None
    inner = g.made_by(transpose.inputs[0], "Reshape")
    if inner is None or len(inner.inputs) != 2 or not g.only_reader(transpose.inputs[0], transpose):
        return None
    shapes = [g.const(r.inputs[1]) for r in (inner, outer)]
    if any(s is None for s in shapes) or any(r.attr("allowzero", 0) and 0 in np.asarray(s)
                                             for r, s in zip((inner, outer), shapes)):
        return None  # allowzero with a 0: an empty dimension, not a copied one
    return inner.inputs[0], [inner, transpose, outer], \
        {"perm": None, "reshapes": [[int(d) for d in np.asarray(s).reshape(-1)] for s in shapes]}


def _sequence_tail(g, y):
    """The nodes that turn a recurrent node's Y (L, D, N, H) into (L, N, D * H) as
    PyTorch's exporter writes them (Transpose(0, 2, 1, 3) then Reshape(0, 0, -1), or a
    Squeeze of axis 1 for one direction), each read only by the next; else None."""
    readers = g.readers.get(y, [])
    if y in g.outputs or len(readers) != 1:
        return None
    first = readers[0]
    if first.op_type == "Squeeze":
        axes = first.attr("axes") if first.input(1) is None else g.const(first.input(1))
        ok = axes is not None and [int(a) for a in np.asarray(axes).reshape(-1)] == [1]
        return [first] if ok else None
    if first.op_type != "Transpose" or list(first.attr("perm", [])) != [0, 2, 1, 3]:
        return None
    later = g.readers.get(first.outputs[0], [])
    if first.outputs[0] in g.outputs or len(later) != 1 or later[0].op_type != "Reshape":
        return None
    shape = g.const(later[0].input(1)) if later[0].input(1) else None
    if shape is None or [int(d) for d in np.asarray(shape).reshape(-1)] != [0, 0, -1]:
        return None
    return [first, later[0]]


def _recurrent_sequence(g, node):
    """LSTM/GRU with its Y reshaped to (L, N, D * H) -> one node writing that (SEQUENCE)."""
    if node.attr(SEQUENCE) or node.attr("layout", 0) or not node.outputs or not node.outputs[0]:
        return False
    tail = _sequence_tail(g, node.outputs[0])
    if tail is None:
        return False
    new = Node(node.op_type, node.name, node.inputs, [tail[-1].outputs[0]] + node.outputs[1:],
               dict(node.attrs, **{SEQUENCE: 1}), node.domain)
    # in the recurrent node's place: readers of its states may come before the tail
    g.nodes[g.nodes.index(node)] = new
    for n in tail:
        g.nodes.remove(n)
    g.refresh()
    return True


def _rules():
    rules = {"Conv": (_pad_into,), "AveragePool": (_pad_into,), "Add": (_matmul_bias,),
             "MatMul": (_attention,), "LSTM": (_recurrent_sequence,),
             "GRU": (_recurrent_sequence,)}
    for root in sorted({sp.tree.op for _, _, sp in trees()}):
        rules[root] = (_spelled,) + rules.get(root, ())
    return rules


RULES = _rules()


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
