"""Converters built on the operator library (dlprim.ops).

- Every one-input float operator the ``Pointwise`` layer runs (``ops.layer_operators``)
  whose declaration names an ONNX op type that no hand-written converter claims becomes a
  ``Pointwise`` layer over float tensors; one whose expression takes attributes of ONNX's
  names (Selu, Celu, ThresholdedRelu, Shrink, Swish) a ``LibraryOp`` with the node's
  values of them (``ONNX_DEFAULTS`` where it has none).
- The comparison, logical, bitwise and arithmetic operators over any dtype the Net holds
  (integers, bools, float16, float64) become ``LibraryOp`` layers (``typed``), with ONNX's
  type rules: the output has the inputs' type (comparisons: bool), an integer ``Div``
  truncates, ``Mod`` follows ``fmod``, ``Pow`` keeps the base's type.

Imported after the hand-written converter modules, so those (which fold activations into
their producers, say) keep their op types; they call ``typed`` for tensors that are not
float32.
"""
import numpy as np

from .. import ops as library
from ..dtypes import NARROW_TYPES, as_dtype, bfloat16, is_narrow
from ..ops import layer_operators
from ..layers.pointwise_op import result_dtype, promote_types
from . import ops_math, ops_nn, ops_pool, ops_rnn, ops_shape  # noqa: F401  (theirs first)
from .registry import CONVERTERS, Unsupported, converts
from .steps import ONNX_TYPES

__all__ = ["GENERATED", "typed", "is_typed", "operand", "typed_constant"]

_F32 = np.dtype(np.float32)
# ONNX TensorProto data types -> the dtype names the Net holds (refused: string, complex,
# float6); the narrow ones (float8, float4, int4, uint4, int2, uint2: dtypes.NARROW_TYPES)
# only through conversions and layout operators
NARROW_NAMES = frozenset(NARROW_TYPES.values())
_FLOAT32_EXACT = 2 ** 24  # integers up to this magnitude are exact in float32


def _name(dtype):
    dt = np.dtype(dtype)
    if dt in NARROW_TYPES:
        return NARROW_TYPES[dt]
    return "bfloat16" if dt.name == "bfloat16" or dt.kind == "V" else dt.name


def is_typed(b, node, names=None):
    """Whether any of ``node``'s inputs (or ``names``) is not float32: such a node runs as
    ``LibraryOp`` layers."""
    return any(n and _name(b.dtype(n)) != "float32" for n in (names or node.inputs))


def operand(b, name, dtype, rank):
    """How ONNX tensor ``name`` enters a LibraryOp: ``("scalar", number)`` for a constant
    of one element that widens no shape, else ``("tensor", dlprim tensor)``; a constant
    array that is not float32 is stored as a float32 Parameter converted on the device,
    where float32 holds it exactly."""
    if not b.is_const(name):
        return "tensor", b.value(name)
    a = np.asarray(b.consts[name])
    if a.size == 1 and a.ndim <= rank:
        v = a.reshape(()).item()
        return "scalar", bool(v) if a.dtype == np.bool_ else v
    if a.dtype == np.float32:
        return "tensor", b.value(name)
    return "tensor", typed_constant(b, name, a.astype(dtype) if a.dtype.kind == "b" else a,
                                    dtype)


def typed_constant(b, name, array, dtype=None):
    """The dlprim tensor of a constant array that is not float32 (integer indices, bool
    masks), read at run time: a float32 Parameter converted on the device to ``dtype``
    (default: the array's), where float32 holds every value exactly (every narrow type's
    values too); else Unsupported."""
    a = np.asarray(array)
    dtype = a.dtype if dtype is None else dtype
    inexact = a.dtype not in NARROW_TYPES and (
        a.dtype.kind not in "biuf" or (a.dtype.kind in "iu" and a.size and
                                       np.abs(a).max() > _FLOAT32_EXACT) or
        (a.dtype.kind == "f" and not np.array_equal(a.astype(np.float32), a)))
    if inexact:
        raise Unsupported("constant '%s' (%s) read at run time is not exact in float32"
                          % (name, a.dtype))
    f = b.constant(a.astype(np.float32), name + "/float")
    return b.add("LibraryOp", [b.value(f)], a.shape, name=name + "/cast",
                 output=b.fresh(name + "/typed"), options={"op": "copy", "dtype": _name(dtype)},
                 dtype=dtype)


