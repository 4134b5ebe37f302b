"""Converters of pointwise and reducing operators: activations, Clip, arithmetic,
Softmax/LogSoftmax, Reduce*, Dropout, Identity (over float32 tensors; other dtypes and
Cast: ops_library)."""
import math

import numpy as np

from .registry import Unsupported, converts
from .rewrite import ACTIVATION
from .spelling import import_options, match_attrs, match_value, one_node

FLOAT_MAX = 3.4028234663852886e38


def activation(b, node, act, **options):
    """Activation ``act`` of node's first input (the graph passes fold it into its
    producer where they can, after conversion)."""
    if not options:
        b.note_activation(node)
    x = node.inputs[0]
    b.add("Activation", [b.value(x)], b.shape(x), node, options=dict(activation=act, **options))


def spelled(b, node, scalars=()):
    """Convert ``node`` into the activation whose one-node spelling (activation table) it
    matches, ``scalars`` being its constant inputs after x; False when none does."""
    for name, act, sp in one_node(node.op_type):
        bound = match_attrs(act, sp.tree, node.op_type, node.attrs, {})
        for want, value in zip(sp.tree.inputs[1:], scalars):
            bound = None if bound is None else match_value(want, value, bound)
        if bound is not None:
            activation(b, node, name, **import_options(act, sp, bound))
            return True
    return False


@converts(ACTIVATION)
def fused_activation(b, node):
    activation(b, node, node.attr("activation"), **node.attr("options", {}))


@converts("Abs")
def abs_(b, node):
    x = node.inputs[0]
    b.add("Abs", [b.value(x)], b.shape(x), node)


def _bounds(b, node):
    if b.opset < 11:
        return node.attr("min", -FLOAT_MAX), node.attr("max", FLOAT_MAX)
    lo = float(b.const(node.inputs[1], "min").reshape(())) if node.input(1) else -FLOAT_MAX
    hi = float(b.const(node.inputs[2], "max").reshape(())) if node.input(2) else FLOAT_MAX
    return lo, hi


@converts("Clip")
def clip(b, node):
    lo, hi = _bounds(b, node)
    # an absent bound is +-FLOAT_MAX; the table spells "no upper bound" as infinity
    if spelled(b, node, [-math.inf if lo <= -FLOAT_MAX else lo, math.inf if hi >= FLOAT_MAX else hi]):
        return
    if not lo < hi:
        raise Unsupported("min %g is not below max %g" % (lo, hi))
    x = node.inputs[0]
    b.add("Hardtanh", [b.value(x)], b.shape(x), node,
          options={"min_val": max(lo, -FLOAT_MAX), "max_val": min(hi, FLOAT_MAX)})


@converts("HardSigmoid")
def hard_sigmoid(b, node):
    if spelled(b, node):
        return
    alpha, beta = float(node.attr("alpha", 0.2)), float(node.attr("beta", 0.5))
    # max(0, min(1, alpha x + beta)): an affine Elementwise against a constant one, clipped
    x = node.inputs[0]
    one = b.constant(np.ones(1, np.float32), node.name + ".one")
    t = b.add("Elementwise", [b.value(x), b.value(one)], b.shape(x), name=node.name + "/affine",
              output=b.fresh(node.outputs[0] + "/affine"),
              options={"operation": "sum", "coef1": alpha, "coef2": beta})
    b.add("Hardtanh", [t], b.shape(x), node, options={"min_val": 0.0, "max_val": 1.0})


# the other ops of one-node spellings, which nothing else converts
@converts(*sorted({sp.tree.op for _, _, sp in one_node()} - {"Clip", "HardSigmoid"}))
def activation_op(b, node):
    if not spelled(b, node):
        attrs = ", ".join("%s=%r" % kv for kv in sorted(node.attrs.items()))
        raise Unsupported("attributes %s (no activation is spelled so)" % (attrs or "none"))


ARITHMETIC = {"Add": "sum", "Sub": "sub", "Mul": "prod", "Div": "div", "Max": "max",
              "Min": "min", "Sum": "sum"}


@converts(*ARITHMETIC)
def arithmetic(b, node):
    ins = [n for n in node.inputs if n]
    if len(ins) == 1:
        b.out(node, b.value(ins[0]))
        return
    op = ARITHMETIC[node.op_type]
    cur = ins[0]
    for k, other in enumerate(ins[1:]):
        shape = tuple(np.broadcast_shapes(b.shape(cur), b.shape(other)))
        last = k == len(ins) - 2
        out = b.add("Elementwise", [b.value(cur), b.value(other)], shape,
                    node if last else None, name=node.name,
                    output=None if last else b.fresh(node.outputs[0] + "/%d" % k),
                    options={"operation": op})
        b.alias[out] = out
        cur = out
    b.out(node, cur)


