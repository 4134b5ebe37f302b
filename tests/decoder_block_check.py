"""One decoder block at one token through ``core/decoder_layer.py``'s launch, against a
float64 numpy reference of the same block: random weights, a cache holding ``pos``
positions, the new token at ``pos``. Shared by tests/test_llm_fused_step.py and the
oclgrind run (tests/oclgrind/).

FAMILIES: "llama" (RMSNorm, rotary, a gated SiLU MLP, grouped key/value heads, the block's
residual given) and "gpt2" (LayerNorm with biases, no rotary, one GELU product, biases on
every product, the first block's residual a token's and a position's rows). WEIGHTS: the
Linears' storages (int8 with a scale a row, 4-bit with a scale a group: the reference
takes the values they stand for).
"""
import numpy as np

import dlprim as dp
from dlprim.core.decoder_layer import DecoderBlockDims, DecoderLayerOps
from dlprim.core.quantize import dequantize_q4, quantize_q4, quantize_rows

FAMILIES = {
    "llama": dict(norm="rms", rotary=True, gated=True, activation="silu", pos_embed=False,
                  qkv_bias=True, out_bias=False, mlp_bias=False, kv_heads=2),
    "gpt2": dict(norm="layer", rotary=False, gated=False, activation="gelu_tanh",
                 pos_embed=True, qkv_bias=True, out_bias=True, mlp_bias=True, kv_heads=4),
}
WEIGHTS = {"float32": np.float32, "int8": np.int8, "q4": np.uint8}
# (two chunks of 32 positions: the merge; an MLP of 24, a third of a team's 8-value loads)
HIDDEN, INNER, HEADS, WIDTH, CONTEXT, VOCAB, EPS = 32, 24, 4, 8, 40, 11, 1e-5


def _act(name, g):
    if name == "silu":
        return g / (1 + np.exp(-g))
    return 0.5 * g * (1 + np.tanh(np.sqrt(2 / np.pi) * (g + 0.044715 * g ** 3)))


def _norm(kind, x, w, b):
    if kind == "rms":
        return x / np.sqrt((x * x).mean() + EPS) * w
    m = x.mean()
    return (x - m) / np.sqrt(((x - m) ** 2).mean() + EPS) * w + b


def _stored(weights, w):
    """(what the kernel reads of float32 weight ``w`` as ``weights``, its scales or None,
    the float32 values they stand for)."""
    if weights == "int8":
        q, s = quantize_rows(w)
        return q, s, q * s[:, None]
    if weights == "q4":
        q, s = quantize_q4(w)
        return q, s, dequantize_q4(q, s, w.shape[1])
    return w, None, w


def _block_params(rng, f, weights):
    """(the values a block stands for, float32; what the kernel reads: its Linears' stored
    weights and scales) for one random block of family ``f``."""
    H, I, QH, KVH, D = HIDDEN, INNER, HEADS, f["kv_heads"], WIDTH
    nqkv = (QH + 2 * KVH) * D

    def r(*shape, s=0.3):
        return (rng.standard_normal(shape) * s).astype(np.float32)
    p = {"norm1": 1 + r(H), "norm2": 1 + r(H), "w_qkv": r(nqkv, H), "w_o": r(H, QH * D),
         "w_up": r(I, H), "w_down": r(H, I)}
    if f["gated"]:
        p["w_gate"] = r(I, H)
    if f["norm"] == "layer":
        p["norm1_b"], p["norm2_b"] = r(H), r(H)
    for key, on in (("qkv", f["qkv_bias"]), ("o", f["out_bias"]), ("up", f["mlp_bias"]),
                    ("down", f["mlp_bias"]), ("gate", f["mlp_bias"] and f["gated"])):
        if on:
            p["b_" + key] = r(p["w_" + key].shape[0])
    stored = {}
    for key in [k for k in p if k.startswith("w_")]:
        stored[key], scales, p[key] = _stored(weights, p[key])
        if scales is not None:
            stored["s_" + key[2:]] = scales
    p["keys"], p["values"] = r(KVH, CONTEXT, D, s=1.0), r(KVH, CONTEXT, D, s=1.0)
    return p, dict(p, **stored)