def typed(b, node, op, inputs=None, attrs=None, dtype=None, output=None, name=None):
    """A ``LibraryOp`` of library operator ``op`` over ONNX tensors ``inputs`` (default: the
    node's), attributes ``attrs``, stored as ``dtype`` (default: the promotion's); writes
    the node's output (or ``output``); returns the dlprim tensor."""
    inputs = [n for n in (inputs if inputs is not None else node.inputs) if n]
    shapes = [b.shape(n) for n in inputs]
    shape = tuple(np.broadcast_shapes(*shapes))
    tensors, scalars, dtypes, numbers = [], {}, [], []
    for place, n in zip("abc", inputs):
        kind, v = operand(b, n, b.dtype(n), len(shape))
        if kind == "scalar" and len(scalars) + 1 < len(inputs):
            scalars[place] = v
            numbers.append(v)
        else:
            if kind == "scalar":
                kind, v = "tensor", b.value(n)
            tensors.append(v)
            dtypes.append(b.dtype(n))
    options = {"op": op}
    if attrs:
        options["attrs"] = dict(attrs)
    if scalars:
        options["scalars"] = scalars
    natural = _natural(op, dtypes, numbers, attrs)
    if dtype is not None and _name(dtype) != _name(natural):
        options["dtype"] = _name(dtype)
    out_dtype = dtype if dtype is not None else natural
    return b.add("LibraryOp", tensors, shape, None if output else node, output=output,
                 name=name or node.name, options=options, dtype=out_dtype)


def _natural(op, dtypes, numbers, attrs):
    dtypes = [_net_dtype(d) for d in dtypes]
    if op == "where":
        return promote_types(dtypes[1:] or dtypes, numbers)
    if op == "copy":
        return dtypes[0]
    return result_dtype(library.get(op), dtypes, numbers, attrs)[1]


def _net_dtype(dtype):
    return bfloat16 if _name(dtype) == "bfloat16" else np.dtype(dtype)


def _converter(name):
    def convert(b, node):
        x = node.inputs[0]
        if is_typed(b, node):
            typed(b, node, name)
            return
        b.add("Pointwise", [b.value(x)], b.shape(x), node, options={"op": name})
    return convert


GENERATED = {}  # ONNX op type -> the library operator its converter makes
for _name_ in layer_operators():
    _op = library.get(_name_)
    if _op.onnx and _op.onnx not in CONVERTERS:
        converts(_op.onnx)(_converter(_name_))
        GENERATED[_op.onnx] = _name_

# ONNX's defaults of the attributes of the library operators whose expressions take them
# under ONNX's names (Selu's alpha and gamma, Shrink's lambd and bias ...)
ONNX_DEFAULTS = {"Selu": {"alpha": 1.67326319217681884765625, "gamma": 1.05070102214813232421875},
                 "Celu": {"alpha": 1.0}, "ThresholdedRelu": {"alpha": 1.0},
                 "Shrink": {"lambd": 0.5, "bias": 0.0}, "Swish": {"alpha": 1.0}}


def _with_attributes(name, defaults):
    def convert(b, node):
        extra = sorted(set(node.attrs) - set(defaults))
        if extra:
            raise Unsupported("attribute %s" % extra[0])
        x = node.inputs[0]
        if _name(b.dtype(x)) not in ("float32", "float16", "float64", "bfloat16"):
            raise Unsupported("%s of %s (floats only)" % (node.op_type, _name(b.dtype(x))))
        typed(b, node, name, attrs={k: float(node.attr(k, v)) for k, v in defaults.items()})
    return convert


for _name_, _op in library.OPS.items():
    if _op.onnx in ONNX_DEFAULTS and _op.onnx not in CONVERTERS:
        converts(_op.onnx)(_with_attributes(_name_, ONNX_DEFAULTS[_op.onnx]))

# ----- the typed operators: one library operator each, ONNX's types
SIMPLE = {"Equal": "eq", "Less": "lt", "LessOrEqual": "le", "Greater": "gt",
          "GreaterOrEqual": "ge", "Not": "logical_not", "And": "logical_and",
          "Or": "logical_or", "Xor": "logical_xor", "IsNaN": "isnan", "BitwiseAnd": "bitwise_and",
          "BitwiseOr": "bitwise_or", "BitwiseXor": "bitwise_xor", "BitwiseNot": "bitwise_not", "PRelu": "prelu"}


