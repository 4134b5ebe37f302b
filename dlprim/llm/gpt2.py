"""GPT-2 checkpoints (HF's ``GPT2LMHeadModel``) as ``models.gpt_decoder`` builds them: the
config's names mapped to the builder's, and the weights to its parameters (Conv1D's
(in, out) weights transposed to InnerProduct's (out, in); the head tied to the token
table)."""
import math

import numpy as np

from ..models import gpt_decoder
from .checkpoint import ArchitectureError, activation, as_float32

__all__ = ["decoder", "longest_context", "weights"]

def longest_context(config):
    """The most positions GPT-2's decoder takes: its position table's rows."""
    return int(config.get("n_positions", 1024))


def decoder(config, batch=1, tokens=1, context=None, per_sample=False, last_only=False,
            weights="float32"):
    """(NetConfig, {}) of GPT-2's decoder for HF ``config`` (a dict) over a key/value
    cache of ``context`` positions (default and at most ``n_positions``)."""
    act = activation(config.get("activation_function", "gelu_new"), "GPT-2's MLP")
    # the attention's scale: 1 / sqrt(d) (none without scale_attn_weights), over layer
    # i + 1 with scale_attn_by_inverse_layer_idx. (reorder_and_upcast_attn's float32
    # scores are what the kernels compute whatever the storage.)
    layers, width = config["n_layer"], config["n_embd"] // config["n_head"]
    base = 1.0 / math.sqrt(width) if config.get("scale_attn_weights", True) else 1.0
    inverse = bool(config.get("scale_attn_by_inverse_layer_idx"))
    scales = [base / (i + 1) if inverse else base for i in range(layers)]
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
                      inner=config.get("n_inner"), weights=weights, scales=scales)
    return cfg, {}


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