@converts("Where")
def where(b, node):
    """Where(condition, x, y) -> the Where layer; a constant condition (boolean in ONNX)
    becomes a float 0/1 Parameter."""
    cond, x, y = node.inputs[:3]
    if b.is_const(cond):
        cond = b.constant(np.asarray(b.consts[cond]).astype(np.float32), cond + "/float")
    shape = tuple(np.broadcast_shapes(b.shape(cond), b.shape(x), b.shape(y)))
    b.add("Where", [b.value(cond), b.value(x), b.value(y)], shape, node)


@converts("Softmax", "LogSoftmax")
def softmax(b, node):
    x = node.inputs[0]
    shape = b.shape(x)
    rank = len(shape)
    axis = int(node.attr("axis", 1 if b.opset < 13 else -1)) % rank
    opts = {"log": node.op_type == "LogSoftmax"}
    if axis == 1 and (rank == 2 or b.opset >= 13):
        b.add("Softmax", [b.value(x)], shape, node, options=opts)
        return
    # dlprim's Softmax works over axis 1 with every later position separate: put the
    # softmax axis (before opset 13: everything from it on, flattened) at axis 1
    inner = shape[axis:] if b.opset < 13 else shape[axis:axis + 1]
    rest = shape[axis + len(inner):]
    view = (int(np.prod(shape[:axis])), int(np.prod(inner)), int(np.prod(rest)))
    dims = [-1] + list(view[1:]) if axis else list(view)
    t = b.add("Reshape", [b.value(x)], view, name=node.name + "/in",
              output=b.fresh(node.outputs[0] + "/in"), options={"dims": dims})
    t = b.add("Softmax", [t], view, name=node.name, output=b.fresh(node.outputs[0] + "/sm"),
              options=opts)
    b.add("Reshape", [t], shape, node, name=node.name + "/out",
          options={"dims": [-1] + [int(d) for d in shape[1:]]})


REDUCE = {"ReduceMean": "mean", "ReduceSum": "sum", "ReduceSumSquare": "sumsq",
          "ReduceL1": "abssum", "ReduceMax": "max", "ReduceMin": "min", "ReduceProd": "prod",
          "ReduceL2": "sumsq", "ReduceLogSum": "sum"}
# the library operator applied to the reduction (float inputs only)
AFTER = {"ReduceL2": "sqrt", "ReduceLogSum": "log"}
# noop_with_empty_axes with no axes: ONNX's reference reduces over none, leaving each
# element's own term (x*x, |x|, log x); the others leave x itself
NOOP = {"ReduceSumSquare": "mul", "ReduceL1": "abs", "ReduceL2": "abs", "ReduceLogSum": "log"}


def _axes(b, node, rank):
    from_input = b.opset >= 18 or (node.op_type == "ReduceSum" and b.opset >= 13)
    axes = (b.const(node.inputs[1], "axes") if node.input(1) else None) if from_input \
        else node.attr("axes")
    if axes is None or len(axes) == 0:
        return None if node.attr("noop_with_empty_axes", 0) else list(range(rank))
    axes = [int(a) for a in np.asarray(axes).reshape(-1)]
    if any(not -rank <= a < rank for a in axes) or len({a % rank for a in axes}) != len(axes):
        raise Unsupported("axes %s for an input of rank %d" % (axes, rank))
    return sorted(a % rank for a in axes)


def _is_float(dtype):
    dt = np.dtype(dtype)
    return dt.kind == "f" or dt.name == "bfloat16" or dt.kind == "V"


def _library(b, node, op, tensors, dtype, tag=None, **options):
    """A LibraryOp of ``op`` over dlprim ``tensors`` (broadcast), stored as ``dtype``;
    writes the node's output unless ``tag`` names a new tensor."""
    shape = tuple(np.broadcast_shapes(*(b.shapes[t] for t in tensors)))
    t = b.add("LibraryOp", tensors, shape, None if tag else node, name=node.name + (
        "/" + tag if tag else ""), output=b.fresh(node.outputs[0] + "/" + tag) if tag else None,
        options=dict(op=op, **options), dtype=dtype)
    if tag:
        b.alias[t] = t
    return t