@converts(*SIMPLE)
def simple(b, node):
    typed(b, node, SIMPLE[node.op_type])


@converts("IsInf")
def is_inf(b, node):
    pos, neg = int(node.attr("detect_positive", 1)), int(node.attr("detect_negative", 1))
    op = {(1, 1): "isinf", (1, 0): "isposinf", (0, 1): "isneginf"}.get((pos, neg))
    if op is not None:
        typed(b, node, op)
        return
    # neither sign: every element false
    t = typed(b, node, "isinf", output=b.fresh(node.outputs[0] + "/inf"),
              name=node.name + "/inf")
    b.alias[t] = t
    typed(b, node, "logical_and", inputs=[t, b.constant(np.asarray(False), node.name + "/no")])


@converts("BitShift")
def bit_shift(b, node):
    direction = node.attr("direction")
    if isinstance(direction, bytes):
        direction = direction.decode()
    op = {"LEFT": "bitwise_left_shift", "RIGHT": "bitwise_right_shift"}.get(direction)
    if op is None:
        raise Unsupported("direction %r" % direction)
    # the library's shifts are ONNX's (opset 28): a shift below 0 or of the width or more
    # gives 0 (a right shift of a negative number: -1); a left shift wraps in the type
    if any(np.dtype(_net_dtype(b.dtype(n))).kind not in "iu" for n in node.inputs):
        raise Unsupported("BitShift of %s (integers only)" % _name(b.dtype(node.inputs[0])))
    typed(b, node, op)


@converts("Mod")
def mod(b, node):
    """fmod=1: C's fmod; fmod=0: Python's %, defined over floats from opset 28 on with the
    sign of the divisor on a zero result too (remainder gives +0 there: copysign)."""
    fmod = int(node.attr("fmod", 0))
    floats = any(np.dtype(_net_dtype(b.dtype(n))).kind == "f" or
                 _name(b.dtype(n)) == "bfloat16" for n in node.inputs)
    if fmod or not floats:
        typed(b, node, "fmod" if fmod else "remainder")
        return
    if b.opset < 28:
        raise Unsupported("fmod=0 over floats (before opset 28 ONNX requires fmod=1 there)")
    t = typed(b, node, "remainder", output=b.fresh(node.outputs[0] + "/remainder"),
              name=node.name + "/remainder")
    b.alias[t] = t
    typed(b, node, "copysign", inputs=[t, node.inputs[1]])


@converts("Pow")
def pow_(b, node):
    """The result has the base's type (an integer base with a float exponent: computed in
    float, then truncated as ONNX Runtime converts)."""
    typed(b, node, "pow", dtype=b.dtype(node.inputs[0]))


@converts("Mean")
def mean(b, node):
    ins = [n for n in node.inputs if n]
    cur = ins[0]
    for k, other in enumerate(ins[1:]):
        cur = typed(b, node, "add", inputs=[cur, other], attrs={"alpha": 1},
                    output=b.fresh(node.outputs[0] + "/%d" % k), name=node.name + "/%d" % k)
        b.alias[cur] = cur
    count = b.constant(np.asarray(len(ins), b.dtype(ins[0])), node.name + "/count")
    typed(b, node, "div", inputs=[cur, count])


def cast_to(b, node, to):
    """The node's first input converted to numpy dtype ``to`` (PyTorch's and ONNX
    Runtime's conversions: floats truncate toward 0 into integers, anything nonzero or
    NaN is true; the narrow types as ONNX's Cast tables say, with the node's
    ``saturate`` and ``round_mode``)."""
    x = node.inputs[0]
    if _name(b.dtype(x)) == _name(to):
        b.out(node, b.value(x))
        return
    attrs = {}
    if is_narrow(_net_dtype(to)):
        saturate = int(node.attr("saturate", 1))
        if saturate not in (0, 1):
            raise Unsupported("saturate=%d (0 or 1)" % saturate)
        round_mode = node.attr("round_mode", "up")
        if round_mode not in ("up", "down", "nearest"):
            raise Unsupported("round_mode %r (up, down or nearest)" % round_mode)
        attrs = {"saturate": saturate}
        if _name(to) == "float8_e8m0fnu":
            attrs["round_mode"] = round_mode
    typed(b, node, "copy", inputs=[x], dtype=to, attrs=attrs)


