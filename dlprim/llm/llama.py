"""The Llama family's decoder (Llama, Mistral, Qwen2) as one Net over a key/value cache:
a prompt of T tokens and then one token a step are two plans of the same Net
(``Net.reshape``), the caches and weights shared, as ``models.gpt_decoder`` does for GPT-2.

Per block, HuggingFace's formulas and parameter names (``model.layers.<i>.self_attn.o_proj
.weight``, ...): RMSNorm (taken by the products that read it on the way: InnerProduct's
``input_rms``), the q, k and v projections as one (``self_attn.qkv_proj``, as
Phi-3 keeps them; ``weights`` joins HF's three; with biases for Qwen2), the rotary
position embedding applied by the cache as it splits the heads, grouped-query attention
over the cache (each key/value head serves H / KVH query heads), the output projection
added onto the residual; RMSNorm, the SwiGLU MLP (``down(silu(gate(x)) * up(x))``, the
gate and up projections one gated InnerProduct) added onto it. Then RMSNorm (taken by the
head too) and the head.

The rotary tables are constants of the Net (``rope.cos`` and ``rope.sin``, one row per
position, from ``rope.py``): ``decoder`` returns them beside the config.
"""
import math
import re

import numpy as np

from ..models import decoder_inputs, decoder_logits, linear_params, row_linear, token_table
from ..errors import FileFormatError
from .checkpoint import ArchitectureError, as_float32
from .checkpoint import activation as hf_activation
from .rope import longest_context, rope_tables

__all__ = ["decoder", "decoder_names", "fused_spec", "longest_context", "rope_tables",
           "weights"]


def decoder_names(named, where="the checkpoint"):
    """(name, array) pairs under HF's names -> the decoder's: the q, k and v projections
    (and their biases) joined into one ``self_attn.qkv_proj`` as Phi-3 keeps them,
    Phi-3's gate_up_proj split into gate and up, stored rotary frequencies dropped; the
    rest as they come. ``where`` names the source in the error for a projection whose
    q, k or v is missing."""
    parts = {}  # "<layer>.self_attn.qkv_proj.<weight or bias>" -> {q, k, v: array}
    for name, a in named:
        if name.endswith("rotary_emb.inv_freq"):
            continue  # (older checkpoints keep the frequencies, which rope_tables computes)
        joined = re.match(r"(.*self_attn\.)([qkv])_proj\.(weight|bias)$", name)
        if joined:
            base, part, kind = joined.groups()
            held = parts.setdefault(base + "qkv_proj." + kind, {})
            held[part] = a
            if len(held) == 3:
                yield base + "qkv_proj." + kind, np.concatenate([held.pop(c) for c in "qkv"])
        elif name.endswith("mlp.gate_up_proj.weight"):
            base = name[:-len("gate_up_proj.weight")]
            half = a.shape[0] // 2
            yield base + "gate_proj.weight", a[:half]
            yield base + "up_proj.weight", a[half:]
        else:
            yield name, a
    partial = sorted(n for n, held in parts.items() if held)
    if partial:
        raise FileFormatError("%s: %s lacks %s of the q, k and v projections"
                              % (where, partial[0],
                                 ", ".join(sorted(set("qkv") - set(parts[partial[0]])))))


