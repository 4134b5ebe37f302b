"""Converters generated from the operator library (dlprim.ops): every one-input float
operator the ``Pointwise`` layer runs (``ops.layer_operators``) whose
declaration names an ONNX op type that no hand-written converter claims becomes a
``Pointwise`` layer. Imported after the hand-written converter modules, so those (which
fold activations into their producers, say) keep their op types."""
from .. import ops as library
from ..ops import layer_operators
from . import ops_math, ops_nn, ops_pool, ops_rnn, ops_shape  # noqa: F401  (theirs first)
from .registry import CONVERTERS, converts

__all__ = ["GENERATED"]


def _converter(name):
    def convert(b, node):
        x = node.inputs[0]
        b.add("Pointwise", [b.value(x)], b.shape(x), node, options={"op": name})
    return convert


GENERATED = {}  # ONNX op type -> the library operator its converter makes
for _name in layer_operators():
    _op = library.get(_name)
    if _op.onnx and _op.onnx not in CONVERTERS:
        converts(_op.onnx)(_converter(_name))
        GENERATED[_op.onnx] = _name
