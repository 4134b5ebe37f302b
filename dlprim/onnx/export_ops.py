"""dlprim layers as ONNX nodes, one function per layer type:
``fn(e, op, layer, ins, outs, params)`` with ``e`` the ``export.ExportGraph``, ``ins`` /
``outs`` the ONNX tensor names of the operator's values and ``params`` its initializers."""
import numpy as np

from ..core.activation import ACTIVATIONS, X, OnnxNode, Option
from .spelling import for_export

__all__ = ["EXPORTERS", "activation"]

EXPORTERS = {}


def exports(*types):
    def wrap(fn):
        for t in types:
            EXPORTERS[t] = fn
        return fn
    return wrap


def activation(e, act, x, out, name, options=None):
    """Nodes computing ``act(x)`` into ``out``: the first spelling in the activation table
    that ``e.opset`` and the options allow."""
    values = dict(ACTIVATIONS[act].params if act in ACTIVATIONS else {}, **(options or {}))
    sp = for_export(act, e.opset, values)
    if sp is None:
        raise ValueError("%s: activation %r has no ONNX export at opset %d" % (name, act, e.opset))

    def value(v):
        return float(values[v.name]) if isinstance(v, Option) else v

    def put(t, root):
        if t == X:
            return x
        if not isinstance(t, OnnxNode):
            return e.scalar(value(t))
        ins = [put(i, False) for i in t.inputs]
        attrs = {k: value(v) for k, v in t.attrs.items()}
        return e.node(t.op, ins, [out] if root else None,
                      name if root else "%s/%s" % (name, t.op.lower()), **attrs)

    put(sp.tree, True)


def _then(e, op, act, ins_node, outs, options=None, **attrs):
    """``ins_node`` = (op_type, inputs): that node, then the fused activation, into outs[0]."""
    op_type, inputs = ins_node
    if act == "identity":
        e.node(op_type, inputs, outs, op.name, **attrs)
    else:
        t = e.node(op_type, inputs, name=op.name, **attrs)
        activation(e, act, t, outs[0], op.name + "/" + act, options)


@exports("Convolution2D", "TransposedConvolution2D")
def conv(e, op, layer, ins, outs, params):
    attrs = dict(kernel_shape=list(layer.kernel), strides=list(layer.stride),
                 dilations=list(layer.dilate), group=layer.groups, pads=list(layer.pad))
    op_type = "Conv"
    if op.type == "TransposedConvolution2D":
        op_type = "ConvTranspose"
        attrs["output_padding"] = list(layer.output_pad)
    _then(e, op, layer.activation, (op_type, ins + params), outs, **attrs)


@exports("InnerProduct")
def inner_product(e, op, layer, ins, outs, params):
    # (a decoder's forms, none of which one Gemm spells exactly)
    for present, what in ((layer.input_norm is not None, "a norm of its input"),
                          (layer.gated, "gated"), (len(ins) > 1, "a residual input"),
                          (layer.int8 or layer.q4, "%s weights" % layer.options["weights"])):
        if present:
            raise ValueError("%s: an InnerProduct with %s has no ONNX export" % (op.name, what))
    x = ins[0]
    if len(e.shape(op.in_values[0])) != 2:
        x = e.node("Flatten", [x], name=op.name + "/flatten", axis=1)
    _then(e, op, layer.options["activation"], ("Gemm", [x] + params), outs,
          transB=0 if layer.inputs_first else 1)


@exports("BatchNorm")
def batch_norm(e, op, layer, ins, outs, params):
    mean, var = params[:2]
    if layer.options["affine"]:
        scale, bias = params[2:]
    else:
        c = e.shape(op.in_values[0])[1]
        scale, bias = e.const(np.ones(c, np.float32), "ones"), e.const(np.zeros(c, np.float32), "zeros")
    e.node("BatchNormalization", [ins[0], scale, bias, mean, var], outs, op.name,
           epsilon=float(layer.options["eps"]), momentum=1.0 - float(layer.options["momentum"]))


@exports("Activation")
def activation_layer(e, op, layer, ins, outs, params):
    activation(e, layer.options["activation"], ins[0], outs[0], op.name, layer.options)


