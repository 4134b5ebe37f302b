"""Converters of layers with weights: Conv, ConvTranspose, Gemm, MatMul (with a folded
bias), BatchNormalization; LRN; attention (a folded pattern, and dlprim's own
PackedAttention node); and the window helpers the pooling converters share."""
import numpy as np

from .model_reader import Node
from .einsum import einsum as composed_einsum
from .registry import Unsupported, converts
from .steps import ONNX_TYPES, Steps, dtype_name
from . import conv_gather, ops_select  # noqa: F401  (Hardmax, ReverseSequence: registered with these)
from .rewrite import ATTENTION
from ..utils import ceil_div


def image_shape(b, node, what="input"):
    shape = b.shape(node.inputs[0])
    if len(shape) != 4:
        raise Unsupported("%s of shape %s: only 2-D (N, C, H, W) is supported" % (what, shape))
    return shape


def pairs(node, key, default):
    v = node.attr(key, default)
    if len(v) != 2:
        raise Unsupported("attribute %s %s: only 2-D windows are supported" % (key, list(v)))
    return [int(a) for a in v]


def window(node, hw, kernel):
    """(strides, dilations, pads [top, left, bottom, right]) with auto_pad resolved."""
    strides = pairs(node, "strides", [1, 1])
    dilations = pairs(node, "dilations", [1, 1])
    pads = [int(p) for p in node.attr("pads", [0, 0, 0, 0])]
    auto = node.attr("auto_pad", "NOTSET")
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        pads = [0, 0, 0, 0]
        for i in range(2):
            out = ceil_div(hw[i], strides[i])
            total = max((out - 1) * strides[i] + (kernel[i] - 1) * dilations[i] + 1 - hw[i], 0)
            small = total // 2
            pads[i], pads[i + 2] = (small, total - small) if auto == "SAME_UPPER" \
                else (total - small, small)
    elif auto == "VALID":
        pads = [0, 0, 0, 0]
    elif auto != "NOTSET":
        raise Unsupported("auto_pad %r" % auto)
    if len(pads) != 4:
        raise Unsupported("pads %s: only 2-D windows are supported" % pads)
    return strides, dilations, pads


def _pad_option(pads):
    return pads[:2] if pads[:2] == pads[2:] else list(pads)


def _composed(b, node):
    """Whether a Conv/ConvTranspose goes through ``conv_gather``: a weight given at run
    time (the layers hold theirs as parameters), or spatial axes other than 1 or 2."""
    return not b.is_const(node.inputs[1]) or len(b.shape(node.inputs[0])) not in (3, 4) or \
        (node.input(2) is not None and not b.is_const(node.inputs[2]))


def _convolution(b, node, composed, two_d):
    """Conv or ConvTranspose: composed of layers (``composed``: weights given at run time,
    3 and more spatial axes), 1-D as the 2-D layer, or the 2-D layer (``two_d``)."""
    if _composed(b, node):
        return composed(b, node)
    if len(b.shape(node.inputs[0])) == 3:
        return _one_d(b, node, two_d)
    image_shape(b, node)
    return two_d(b, node, b.value(node.inputs[0]), b.const(node.inputs[1], "weight"))


@converts("Conv")
def conv(b, node):
    return _convolution(b, node, conv_gather.conv, _conv2d)


def _conv2d(b, node, x, weight, output=None):
    n, c, h, w = b.shapes[x]
    if weight.ndim != 4:
        raise Unsupported("weight of shape %s: only 1-D and 2-D convolutions" % (weight.shape,))
    k, _, kh, kw = weight.shape
    group = int(node.attr("group", 1))
    strides, dil, pads = window(node, (h, w), (kh, kw))
    params = [b.param(node.inputs[1], weight)]
    if node.input(2):
        params.append(b.param(node.inputs[2], b.const(node.inputs[2], "bias")))
    oh = (h + pads[0] + pads[2] - dil[0] * (kh - 1) - 1) // strides[0] + 1
    ow = (w + pads[1] + pads[3] - dil[1] * (kw - 1) - 1) // strides[1] + 1
    return b.add("Convolution2D", [x], (n, k, oh, ow), node, output=output, params=params,
                 options={"channels_out": int(k), "channels_in": int(c),
                          "kernel": [int(kh), int(kw)], "stride": strides,
                          "pad": _pad_option(pads), "dilate": dil, "groups": group,
                          "bias": len(params) == 2})


# a 1-D window attribute -> the 2-D one over (N, C, 1, L): the height axis of size 1
_LIFT = {"strides": lambda v: [1] + v, "dilations": lambda v: [1] + v,
         "kernel_shape": lambda v: [1] + v, "output_padding": lambda v: [0] + v,
         "output_shape": lambda v: [1] + v[-1:], "pads": lambda v: [0, v[0], 0, v[1]]}


