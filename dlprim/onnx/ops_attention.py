"""Converters of the transformer operators ONNX defines since opset 23: Attention (onto
the fused ScaledDotProductAttention where it computes the node, else composed of MatMul,
Softmax and pointwise layers), LayerNormalization (LayerNorm, and its statistics outputs),
RMSNormalization (RMSNorm) and RotaryEmbedding (slices and pointwise products).

Attention's additive bias is ONNX's: the mask (a bool one as 0 / -inf, a short last axis
padded with -inf), the bottom-right causal frontier and the sliding window at offset
``past_sequence_length`` (constants, the shapes being static), and with
``nonpad_kv_seqlen`` the per-batch frontier and padding, compared on the device. A
query row whose bias is -inf throughout gives zeros (the fused kernels do so for a row
whose scores are all -inf; the composed form selects them away).
"""
import numpy as np

from .ops_library import typed
from .steps import Steps, dtype_name as _dtype_name


class TypedSteps(Steps):
    """Steps whose LibraryOps follow ONNX's type rules (``typed``)."""

    def lib(self, op, inputs, tag, dtype=None, attrs=None, output=None):
        t = typed(self.b, self.node, op, inputs=inputs, attrs=attrs, dtype=dtype,
                  output=output or self._out(tag), name="%s/%s" % (self.node.name, tag))
        self.b.alias[t] = t
        return t
from .registry import Unsupported, converts

_HALF = ("float16", "bfloat16")
_FLOATS = ("float32",) + _HALF
# ONNX TensorProto types a softmax_precision may name: never less precise than float32's
# arithmetic, which both paths use
_SOFTMAX_PRECISIONS = {1: "float32", 10: "float16", 11: "float64", 16: "bfloat16"}


def _softmax_last(s, x, tag):
    """Softmax over the last axis of float32 ``x`` (the layer's axis 1 of a 2-D view)."""
    shape = s.b.shape(x)
    rows = s.reshape(x, (int(np.prod(shape[:-1])), shape[-1]), tag + "_rows")
    y = s.add("Softmax", [rows], s.b.shape(rows), tag)
    return s.reshape(y, shape, tag + "_out")


# ----------------------------------------------------------------- Attention
class _Spec:
    """The node's attributes and inputs, checked."""

    def __init__(self, b, node):
        self.node = node
        a = node.attr
        self.is_causal = bool(a("is_causal", 0))
        self.scale = a("scale", None)
        self.softcap = float(a("softcap", 0.0) or 0.0)
        self.mode = int(a("qk_matmul_output_mode", 0))
        self.left = int(a("left_window_size", -1))
        self.right = int(a("right_window_size", -1))
        self.q_heads, self.kv_heads = a("q_num_heads", None), a("kv_num_heads", None)
        names = list(node.inputs) + [""] * (7 - len(node.inputs))
        self.q, self.k, self.v, self.mask, self.past_k, self.past_v, self.nonpad = names[:7]
        outs = list(node.outputs) + [""] * (4 - len(node.outputs))
        read = [bool(o) and (bool(b.consumers.get(o)) or o in b.graph_outputs) for o in outs]
        self.outputs, self.read = outs, read
        self.dtype = b.dtype(self.q)
        kind = _dtype_name(self.dtype)
        if kind not in _FLOATS or any(_dtype_name(b.dtype(n)) != kind
                                      for n in (self.k, self.v, self.past_k, self.past_v) if n):
            raise Unsupported("Q, K, V (and the past) of dtypes %s: one of %s only" % (
                ", ".join(_dtype_name(b.dtype(n)) for n in (self.q, self.k, self.v) if n),
                ", ".join(_FLOATS)))
        precision = a("softmax_precision", None)
        if precision is not None and int(precision) not in _SOFTMAX_PRECISIONS:
            raise Unsupported("softmax_precision %s (float, float16, double, bfloat16 only)"
                              % precision)
        if self.mode not in (0, 1, 2, 3):
            raise Unsupported("qk_matmul_output_mode %d" % self.mode)
        if self.mode == 0 and self.softcap > 0 and read[3]:
            # the specification's mode 0 is the raw product; onnx's reference gives the
            # softcapped one: refused rather than either guessed
            raise Unsupported("qk_matmul_output_mode 0 with softcap %g: the raw product "
                              "(the specification) and onnx's reference differ"
                              % self.softcap)
        if self.left < -1 or self.right < -1:
            raise Unsupported("left_window_size %d, right_window_size %d: -1 or more only"
                              % (self.left, self.right))
        if bool(self.past_k) != bool(self.past_v):
            raise Unsupported("past_key without past_value (or the reverse)")
        if self.nonpad and self.past_k:
            raise Unsupported("nonpad_kv_seqlen together with past_key/past_value")
        if self.nonpad and _dtype_name(b.dtype(self.nonpad)) != "int64":
            raise Unsupported("nonpad_kv_seqlen of dtype %s (int64 only)"
                              % _dtype_name(b.dtype(self.nonpad)))
        if self.softcap < 0:
            raise Unsupported("softcap %g is negative" % self.softcap)