@converts(*REDUCE, "ReduceLogSumExp")
def reduce_(b, node):
    x = node.inputs[0]
    shape, dtype = b.shape(x), b.dtype(x)
    axes = _axes(b, node, len(shape))
    if node.op_type in AFTER or node.op_type == "ReduceLogSumExp":
        if not _is_float(dtype):
            raise Unsupported("%s of %s (floats only)" % (node.op_type, np.dtype(dtype).name))
    if axes is None:
        op = NOOP.get(node.op_type)
        if op is None:
            b.out(node, b.value(x))
        else:
            _library(b, node, op, [b.value(x)] * (2 if op == "mul" else 1), dtype)
        return
    keep = bool(node.attr("keepdims", 1))
    out = tuple(1 if i in axes else d for i, d in enumerate(shape)) if keep else \
        tuple(d for i, d in enumerate(shape) if i not in axes)
    if node.op_type == "ReduceLogSumExp":
        _log_sum_exp(b, node, x, axes, keep, out)
        return
    method = REDUCE[node.op_type]
    if node.op_type in AFTER:
        t = _reduction(b, node, x, axes, keep, out, method, final=False)
        _library(b, node, AFTER[node.op_type], [t], dtype)
    elif len(shape) == 4 and axes == [2, 3] and keep and method in ("mean", "max") and \
            np.dtype(dtype) == np.float32 and all(shape[2:]):
        b.add("GlobalPooling", [b.value(x)], out, node,
              options={"mode": "avg" if method == "mean" else "max"})
    else:
        _reduction(b, node, x, axes, keep, out, method, final=True)


def _reduction(b, node, x, axes, keep, out, method, final):
    """A Reduction of ONNX tensor ``x`` to ``out`` (ONNX's shape: () when every axis is
    dropped, where the layer gives (1,)); writes the node's output when ``final``, else
    returns a new tensor (known under its own name)."""
    dtype = b.dtype(x)
    opts = {"method": method, "dims": axes, "keep_dim": keep}
    name = node.outputs[0]
    if out:
        t = b.add("Reduction", [b.value(x)], out, node if final else None, name=node.name,
                  output=None if final else b.fresh(name + "/" + method), options=opts,
                  dtype=dtype)
    else:
        t = b.add("Reduction", [b.value(x)], (1,), name=node.name,
                  output=b.fresh(name + "/1"), options=opts, dtype=dtype)
        t = b.add("Reshape", [t], (), node if final else None, name=node.name + "/scalar",
                  output=None if final else b.fresh(name + "/" + method),
                  options={"dims": []}, dtype=dtype)
    if not final:
        b.alias[t] = t
    return t


def _log_sum_exp(b, node, x, axes, keep, out):
    """log(sum(exp(x - m))) + m, m the largest value (0 where it is infinite, as PyTorch's
    logsumexp: an all -inf slice gives -inf, a +inf gives +inf)."""
    dtype, name = b.dtype(x), node.outputs[0]
    kept = tuple(1 if i in axes else d for i, d in enumerate(b.shape(x)))
    m = _reduction(b, node, x, axes, True, kept, "max", final=False)
    inf = _library(b, node, "isinf", [m], np.bool_, "inf")
    m = _library(b, node, "where", [inf, m], dtype, "shift", scalars={"b": 0.0})
    d = _library(b, node, "sub", [b.value(x), m], dtype, "sub", attrs={"alpha": 1})
    e = _library(b, node, "exp", [d], dtype, "exp")
    s = _library(b, node, "log", [_reduction(b, node, e, axes, keep, out, "sum", final=False)],
                 dtype, "log")
    if not keep:
        m = b.add("Reshape", [m], out, name=node.name + "/shape",
                  output=b.fresh(name + "/shifted"), options={"dims": [int(d) for d in out]},
                  dtype=dtype)
    _library(b, node, "add", [s, m], dtype, attrs={"alpha": 1})


@converts("Dropout")
def dropout(b, node):
    """Inference (no training_mode, or false): the input, its mask all true where read; a
    Dropout layer where the mask is not read, so that the net drops when trained. Random
    dropout in the model itself (training_mode true, ratio above 0) is refused."""
    ratio = node.attr("ratio", 0.5)
    if b.opset >= 12:
        ratio = float(b.const(node.inputs[1], "ratio").reshape(())) if node.input(1) else 0.5
    x = node.inputs[0]
    training = node.input(2) and bool(b.const(node.inputs[2], "training_mode").reshape(()))
    if training and ratio != 0.0:
        # ONNX drops at random here whatever the net's mode; a predicting net would not
        raise Unsupported("training_mode true (random dropout in the model itself)")
    mask = node.outputs[1] if len(node.outputs) > 1 and node.outputs[1] else None
    if mask and (b.consumers.get(mask) or mask in b.graph_outputs):
        b.consts[mask] = np.ones(b.shape(x), np.bool_)
        b.out(node, b.value(x))
        return
    if ratio == 0.0 or training:
        b.out(node, b.value(x))
        return
    b.add("Dropout", [b.value(x)], b.shape(x), node, options={"ratio": float(ratio)})


@converts("Identity")
def identity(b, node):
    b.out(node, b.value(node.inputs[0]))