@exports("Threshold")
def threshold(e, op, layer, ins, outs, params):
    from onnx import TensorProto
    t = e.node("Greater", [ins[0], e.scalar(float(layer.options["threshold"]))], name=op.name + "/gt")
    e.node("Cast", [t], outs, op.name, to=TensorProto.FLOAT)


@exports("Hardtanh")
def hardtanh(e, op, layer, ins, outs, params):
    o = layer.options
    e.node("Clip", [ins[0], e.scalar(float(o["min_val"])), e.scalar(float(o["max_val"]))], outs, op.name)


@exports("Abs")
def abs_(e, op, layer, ins, outs, params):
    e.node("Abs", ins, outs, op.name)


@exports("Pointwise")
def pointwise(e, op, layer, ins, outs, params):
    """The operator's ONNX op type, from its declaration (dlprim.ops)."""
    if layer.op.onnx is None:
        raise ValueError("%s: operator %r has no ONNX spelling" % (op.name, layer.op.name))
    e.node(layer.op.onnx, ins, outs, op.name)


ELEMENTWISE = {"sum": "Add", "sub": "Sub", "prod": "Mul", "div": "Div", "max": "Max", "min": "Min"}


@exports("Elementwise")
def elementwise(e, op, layer, ins, outs, params):
    a, b = ins
    c1, c2 = layer.coefs
    if c1 != 1.0:
        a = e.node("Mul", [a, e.scalar(c1)], name=op.name + "/coef1")
    if c2 != 1.0:
        b = e.node("Mul", [b, e.scalar(c2)], name=op.name + "/coef2")
    _then(e, op, layer.options["activation"], (ELEMENTWISE[layer.op], [a, b]), outs)


@exports("Where")
def where(e, op, layer, ins, outs, params):
    cond = e.node("Cast", [ins[0]], name=op.name + "/condition", to=9)  # BOOL: nonzero is true
    e.node("Where", [cond, ins[1], ins[2]], outs, op.name)


@exports("Pooling2D")
def pooling(e, op, layer, ins, outs, params):
    attrs = dict(kernel_shape=list(layer.kernel), strides=list(layer.stride),
                 pads=list(layer.pad) * 2, ceil_mode=int(layer.ceil_mode))
    if layer.options["mode"] == "max":
        e.node("MaxPool", ins, outs, op.name, **attrs)
    else:
        e.node("AveragePool", ins, outs, op.name, count_include_pad=int(layer.count_include_pad),
               **attrs)


@exports("LRN")
def lrn(e, op, layer, ins, outs, params):
    o = layer.options
    e.node("LRN", ins, outs, op.name, size=int(o["size"]), alpha=float(o["alpha"]),
           beta=float(o["beta"]), bias=float(o["k"]))


@exports("GlobalPooling")
def global_pooling(e, op, layer, ins, outs, params):
    e.node("GlobalMaxPool" if layer.options["mode"] == "max" else "GlobalAveragePool", ins, outs,
           op.name)


@exports("Concat")
def concat(e, op, layer, ins, outs, params):
    e.node("Concat", ins, outs, op.name, axis=int(layer.options["dim"]))


@exports("Slice")
def slice_(e, op, layer, ins, outs, params):
    shape = e.shape(op.in_values[0])
    axis = int(layer.options["dim"]) % len(shape)
    begin, end = layer.bounds(shape[axis])
    e.node("Slice", [ins[0], e.ints([begin]), e.ints([end]), e.ints([axis])], outs, op.name)


@exports("Reshape", "Flatten", "Squeeze")
def reshape(e, op, layer, ins, outs, params):
    # the output shape with the batch kept symbolic where the layer keeps it (dims 0)
    out = list(e.shape(op.out_values[0]))
    if op.type == "Reshape":
        out = [int(d) for d in layer.options["dims"]]
    elif op.type == "Flatten":
        out = [0, -1]
    e.node("Reshape", [ins[0], e.ints(out, op.name + ".shape")], outs, op.name)


