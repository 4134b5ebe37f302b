"""The rotary position embedding's tables for a HF config, as transformers computes its
frequencies: ``rope_theta`` and the scalings "linear", "llama3", "yarn", "longrope" (and
its older name "su", Phi-3's) and "dynamic" (NTK).

A planned decode reads one fixed table row per position. "longrope" and "dynamic" change
every position's frequencies with the sequence's length once it passes the original
context (``original_max_position_embeddings``; for "dynamic", the config's
``max_position_embeddings``), which a fixed table cannot follow: for them a context
beyond the original one is refused, and within it their frequencies are the unscaled ones
(LongRoPE's short factors). "yarn" and "longrope" scale the tables by their attention
factor, as transformers scales cos and sin.

The sine's first half is negated, so that rotating x is ``x cos + swap(x) sin`` with
``swap`` the two halves exchanged (``core/rotary.py``).
"""
import math

import numpy as np

from .checkpoint import ArchitectureError

__all__ = ["rope_tables", "longest_context", "ROPE_KINDS"]

ROPE_KINDS = ("default", "linear", "llama3", "yarn", "longrope", "dynamic")
_ALIASES = {"su": "longrope"}


def _scaling(config):
    """(the scaling's parameters, its kind) of HF ``config``; an unknown kind refused."""
    # (older configs: rope_theta and rope_scaling; newer: one rope_parameters dict)
    params = dict(config.get("rope_scaling") or {}, **(config.get("rope_parameters") or {}))
    kind = params.get("rope_type", params.get("type")) or "default"
    kind = _ALIASES.get(kind, kind)
    if kind not in ROPE_KINDS:
        raise ArchitectureError("rotary embedding %r is not one dlprim builds yet (%s)"
                                % (params, ", ".join(ROPE_KINDS)))
    return params, kind


def longest_context(config):
    """The most positions whose rotary tables a planned decode follows for ``config``
    ("longrope" and "dynamic": the trained context), or None where any number."""
    params, kind = _scaling(config)
    if kind == "longrope":
        return _original(config, params)
    if kind == "dynamic":
        return int(config["max_position_embeddings"])
    return None


def _original(config, params):
    original = params.get("original_max_position_embeddings",
                          config.get("original_max_position_embeddings"))
    if original is None:
        raise ArchitectureError("rotary scaling longrope without "
                                "original_max_position_embeddings")
    return int(original)


def rope_tables(config, context):
    """(cos, sin) of the rotary embedding, (context, head width) float32, for HF ``config``
    (a dict) and a cache of ``context`` positions."""
    params, kind = _scaling(config)
    partial = params.get("partial_rotary_factor", config.get("partial_rotary_factor"))
    if partial is not None and float(partial) != 1.0:
        raise ArchitectureError("a rotary embedding over part of each head "
                                "(partial_rotary_factor %r) is not one dlprim builds yet"
                                % partial)
    heads = config["num_attention_heads"]
    width = config.get("head_dim") or config["hidden_size"] // heads
    theta = float(params.get("rope_theta", config.get("rope_theta", 10000.0)))
    # theta ** (2i / width) in float32, as transformers computes it
    powers = theta ** (np.arange(0, width, 2, dtype=np.int64).astype(np.float32) / width)
    inv = (1.0 / powers).astype(np.float32)
    scale = 1.0
    if kind == "linear":
        inv = (inv / np.float32(_number(params, "factor", kind))).astype(np.float32)
    elif kind == "llama3":
        inv = _llama3_frequencies(inv, params)
    elif kind == "yarn":
        inv, scale = _yarn(config, params, powers, width, theta)
    elif kind == "longrope":
        inv, scale = _longrope(config, params, powers, width)
    limit = longest_context(config)  # (dynamic's frequencies within it are the unscaled ones)
    if limit is not None and context > limit:
        raise ArchitectureError(
            "a context of %d positions is beyond the %d the rotary scaling %r was trained "
            "at; beyond it, transformers changes every position's frequencies with the "
            "sequence's length, which a planned decode does not follow: give a context of "
            "at most %d" % (context, limit, kind, limit))
    freqs = np.outer(np.arange(context, dtype=np.float32), inv).astype(np.float32)
    angles = np.concatenate([freqs, freqs], axis=1)
    cos, sin = np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)
    cos *= np.float32(scale)  # (yarn's and longrope's attention factor; else 1)
    sin *= np.float32(scale)
    sin[:, :width // 2] *= -1
    return cos, sin


def _number(params, key, kind):
    try:
        return float(params[key])
    except KeyError:
        raise ArchitectureError("rotary scaling %s without %s" % (kind, key)) from None


def _llama3_frequencies(inv, params):
    """Llama 3.1's scaling: wavelengths longer than the original context over
    ``low_freq_factor`` divided by ``factor``, shorter than it over ``high_freq_factor``
    kept, and a smooth blend between."""
    factor, low, high, old = (_number(params, k, "llama3") for k in (
        "factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"))
    wavelen = 2 * np.pi / inv
    scaled = np.where(wavelen > old / low, inv / factor, inv)
    smooth = (old / wavelen - low) / (high - low)
    blended = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelen < old / high) & ~(wavelen > old / low)
    return np.where(medium, blended, scaled).astype(np.float32)