def _reference_block(f, q, x, pos, scale, cos, sin):
    """(the residual after the block, its new cache rows) in float64; ``q`` the block's
    values, float64."""
    QH, KVH, D = HEADS, f["kv_heads"], WIDTH
    qkv = q["w_qkv"] @ _norm(f["norm"], x, q["norm1"], q.get("norm1_b")) + q.get("b_qkv", 0)
    heads = qkv.reshape(QH + 2 * KVH, D)
    if f["rotary"]:
        a, b = heads[:QH + KVH, :D // 2].copy(), heads[:QH + KVH, D // 2:].copy()
        c, s = cos[pos].astype(np.float64), sin[pos].astype(np.float64)
        heads[:QH + KVH, :D // 2] = a * c[:D // 2] + b * s[:D // 2]
        heads[:QH + KVH, D // 2:] = b * c[D // 2:] + a * s[D // 2:]
    K, V = q["keys"].copy(), q["values"].copy()
    K[:, pos], V[:, pos] = heads[QH:QH + KVH], heads[QH + KVH:]
    att = np.empty((QH, D))
    for h in range(QH):
        kv = h // (QH // KVH)
        sc = K[kv, :pos + 1] @ heads[h] * scale
        w = np.exp(sc - sc.max())
        att[h] = w @ V[kv, :pos + 1] / w.sum()
    x = x + q["w_o"] @ att.reshape(-1) + q.get("b_o", 0)
    n2 = _norm(f["norm"], x, q["norm2"], q.get("norm2_b"))
    up = q["w_up"] @ n2 + q.get("b_up", 0)
    if f["gated"]:
        mlp = _act(f["activation"], q["w_gate"] @ n2 + q.get("b_gate", 0)) * up
    else:
        mlp = _act(f["activation"], up)
    return x + q["w_down"] @ mlp + q.get("b_down", 0), [K[:, pos], V[:, pos]]


def run_block(ctx, rng, family, pos=35, token=7, scale=0.3, weights="float32", blocks=1):
    """(the kernel's residual, the reference's, the caches' rows ``pos``: kernel and
    reference, a list a block) for ``blocks`` blocks of ``family`` in one launch, with
    random float32 parameters, the Linears' weights stored as ``weights`` (WEIGHTS). Each
    of a tensor's blocks lies in one buffer (the kernel's table of offsets past the first
    block's), each block with an attention scale of its own."""
    f = FAMILIES[family]
    H, I, QH, KVH, D = HIDDEN, INNER, HEADS, f["kv_heads"], WIDTH
    dims = DecoderBlockDims(H, I, QH, KVH, D, CONTEXT, VOCAB, 0, f["qkv_bias"],
                            f["out_bias"], f["mlp_bias"], f["norm"], f["rotary"], f["gated"],
                            f["activation"], f["pos_embed"])
    ops = DecoderLayerOps(ctx, dims, WEIGHTS[weights], np.float32, np.float32, np.float32,
                          groups=1)
    made = [_block_params(rng, f, weights) for _ in range(blocks)]
    scales = [scale * (1 + 0.5 * b) for b in range(blocks)]
    angles = np.arange(CONTEXT)[:, None] * 0.1 * (np.arange(D // 2) + 1)[None]
    cos = np.concatenate([np.cos(angles)] * 2, 1).astype(np.float32)
    sin = np.concatenate([-np.sin(angles), np.sin(angles)], 1).astype(np.float32)
    table = rng.standard_normal((VOCAB, H)).astype(np.float32)
    pos_table = rng.standard_normal((CONTEXT, H)).astype(np.float32)
    x0 = rng.standard_normal(H).astype(np.float32)
    embed = f["pos_embed"]

    def t(a, dtype=np.float32):
        return dp.Tensor.from_numpy(ctx, np.ascontiguousarray(a, dtype))
    # each tensor's blocks one after another in a buffer of their own (8 values apart)
    kernel_blocks = [{} for _ in made]
    for name, first in made[0][1].items():
        flat = [np.ravel(m[1][name]) for m in made]
        step = -(-flat[0].size // 8) * 8 + 8
        whole = t(np.concatenate([np.pad(a, (0, step - a.size)) for a in flat]), first.dtype)
        for b, a in enumerate(flat):
            kernel_blocks[b][name] = whole.view(a.shape, b * step)
    scratch = ops.scratch()
    scratch["x"].to_device(x0)
    launch = ops.launch(embed, scratch, t(np.array([token]), np.int64),
                        t(np.array([pos]), np.int64), t(table), None, kernel_blocks,
                        (t(cos), t(sin)) if f["rotary"] else None, EPS, scales,
                        pos_table=t(pos_table) if embed else None)
    launch(ctx.queue)
    got = scratch["x"].to_host()
    got_rows = [[kb[c].to_host().reshape(KVH, CONTEXT, D)[:, pos] for c in ("keys", "values")]
                for kb in kernel_blocks]

    # the reference, float64
    x = (table[token] + pos_table[pos] if embed else x0).astype(np.float64)
    want_rows = []
    for (p, _), s in zip(made, scales):
        x, rows = _reference_block(f, {k: v.astype(np.float64) for k, v in p.items()}, x,
                                   pos, s, cos, sin)
        want_rows.append(rows)
    return got, x, got_rows, want_rows


def check_block(ctx, rng, family, weights="float32", blocks=1):
    got, want, got_rows, want_rows = run_block(ctx, rng, family, weights=weights,
                                               blocks=blocks)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
    for gb, wb in zip(got_rows, want_rows):
        for g, w in zip(gb, wb):
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