def _one_d(b, node, convert):
    """A 1-D Conv or ConvTranspose (Whisper's, wav2vec's) as the 2-D one over (N, C, 1, L):
    the same sums, the weight (K, C, kL) held as (K, C, 1, kL) under its own name, so a
    model's parameter still maps onto it element for element."""
    n, c, length = b.shape(node.inputs[0])
    weight = b.const(node.inputs[1], "weight")
    if weight.ndim != 3:
        raise Unsupported("weight of shape %s for an input of shape %s"
                          % (weight.shape, (n, c, length)))
    attrs = {k: (_LIFT[k]([int(a) for a in v]) if k in _LIFT else v)
             for k, v in node.attrs.items()}
    lifted = Node(node.op_type, node.name, node.inputs, node.outputs, attrs, node.domain)
    x = b.add("Reshape", [b.value(node.inputs[0])], (n, c, 1, length), name=node.name + "/2d",
              output=b.fresh(node.outputs[0] + "/2d_in"), options={"dims": [0, c, 1, length]})
    y = convert(b, lifted, x, weight[:, :, None, :], output=b.fresh(node.outputs[0] + "/2d"))
    _, k, _, out_len = b.shapes[y]
    return b.add("Reshape", [y], (n, k, out_len), node, options={"dims": [0, k, out_len]})


@converts("ConvTranspose")
def conv_transpose(b, node):
    return _convolution(b, node, conv_gather.conv_transpose, _conv_transpose2d)


def _conv_transpose2d(b, node, x, weight, output=None):
    n, c, h, w = b.shapes[x]
    if weight.ndim != 4:
        raise Unsupported("weight of shape %s: only 1-D and 2-D convolutions" % (weight.shape,))
    group = int(node.attr("group", 1))
    _, kper, kh, kw = weight.shape
    k = kper * group
    strides = pairs(node, "strides", [1, 1])
    dil = pairs(node, "dilations", [1, 1])
    out_pad = pairs(node, "output_padding", [0, 0])
    pads = [int(p) for p in node.attr("pads", [0, 0, 0, 0])]
    full = [(i - 1) * s + d * (kk - 1) + 1 for i, s, d, kk in zip((h, w), strides, dil, (kh, kw))]
    auto, target = node.attr("auto_pad", "NOTSET"), node.attr("output_shape")
    if target is not None or auto in ("SAME_UPPER", "SAME_LOWER"):
        target = list(target)[-2:] if target is not None else [i * s for i, s in zip((h, w), strides)]
        pads = [0, 0, 0, 0]
        for i in range(2):
            total = full[i] + out_pad[i] - target[i]
            if total < 0:
                out_pad[i] -= total
                total = 0
            small = total // 2
            # the larger half at the start, except for SAME_UPPER (the ONNX rule)
            pads[i], pads[i + 2] = (small, total - small) if auto == "SAME_UPPER" else (total - small, small)
    elif auto == "VALID":
        pads = [0, 0, 0, 0]
    if any(op >= s for op, s in zip(out_pad, strides)):
        raise Unsupported("output padding %s is not smaller than the stride %s" % (out_pad, strides))
    params = [b.param(node.inputs[1], weight)]
    if node.input(2):
        params.append(b.param(node.inputs[2], b.const(node.inputs[2], "bias")))
    oh = full[0] - pads[0] - pads[2] + out_pad[0]
    ow = full[1] - pads[1] - pads[3] + out_pad[1]
    return b.add("TransposedConvolution2D", [x], (n, k, oh, ow), node, output=output,
                 params=params,
                 options={"channels_out": int(k), "channels_in": int(c),
                          "kernel": [int(kh), int(kw)], "stride": strides,
                          "pad": _pad_option(pads), "dilate": dil, "groups": group,
                          "bias": len(params) == 2, "output_pad": out_pad})


def _inner_product(b, node, x, w, bias, w_name, b_name, output=None, name=None,
                   inputs_first=False):
    """InnerProduct of 2-D ``x`` with weight w [outputs, inputs] ([inputs, outputs] with
    ``inputs_first``) and optional bias."""
    params = [b.param(w_name, w)]
    if bias is not None:
        params.append(b.param(b_name, bias))
    n = b.shape(x)[0]
    outputs, inputs = (w.shape[1], w.shape[0]) if inputs_first else w.shape
    options = {"outputs": int(outputs), "inputs": int(inputs), "bias": bias is not None}
    if inputs_first:
        options["weight_layout"] = "inputs_outputs"
    return b.add("InnerProduct", [b.value(x)], (n, outputs), node, params=params,
                 output=output, name=name, options=options)


