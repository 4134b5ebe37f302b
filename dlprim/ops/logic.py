"""Comparisons, logical and bitwise operators and shifts (declarations: see
ops/declare.py). Comparisons and logical operators give bools and compute in the operands'
promoted dtype; bitwise operators take integers and bools."""
from .declare import declare

FAMILY = "logic"


def _compare(name, symbol, doc, onnx=None, aliases=()):
    declare(name, FAMILY, "binary", doc, expr="({a} %s {b})" % symbol, promote="bool",
            onnx=onnx, aten=(name,) + aliases)


_compare("eq", "==", "a == b", onnx="Equal")
_compare("ne", "!=", "a != b", aliases=("not_equal",))
_compare("lt", "<", "a < b", onnx="Less", aliases=("less",))
_compare("le", "<=", "a <= b", onnx="LessOrEqual", aliases=("less_equal",))
_compare("gt", ">", "a > b", onnx="Greater", aliases=("greater",))
_compare("ge", ">=", "a >= b", onnx="GreaterOrEqual", aliases=("greater_equal",))

declare("logical_not", FAMILY, "unary", "not a", expr="({a} == 0)", promote="bool",
        onnx="Not")
declare("logical_and", FAMILY, "binary", "a and b", expr="(({a} != 0) && ({b} != 0))",
        promote="bool", onnx="And")
declare("logical_or", FAMILY, "binary", "a or b", expr="(({a} != 0) || ({b} != 0))",
        promote="bool", onnx="Or")
declare("logical_xor", FAMILY, "binary", "a xor b", expr="(({a} != 0) != ({b} != 0))",
        promote="bool", onnx="Xor")

_INTS = ("int", "bool")
declare("bitwise_not", FAMILY, "unary", "~a (not, for bools)",
        expr={"int": "(~{a})", "bool": "(!{a})"}, dtypes=_INTS, promote="same",
        onnx="BitwiseNot")
for _name, _symbol, _onnx, _dunder in (("bitwise_and", "&", "BitwiseAnd", "__and__"),
                                       ("bitwise_or", "|", "BitwiseOr", "__or__"),
                                       ("bitwise_xor", "^", "BitwiseXor", "__xor__")):
    declare(_name, FAMILY, "binary", "a %s b, bit by bit" % _symbol,
            expr="({a} %s {b})" % _symbol, dtypes=_INTS, onnx=_onnx,
            aten=(_name, _dunder))
# shifts by the operand's width or more give 0, or -1 for a negative a shifted right
# (PyTorch's answer; C leaves them undefined)
declare("bitwise_left_shift", FAMILY, "binary", "a << b",
        expr="(({b} < 0 || {b} >= (%s)(8 * sizeof({T}))) ? ({T})0 : ({T})({a} << {b}))"
        % "{T}", dtypes=("int",), aten=("bitwise_left_shift", "__lshift__"))
declare("bitwise_right_shift", FAMILY, "binary", "a >> b (arithmetic)",
        expr="(({b} < 0 || {b} >= (%s)(8 * sizeof({T}))) ? ({a} < 0 ? ({T})-1 : ({T})0) "
             ": ({T})({a} >> {b}))" % "{T}", dtypes=("int",),
        aten=("bitwise_right_shift", "__rshift__"))

declare("equal", FAMILY, "launcher", "whether two tensors have the same shape and elements",
        aten=("equal",), launch="dlprim.torch.ops_logic._equal")
declare("allclose", FAMILY, "launcher", "whether every element is close (isclose) to the other's",
        aten=("allclose",), launch="dlprim.torch.ops_logic._allclose")