def _yarn(config, params, powers, width, theta):
    """YaRN: each frequency between its interpolated (divided by ``factor``) and its own
    value by a linear ramp over the dimensions whose wavelengths fit between ``beta_fast``
    and ``beta_slow`` turns of the original context; the attention factor from
    ``factor`` (and ``mscale``/``mscale_all_dim``) unless given."""
    original = params.get("original_max_position_embeddings") or config["max_position_embeddings"]
    original = float(original)
    factor = params.get("factor")
    factor = float(factor) if factor is not None else config["max_position_embeddings"] / original

    def mscale(scale, m=1.0):
        return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0

    attention = params.get("attention_factor")
    if attention is None:
        m, m_all = params.get("mscale"), params.get("mscale_all_dim")
        attention = (mscale(factor, m) / mscale(factor, m_all) if m and m_all
                     else mscale(factor))
    fast, slow = params.get("beta_fast") or 32, params.get("beta_slow") or 1

    def dimension(turns):  # the dimension whose wavelength fits ``turns`` times
        return width * math.log(original / (turns * 2 * math.pi)) / (2 * math.log(theta))

    low, high = dimension(fast), dimension(slow)
    if params.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, width - 1)
    if low == high:
        high += 0.001  # (a ramp of no width)
    ramp = np.clip((np.arange(width // 2, dtype=np.float32) - low) / (high - low), 0, 1)
    keep = (1 - ramp).astype(np.float32)
    extrapolated = (1.0 / powers).astype(np.float32)
    interpolated = (1.0 / (np.float32(factor) * powers)).astype(np.float32)
    inv = interpolated * (1 - keep) + extrapolated * keep
    return inv.astype(np.float32), float(attention)


def _longrope(config, params, powers, width):
    """LongRoPE within the original context: the frequencies divided by the short
    factors; the attention factor from max_position_embeddings over the original context
    unless given."""
    original = _original(config, params)
    short = params.get("short_factor")
    if short is None or len(short) != width // 2:
        raise ArchitectureError("rotary scaling longrope: short_factor must have %d numbers "
                                "(half the head width), got %r" % (width // 2, short))
    factor = params.get("factor")
    factor = (float(factor) if factor is not None
              else config["max_position_embeddings"] / original)
    attention = params.get("attention_factor")
    if attention is None:
        attention = 1.0 if factor <= 1 else math.sqrt(1 + math.log(factor) / math.log(original))
    inv = (1.0 / (np.asarray(short, np.float32) * powers)).astype(np.float32)
    return inv, float(attention)
