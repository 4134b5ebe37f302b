"""What a Value's methods and ``dlprim.nn.functional`` compute: each call checks the
operands' shapes and adds one operator to the trace of its Value.

Operators are named after the function in the scope of the module calling it
("layer1.0.add"); a module's own operator passes its name. Operands are recognised by
their ``trace``, and annotated "Value" by name: this module cannot import Value, whose
methods call it.
"""
import math
from typing import Optional, Sequence

from ..core.activation import ACTIVATIONS

__all__ = ["axis", "add", "sub", "mul", "div", "matmul", "activation", "hardtanh", "flatten",
           "reshape", "permute", "transpose", "cat", "softmax", "log_softmax", "dropout"]


def _trace(x, what):
    trace = getattr(x, "trace", None)
    if trace is None:
        raise TypeError("%s: expected a dlprim.nn Value (a tensor of the net being built), "
                        "got %s %r" % (what, type(x).__name__, x))
    return trace


def _float(x, what):
    if x.dtype != "float":
        _trace(x, what).fail("%s needs a float input, got %s" % (what, x.dtype))


def axis(x: "Value", dim: int) -> int:
    """``dim`` of Value ``x`` as an index in [0, ndim) (negative counts from the end)."""
    if isinstance(dim, bool) or not isinstance(dim, int) or not -x.ndim <= dim < x.ndim:
        _trace(x, "dim").fail("dim %r is out of range for a %d-D input of shape %s"
                              % (dim, x.ndim, x.shape))
    return dim % x.ndim


def _broadcast(a, b):
    """numpy's broadcasting of two shapes; None where they do not broadcast."""
    n = max(len(a), len(b))
    a, b = (1,) * (n - len(a)) + a, (1,) * (n - len(b)) + b
    if any(p != q and 1 not in (p, q) for p, q in zip(a, b)):
        return None
    return tuple(max(p, q) if 1 in (p, q) else p for p, q in zip(a, b))


def _binary(a, b, operation, function, name):
    trace = _trace(a, function)
    if getattr(b, "trace", None) is not trace:
        raise TypeError("%s: %s combines two Values of one net, got %s %r (scalars have no "
                        "layer of their own; multiply by a learned or constant tensor instead)"
                        % (trace.where, function, type(b).__name__, b))
    for v in (a, b):
        _float(v, function)
    shape = _broadcast(a.shape, b.shape)
    if shape is None:
        trace.fail("%s: shapes %s and %s do not broadcast" % (function, a.shape, b.shape))
    return trace.add("Elementwise", [a, b], shape, options={"operation": operation},
                     name=name or trace.call_name(function))


def add(a: "Value", b: "Value", name: Optional[str] = None) -> "Value":
    """a + b with numpy broadcasting (Elementwise sum)."""
    return _binary(a, b, "sum", "add", name)


def sub(a: "Value", b: "Value", name: Optional[str] = None) -> "Value":
    """a - b with numpy broadcasting."""
    return _binary(a, b, "sub", "sub", name)


def mul(a: "Value", b: "Value", name: Optional[str] = None) -> "Value":
    """a * b elementwise with numpy broadcasting (Elementwise prod)."""
    return _binary(a, b, "prod", "mul", name)


def div(a: "Value", b: "Value", name: Optional[str] = None) -> "Value":
    """a / b elementwise with numpy broadcasting."""
    return _binary(a, b, "div", "div", name)


def matmul(a: "Value", b: "Value", name: Optional[str] = None) -> "Value":
    """a @ b over the last two axes, batches broadcast (MatMul)."""
    trace = _trace(a, "matmul")
    _trace(b, "matmul")
    if a.ndim < 2 or b.ndim < 2:
        trace.fail("matmul needs inputs of at least 2 dimensions, got %s and %s" % (a.shape, b.shape))
    if a.shape[-1] != b.shape[-2]:
        trace.fail("matmul of %s and %s: the inner sizes %d and %d differ"
                   % (a.shape, b.shape, a.shape[-1], b.shape[-2]))
    batch = _broadcast(a.shape[:-2], b.shape[:-2])
    if batch is None:
        trace.fail("matmul: the batch shapes %s and %s do not broadcast" % (a.shape[:-2], b.shape[:-2]))
    return trace.add("MatMul", [a, b], batch + (a.shape[-2], b.shape[-1]),
                     name=name or trace.call_name("matmul"))