def _trained_as_stored(b, w):
    """Whether weight ``w`` (of a MatMul, or of a Gemm without transB) is a trainable
    parameter itself, not a copy through a Transpose: the InnerProduct then holds it
    [inputs, outputs] as it is, so ``torch.compile``'s Net shares the parameter's memory
    instead of copying it transposed at every call and its gradient back."""
    return w in b.live and w in b.info.initializers


@converts("Gemm")
def gemm(b, node):
    """alpha * op(A) @ op(B) + beta * C: the InnerProduct layer where B is a constant
    float32 matrix, A is not transposed and C is a bias (a vector, a scalar); else the
    MatMul layer (B given at run time, transA, C of any shape that broadcasts)."""
    a, w = node.inputs[0], node.inputs[1]
    ta, tb = bool(node.attr("transA", 0)), bool(node.attr("transB", 0))
    alpha, beta = float(node.attr("alpha", 1.0)), float(node.attr("beta", 1.0))
    if len(b.shape(a)) != 2 or len(b.shape(w)) != 2:
        raise Unsupported("operands of shapes %s and %s (Gemm's are matrices)"
                          % (b.shape(a), b.shape(w)))
    c = node.input(2) if beta != 0.0 else None  # ONNX's reference leaves C out at beta 0
    bias = _gemm_bias(b, node, c, beta)
    if ta or bias is False or b.is_const(a) or not b.is_const(w) or \
            b.dtype(a) != np.float32 or b.consts[w].dtype != np.float32:
        _data_matmul(b, node, transpose_a=ta, transpose_b=tb, alpha=alpha, addend=c, beta=beta)
        return
    weight = b.consts[w]
    if not tb and alpha == 1.0 and _trained_as_stored(b, w):
        if weight.shape[0] != b.shape(a)[1]:
            raise Unsupported("B of shape %s does not match A %s" % (weight.shape, b.shape(a)))
        _inner_product(b, node, a, weight, bias, w, c, inputs_first=True)
        return
    m = weight if tb else weight.T
    m = m * np.float32(alpha) if alpha != 1.0 else m
    if m.shape[1] != b.shape(a)[1]:
        raise Unsupported("B of shape %s does not match A %s" % (weight.shape, b.shape(a)))
    _inner_product(b, node, a, m, bias, w, c)


def _gemm_bias(b, node, c, beta):
    """Gemm's beta * C as the InnerProduct's bias vector; None without C; False where C is
    no bias (computed at run time, or of a shape with more than one row)."""
    if c is None:
        return None
    if not b.is_const(c) or b.consts[c].dtype != np.float32:
        return False
    value = b.consts[c]
    shape, n = b.shape(node.inputs[1]), None
    n = shape[0] if node.attr("transB", 0) else shape[1]
    if value.size == 1:
        value = np.full(n, value.reshape(()), np.float32)
    elif value.size != n or (value.ndim == 2 and value.shape[0] != 1):
        return False
    return value.reshape(n) * np.float32(beta)


def _data_matmul(b, node, transpose_a=False, transpose_b=False, alpha=1.0, addend=None,
                 beta=1.0):
    """The MatMul layer over numpy's ``matmul`` rule: a 1-D operand is a row (A) or a
    column (B) whose axis the result drops; an operand whose batch broadcasts partly
    against the other's is expanded to the full batch first (the layer reads a batch
    that is whole or absent). ``addend`` (an ONNX name), times ``beta``, is added to the
    product (Gemm's C, a folded bias)."""
    s = Steps(b, node)
    a, w = node.inputs[0], node.inputs[1]
    sa, sb = b.shape(a), b.shape(w)
    dt = b.dtype(a)
    if dtype_name(dt) not in ("float32", "float16", "bfloat16") or \
            dtype_name(b.dtype(w)) != dtype_name(dt):
        raise Unsupported("operands of dtypes %s and %s (float32, float16 or bfloat16 only)"
                          % (dtype_name(dt), dtype_name(b.dtype(w))))
    if not sa or not sb:
        raise Unsupported("a scalar operand (shapes %s and %s)" % (sa, sb))
    if len(sa) == 1:
        a = s.reshape(a, (1, sa[0]), "row")
    if len(sb) == 1:
        w = s.reshape(w, (sb[0], 1), "column")
    ra, rb = b.shape(a), b.shape(w)
    m, k_a = (ra[-1], ra[-2]) if transpose_a else (ra[-2], ra[-1])
    k_b, n = (rb[-1], rb[-2]) if transpose_b else (rb[-2], rb[-1])
    if k_a != k_b:
        raise Unsupported("operands of shapes %s and %s: the inner sizes differ" % (sa, sb))
    try:
        batch = tuple(np.broadcast_shapes(tuple(ra[:-2]), tuple(rb[:-2])))
    except ValueError:
        raise Unsupported("batch shapes %s and %s do not broadcast" % (sa[:-2], sb[:-2])) from None
    operands = []
    for t, shape, tag in ((a, ra, "a"), (w, rb, "b")):
        own = (1,) * (len(batch) - len(shape) + 2) + tuple(shape[:-2])
        if own != batch and int(np.prod(own)) != 1:
            t = s.add("Expand", [t], batch + tuple(shape[-2:]), tag + "_batch", dtype=dt,
                      shape=[int(d) for d in batch + tuple(shape[-2:])])
        operands.append(t)
    full = batch + (m, n)
    want = batch + ((m,) if len(sa) > 1 else ()) + ((n,) if len(sb) > 1 else ())
    out = node.outputs[0]
    y = s.add("MatMul", operands, full, "product", dtype=dt,
              output=out if full == want and addend is None else None,
              transpose_a=bool(transpose_a), transpose_b=bool(transpose_b), alpha=float(alpha))
    if full != want:
        y = s.reshape(y, want, "vector", output=out if addend is None else None)
    if addend is not None:
        y = s.lib("add", [y, _scaled(b, s, addend, beta, dt)], "sum", dtype=dt,
                  attrs={"alpha": 1}, output=out)
    s.finish(0, y)
    return y


