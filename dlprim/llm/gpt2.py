"""GPT-2 checkpoints (HF's ``GPT2LMHeadModel``) as ``models.gpt_decoder`` builds them: the
config's names mapped to the builder's, and the weights to its parameters (Conv1D's
(in, out) weights transposed to InnerProduct's (out, in); the head tied to the token
table)."""
import math

import numpy as np

from ..models import gpt_decoder
from .checkpoint import ArchitectureError, activation, as_float32

__all__ = ["decoder", "fused_spec", "longest_context", "weights"]


def longest_context(config):
    """The most positions GPT-2's decoder takes: its position table's rows."""
    return int(config.get("n_positions", 1024))


def decoder(config, batch=1, tokens=1, context=None, per_sample=False, last_only=False,
            weights="float32"):
    """(NetConfig, {}) of GPT-2's decoder for HF ``config`` (a dict) over a key/value
    cache of ``context`` positions (default and at most ``n_positions``)."""
    act = _activation(config)
    positions = longest_context(config)
    context = int(context or positions)
    if context > positions:
        raise ArchitectureError("a context of %d positions is beyond GPT-2's position table "
                                "of %d (n_positions)" % (context, positions))
    cfg = gpt_decoder(vocab=config["vocab_size"], context=context, layers=config["n_layer"],
                      heads=config["n_head"], dim=config["n_embd"], batch=batch, tokens=tokens,
                      activation=act,
                      eps=float(config.get("layer_norm_epsilon", 1e-5)),
                      per_sample=per_sample, last_only=last_only,
                      inner=config.get("n_inner"), weights=weights, scales=_scales(config))
    return cfg, {}


def fused_spec(config, context=None):
    """What ``llm/fused_step.py`` needs of the decoder ``decoder`` builds for ``config``:
    the block's shape, the family (LayerNorm, no rotary embedding, one MLP product and its
    activation, a learned position table), each layer's attention scale and the
    parameters' names."""
    layers, hidden, heads = config["n_layer"], config["n_embd"], config["n_head"]
    eps = float(config.get("layer_norm_epsilon", 1e-5))
    return {"hidden": hidden, "inner": config.get("n_inner") or 4 * hidden, "heads": heads,
            "kv_heads": heads, "width": hidden // heads,
            "context": int(context or longest_context(config)),
            "vocab": config["vocab_size"], "windows": [0] * layers, "qkv_bias": True,
            "out_bias": True, "mlp_bias": True, "eps": eps, "head_eps": eps,
            "layers": layers, "norm": "layer", "rotary": False, "gated": False,
            "activation": _activation(config), "scales": _scales(config),
            "names": {"block": "transformer.h.%d.", "norm1": "ln_1", "norm2": "ln_2",
                      "qkv": "attn.c_attn", "o": "attn.c_proj", "gate": None,
                      "up": "mlp.c_fc", "down": "mlp.c_proj", "cache": "attn.cache",
                      "embed": "transformer.wte.weight",
                      "positions": "transformer.wpe.weight",
                      "final_norm": "transformer.ln_f", "head": "lm_head"}}


def _activation(config):
    return activation(config.get("activation_function", "gelu_new"), "GPT-2's MLP")


def _scales(config):
    """Each layer's attention scale: 1 / sqrt(d) (none without scale_attn_weights), over
    layer i + 1 with scale_attn_by_inverse_layer_idx. (reorder_and_upcast_attn's float32
    scores are what the kernels compute whatever the storage.)"""
    layers, width = config["n_layer"], config["n_embd"] // config["n_head"]
    base = 1.0 / math.sqrt(width) if config.get("scale_attn_weights", True) else 1.0
    inverse = bool(config.get("scale_attn_by_inverse_layer_idx"))
    return [base / (i + 1) if inverse else base for i in range(layers)]


def weights(checkpoint, context=None):
    """(name, float32 array) of the decoder's parameters from a GPT-2 ``Checkpoint``
    (names with or without the ``transformer.`` prefix; the position table cut to
    ``context`` rows where given)."""
    for name in checkpoint.names():
        if name.endswith(".attn.bias") or name.endswith(".attn.masked_bias"):
            continue  # (the causal-mask buffers older files keep)
        full = name if name.startswith(("transformer.", "lm_head.")) else "transformer." + name
        a = as_float32(checkpoint.tensor(name))
        if full.endswith(".weight") and (".attn.c_" in full or ".mlp.c_" in full):
            a = np.ascontiguousarray(a.T)
        elif full == "transformer.wpe.weight" and context:
            a = a[:context]
        yield full, a
    if "lm_head.weight" not in checkpoint:
        table = "transformer.wte.weight" if "transformer.wte.weight" in checkpoint \
            else "wte.weight"
        yield "lm_head.weight", as_float32(checkpoint.tensor(table))