def activation(x: "Value", kind: str, inplace: bool = False, name: Optional[str] = None,
               **params) -> "Value":
    """``kind`` of the activation table (core/activation.py) applied to ``x``; ``params``
    are its parameters (``negative_slope`` ...); ``inplace`` writes over x's tensor."""
    trace = _trace(x, kind)
    _float(x, kind)
    entry = ACTIVATIONS[kind]
    unknown = sorted(set(params) - set(entry.params))
    if unknown:
        trace.fail("%s takes no parameter %s" % (kind, ", ".join(unknown)))
    options = {"activation": kind}
    options.update((p, float(params.get(p, default))) for p, default in entry.params.items())
    return trace.add("Activation", [x], x.shape, options=options, inplace=bool(inplace),
                     name=name or trace.call_name(kind))


def pointwise(x: "Value", op: str, name: Optional[str] = None) -> "Value":
    """Operator ``op`` of the operator library (a one-input float operator: see
    ``dlprim.ops.layer_operators``) applied to ``x``, as a ``Pointwise`` layer."""
    trace = _trace(x, op)
    _float(x, op)
    return trace.add("Pointwise", [x], x.shape, options={"op": op},
                     name=name or trace.call_name(op))


def hardtanh(x: "Value", min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False,
             name: Optional[str] = None) -> "Value":
    """min(max(x, min_val), max_val) (Hardtanh)."""
    trace = _trace(x, "hardtanh")
    _float(x, "hardtanh")
    if not min_val < max_val:
        trace.fail("hardtanh: min_val %r must be below max_val %r" % (min_val, max_val))
    return trace.add("Hardtanh", [x], x.shape, inplace=bool(inplace),
                     options={"min_val": float(min_val), "max_val": float(max_val)},
                     name=name or trace.call_name("hardtanh"))


def flatten(x: "Value", start_dim: int = 1, end_dim: int = -1,
            name: Optional[str] = None) -> "Value":
    """Axes ``start_dim`` to ``end_dim`` merged into one: Flatten for (N, ...) -> (N, rest),
    else a Reshape that keeps the leading axes (batch included) as they come."""
    trace = _trace(x, "flatten")
    start, end = axis(x, start_dim), axis(x, end_dim)
    if start > end:
        trace.fail("flatten: start_dim %d comes after end_dim %d" % (start_dim, end_dim))
    if start == end:
        return x
    shape = x.shape[:start] + (math.prod(x.shape[start:end + 1]),) + x.shape[end + 1:]
    name = name or trace.call_name("flatten")
    if start == 1 and end == x.ndim - 1:
        return trace.add("Flatten", [x], shape, x.dtype, name=name)
    dims = [0] * start + list(shape[start:])   # 0 keeps an axis: the net can change batch
    return trace.add("Reshape", [x], shape, x.dtype, options={"dims": dims}, name=name)


def _sizes(args, what):
    sizes = args[0] if len(args) == 1 and isinstance(args[0], (list, tuple)) else args
    if not all(isinstance(s, int) and not isinstance(s, bool) for s in sizes):
        raise TypeError("%s expects integers, got %r" % (what, sizes))
    return [int(s) for s in sizes]


