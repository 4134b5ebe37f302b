"""Operators of opsets older than 9, read as the definitions the converters know.

A node of a model whose default-domain opset is below 9 follows the definition of its
operator in effect at that opset (``onnx.defs.get_schema(op, opset).since_version``).
Where that is the definition in effect at opset 9, the converters read it as they read
any other node. Where it is older, ``normalize`` rewrites the node into its opset 9
spelling when the two mean the same, and refuses it (``Unsupported``, naming the
attribute) otherwise:

- the ``consumed_inputs`` attribute (definitions before 6) only said which inputs a
  runtime may overwrite: dropped;
- arithmetic, logic and comparison before 7 (``broadcast``, ``axis``): with
  ``broadcast=0`` both shapes must be equal; with ``broadcast=1`` B's axes line up with
  A's from ``axis`` (default: A's last axes), B of one element being a scalar: B is
  reshaped so that numpy's broadcasting gives that (the output has A's shape);
- Max, Min, Sum and Mean before 8 do not broadcast: their inputs must share one shape;
- Gemm before 7: with ``broadcast=0`` C must be (M, N);
- BatchNormalization before 7 normalizes with the batch's statistics unless
  ``is_test=1``; ``spatial=0`` (statistics per element) has no opset 9 spelling;
- Dropout before 7 drops at random unless ``is_test=1``;
- Cast-1 names the type as a string; Concat-1's axis defaults to 1; Reshape-1 takes the
  shape as an attribute, Split-1 the sizes as an input, Pad-1 the pads as ``paddings``.

Every other older definition (Tile-1, Upsample-1, GRU-1/3, LSTM-1 ...) is refused naming
the definition, so that nothing is read under the wrong semantics.
"""
import numpy as np

from .model_reader import DEFAULT_DOMAINS, Node
from .registry import Unsupported

__all__ = ["LATEST_LEGACY", "FOLD_OPSET", "definition", "normalize", "broadcasts_by_attribute"]

LATEST_LEGACY = 8  # models of this opset and older are read through this module
FOLD_OPSET = LATEST_LEGACY + 1  # what a rewritten node is evaluated under
# the operators whose definitions before 7 broadcast by attributes (broadcast, axis)
BROADCAST_ATTRIBUTE = ("Add", "Sub", "Mul", "Div", "And", "Or", "Xor", "Equal", "Less",
                       "Greater", "Pow")
VARIADIC = ("Max", "Min", "Sum", "Mean")


def definition(op_type, opset):
    """(the version of ``op_type``'s definition in effect at ``opset``, the one in effect
    at opset 9); None for either where the default domain does not define it then."""
    from onnx import defs
    found = []
    for v in (opset, LATEST_LEGACY + 1):
        try:
            found.append(defs.get_schema(op_type, v).since_version)
        except Exception:  # onnx's SchemaError: not defined at that opset
            found.append(None)
    return tuple(found)


def broadcasts_by_attribute(node, opset):
    """Whether ``node`` broadcasts by the ``broadcast`` attribute of the old arithmetic."""
    return opset < 7 and node.domain in DEFAULT_DOMAINS and \
        node.op_type in BROADCAST_ATTRIBUTE and int(node.attr("broadcast", 0)) == 1


def normalize(b, node):
    """``node`` as the converters read it (itself when its definition is opset 9's, or a
    new Node in opset 9's spelling); Unsupported where the meanings differ."""
    if b.opset > LATEST_LEGACY or node.domain not in DEFAULT_DOMAINS:
        return node
    old, now = definition(node.op_type, b.opset)
    if old is None:
        raise Unsupported("not defined at opset %d" % b.opset)
    if old == now:
        return node
    attrs = {k: v for k, v in node.attrs.items() if k != "consumed_inputs"}
    rule = RULES.get(node.op_type)
    if rule is None or (rule[0] is not None and old not in rule[0]):
        raise Unsupported("%s-%d (the definition at opset %d) differs from %s-%d, and only "
                          "the later one is supported: convert the model to opset %d or "
                          "later" % (node.op_type, old, b.opset, node.op_type, now,
                                     LATEST_LEGACY + 1))
    return rule[1](b, node, attrs, old)


def _node(node, inputs=None, attrs=None):
    """A node in opset 9's spelling; its proto (what constant folding evaluates, at opset
    9: ``FOLD_OPSET``) is made anew."""
    from onnx import helper
    inputs = node.inputs if inputs is None else inputs
    attrs = node.attrs if attrs is None else attrs
    proto = helper.make_node(node.op_type, inputs, node.outputs, name=node.name,
                             domain=node.domain or None, **attrs)
    return Node(node.op_type, node.name, inputs, node.outputs, attrs, node.domain, proto)


def _same(b, node, attrs, old):
    return node if attrs == node.attrs else _node(node, attrs=attrs)


def _attribute_broadcast(b, node, attrs, old):
    if old >= 7:  # Less-7, Greater-7: numpy's broadcasting, as at opset 9
        return _node(node, attrs=attrs)
    a, other = node.inputs[0], node.inputs[1]
    sa, so = b.shape(a), b.shape(other)
    broadcast = int(attrs.pop("broadcast", 0))
    axis = attrs.pop("axis", None)
    if not broadcast:
        if sa != so:
            raise Unsupported("broadcast=0 with shapes %s and %s (they must be equal)"
                              % (list(sa), list(so)))
        return _node(node, attrs=attrs)
    if int(np.prod(so)) == 1:
        want = ()
    else:
        start = len(sa) - len(so) if axis is None else int(axis) % max(len(sa), 1)
        if start < 0 or start + len(so) > len(sa) or \
                any(d not in (1, sa[start + k]) for k, d in enumerate(so)):
            raise Unsupported("broadcast=1, axis=%s: B of shape %s does not line up with A "
                              "of shape %s" % (axis, list(so), list(sa)))
        want = (1,) * start + tuple(so) + (1,) * (len(sa) - start - len(so))
    return _node(node, inputs=[a, _reshaped(b, node, other, want)] + node.inputs[2:],
                 attrs=attrs)