def _scaled(b, s, name, beta, dtype):
    """ONNX tensor ``name`` times ``beta`` in ``dtype`` (a constant's product taken here,
    as numpy rounds it)."""
    if beta == 1.0:
        return name
    if b.is_const(name):
        return s.const(np.asarray(b.consts[name]).astype(dtype) * np.asarray(beta, dtype), "beta_c")
    return s.lib("mul", [name, s.const(np.asarray(beta, np.float32), "beta")], "beta_c",
                 dtype=dtype)


def _einsum_matmul(equation):
    """(transpose_a, transpose_b) when ``equation`` is a batched matrix product
    "b..ij,b..jk->b..ik" up to transposes of either operand; else None."""
    eq = equation.replace(" ", "")
    if "..." in eq or "->" not in eq or eq.count(",") != 1:
        return None
    ins, out = eq.split("->")
    a, b = ins.split(",")
    if len(a) < 2 or len(a) != len(b) or len(out) != len(a) or len(set(a + b + out)) != len(a) + 1:
        return None
    batch = out[:-2]
    if a[:-2] != batch or b[:-2] != batch:
        return None
    m, n = out[-2:]
    k = (set(a[-2:]) & set(b[-2:])) - {m, n}
    if len(k) != 1 or set(a[-2:]) != {m} | k or set(b[-2:]) != {n} | k:
        return None
    k = k.pop()
    return a[-2:] == k + m, b[-2:] == n + k


@converts("Einsum")
def einsum(b, node):
    """Einsum: a batched matrix product of two data tensors as one MatMul layer (with
    transposes); any other equation composed of layers (``einsum.py``)."""
    eq = node.attr("equation")
    eq = eq.decode() if isinstance(eq, bytes) else str(eq)
    flags = _einsum_matmul(eq)
    if flags is None or len(node.inputs) != 2 or any(b.is_const(i) for i in node.inputs) or \
            b.dtype(node.inputs[0]) != np.float32 or b.dtype(node.inputs[1]) != np.float32:
        composed_einsum(b, node, eq)
        return
    ta, tb = flags
    sa, sb = b.shape(node.inputs[0]), b.shape(node.inputs[1])
    m = sa[-1] if ta else sa[-2]
    n = sb[-2] if tb else sb[-1]
    b.add("MatMul", [b.value(node.inputs[0]), b.value(node.inputs[1])], tuple(sa[:-2]) + (m, n),
          node, options={"transpose_a": ta, "transpose_b": tb})