@exports("Transpose")
def transpose(e, op, layer, ins, outs, params):
    rank = len(e.shape(op.in_values[0]))
    e.node("Transpose", ins, outs, op.name, perm=[int(d) % rank for d in layer.options["dims"]])


@exports("Softmax")
def softmax(e, op, layer, ins, outs, params):
    e.node("LogSoftmax" if layer.options["log"] else "Softmax", ins, outs, op.name, axis=1)


@exports("Dropout")
def dropout(e, op, layer, ins, outs, params):
    e.node("Identity", ins, outs, op.name)


@exports("Cast")
def cast(e, op, layer, ins, outs, params):
    # a net of precision "fp16" exports as the float32 model it trains (ONNX's Conv and
    # Gemm want one type for data and weights): its Casts change nothing there
    e.node("Identity", ins, outs, op.name)


@exports("Parameter")
def parameter(e, op, layer, ins, outs, params):
    if list(outs) == list(params):
        return  # the value is the initializer itself (an imported constant keeps its name)
    e.node("Identity", params, outs, op.name)


@exports("Interpolation")
def interpolation(e, op, layer, ins, outs, params):
    o = layer.options
    if o["method"] == "bilinear":
        attrs = dict(mode="linear", coordinate_transformation_mode="align_corners"
                     if o["align_corners"] else "half_pixel")
    elif o["method"] == "nearest":
        attrs = dict(mode="nearest", coordinate_transformation_mode="asymmetric", nearest_mode="floor")
    else:
        attrs = dict(mode="nearest", coordinate_transformation_mode="half_pixel",
                     nearest_mode="round_prefer_ceil")
    if o["scale_y"] > 0:
        scales = e.const(np.array([1, 1, o["scale_y"], o["scale_x"]], np.float32), op.name + ".scales")
        e.node("Resize", [ins[0], "", scales], outs, op.name, **attrs)
    else:
        sizes = e.ints(list(e.shape(op.out_values[0])), op.name + ".sizes")
        e.node("Resize", [ins[0], "", "", sizes], outs, op.name, **attrs)


REDUCE = {"sum": "ReduceSum", "mean": "ReduceMean", "sumsq": "ReduceSumSquare", "abssum": "ReduceL1",
          "max": "ReduceMax", "min": "ReduceMin", "prod": "ReduceProd"}


@exports("Reduction")
def reduction(e, op, layer, ins, outs, params):
    o = layer.options
    rank = len(e.shape(op.in_values[0]))
    axes = layer.axes(rank)
    keep = int(o["keep_dim"])
    op_type = REDUCE[o["method"]]
    t = ins[0]
    if e.opset >= 18 or op_type == "ReduceSum":
        t = e.node(op_type, [t, e.ints(axes)], name=op.name, keepdims=keep)
    else:
        t = e.node(op_type, [t], name=op.name, keepdims=keep, axes=list(axes))
    if float(o["output_scale"]) != 1.0:
        t = e.node("Mul", [t, e.scalar(float(o["output_scale"]))], name=op.name + "/scale")
    # dlprim gives (1,) where ONNX reduces to a scalar
    e.node("Reshape", [t, e.ints(list(e.shape(op.out_values[0])))], outs, op.name + "/shape")


def _to_one(e, op, t, outs):
    e.node("Reshape", [t, e.ints([1])], outs, op.name + "/shape")


@exports("SoftmaxWithLoss")
def softmax_loss(e, op, layer, ins, outs, params):
    labels = _int_labels(e, op, ins[1])
    _to_one(e, op, e.node("SoftmaxCrossEntropyLoss", [ins[0], labels], name=op.name,
                          reduction="mean", ignore_index=layer.ignore_index), outs)


@exports("NLLLoss")
def nll_loss(e, op, layer, ins, outs, params):
    labels = _int_labels(e, op, ins[1])
    reduce = layer.options["reduce"]
    if reduce == "none":
        e.node("NegativeLogLikelihoodLoss", [ins[0], labels], outs, op.name, reduction="none",
               ignore_index=layer.ignore_index)
    else:
        _to_one(e, op, e.node("NegativeLogLikelihoodLoss", [ins[0], labels], name=op.name,
                              reduction=reduce, ignore_index=layer.ignore_index), outs)