def _heads(s, spec):
    """q (N, Hq, L, D), k (N, Hk, S, D), v (N, Hk, S, DV) as 4-D tensors (the 3-D form split
    into heads), the present key and value written, and the 3-D flag."""
    b = s.b
    sq, sk, sv = (b.shape(n) for n in (spec.q, spec.k, spec.v))
    if not len(sq) == len(sk) == len(sv) or len(sq) not in (3, 4):
        raise Unsupported("Q, K, V of shapes %s, %s, %s: all 3-D or all 4-D" % (sq, sk, sv))
    three = len(sq) == 3
    if three:
        if spec.q_heads is None or spec.kv_heads is None:
            raise Unsupported("3-D Q, K, V without q_num_heads and kv_num_heads")
        hq, hk = int(spec.q_heads), int(spec.kv_heads)
        if hq < 1 or hk < 1 or sq[2] % hq or sk[2] % hk or sv[2] % hk:
            raise Unsupported("hidden sizes %d, %d, %d in %d query and %d key/value heads"
                              % (sq[2], sk[2], sv[2], hq, hk))
        split = []
        for name, shape, h, tag in ((spec.q, sq, hq, "q"), (spec.k, sk, hk, "k"),
                                    (spec.v, sv, hk, "v")):
            t = s.reshape(name, (shape[0], shape[1], h, shape[2] // h), tag + "_heads")
            split.append(s.transpose(t, (0, 2, 1, 3), tag + "_nhld"))
        q, k, v = split
    else:
        q, k, v = spec.q, spec.k, spec.v
    sq, sk, sv = (b.shape(n) for n in (q, k, v))
    if sk[:2] != sv[:2] or sk[2] != sv[2] or sq[0] != sk[0] or sq[3] != sk[3] or \
            sq[1] % sk[1]:
        raise Unsupported("Q %s, K %s, V %s do not fit (N, H, L, D), (N, Hk, S, D), "
                          "(N, Hk, S, DV) with Hk dividing H" % (sq, sk, sv))
    if spec.past_k:
        pk, pv = b.shape(spec.past_k), b.shape(spec.past_v)
        if len(pk) != 4 or len(pv) != 4 or pk[:2] != sk[:2] or pk[3] != sk[3] or \
                pv[:2] != sv[:2] or pv[3] != sv[3] or pk[2] != pv[2]:
            raise Unsupported("past_key %s / past_value %s do not fit K %s, V %s"
                              % (pk, pv, sk, sv))
        k = s.add("Concat", [spec.past_k, k], sk[:2] + (pk[2] + sk[2], sk[3]), "present_key",
                  dtype=spec.dtype, dim=2)
        v = s.add("Concat", [spec.past_v, v], sv[:2] + (pv[2] + sv[2], sv[3]), "present_value",
                  dtype=spec.dtype, dim=2)
    for i, t in ((1, k), (2, v)):
        if spec.outputs[i]:
            s.finish(i, t)
    return q, k, v, three


def _repeat_heads(s, x, r, tag):
    """(N, Hk, S, D) -> (N, Hk * r, S, D), each head r times in a row (numpy.repeat on axis
    1, the grouped-query layout)."""
    if r == 1:
        return x
    n, h, length, d = s.b.shape(x)
    t = s.reshape(x, (n, h, 1, length, d), tag + "_5d")
    t = s.add("Expand", [t], (n, h, r, length, d), tag + "_rep", dtype=s.b.dtype(x),
              shape=[n, h, r, length, d])
    return s.reshape(t, (n, h * r, length, d), tag)


def _static_allowed(spec, lq, lk, offset):
    """(L, S) bool of the keys the causal frontier and the window allow at ``offset``,
    or None when neither restricts."""
    if not spec.is_causal and spec.left < 0 and spec.right < 0:
        return None
    diff = np.arange(lq)[:, None] + offset - np.arange(lk)[None, :]  # query - key position
    allowed = np.ones((lq, lk), bool)
    if spec.is_causal:
        allowed &= diff >= 0
    if spec.left >= 0:
        allowed &= diff <= spec.left
    if spec.right >= 0:
        allowed &= -diff <= spec.right
    return allowed


def _additive(allowed):
    return np.where(allowed, 0.0, -np.inf).astype(np.float32)


def _mask_bias(s, spec, lk):
    """The attn_mask as an additive bias: ("const", array) or ("tensor", name) or None."""
    b = s.b
    if not spec.mask:
        return None
    shape = b.shape(spec.mask)
    if not shape or shape[-1] > lk:
        raise Unsupported("attn_mask of shape %s for %d keys" % (shape, lk))
    is_bool = _dtype_name(b.dtype(spec.mask)) == "bool"
    if not is_bool and _dtype_name(b.dtype(spec.mask)) != _dtype_name(spec.dtype):
        raise Unsupported("a float attn_mask of dtype %s for Q of %s"
                          % (_dtype_name(b.dtype(spec.mask)), _dtype_name(spec.dtype)))
    pad = lk - shape[-1]
    if b.is_const(spec.mask):
        m = np.asarray(b.consts[spec.mask])
        m = _additive(m) if is_bool else m.astype(np.float32)
        if pad:
            m = np.concatenate([m, np.full(m.shape[:-1] + (pad,), -np.inf, np.float32)], -1)
        return "const", m
    if is_bool:
        t = s.lib("where", [spec.mask, s.const(np.float32(0), "zero"),
                            s.const(np.float32(-np.inf), "neg_inf")], "mask_bias",
                  dtype=spec.dtype)
    else:
        t = b.value(spec.mask)
    if pad:
        t = s.add("Pad", [t], shape[:-1] + (lk,), "mask_padded", dtype=spec.dtype,
                  pads=[0] * len(shape) + [0] * (len(shape) - 1) + [pad], mode="constant",
                  value=float("-inf"))
    return "tensor", t


def _nonpad_bias(s, spec, n, lq, lk):
    """The per-batch bias of nonpad_kv_seqlen (N,): key j is padding where j >= len[b];
    the causal frontier and window at offset len[b] - L. (N, 1, L, S) in Q's dtype."""
    b = s.b
    if b.shape(spec.nonpad) != (n,):
        raise Unsupported("nonpad_kv_seqlen of shape %s for batch %d"
                          % (b.shape(spec.nonpad), n))
    seq = s.reshape(spec.nonpad, (n, 1, 1, 1), "seqlen")
    # c = key - query + L: causal j <= i + len - L is c <= len; the window's
    # query - key <= left is c >= len - left, key - query <= right is c <= len + right
    c = (np.arange(lk)[None, :] - np.arange(lq)[:, None] + lq).astype(np.int64)
    tests = [("lt", np.broadcast_to(np.arange(lk, dtype=np.int64), (lq, lk)), 0)]
    if spec.is_causal:
        tests.append(("le", c, 0))
    if spec.left >= 0:
        tests.append(("ge", c, -spec.left))
    if spec.right >= 0:
        tests.append(("le", c, spec.right))
    allowed = None
    for op, const, shift in tests:
        bound = seq if not shift else s.lib("add", [seq, s.const(np.int64(shift), "shift")],
                                            "seqlen_%+d" % shift, attrs={"alpha": 1})
        t = s.lib(op, [s.const(np.ascontiguousarray(const), "positions"), bound], "allowed")
        allowed = t if allowed is None else s.lib("logical_and", [allowed, t], "allowed")
    return s.lib("where", [allowed, s.const(np.float32(0), "zero"),
                           s.const(np.float32(-np.inf), "neg_inf")], "padding_bias",
                 dtype=spec.dtype)


def _bias(s, spec, n, lq, lk, past):
    """The additive bias as ("const", float32 array) / ("tensor", name) / None, and
    whether the fused kernel's own (top-left) causal flag is all of it."""
    parts = []
    m = _mask_bias(s, spec, lk)
    if m is not None:
        parts.append(m)
    if spec.nonpad:
        parts.append(("tensor", _nonpad_bias(s, spec, n, lq, lk)))
    else:
        allowed = _static_allowed(spec, lq, lk, past)
        if allowed is not None:
            if not parts and past == 0 and spec.left < 0 and spec.right < 0:
                return None, True  # is_causal alone, top-left: the kernel's causal flag
            parts.append(("const", _additive(allowed)))
    if not parts:
        return None, False
    consts = [v for kind, v in parts if kind == "const"]
    tensors = [v for kind, v in parts if kind == "tensor"]
    total = None
    if consts:
        total = consts[0]
        for c in consts[1:]:
            total = total + c
        if not tensors:
            return ("const", total), False
    cur = tensors[0]
    for t in tensors[1:] + ([s.const(total, "bias")] if total is not None else []):
        cur = s.lib("add", [cur, t], "bias", dtype=spec.dtype, attrs={"alpha": 1})
    return ("tensor", cur), False


def _bias_tensor(s, spec, bias):
    kind, v = bias
    if kind == "tensor":
        return v
    return s.cast(s.const(v, "bias"), spec.dtype, "bias_typed")


def _fits_kernel(b, spec, bias, n, hq, lq, lk):
    if spec.softcap > 0 or spec.read[3]:
        return False
    if bias is None:
        return True
    shape = b.shape(bias[1]) if bias[0] == "tensor" else bias[1].shape
    full = (1,) * (4 - len(shape)) + tuple(shape)
    return len(shape) <= 4 and all(a in (1, t) for a, t in zip(full, (n, hq, lq, lk)))


@converts("Attention")
def attention(b, node):
    """ONNX Attention (opset 23 on): the fused ScaledDotProductAttention where it computes
    the node (no softcap, the scores not an output), else the product, softcap, bias,
    softmax and product as layers."""
    spec = _Spec(b, node)
    s = TypedSteps(b, node)
    q, k, v, three = _heads(s, spec)
    n, hq, lq, d = b.shape(q)
    _, hk, lk, dv = b.shape(v)
    past = b.shape(spec.past_k)[2] if spec.past_k else 0
    scale = float(spec.scale) if spec.scale is not None else 1.0 / np.sqrt(d)
    if not scale > 0:
        raise Unsupported("scale %g: Q and K are scaled by its square root, so it must be "
                          "positive" % scale)
    bias, causal = _bias(s, spec, n, lq, lk, past)
    k = _repeat_heads(s, k, hq // hk, "k_groups")
    v = _repeat_heads(s, v, hq // hk, "v_groups")
    y_shape = (n, hq, lq, dv)
    out = None if three else node.outputs[0]
    if _fits_kernel(b, spec, bias, n, hq, lq, lk):
        inputs = [q, k, v] + ([_bias_tensor(s, spec, bias)] if bias is not None else [])
        y = s.add("ScaledDotProductAttention", inputs, y_shape, "sdpa", dtype=spec.dtype,
                  output=out, scale=scale, causal=causal)
    else:
        y = _composed(s, spec, q, k, v, bias, causal, scale, y_shape, out)
    if three:
        t = s.transpose(y, (0, 2, 1, 3), "y_nlhd")
        y = s.reshape(t, (n, lq, hq * dv), "y", output=node.outputs[0])
    s.finish(0, y)


def _composed(s, spec, q, k, v, bias, causal, scale, y_shape, out):
    """softmax(softcap(scale q k^T) + bias) v as MatMul, pointwise, Softmax layers."""
    b = s.b
    n, hq, lq, _ = b.shape(q)
    lk = b.shape(k)[2]
    if causal:  # the kernel's flag: written as the bias here
        bias = ("const", _additive(_static_allowed(spec, lq, lk, 0)))
    scores = s.add("MatMul", [q, k], (n, hq, lq, lk), "scores", dtype=spec.dtype,
                   transpose_b=True, alpha=scale)
    raw = scores
    if spec.softcap > 0:
        c = spec.softcap
        t = s.lib("div", [scores, s.const(np.float32(c), "softcap")], "capped_in")
        t = s.lib("tanh", [t], "capped_tanh")
        scores = s.lib("mul", [t, s.const(np.float32(c), "softcap")], "capped")
    capped = scores
    if bias is not None:
        scores = s.lib("add", [scores, _bias_tensor(s, spec, bias)], "biased",
                       dtype=spec.dtype, attrs={"alpha": 1})
    x = s.cast(scores, np.float32, "scores_f32")
    p = s.cast(_softmax_last(s, x, "softmax"), spec.dtype, "probs")
    p = _guard(s, spec, bias, p)
    if spec.read[3]:
        mode_out = {0: raw, 1: capped, 2: scores, 3: p}[spec.mode]
        s.finish(3, mode_out)
    return s.add("MatMul", [p, v], y_shape, "y", dtype=spec.dtype, output=out)


def _guard(s, spec, bias, p):
    """Rows whose bias is -inf throughout: zeros (ONNX's fully-masked-row rule)."""
    if bias is None:
        return p
    kind, v = bias
    if kind == "const":
        dead = np.isneginf(v.max(axis=-1, keepdims=True))
        if not dead.any():
            return p
        keep = s.const(~dead, "live_rows")
    else:
        shape = s.b.shape(v)
        top = s.add("Reduction", [v], shape[:-1] + (1,), "bias_max", dtype=s.b.dtype(v),
                    method="max", dims=[len(shape) - 1], keep_dim=True)
        keep = s.lib("isneginf", [top], "dead_rows")
        keep = s.lib("logical_not", [keep], "live_rows")
    return s.lib("where", [keep, p, s.const(np.float32(0), "zero")], "probs_guarded",
                 dtype=spec.dtype)


# ----------------------------------------------------------------- RMSNormalization
def _normalized_axes(b, node):
    """(x, its shape, axis, the normalized shape) of a normalization node over the axes
    from ``axis`` on: a float input, statistics in float32 (``stash_type`` 1)."""
    x = node.inputs[0]
    shape = b.shape(x)
    if _dtype_name(b.dtype(x)) not in _FLOATS:
        raise Unsupported("input of dtype %s" % _dtype_name(b.dtype(x)))
    axis = int(node.attr("axis", -1))
    if not -len(shape) <= axis < len(shape):
        raise Unsupported("axis %d of an input of rank %d" % (axis, len(shape)))
    axis %= len(shape)
    stash = int(node.attr("stash_type", 1))
    if stash != 1:
        raise Unsupported("stash_type %d (statistics in float32 only)" % stash)
    return x, shape, axis, tuple(shape[axis:])


@converts("RMSNormalization")
def rms_normalization(b, node):
    """x / sqrt(mean(x^2 over axes axis..) + epsilon) * scale: the RMSNorm layer over the
    trailing axes from ``axis``, the scale broadcast to them."""
    x, shape, axis, normalized = _normalized_axes(b, node)
    scale = np.asarray(b.const(node.inputs[1], "scale"))
    try:
        weight = np.broadcast_to(scale, normalized)
    except ValueError:
        raise Unsupported("scale of shape %s does not broadcast to the normalized shape %s"
                          % (scale.shape, normalized)) from None
    if np.broadcast_shapes(scale.shape, normalized) != normalized:
        raise Unsupported("scale of shape %s widens the normalized shape %s"
                          % (scale.shape, normalized))
    b.add("RMSNorm", [b.value(x)], shape, node, dtype=b.dtype(x),
          params=[b.param(node.inputs[1], weight)],
          options={"normalized_dims": len(normalized),
                   "eps": float(node.attr("epsilon", 1e-5)), "affine": True})


# ----------------------------------------------------------------- LayerNormalization
@converts("LayerNormalization")
def layer_norm(b, node):
    """The LayerNorm layer over the axes from ``axis`` on (a missing bias is zeros); the
    Mean and InvStdDev outputs, where read, as ONNX's reference computes them: a mean, then
    1 / sqrt(mean((x - mean)^2) + epsilon), kept as (d0 .. d(axis-1), 1, .., 1)."""
    x, shape, axis, normalized = _normalized_axes(b, node)
    eps = float(node.attr("epsilon", 1e-5))
    scale = b.const(node.inputs[1], "scale")
    bias = b.const(node.inputs[2], "bias") if node.input(2) else np.zeros(normalized, np.float32)
    try:
        params = [b.param(node.inputs[1], np.broadcast_to(scale, normalized)),
                  b.param(node.input(2) or node.name + ".bias", np.broadcast_to(bias, normalized))]
    except ValueError:
        raise Unsupported("scale %s / bias %s do not broadcast to the normalized shape %s"
                          % (np.shape(scale), np.shape(bias), normalized)) from None
    b.add("LayerNorm", [b.value(x)], shape, node, params=params, dtype=b.dtype(x), options={
        "normalized_dims": len(normalized), "eps": eps, "affine": True})
    outs = list(node.outputs) + [""] * (3 - len(node.outputs))
    if any(o and (b.consumers.get(o) or o in b.graph_outputs) for o in outs[1:]):
        _layer_norm_statistics(b, node, x, axis, eps, outs)


def _layer_norm_statistics(b, node, x, axis, eps, outs):
    s = TypedSteps(b, node)
    shape = b.shape(x)
    dims = list(range(axis, len(shape)))
    kept = tuple(shape[:axis]) + (1,) * len(dims)
    x32 = s.cast(x, np.float32, "x_f32")
    mean = s.add("Reduction", [x32], kept, "mean", method="mean", dims=dims, keep_dim=True,
                 output=outs[1] or None)
    diff = s.lib("sub", [x32, mean], "centred", attrs={"alpha": 1})
    var = s.add("Reduction", [diff], kept, "variance", method="sumsq", dims=dims,
                keep_dim=True, output_scale=1.0 / int(np.prod(shape[axis:])))
    t = s.lib("add", [var, s.const(np.float32(eps), "epsilon")], "variance_eps",
              attrs={"alpha": 1})
    t = s.lib("sqrt", [t], "std")
    inv = s.lib("reciprocal", [t], "inv_std", output=outs[2] or None)
    if outs[1]:
        s.finish(1, mean)
    if outs[2]:
        s.finish(2, inv)


# ----------------------------------------------------------------- RotaryEmbedding
@converts("RotaryEmbedding")
def rotary_embedding(b, node):
    """Rotate pairs of x's features by the angles of cos_cache / sin_cache at the token's
    position (RoFormer, Su et al. 2021): the pairs (x_i, x_{i + r/2}), or neighbours with
    ``interleaved``, of the first ``rotary_embedding_dim`` (r) features of each head.

        y1 = x1 cos - x2 sin,   y2 = x2 cos + x1 sin,   the rest of the head unchanged
    """
    s = TypedSteps(b, node)
    x, cos, sin = node.inputs[:3]
    pos = node.input(3)
    shape = b.shape(x)
    dtype = b.dtype(x)
    if _dtype_name(dtype) not in _FLOATS:
        raise Unsupported("input of dtype %s" % _dtype_name(dtype))
    interleaved = bool(node.attr("interleaved", 0))
    heads = int(node.attr("num_heads", 0))
    if len(shape) == 4:  # (N, H, L, D)
        x4 = x
    elif len(shape) == 3:  # (N, L, H * D): heads split
        if heads <= 0 or shape[2] % heads:
            raise Unsupported("3-D input %s without num_heads dividing its last axis"
                              % (shape,))
        t = s.reshape(x, (shape[0], shape[1], heads, shape[2] // heads), "heads")
        x4 = s.transpose(t, (0, 2, 1, 3), "nhld")
    else:
        raise Unsupported("input of shape %s: 3-D or 4-D only" % (shape,))
    n, h, length, d = b.shape(x4)
    rot = int(node.attr("rotary_embedding_dim", 0)) or d
    if rot % 2 or rot > d:
        raise Unsupported("rotary_embedding_dim %d for head size %d" % (rot, d))
    half = rot // 2
    cos_t, sin_t = (s.cast(_angles(s, name, pos, n, length, half, tag), dtype, tag + "_typed")
                    for name, tag in ((cos, "cos"), (sin, "sin")))
    if interleaved:  # neighbours: (.., r/2, 2) views, the pair on the last axis
        pairs = s.reshape(_slice(s, x4, 0, rot, "rotated") if rot < d else x4,
                          (n, h, length, half, 2), "pairs")
        x1 = s.reshape(_slice(s, pairs, 0, 1, "even"), (n, h, length, half), "x1")
        x2 = s.reshape(_slice(s, pairs, 1, 2, "odd"), (n, h, length, half), "x2")
    else:
        x1 = _slice(s, x4, 0, half, "x1")
        x2 = _slice(s, x4, half, rot, "x2")
    y1 = s.lib("sub", [s.lib("mul", [cos_t, x1], "x1cos"), s.lib("mul", [sin_t, x2], "x2sin")],
               "y1", attrs={"alpha": 1})
    y2 = s.lib("add", [s.lib("mul", [sin_t, x1], "x1sin"), s.lib("mul", [cos_t, x2], "x2cos")],
               "y2", attrs={"alpha": 1})
    if interleaved:
        y1 = s.reshape(y1, (n, h, length, half, 1), "y1_5d")
        y2 = s.reshape(y2, (n, h, length, half, 1), "y2_5d")
        t = s.add("Concat", [y1, y2], (n, h, length, half, 2), "pairs_out", dtype=dtype, dim=4)
        rotated = s.reshape(t, (n, h, length, rot), "rotated_out")
        parts = [rotated]
    else:
        parts = [y1, y2]
    if rot < d:
        parts.append(_slice(s, x4, rot, d, "kept"))
    y = parts[0] if len(parts) == 1 else s.add("Concat", parts, (n, h, length, d), "joined",
                                                 dtype=dtype, dim=3)
    if len(shape) == 3:
        t = s.transpose(y, (0, 2, 1, 3), "nlhd")
        y = s.reshape(t, shape, "y", output=node.outputs[0])
    s.finish(0, y)


def _slice(s, x, start, stop, tag):
    shape = s.b.shape(x)
    out = tuple(shape[:-1]) + (stop - start,)
    return s.add("Slice", [x], out, tag, dtype=s.b.dtype(x), dim=len(shape) - 1,
                 start=start, stop=stop)


def _angles(s, cache, pos, n, length, half, tag):
    """cos or sin at each token, (N, 1, L, r/2): the constant cache gathered at the
    position ids (constant ids: at import; run-time ones: a Gather), or given per token
    (N, L, r/2) when there are no position ids."""
    b = s.b
    table = np.asarray(b.const(cache, tag + "_cache"))
    if table.ndim < 2 or table.shape[-1] < half:
        raise Unsupported("%s_cache of shape %s for rotary pairs %d" % (tag, table.shape, half))
    table = table[..., :half]
    if pos is None:
        if table.shape != (n, length, half):
            raise Unsupported("%s_cache of shape %s without position_ids: (N, L, r/2) = %s "
                              "needed" % (tag, table.shape, (n, length, half)))
        values = table
    elif b.is_const(pos):
        ids = np.asarray(b.consts[pos]).astype(np.int64)
        if ids.shape != (n, length) or ids.min() < 0 or ids.max() >= table.shape[0]:
            raise Unsupported("position_ids of shape %s into a cache of %d positions"
                              % (ids.shape, table.shape[0]))
        values = table[ids]
    else:
        if b.shape(pos) != (n, length) or table.ndim != 2:
            raise Unsupported("position_ids of shape %s, %s_cache of shape %s"
                              % (b.shape(pos), tag, table.shape))
        t = s.add("Gather", [s.const(np.ascontiguousarray(table), tag + "_table"), pos],
                  (n, length, half), tag + "_at", axis=0)
        return s.reshape(t, (n, 1, length, half), tag + "_4d")
    return s.const(np.ascontiguousarray(values.reshape(n, 1, length, half)), tag)