def decoder(config, batch=1, tokens=1, context=None, qkv_bias=None, per_sample=False,
            last_only=False, weights="float32"):
    """(NetConfig, {"rope.cos", "rope.sin"}) of the decoder for HF ``config`` (a dict):
    inputs ``tokens`` and ``positions`` (batch, T) int64 and ``pos`` (1,) int64 (the
    tokens the cache holds before them); output ``logits`` (batch * T, vocab). ``context``:
    the cache's length (default: max_position_embeddings); ``qkv_bias``: whether q, k and
    v have biases (default: Qwen2's do); ``weights``: the Linears' storage (float32,
    float16, bfloat16, or int8 with a scale per output). Load the checkpoint's tensors with
    ``set_parameters(weights, strict=False)`` (the caches are not weights); a tied head
    (``tie_word_embeddings``) takes ``model.embed_tokens.weight`` as ``lm_head.weight``."""
    s = _shape(config, context, qkv_bias)
    hidden, heads, kv_heads, width = s["hidden"], s["heads"], s["kv_heads"], s["width"]
    context, activation, windows = s["context"], s["activation"], s["windows"]
    qkv_bias, mlp_bias, out_bias, eps = s["qkv_bias"], s["mlp_bias"], s["out_bias"], s["eps"]
    vocab, inner = s["vocab"], s["inner"]
    cfg, ids, places, pos = decoder_inputs(batch, tokens, per_sample, last_only)
    x = token_table(cfg, "model.embed_tokens", ids, vocab, hidden, weights)
    # the residual stream as rows (batch * T, hidden): the output and down projections
    # add onto it in place (row_linear's residual)
    x = cfg.add("Reshape", name="model.embed_tokens/rows", inputs=[x],
                options={"dims": [-1, hidden]})
    tables = [cfg.add("Embedding", name="rope." + part, inputs=[places], params=["rope." + part],
                      options={"num_embeddings": context, "embedding_dim": width})
              for part in ("cos", "sin")]  # (batch, T, width): each token's row
    group = heads // kv_heads  # the query heads one key/value head serves

    def linear(name, x, inputs, outputs, bias=False, residual=None, norm=None, **kw):
        return row_linear(cfg, name, x, inputs, outputs, bias, weights, residual,  # over rows
                          rms_norm=None if norm is None else (norm, eps), **kw)

    for i in range(config["num_hidden_layers"]):
        p = "model.layers.%d." % i
        # q, k and v in one projection (``weights`` joins HF's three, as Phi-3 keeps them)
        # of the RMSNorm of x (the product normalizes the rows on the way: a decoder's
        # step launches no norm), split into heads by a Reshape alone; the cache splits
        # off the queries and rotates them and the new keys on the way: (batch, heads, T,
        # width) queries
        qkv = linear(p + "self_attn.qkv_proj", x, hidden, (heads + 2 * kv_heads) * width,
                     qkv_bias, norm=p + "input_layernorm")
        qkv = cfg.add("Reshape", name=p + "self_attn/split", inputs=[qkv],
                      options={"dims": [batch, -1, heads + 2 * kv_heads, width]})
        q, keys, values = cfg.add(
            "KVCache", name=p + "self_attn.cache", inputs=[qkv, pos] + tables,
            outputs=[p + "q", p + "keys", p + "values"],
            options={"length": context, "mask": False, "layout": "packed",
                     "query_heads": heads})
        # grouped-query attention without repeating the caches: the G query heads of
        # one key/value head are G x T query rows of it (HF's head h = j * G + g); each
        # query sees the cached keys up to its own position (``pos`` read on the device:
        # no mask is written or read, and the kernels stop at the last key a block sees)
        if group > 1:
            q = cfg.add("Reshape", name=p + "q/groups", inputs=[q],
                        options={"dims": [batch, kv_heads, -1, width]})
        a = cfg.add("ScaledDotProductAttention", name=p + "self_attn",
                    inputs=[q, keys, values, pos],
                    options={"positions": True, "query_groups": group, "window": windows[i]})
        if group > 1:
            a = cfg.add("Reshape", name=p + "self_attn/heads", inputs=[a],
                        options={"dims": [batch, heads, -1, width]})
        a = cfg.add("Transpose", name=p + "self_attn/merge", inputs=[a],
                    options={"dims": [0, 2, 1, 3]})
        a = cfg.add("Reshape", name=p + "self_attn/merged", inputs=[a],
                    options={"dims": [-1, heads * width]})
        x = linear(p + "self_attn.o_proj", a, heads * width, hidden, out_bias, residual=x)
        # silu(gate(x)) * up(x) of the RMSNorm of x: one gated InnerProduct (a decoder's
        # step streams both weights in one launch)
        m = linear(p + "mlp.gate_proj", x, hidden, inner, mlp_bias,
                   norm=p + "post_attention_layernorm",
                   activation=activation, pair=p + "mlp.up_proj")
        x = linear(p + "mlp.down_proj", m, inner, hidden, mlp_bias, residual=x)
    decoder_logits(cfg, x, hidden, vocab, linear_params("lm_head", False, weights),
                   weights=weights, rms_norm=("model.norm", eps))
    cos, sin = rope_tables(config, context)
    return cfg, {"rope.cos": cos, "rope.sin": sin}