def _reshaped(b, node, name, shape):
    """ONNX tensor ``name`` viewed with ``shape`` (a new constant, or a Reshape)."""
    if tuple(b.shape(name)) == tuple(shape):
        return name
    if b.is_const(name):
        return b.constant(np.asarray(b.consts[name]).reshape(shape), name + "/aligned")
    t = b.add("Reshape", [b.value(name)], shape, name=b.fresh_op(node.name + "/align"),
              output=b.fresh(name + "/aligned"), options={"dims": [int(d) for d in shape]},
              dtype=b.dtype(name))
    b.alias[t] = t
    return t


def _equal_shapes(b, node, attrs, old):
    shapes = {tuple(b.shape(n)) for n in node.inputs if n}
    if len(shapes) > 1:
        raise Unsupported("%s-%d does not broadcast: inputs of shapes %s"
                          % (node.op_type, old, sorted(list(s) for s in shapes)))
    return _node(node, attrs=attrs)


def _gemm(b, node, attrs, old):
    broadcast = int(attrs.pop("broadcast", 0))
    if node.input(2) and not broadcast and old < 7:
        sa, sb = b.shape(node.inputs[0]), b.shape(node.inputs[1])
        m = sa[1] if attrs.get("transA", 0) else sa[0]
        n = sb[0] if attrs.get("transB", 0) else sb[1]
        if tuple(b.shape(node.inputs[2])) != (m, n):
            raise Unsupported("broadcast=0 with C of shape %s (it must be (%d, %d))"
                              % (list(b.shape(node.inputs[2])), m, n))
    return _node(node, attrs=attrs)


def _batch_norm(b, node, attrs, old):
    if int(attrs.pop("spatial", 1)) != 1:
        raise Unsupported("spatial=0 (statistics per element, not per channel)")
    if old < 7 and not int(attrs.pop("is_test", 0)):
        raise Unsupported("is_test=0 (normalized with the batch's own statistics)")
    attrs.pop("is_test", None)
    return _node(node, attrs=attrs)


def _dropout(b, node, attrs, old):
    if not int(attrs.pop("is_test", 0)):
        raise Unsupported("is_test=0 (random dropout in the model itself)")
    # in test mode the output is the input (no mask is written)
    return _node(node, attrs={})


def _cast(b, node, attrs, old):
    from onnx import TensorProto
    to = attrs.get("to")
    if isinstance(to, str):
        try:
            attrs["to"] = TensorProto.DataType.Value(to.upper())
        except ValueError:
            raise Unsupported("to=%r is no ONNX type" % to) from None
    return _node(node, attrs=attrs)


def _concat(b, node, attrs, old):
    attrs.setdefault("axis", 1)
    return _node(node, attrs=attrs)


def _reshape(b, node, attrs, old):
    shape = attrs.pop("shape", None)
    if shape is None:
        raise Unsupported("no shape attribute")
    return _node(node, inputs=[node.inputs[0], b.constant(np.asarray(shape, np.int64),
                                                          node.name + "/shape")], attrs=attrs)


def _split(b, node, attrs, old):
    if node.input(1):
        attrs["split"] = [int(v) for v in np.asarray(b.const(node.inputs[1], "split")).reshape(-1)]
    return _node(node, inputs=node.inputs[:1], attrs=attrs)


def _pad(b, node, attrs, old):
    if "paddings" in attrs:
        attrs["pads"] = attrs.pop("paddings")
    return _node(node, attrs=attrs)


def _prelu(b, node, attrs, old):
    """PRelu before 7: a slope of one element, or of X's shape (no broadcasting)."""
    if old >= 7:
        return _node(node, attrs=attrs)
    slope = b.shape(node.inputs[1])
    if int(np.prod(slope)) != 1 and tuple(slope) != tuple(b.shape(node.inputs[0])):
        raise Unsupported("PRelu-%d does not broadcast: slope of shape %s, X of shape %s"
                          % (old, list(slope), list(b.shape(node.inputs[0]))))
    return _node(node, attrs=attrs)


# op type -> (the old definitions it reads, None: all; the rewrite into opset 9's)
_SAME = ("Abs", "Ceil", "Floor", "Clip", "Elu", "Exp", "Log", "HardSigmoid", "LeakyRelu",
         "Neg", "Reciprocal", "Relu", "Sigmoid", "Sqrt", "Tanh", "Selu", "Flatten", "MatMul",
         "MaxPool", "AveragePool", "Constant")  # consumed_inputs, or only the types they take, differ
RULES = dict({op: (None, _same) for op in _SAME},
             **{op: (None, _attribute_broadcast) for op in BROADCAST_ATTRIBUTE},
             **{op: (None, _equal_shapes) for op in VARIADIC})
RULES.update({"Gemm": (None, _gemm), "BatchNormalization": (None, _batch_norm),
              "Dropout": ((1, 6), _dropout), "Cast": (None, _cast), "Concat": ((1,), _concat),
              "Reshape": ((1,), _reshape), "Split": ((1,), _split), "Pad": ((1,), _pad),
              "PRelu": (None, _prelu)})