def _int_labels(e, op, labels):
    from onnx import TensorProto
    shape = e.shape(op.in_values[1])
    if len(shape) == 2:
        labels = e.node("Reshape", [labels, e.ints([-1])], name=op.name + "/labels")
    if e.net.graph.values[op.in_values[1]].dtype.kind == "f":
        labels = e.node("Cast", [labels], name=op.name + "/cast", to=TensorProto.INT64)
    return labels


@exports("MSELoss")
def mse_loss(e, op, layer, ins, outs, params):
    d = e.node("Sub", ins, name=op.name + "/sub")
    reduce = layer.options["reduce"]
    if reduce == "none":
        e.node("Mul", [d, d], outs, op.name)
        return
    sq = e.node("Mul", [d, d], name=op.name + "/sq")
    t = e.node("ReduceMean" if reduce == "mean" else "ReduceSum", [sq], name=op.name, keepdims=0)
    _to_one(e, op, t, outs)


# ----- the layers of transformers
def _affine(e, op, layer, params, shape):
    """(scale, bias) initializers: the parameters, or ones and zeros without ``affine``."""
    scale = params[0] if layer.affine else e.const(np.ones(shape, np.float32), "ones")
    if layer.affine and len(params) > 1:
        return scale, params[1]
    return scale, e.const(np.zeros(shape, np.float32), "zeros")


@exports("LayerNorm")
def layer_norm(e, op, layer, ins, outs, params):
    dims = int(layer.options["normalized_dims"])
    shape = tuple(e.shape(op.in_values[0])[-dims:])
    scale, bias = _affine(e, op, layer, params, shape)
    e.node("LayerNormalization", [ins[0], scale, bias], outs, op.name, axis=-dims,
           epsilon=layer.eps)


@exports("RMSNorm")
def rms_norm(e, op, layer, ins, outs, params):
    """x / sqrt(mean(x^2) + eps) * weight, spelled out (RMSNormalization is opset 23)."""
    rank = len(e.shape(op.in_values[0]))
    axes = list(range(rank - int(layer.options["normalized_dims"]), rank))
    sq = e.node("Mul", [ins[0], ins[0]], name=op.name + "/square")
    if e.opset >= 18:
        ms = e.node("ReduceMean", [sq, e.ints(axes)], name=op.name + "/mean", keepdims=1)
    else:
        ms = e.node("ReduceMean", [sq], name=op.name + "/mean", keepdims=1, axes=axes)
    rms = e.node("Sqrt", [e.node("Add", [ms, e.scalar(layer.eps)], name=op.name + "/eps")],
                 name=op.name + "/sqrt")
    if layer.affine:
        y = e.node("Div", [ins[0], rms], name=op.name + "/normalise")
        e.node("Mul", [y, params[0]], outs, op.name)
    else:
        e.node("Div", [ins[0], rms], outs, op.name)


@exports("GroupNorm")
def group_norm(e, op, layer, ins, outs, params):
    if e.opset < 21:
        raise ValueError("%s: GroupNorm exports as GroupNormalization with a scale per "
                         "channel, which needs opset 21 or newer (this export is at %d)"
                         % (op.name, e.opset))
    c = e.shape(op.in_values[0])[1]
    scale, bias = _affine(e, op, layer, params, (c,))
    e.node("GroupNormalization", [ins[0], scale, bias], outs, op.name,
           num_groups=int(layer.options["groups"]), epsilon=layer.eps)


@exports("MatMul")
def matmul(e, op, layer, ins, outs, params):
    operands = []
    for x, vid, transposed in zip(ins, op.in_values, (layer.ta, layer.tb)):
        if transposed:
            rank = len(e.shape(vid))
            x = e.node("Transpose", [x], name=op.name + "/transpose",
                       perm=list(range(rank - 2)) + [rank - 1, rank - 2])
        operands.append(x)
    if layer.alpha == 1.0:
        e.node("MatMul", operands, outs, op.name)
    else:
        t = e.node("MatMul", operands, name=op.name)
        e.node("Mul", [t, e.scalar(layer.alpha)], outs, op.name + "/alpha")


