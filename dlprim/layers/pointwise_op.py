"""``Pointwise``: a one-input operator of the operator library (dlprim.ops) as a layer,
its forward and backward code read from the operator's declaration: ``{"type":
"Pointwise", "options": {"op": "sin"}}``. Every unary float operator with a gradient
expression is available, so the ONNX importer, ``dlprim.nn.functional`` and JSON nets
reach the same code as the ``ocl`` device.

The gradient is the declaration's expression over ``a`` (the input), ``y`` (the output)
and ``dy``. Where it needs only ``y``, backward reads the output and the layer may run in
place; otherwise it reads the input.
"""
import re

from .. import ops as library
from ..ops import layer_operators
from .activation import PointwiseLayer
from .base import register

__all__ = ["Pointwise", "layer_operators"]


def _names(text):
    return set(re.findall(r"\b[a-z]\w*\b", text))


@register("Pointwise")
class Pointwise(PointwiseLayer):
    """``y = op(x)`` for ``op`` an operator of the library (``layer_operators()``)."""
    OPTIONS = {"op": None}

    def check_options(self):
        name = self.options["op"]
        if name not in layer_operators():
            self.fail("option 'op': %r is not a one-input float operator with a gradient; "
                      "known: %s" % (name, ", ".join(sorted(layer_operators()))))
        self.op = library.get(name)
        grad = self.op.grad[0]
        self._from_y = "a" not in _names(grad)

    def io_flags(self):
        return self.default_flags(backward_reads_inputs=not self._from_y,
                                  backward_reads_outputs=self._from_y, inplace=self._from_y)

    def forward_statements(self):
        expr = self.op.expr_for("float").format(a="((float)x0)", T="float", R="float")
        return "y0 = %s;" % expr

    def backward_statements(self):
        # x0: dy; x1: the input (a) or the output (y), as io_flags chose
        grad = self.op.grad[0].replace("{R}", "float")
        grad = re.sub(r"\bdy\b", "((float)x0)", grad)
        if self._from_y:
            return "y0 = %s;" % re.sub(r"\by\b", "((float)x1)", grad)
        forward = self.op.expr_for("float").format(a="((float)x1)", T="float", R="float")
        grad = re.sub(r"\by\b", "(%s)" % forward, grad)  # y recomputed from the input
        grad = re.sub(r"\ba\b", "((float)x1)", grad)
        return "y0 = %s;" % grad