def reshape(x: "Value", *shape: int, name: Optional[str] = None) -> "Value":
    """``x`` with the shape ``shape`` (one entry may be -1); no copy (Reshape)."""
    trace = _trace(x, "reshape")
    dims = _sizes(shape, "reshape")
    known = math.prod(d for d in dims if d != -1)
    total = math.prod(x.shape)
    if dims.count(-1) > 1 or any(d < -1 or d == 0 for d in dims):
        fits = False
    elif -1 in dims:
        fits = total % known == 0
    else:
        fits = known == total
    if not fits:
        trace.fail("reshape: shape %s does not hold the %d elements of %s" % (dims, total, x.shape))
    out = [total // known if d == -1 else d for d in dims]
    return trace.add("Reshape", [x], out, x.dtype, options={"dims": dims},
                     name=name or trace.call_name("reshape"))


def permute(x: "Value", *dims: int, name: Optional[str] = None) -> "Value":
    """The axes of ``x`` in the order ``dims`` (Transpose)."""
    trace = _trace(x, "permute")
    order = [axis(x, d) for d in _sizes(dims, "permute")]
    if sorted(order) != list(range(x.ndim)):
        trace.fail("permute: %s is not an order of the %d axes of %s" % (list(dims), x.ndim, x.shape))
    return trace.add("Transpose", [x], [x.shape[d] for d in order], x.dtype,
                     options={"dims": order}, name=name or trace.call_name("permute"))


def transpose(x: "Value", dim0: int, dim1: int, name: Optional[str] = None) -> "Value":
    """``x`` with axes ``dim0`` and ``dim1`` swapped (Transpose)."""
    order = list(range(x.ndim))
    a, b = axis(x, dim0), axis(x, dim1)
    order[a], order[b] = b, a
    return permute(x, *order, name=name or _trace(x, "transpose").call_name("transpose"))


def cat(tensors: Sequence["Value"], dim: int = 1, name: Optional[str] = None) -> "Value":
    """Values joined along ``dim``, their other sizes equal (Concat)."""
    tensors = list(tensors)
    if not tensors:
        raise ValueError("cat needs at least one Value")
    first = tensors[0]
    trace = _trace(first, "cat")
    d = axis(first, dim)
    for i, t in enumerate(tensors):
        if _trace(t, "cat") is not trace:
            raise TypeError("cat: Value %d belongs to another net" % i)
        if t.ndim != first.ndim or t.dtype != first.dtype or any(
                p != q for k, (p, q) in enumerate(zip(t.shape, first.shape)) if k != d):
            trace.fail("cat along dim %d: input %d of shape %s (%s) does not match input 0 "
                       "of shape %s (%s)" % (dim, i, t.shape, t.dtype, first.shape, first.dtype))
    shape = list(first.shape)
    shape[d] = sum(t.shape[d] for t in tensors)
    return trace.add("Concat", tensors, shape, first.dtype, options={"dim": d},
                     name=name or trace.call_name("cat"))


def _softmax(x, dim, log, name, function):
    trace = _trace(x, function)
    _float(x, function)
    if x.ndim < 2 or axis(x, dim) != 1:
        trace.fail("%s works over axis 1 of (N, C, ...); dim=%r of shape %s is another axis "
                   "(permute it to axis 1 first)" % (function, dim, x.shape))
    return trace.add("Softmax", [x], x.shape, options={"log": True} if log else None,
                     name=name or trace.call_name(function))


def softmax(x: "Value", dim: int, name: Optional[str] = None) -> "Value":
    """Softmax over ``dim``, which must be axis 1 (Softmax)."""
    return _softmax(x, dim, False, name, "softmax")


def log_softmax(x: "Value", dim: int, name: Optional[str] = None) -> "Value":
    """Log-softmax over ``dim``, which must be axis 1 (Softmax with ``log``)."""
    return _softmax(x, dim, True, name, "log_softmax")


def dropout(x: "Value", p: float = 0.5, training: bool = True, inplace: bool = False,
            name: Optional[str] = None) -> "Value":
    """Inverted dropout of ratio ``p`` in train mode, the identity when predicting (the
    Net's mode decides; ``training=False`` adds nothing)."""
    trace = _trace(x, "dropout")
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0 <= p < 1:
        trace.fail("dropout probability must be in [0, 1), got %r" % (p,))
    if not training:
        return x
    return trace.add("Dropout", [x], x.shape, x.dtype, options={"ratio": float(p)},
                     inplace=bool(inplace), name=name or trace.call_name("dropout"))