@exports("Embedding")
def embedding(e, op, layer, ins, outs, params):
    e.node("Gather", [params[0], ins[0]], outs, op.name, axis=0)


@exports("ScaledDotProductAttention")
def attention(e, op, layer, ins, outs, params):
    """The plain ONNX form: softmax(scale q k^T + mask) v, with a causal mask as a constant;
    the "nlhd" and "packed" layouts go through (N, H, L, D) by Transpose (and Gather of
    the packed parts) and back."""
    if layer.options.get("positions"):
        raise ValueError("%s: a ScaledDotProductAttention over a cache's positions has no "
                         "ONNX export" % op.name)
    layout = layer.options.get("layout", "nhld")
    shape = e.shape(op.in_values[0])
    if layout == "packed":  # (N, L, 3, H, D)
        parts = [e.node("Gather", [ins[0], e.const(np.array(j, np.int64), "%s.part%d" % (op.name, j))],
                        name="%s/%s" % (op.name, "qkv"[j]), axis=2) for j in range(3)]
        mask = ins[1:]
        lq = lk = shape[1]
        d = shape[4]
    else:
        parts, mask = list(ins[:3]), ins[3:]
        k_shape = e.shape(op.in_values[1])
        at = 1 if layout == "nlhd" else 2
        lq, lk, d = shape[at], k_shape[at], shape[3]
    if layout != "nhld":
        parts = [e.node("Transpose", [t], name="%s/%s_nhld" % (op.name, "qkv"[j]), perm=[0, 2, 1, 3])
                 for j, t in enumerate(parts)]
    scale = layer.options["scale"]
    scale = 1.0 / np.sqrt(d) if scale is None else float(scale)
    kt = e.node("Transpose", [parts[1]], name=op.name + "/kt", perm=[0, 1, 3, 2])
    s = e.node("MatMul", [parts[0], kt], name=op.name + "/scores")
    s = e.node("Mul", [s, e.scalar(scale)], name=op.name + "/scale")
    if mask:
        s = e.node("Add", [s, mask[0]], name=op.name + "/mask")
    if layer.options["causal"]:
        tri = np.where(np.triu(np.ones((lq, lk), bool), 1), -np.inf, 0).astype(np.float32)
        s = e.node("Add", [s, e.const(tri, op.name + ".causal")], name=op.name + "/causal")
    p = e.node("Softmax", [s], name=op.name + "/softmax", axis=-1)
    if layout == "nhld":
        e.node("MatMul", [p, parts[2]], outs, op.name)
    else:
        o = e.node("MatMul", [p, parts[2]], name=op.name + "/nhld")
        e.node("Transpose", [o], outs, op.name, perm=[0, 2, 1, 3])


# library operators (LibraryOp) whose ONNX op type is not their declaration's own spelling
_LIBRARY_ONNX = {"eq": "Equal", "lt": "Less", "le": "LessOrEqual", "gt": "Greater",
                 "ge": "GreaterOrEqual", "logical_not": "Not", "logical_and": "And",
                 "logical_or": "Or", "logical_xor": "Xor", "isnan": "IsNaN", "isinf": "IsInf",
                 "bitwise_and": "BitwiseAnd", "bitwise_or": "BitwiseOr",
                 "bitwise_xor": "BitwiseXor", "bitwise_not": "BitwiseNot", "add": "Add",
                 "sub": "Sub", "mul": "Mul", "div": "Div", "maximum": "Max", "minimum": "Min",
                 "pow": "Pow", "where": "Where", "fmod": "Mod", "remainder": "Mod",
                 "isposinf": "IsInf", "isneginf": "IsInf",
                 "bitwise_left_shift": "BitShift", "bitwise_right_shift": "BitShift"}
_LIBRARY_ATTRS = {"fmod": {"fmod": 1}, "remainder": {"fmod": 0},
                  "isposinf": {"detect_negative": 0}, "isneginf": {"detect_positive": 0},
                  "bitwise_left_shift": {"direction": "LEFT"},
                  "bitwise_right_shift": {"direction": "RIGHT"}}