def _shape(config, context=None, qkv_bias=None):
    """The decoder's sizes and options from HF ``config``: hidden, heads, kv_heads, width,
    context, inner, vocab, activation, windows (each layer's), qkv_bias, mlp_bias,
    out_bias, eps, layers."""
    hidden, heads = config["hidden_size"], config["num_attention_heads"]
    kv_heads = config.get("num_key_value_heads") or heads
    if heads % kv_heads:
        raise ArchitectureError("%d attention heads are not a multiple of %d key/value heads"
                                % (heads, kv_heads))
    context = int(context or config["max_position_embeddings"])
    if qkv_bias is None:
        qkv_bias = config.get("model_type") == "qwen2" or bool(config.get("attention_bias"))
    return {"hidden": hidden, "heads": heads, "kv_heads": kv_heads,
            "width": config.get("head_dim") or hidden // heads, "context": context,
            "inner": config["intermediate_size"], "vocab": config["vocab_size"],
            "activation": hf_activation(config.get("hidden_act", "silu"), "the MLP"),
            "windows": _windows(config, context), "qkv_bias": bool(qkv_bias),
            "mlp_bias": bool(config.get("mlp_bias")),  # (Llama's option: gate, up and down)
            # (Llama's attention_bias covers o_proj; Qwen2's biases are q, k and v only)
            "out_bias": bool(config.get("attention_bias")),
            "eps": float(config.get("rms_norm_eps", 1e-6)),
            "layers": int(config["num_hidden_layers"])}


def fused_spec(config, context=None):
    """What ``llm/fused_step.py`` needs of the decoder ``decoder`` builds for ``config``:
    ``_shape``'s dict, the head's eps, the family (RMSNorm, rotary, a gated MLP), each
    layer's attention scale and the parameters' names."""
    s = _shape(config, context)
    s.update(head_eps=s["eps"], norm="rms", rotary=True, gated=True,
             scales=[1.0 / math.sqrt(s["width"])] * s["layers"],
             names={"block": "model.layers.%d.", "norm1": "input_layernorm",
                    "norm2": "post_attention_layernorm", "qkv": "self_attn.qkv_proj",
                    "o": "self_attn.o_proj", "gate": "mlp.gate_proj", "up": "mlp.up_proj",
                    "down": "mlp.down_proj", "cache": "self_attn.cache",
                    "embed": "model.embed_tokens.weight", "positions": None,
                    "final_norm": "model.norm", "head": "lm_head"})
    return s


def _windows(config, context):
    """Each layer's attention window (0: every key up to the query): ``sliding_window`` on
    the layers ``layer_types`` names "sliding_attention" (Qwen2 without them: from
    ``max_window_layers`` on; Mistral: every layer), none where ``use_sliding_window`` is
    false, and none that the context does not pass."""
    window, layers = config.get("sliding_window"), int(config["num_hidden_layers"])
    if not window or config.get("use_sliding_window") is False:
        return [0] * layers
    types = config.get("layer_types")
    if types is None:
        first = int(config.get("max_window_layers") or 0) \
            if config.get("model_type") == "qwen2" else 0
        types = ["sliding_attention" if i >= first else "full_attention"
                 for i in range(layers)]
    unknown = sorted(set(types) - {"full_attention", "sliding_attention"})
    if len(types) != layers or unknown:
        raise ArchitectureError("layer_types %r: one of full_attention or sliding_attention "
                                "for each of the %d layers" % (types, layers))
    window = int(window)
    return [window if kind == "sliding_attention" and window < context else 0
            for kind in types]


def weights(checkpoint, context=None):
    """(name, float32 array) of the decoder's parameters from a ``Checkpoint``: its
    tensors as ``decoder_names`` maps them, and a tied head given the token table.
    ``context``: unused (the rotary tables are computed for it)."""
    config = checkpoint.config
    yield from decoder_names(((name, as_float32(checkpoint.tensor(name)))
                              for name in checkpoint.names()), checkpoint.folder)
    if "lm_head.weight" not in checkpoint:
        if not config.get("tie_word_embeddings", True):
            raise FileFormatError("%s: the checkpoint has no lm_head.weight, and the config "
                                  "does not tie the head to the token table"
                                  % checkpoint.folder)
        yield "lm_head.weight", as_float32(checkpoint.tensor("model.embed_tokens.weight"))