@converts("Cast")
def cast(b, node):
    to = ONNX_TYPES.get(node.attr("to"))
    if to is None:
        from onnx import helper
        raise Unsupported("cast to %s (the Net holds %s)" % (
            helper.tensor_dtype_to_string(node.attr("to")), ", ".join(ONNX_TYPES.values())))
    cast_to(b, node, as_dtype(to) if to in NARROW_NAMES else
            _net_dtype(to) if to != "bfloat16" else "bfloat16")


@converts("CastLike")
def cast_like(b, node):
    cast_to(b, node, b.dtype(node.inputs[1]))


# ----- hand-written float32 converters (ops_math) whose other dtypes run here
ARITHMETIC = {"Add": ("add", {"alpha": 1}), "Sub": ("sub", {"alpha": 1}), "Mul": ("mul", None),
              "Max": ("maximum", None), "Min": ("minimum", None), "Sum": ("add", {"alpha": 1})}


def _arithmetic(b, node):
    ins = [n for n in node.inputs if n]
    if len(ins) == 1:
        b.out(node, b.value(ins[0]))
        return
    op, attrs = ARITHMETIC.get(node.op_type, ("div", None))
    if node.op_type == "Div" and np.dtype(_net_dtype(b.dtype(ins[0]))).kind in "iub":
        attrs = {"rounding_mode": "trunc"}  # ONNX's integer division truncates
    cur = ins[0]
    for k, other in enumerate(ins[1:]):
        last = k == len(ins) - 2
        cur = typed(b, node, op, inputs=[cur, other], attrs=attrs,
                    output=None if last else b.fresh(node.outputs[0] + "/%d" % k),
                    name=node.name if last else node.name + "/%d" % k)
        b.alias[cur] = cur


def _where(b, node):
    typed(b, node, "where")


def _abs(b, node):
    typed(b, node, "abs")


def _typed_first(op_type, fn, reads=slice(None)):
    """Op type's converter runs ``fn`` where the inputs at ``reads`` are not all float32."""
    float32 = CONVERTERS[op_type]

    def convert(b, node):
        (fn if is_typed(b, node, node.inputs[reads]) else float32)(b, node)
    CONVERTERS[op_type] = convert


def _clip(b, node):
    """clamp(x, min, max) = min(max(x, min), max) (all max where min > max, NaN kept); an
    absent bound is the dtype's lowest or highest value."""
    x = node.inputs[0]
    dtype = _net_dtype(b.dtype(x))
    if dtype == bfloat16 or np.dtype(dtype).kind == "f":
        limits = (np.float32(-np.inf), np.float32(np.inf))
    else:
        info = np.iinfo(dtype)
        limits = (np.asarray(info.min, dtype), np.asarray(info.max, dtype))
    if b.opset < 11:
        given = [node.attr(k) for k in ("min", "max")]
        given = [None if v is None else b.constant(np.float32(v), node.name + "/" + k)
                 for v, k in zip(given, ("min", "max"))]
    else:
        given = [node.input(1), node.input(2)]
    bounds = [g if g is not None else b.constant(lim, node.name + "/limit")
              for g, lim in zip(given, limits)]
    typed(b, node, "clamp", inputs=[x] + bounds, dtype=b.dtype(x))


def _ordered_constant_bounds(b, node):
    try:
        lo, hi = ops_math._bounds(b, node)
    except Unsupported:  # a bound computed at run time
        return False
    return lo < hi


_float32_clip = CONVERTERS["Clip"]


def _clip_any(b, node):
    """float32 with constant bounds, min below max: Hardtanh (or the activation it spells);
    otherwise the library's clamp."""
    if is_typed(b, node, node.inputs[:1]) or not _ordered_constant_bounds(b, node):
        _clip(b, node)
    else:
        _float32_clip(b, node)


CONVERTERS["Clip"] = _clip_any

for _t in list(ARITHMETIC) + ["Div"]:
    _typed_first(_t, _arithmetic)
_typed_first("Where", _where, slice(1, 3))
_typed_first("Abs", _abs)
