"""An operator's one declaration: what every front end (the ``ocl`` device, ONNX import
and export, ``dlprim.nn.functional``, the Net's layers) and the operator table in
docs/operators.md are generated from.

Pure Python: no driver, no torch. An ``Operator`` says

- ``name``: dlprim's name for it (snake case, PyTorch's where PyTorch has one);
- ``family``: the module it is declared in (``ops/<family>.py``), where a newcomer finds it;
- ``kind``: how it runs, which says what the generated front ends do with it:
  ``"unary"`` / ``"binary"`` / ``"ternary"`` (a pointwise expression ``expr``),
  ``"reduce"`` (an expression folded over dims), or ``"launcher"`` (a function of its
  own, ``launch``);
- ``expr``: for the pointwise kinds, OpenCL C over ``{a}``, ``{b}``, ``{c}`` (the operands,
  already in the compute type ``{T}``; ``{R}``: the real type a kernels/mathfun.h function
  is suffixed with) and ``{name}`` for a scalar attribute of that name; a dict
  ``{dtype class: expr}`` where integers, bools or floats need their own (classes:
  ``"float"``, ``"int"``, ``"bool"``); or a function ``(attributes, output C type) -> expr``
  where an attribute changes the code (a rounding mode) or a default depends on the dtype;
- ``inputs``: the names of the operands where they are not the first arguments;
- ``double``: whether float64 computes in double (False: refused, where the expression
  calls float-only helpers);
- ``dtypes``: the dtype classes it takes (inputs outside them are refused, naming it);
- ``promote``: the output dtype: ``"same"`` (PyTorch's type promotion of the inputs),
  ``"float"`` (integers and bools compute in the default float dtype, as ``torch.sin``),
  ``"bool"`` (comparisons and predicates), or ``"int64"``;
- ``attrs``: the attributes a callable ``expr`` consumes (any other attribute must appear
  in the expression or keep its default, else the call is refused naming it);
- ``grad``: the derivative for dlprim's own autograd, as an expression over ``a``, ``b``,
  ``y`` (the output) and ``dy`` per input (``None``: not differentiable);
- ``aten``: the ATen operator packets it implements (their functional, in-place and
  ``out=`` overloads all follow); ``onnx``: the ONNX op type; ``layer``: DLPrimitives' layer
  ``type`` (an activation name, say);
- ``doc``: one line for the operator table.
"""
import re
from dataclasses import dataclass, field

__all__ = ["Operator", "OPS", "declare", "get", "DTYPE_CLASSES", "by_aten", "layer_operators"]

DTYPE_CLASSES = ("float", "int", "bool")
KINDS = ("unary", "binary", "ternary", "reduce", "launcher")
PROMOTIONS = ("same", "float", "bool", "int64")


@dataclass(frozen=True)
class Operator:
    name: str
    family: str
    kind: str
    doc: str
    expr: object = None
    dtypes: tuple = DTYPE_CLASSES
    promote: str = "same"
    attrs: tuple = ()
    inputs: tuple = None
    double: bool = True
    grad: tuple = None
    aten: tuple = ()
    onnx: str = None
    layer: str = None
    launch: object = field(default=None, compare=False)

    def expr_for(self, dtype_class, attrs=None, out_ctype="float"):
        """The expression for operands of this dtype class ('float', 'int', 'bool'; a bool
        takes the integers' where it has none of its own), with these attribute values
        (a callable expr's choice); None where there is none."""
        expr = self.expr(attrs or {}, out_ctype) if callable(self.expr) else self.expr
        if isinstance(expr, dict):
            for cls in (dtype_class, "int" if dtype_class == "bool" else None):
                if cls in expr:
                    return expr[cls]
            return None
        return expr


OPS = {}  # name -> Operator, in declaration order
_BY_ATEN = {}


def declare(name, family, kind, doc, **fields):
    """Declare an operator once (the checks a declaration must pass are made here, so that
    a wrong one fails at import, naming it)."""
    if name in OPS:
        raise ValueError("operator %r is declared twice (in ops/%s.py and ops/%s.py)"
                         % (name, OPS[name].family, family))
    if kind not in KINDS:
        raise ValueError("operator %r: kind %r is not one of %s" % (name, kind, KINDS))
    if kind in ("unary", "binary", "ternary", "reduce") and fields.get("expr") is None:
        raise ValueError("operator %r: a %s operator needs an expr" % (name, kind))
    if kind == "launcher" and fields.get("expr") is not None:
        raise ValueError("operator %r: a launcher has no expr" % name)
    promote = fields.get("promote", "same")
    if promote not in PROMOTIONS:
        raise ValueError("operator %r: promote %r is not one of %s" % (name, promote, PROMOTIONS))
    bad = set(fields.get("dtypes", DTYPE_CLASSES)) - set(DTYPE_CLASSES)
    if bad:
        raise ValueError("operator %r: unknown dtype classes %s" % (name, sorted(bad)))
    fields.setdefault("aten", (name,))
    fields["aten"] = tuple(fields["aten"])
    op = Operator(name, family, kind, doc, **fields)
    for packet in op.aten:
        if packet in _BY_ATEN:
            raise ValueError("ATen operator %r is claimed by both %r and %r"
                             % (packet, _BY_ATEN[packet].name, name))
        _BY_ATEN[packet] = op
    OPS[name] = op
    return op


def get(name):
    """The operator called ``name``; KeyError naming the near ones where none is."""
    try:
        return OPS[name]
    except KeyError:
        import difflib
        near = difflib.get_close_matches(name, OPS, 3)
        raise KeyError("no operator %r%s" % (name, " (did you mean %s?)" % ", ".join(near)
                                             if near else "")) from None


def by_aten(packet):
    """The operator that implements an ATen packet (``"sin"``), or None."""
    return _BY_ATEN.get(packet)


def layer_operators():
    """The names of the operators the Net's ``Pointwise`` layer runs (and so ONNX import
    and ``dlprim.nn.functional``): one input, float, no attributes, a gradient
    expression."""
    out = []
    for op in OPS.values():
        if op.kind != "unary" or "float" not in op.dtypes or op.promote == "bool":
            continue
        expr = op.expr_for("float")
        if expr is None or not op.grad or op.grad[0] is None:
            continue
        if set(re.findall(r"\{(\w+)\}", expr)) - {"a", "T", "R"}:
            continue  # attributes: the Activation layer or an operator's own layer has them
        out.append(op.name)
    return out