@converts("MatMul")
def matmul(b, node):
    a = node.inputs[0]
    weight = b.consts.get(node.inputs[1])
    shape = b.shape(a)
    if b.is_const(a) or weight is None or np.asarray(weight).dtype != np.float32 or \
            weight.ndim != 2 or len(shape) < 2 or shape[-1] != weight.shape[0] or \
            b.dtype(a) != np.float32:
        _data_matmul(b, node, addend=node.input(2))  # a third input: a folded bias
        return
    # a third input is the bias of a following Add (folded by ``rewrite``)
    bias = b.const(node.inputs[2]) if node.input(2) else None
    as_stored = _trained_as_stored(b, node.inputs[1])
    held = weight if as_stored else weight.T
    if len(shape) == 2:
        _inner_product(b, node, a, held, bias, node.inputs[1], node.input(2),
                       inputs_first=as_stored)
        return
    rows = int(np.prod(shape[:-1]))
    flat = b.add("Reshape", [b.value(a)], (rows, shape[-1]), output=b.fresh(a + "/rows"),
                 name=node.name + "/rows", options={"dims": [-1, int(shape[-1])]})
    b.alias[flat] = flat
    y = _inner_product(b, None, flat, held, bias, node.inputs[1], node.input(2),
                       output=b.fresh(node.outputs[0] + "/rows"), name=node.name,
                       inputs_first=as_stored)
    out = tuple(shape[:-1]) + (int(weight.shape[1]),)
    b.alias[y] = y
    # -1 first: the batch is deduced, so the net still reshapes to other batch sizes
    b.add("Reshape", [y], out, node, options={"dims": [-1] + [int(d) for d in out[1:]]})


def _attention_scale(b, node):
    """The product of the pattern's Mul factors over its Div divisors, or None when one
    of them is not a scalar known at import."""
    scale = 1.0
    for kind, name in zip(node.attrs["factors"], node.inputs[4:]):
        if not b.is_const(name) or b.consts[name].size != 1:
            return None
        value = float(np.asarray(b.consts[name], np.float64).reshape(()))
        scale = scale * value if kind == "Mul" else scale / value
    return scale


def _causal(mask, lq, lk):
    """Whether constant ``mask`` is the causal one, the same for every batch and head: 0 on
    and below the diagonal and, above it, -inf or a value at most half the dtype's lowest
    (HuggingFace's eager masks add ``finfo.min``), whose weight is then exactly 0 as the
    causal kernels' is: exp(score + mask - row max) underflows for any score below
    half the dtype's largest."""
    mask = np.asarray(mask)
    if mask.dtype.kind != "f" or mask.ndim < 2 or mask.shape[-2:] != (lq, lk):
        return False
    slices = mask.reshape(-1, lq, lk)
    above = np.triu(np.ones((lq, lk), bool), 1)
    if np.any(slices[:, ~above] != 0):
        return False
    masked = slices[:, above]
    return bool(np.all((masked == -np.inf) | (masked <= np.finfo(mask.dtype).min / 2)))


def _reshaped(shape, target):
    """The shape Reshape(allowzero 0) makes of ``shape`` with ``target``, else None."""
    out = [int(shape[i]) if d == 0 and i < len(shape) else int(d) for i, d in enumerate(target)]
    total = int(np.prod(shape))
    if out.count(-1) == 1:
        known = int(np.prod([d for d in out if d != -1]))
        if known <= 0 or total % known:
            return None
        out[out.index(-1)] = total // known
    return tuple(out) if int(np.prod(out)) == total and min(out) >= 0 else None


def _key_layout(b, node):
    """(k's shape (N, H, S, D), and how to make it of the folded input: ("dims", a
    permutation), ("shape", a reshape) or None) where the pattern's k^T is that k with its
    last two axes swapped; else (None, None)."""
    x = node.inputs[1]
    sx = tuple(b.shape(x))
    if node.attrs.get("reshapes"):
        # (..., S, D) -> (B, S, D) -> (B, D, S) -> (N, H, D, S) with N H = B: row-major
        # reshapes that merge and split only the leading axes, so k^T is k = (N, H, S, D)
        # (x reshaped) with its last two axes swapped
        inner, outer = node.attrs["reshapes"]
        if len(sx) < 3:
            return None, None
        merged = (int(np.prod(sx[:-2])), sx[-2], sx[-1])
        split = _reshaped((merged[0], sx[-1], sx[-2]), outer)
        if _reshaped(sx, inner) != merged or split is None or len(split) != 4 or \
                split[0] * split[1] != merged[0] or split[2:] != (sx[-1], sx[-2]):
            return None, None
        sk = (split[0], split[1], sx[-2], sx[-1])
        return sk, (None if sk == sx else ("shape", sk))
    if len(sx) != 4:
        return None, None
    perm = node.attrs["perm"]
    perm = [3, 2, 1, 0] if perm is None else [int(a) % 4 for a in perm]
    if sorted(perm) != [0, 1, 2, 3]:
        return None, None
    kperm = [perm[0], perm[1], perm[3], perm[2]]
    return tuple(sx[a] for a in kperm), (None if kperm == [0, 1, 2, 3] else ("dims", kperm))


def _last_axis_softmax(b, node):
    """Whether the folded Softmax normalizes the last axis of the rank-4 scores: axis 3 or
    -1 (before opset 13 the rows are the axes from ``axis`` on, the same for the last)."""
    axis = node.attrs.get("softmax_axis")
    if axis is None:
        axis = -1 if (b.opset or 13) >= 13 else 1
    return int(axis) in (-1, 3)