_ONNX_BOOL_OUT = ("Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual", "Not", "And",
                  "Or", "Xor", "IsNaN", "IsInf")


def _onnx_type(dtype):
    from onnx import helper
    from ..dtypes import as_dtype, bfloat16
    dt = as_dtype(dtype)
    if dt == bfloat16:
        from onnx import TensorProto
        return TensorProto.BFLOAT16
    return helper.np_dtype_to_tensor_dtype(np.dtype(dt))


def _exact_in_onnx(layer, onnx_type):
    """Why a LibraryOp's attributes have no exact ONNX node, or None."""
    name, attrs = layer.op.name, dict(layer.attrs)
    alpha = attrs.pop("alpha", 1)
    if name in ("add", "sub") and alpha != 1:
        return None if not attrs else "attributes %s" % attrs  # alpha: a Mul before
    rounding = attrs.pop("rounding_mode", None)
    if name == "div" and rounding is not None and (
            rounding != "trunc" or np.dtype(layer.compute).kind not in "iub"):
        return "division with rounding_mode=%r over %s" % (rounding, layer.compute)
    if name == "remainder" and np.dtype(layer.compute).kind == "f":
        return "Python's remainder of floats (ONNX's Mod with fmod=0 takes integers only)"
    if attrs:
        return "attributes %s" % attrs
    return None


def _scalar(e, value, dtype, name):
    """A constant of one element of ``dtype`` (bfloat16: written as float32, then Cast)."""
    if str(dtype) == "bfloat16":
        t = e.const(np.asarray(value, np.float32), name)
        return e.node("Cast", [t], name=name + "/bf16", to=_onnx_type(dtype))
    return e.const(np.asarray(value, dtype), name)


@exports("LibraryOp")
def library_op(e, op, layer, ins, outs, params):
    """The operator's ONNX node over the operands cast to the layer's compute type (ONNX
    takes one type per node), scalars as constants of it, and a Cast to the stored dtype
    where the node's own output type differs."""
    name = layer.op.name
    out_dtype = e.net.graph.values[op.out_values[0]].dtype
    if name == "copy":
        e.node("Cast", [ins[0]], outs, op.name, to=_onnx_type(out_dtype))
        return
    onnx_op = _LIBRARY_ONNX.get(name) or layer.op.onnx
    problem = None if onnx_op else "no ONNX operator"
    problem = problem or _exact_in_onnx(layer, onnx_op)
    if problem:
        raise ValueError("LibraryOp '%s' (%s): %s has no exact ONNX export"
                         % (op.name, name, problem))
    compute = _onnx_type(layer.compute)
    tensors = dict(zip(layer.places, zip(ins, op.in_values)))
    operands = []
    for place in ("a", "b", "c")[:layer.arity]:
        if place in layer.scalars:
            t = _scalar(e, layer.scalars[place], np.bool_ if (name, place) == ("where", "a")
                        else layer.compute, "%s/%s" % (op.name, place))
        else:
            t, vid = tensors[place]
            vdt = e.net.graph.values[vid].dtype
            if not (name == "where" and place == "a") and _onnx_type(vdt) != compute:
                t = e.node("Cast", [t], name=op.name + "/" + place + "/cast", to=compute)
        operands.append(t)
    if name in ("add", "sub") and layer.attrs.get("alpha", 1) != 1:
        alpha = e.const(np.asarray(layer.attrs["alpha"], dtype=layer.compute),
                        op.name + "/alpha")
        operands[1] = e.node("Mul", [operands[1], alpha], name=op.name + "/alpha_mul")
    natural = _onnx_type(np.bool_) if onnx_op in _ONNX_BOOL_OUT else compute
    attrs = _LIBRARY_ATTRS.get(name, {})
    if natural == _onnx_type(out_dtype):
        e.node(onnx_op, operands, outs, op.name, **attrs)
    else:
        t = e.node(onnx_op, operands, name=op.name, **attrs)
        e.node("Cast", [t], outs, op.name + "/cast", to=_onnx_type(out_dtype))