@converts(ATTENTION)
def attention(b, node):
    """The fused ScaledDotProductAttention where the folded pattern fits it: q, k, v of
    rank 4 with k^T k's last two axes swapped (k itself may be the Transpose of the
    input, as when the head split and k's transpose are one node), a scalar scale, the
    softmax over the last axis, a float mask that broadcasts to (N, H, L, S); otherwise
    the pattern's nodes as they were."""
    q, k, v, mask = node.inputs[:4]
    sq, sv = b.shape(q), b.shape(v)
    in_place = node.attrs.get("layout") == "nlhd"  # (N, L, H, D): rewrite._heads_in_place
    if in_place:
        sq, sk, sv = (_heads_swapped(b.shape(t)) for t in (q, k, v))
        kperm = None
    else:
        sk, kperm = _key_layout(b, node)
    scale = _attention_scale(b, node)
    fits = (sk is not None and scale is not None and scale > 0 and len(sq) == len(sv) == len(sk) == 4
            and _last_axis_softmax(b, node) and sk[:2] == sq[:2]
            and sv[:2] == sq[:2] and sk[3] == sq[3] and sv[2] == sk[2]
            and not any(b.is_const(t) for t in (k, v)))
    dropout = _probability_dropout(b, node, q, v) if fits else None
    fits = fits and dropout is not None
    out = tuple(sq[:3]) + (sv[3],) if fits else None  # (N, H, L, DV)
    kept = node.attrs.get("kept", 0)  # Reshapes folded between the result and its
    if fits and kept:                 # Transpose back: each must keep the shape
        fits = all(b.is_const(s) and
                   _reshaped(out, [int(d) for d in np.asarray(b.consts[s]).reshape(-1)]) == out
                   for s in node.inputs[-kept:])
    causal = zero = False
    if fits and mask:
        target = (sq[0], sq[1], sq[2], sk[2])
        m = b.shape(mask)
        full = (1,) * (4 - len(m)) + tuple(m)
        fits = len(m) <= 4 and all(a in (1, t) for a, t in zip(full, target))
        # the fused layer takes its mask as data (no gradient): a bias that trains (T5's
        # Embedding of the relative positions) keeps the layers it was
        fits = fits and not _mask_trains(b, mask)
        if fits and b.is_const(mask):
            value = np.asarray(b.consts[mask])
            fits = value.dtype.kind == "f"
            causal = fits and _causal(value, sq[2], sk[2])
            # (HuggingFace's BERT adds one of zeros where nothing is padded: none is read)
            zero = fits and not np.any(value != 0)
    if not fits:
        for original in node.attrs["nodes"]:
            b._convert(original)
        return
    key = b.value(k)
    if kperm is not None and kperm[0] == "dims":
        key = b.add("Transpose", [key], tuple(sk), output=b.fresh(k + "/keys"),
                    name=node.name + "/keys", options={"dims": kperm[1]})
    elif kperm is not None:  # -1 first: the batch is deduced, as other Reshapes do
        key = b.add("Reshape", [key], tuple(sk), output=b.fresh(k + "/keys"),
                    name=node.name + "/keys", options={"dims": [-1] + list(sk[1:])})
    inputs = [b.value(q), key, b.value(v)] + (
        [b.value(mask)] if mask and not (causal or zero) else [])
    b.add("ScaledDotProductAttention", inputs, _heads_swapped(out) if in_place else out, node,
          options=dict({"scale": scale, "causal": causal},
                       **({"dropout": dropout} if dropout else {}),
                       **({"layout": "nlhd"} if in_place else {})))


def _heads_swapped(shape):
    """(N, L, H, D) <-> (N, H, L, D); a shape of another rank as it is (the checks refuse it)."""
    shape = tuple(shape)
    return (shape[0], shape[2], shape[1], shape[3]) if len(shape) == 4 else shape


def _probability_dropout(b, node, q, v):
    """The dropout ratio the fused layer applies to the attention weights for the nodes
    between the folded Softmax and the MatMul by v (``rewrite._probability_path``): 0.0
    for none, else the Dropout's ratio, converted as ``ops_math.dropout`` converts it (the
    layer drops in train mode only, as the Dropout layer does). None where they do not
    fit: a Cast that changes the dtype, a ratio not known at import or not below 1, a
    Dropout of opset 6 or older, or one of ``training_mode`` true and a ratio above 0
    (dropping whatever the Net's mode: its converter refuses it by name)."""
    dtype = np.dtype(b.dtype(q))
    if np.dtype(b.dtype(v)) != dtype:
        return None
    ratio = 0.0
    for n in node.attrs.get("between", ()):
        if n.op_type == "Cast" and ONNX_TYPES.get(n.attr("to")) != dtype_name(dtype):
            return None
        if n.op_type != "Dropout":
            continue
        if b.opset < 7 or any(i and not b.is_const(i) for i in n.inputs[1:3]):
            return None
        ratio = float(n.attr("ratio", 0.5))
        if b.opset >= 12:
            ratio = float(np.asarray(b.consts[n.inputs[1]]).reshape(())) if n.input(1) else 0.5
        training = n.input(2) and bool(np.asarray(b.consts[n.inputs[2]]).reshape(()))
        if training and ratio != 0.0:
            return None
        if training:  # of ratio 0: the identity
            ratio = 0.0
        elif not 0.0 <= ratio < 1.0:
            return None
    return ratio


def _mask_trains(b, mask):
    """Whether ONNX tensor ``mask`` may need a gradient: it is a weight that trains (a
    constant that becomes a trainable Parameter, ``Importer._parameter``: a live parameter,
    or an initializer of a train-mode Net, ``_initializer_trains``), or is computed from one
    or from a float net input (``_reads_trainable``)."""
    if b.is_const(mask):
        return np.asarray(b.consts[mask]).dtype == np.float32 and (
            mask in b.live or (b.mode == "train" and _initializer_trains(b, mask)))
    return _reads_trainable(b, b.value(mask))


def _initializer_trains(b, name):
    """Whether initializer ``name`` is a weight a train-mode Net trains: where the caller
    named the parameters (``live``: torch.compile's, whose other initializers are buffers
    such as a float mask, which require no gradient) only those; else every initializer
    (a plain ONNX training import: the Net trains each float one)."""
    return name in b.live if b.live else name in b.info.initializers


def _reads_trainable(b, tensor):
    """Whether dlprim tensor ``tensor`` is computed from a weight that trains (one of the
    ``live`` parameters, torch.compile's, or, for a train-mode Net, any weight the Net
    trains) or from a float net input: the importer is not told which inputs require grad
    (a torch.compile graph's input after a break, T5's position bias computed before it,
    does), and a Net may train in predict mode (an eval-mode graph's gradients).
    Every writer of a tensor is followed, not only ``b.producer``'s last one: an operator
    written in place (T5's bias: the Unsqueeze after the Transpose of its Embedding, a
    Reshape) writes its input's name, so the last writer reads the tensor it writes and
    hides the operators before it."""
    inputs = {name for name, _, _ in b.info.inputs}
    needed = {tensor}
    for op in reversed(b.cfg.operators):  # in the order they run: readers after writers
        if needed.isdisjoint(op["outputs"]):
            continue
        if _trains(b, op):
            return True
        needed.update(op.get("inputs", []))
    return any(t in inputs and b.dtypes[t].kind == "f" for t in needed)


def _trains(b, op):
    """Whether dlprim operator ``op`` reads a weight that trains (``_reads_trainable``)."""
    params = op.get("params") or []
    if any(p in b.live for p in params):
        return True
    if op["type"] == "Parameter" and b.live:
        # where live names the parameters, another initializer's Parameter holds a buffer
        # (``_initializer_trains``); it holds it under its name, or with the "_<k>"
        # ``Importer.param`` adds where another array took the name
        return any(p.rsplit("_", 1)[0] in b.live for p in params)
    return b.mode == "train" and bool(params) and not op.get("frozen") and (
        op["type"] != "Parameter" or bool((op.get("options") or {}).get("is_trainable")))


@converts("PackedAttention")
def packed_attention(b, node):
    """dlprim's own node (domain "dlprim", written by ``dlprim.torch`` when it exports
    ``nn.MultiheadAttention``): attention over qkv (N, L, 3, H, D) -> (N, L, H, D)."""
    if node.domain != "dlprim":
        raise Unsupported("PackedAttention of domain '%s'" % node.domain)
    shape = b.shape(node.inputs[0])
    if len(shape) != 5 or shape[2] != 3:
        raise Unsupported("qkv of shape %s: (N, L, 3, H, D) only" % (shape,))
    n, length, _, h, d = shape
    b.add("ScaledDotProductAttention", [b.value(node.inputs[0])], (n, length, h, d), node,
          options={"layout": "packed", "scale": float(node.attr("scale", 1.0 / d ** 0.5))})


@converts("BatchNormalization")
def batch_norm(b, node):
    shape = b.shape(node.inputs[0])
    if len(shape) < 2:
        raise Unsupported("input of shape %s: (N, C, ...) of rank 2 or more only" % (shape,))
    extra_read = any(b.consumers.get(o) or o in b.graph_outputs for o in node.outputs[1:] if o)
    if int(node.attr("training_mode", 0)) and (extra_read or b.mode != "train"):
        _batch_norm_training(b, node, shape)
        return
    if extra_read:
        raise Unsupported("the batch mean/variance outputs are read")
    names = [node.inputs[i] for i in (3, 4, 1, 2)]  # dlprim order: mean, var, weight, bias
    params = [b.param(n, b.const(n, "statistics/affine input")) for n in names]
    b.add("BatchNorm", [b.value(node.inputs[0])], shape, node, params=params, options={
        "features": int(shape[1]), "eps": float(node.attr("epsilon", 1e-5)),
        "momentum": 1.0 - float(node.attr("momentum", 0.9)), "affine": True})


def _batch_norm_training(b, node, shape):
    """BatchNormalization with ``training_mode=1`` (opset 14 on), as ONNX defines it: y
    normalized by the batch's mean and biased variance over every axis but 1; the
    running_mean/var outputs ``input * momentum + batch * (1 - momentum)``."""
    if b.dtype(node.inputs[0]) != np.float32:
        raise Unsupported("training_mode=1 of a %s input (float32 only)"
                          % np.dtype(b.dtype(node.inputs[0])).name)
    s = Steps(b, node)
    c = int(shape[1])
    axes = [0] + list(range(2, len(shape)))
    kept = tuple(c if i == 1 else 1 for i in range(len(shape)))
    momentum = float(node.attr("momentum", 0.9))

    def per_channel(i, tag):
        if b.is_const(node.inputs[i]):
            return s.const(np.asarray(b.consts[node.inputs[i]], np.float32).reshape(kept), tag)
        return s.reshape(node.inputs[i], kept, tag)

    def mean(t, tag):
        return s.add("Reduction", [t], kept, tag, method="mean", dims=axes, keep_dim=True)
    x = node.inputs[0]
    batch_mean = mean(x, "mean")
    d = s.lib("sub", [x, batch_mean], "centered", attrs={"alpha": 1})
    batch_var = mean(s.lib("mul", [d, d], "squares"), "var")
    std = s.lib("sqrt", [s.lib("add", [batch_var, s.const(np.float32(node.attr(
        "epsilon", 1e-5)), "eps")], "var_eps", attrs={"alpha": 1})], "std")
    scaled = s.lib("mul", [s.lib("div", [d, std], "normalized", attrs={"rounding_mode": None}),
                           per_channel(1, "scale")], "scaled")
    y = s.lib("add", [scaled, per_channel(2, "bias")], "y", attrs={"alpha": 1},
              output=node.outputs[0])
    s.finish(0, y)
    for i, (batch, running) in enumerate(((batch_mean, 3), (batch_var, 4)), 1):
        out = node.outputs[i] if len(node.outputs) > i else ""
        if not out:
            continue
        old = s.lib("mul", [per_channel(running, "running%d" % i),
                            s.const(np.float32(momentum), "momentum%d" % i)], "kept%d" % i)
        new = s.lib("mul", [batch, s.const(np.float32(1.0 - momentum), "rate%d" % i)],
                    "new%d" % i)
        t = s.lib("add", [old, new], "updated%d" % i, attrs={"alpha": 1})
        s.finish(i, s.reshape(t, (c,), "running%d_out" % i, output=out))


@converts("LRN")
def lrn(b, node):
    x = node.inputs[0]
    b.add("LRN", [b.value(x)], b.shape(x), node, options={
        "size": int(node.attr("size")), "alpha": float(node.attr("alpha", 1e-4)),
        "beta": float(node.attr("beta", 0.75)), "k": float(node.attr("bias", 1.0))})


@converts("GroupNormalization")
def group_norm(b, node):
    x = node.inputs[0]
    shape = b.shape(x)
    groups = int(node.attr("num_groups"))
    if len(shape) < 3 or shape[1] % groups:
        raise Unsupported("input of shape %s in %d groups" % (shape, groups))
    c = shape[1]
    if int(node.attr("stash_type", 1)) != 1:
        raise Unsupported("stash_type %d (statistics in float32 only)" % node.attr("stash_type"))
    per_channel = []
    for i, what in ((1, "scale"), (2, "bias")):
        v = np.asarray(b.const(node.inputs[i], what), np.float32).reshape(-1)
        if v.size == groups and groups != c:  # opset 18: one value per group
            v = np.repeat(v, c // groups)
        if v.size != c:
            raise Unsupported("%s of %d values for %d channels in %d groups"
                              % (what, v.size, c, groups))
        per_channel.append(b.param(node.inputs[i], v))
    b.add("GroupNorm", [b.value(x)], shape, node, params=per_channel, options={
        "groups": groups, "eps": float(node.attr("epsilon", 1e-5)), "affine": True})
