"""Llama-family or GPT-2-family decoder blocks at one token, a run of them in one launch
(``kernels/decoder_layer.cl``): each block's norms (RMSNorm, or LayerNorm with a bias), the
q/k/v, output and MLP products (SwiGLU's gate/up pair, or one product and its activation), the
rotary embedding (or none), the cache write and attention over the cache, with P
work-groups meeting at grid barriers between the phases.

A decoder's one-token step on NVIDIA's driver is made of launches that each cost 5-9 us
of host time and 4-5 us of device time whatever they do (docs/benchmarks.md, "Language-
model decoding"): six a block took a TinyLlama step to 2 ms against 0.56 ms for its
bytes. Here the blocks are one launch, their phases and the blocks themselves meeting at
grid barriers (1-3 us).

As with the recurrent layers' one-launch loop (``core/recurrent_persistent.py``), a grid
barrier deadlocks where the device does not keep every work-group resident, so the launch
shape is used only after a probe of it passed on the device (memoized per context), the
barriers' spins are bounded, and a launch that waited too long writes NaN. ``groups=1``
runs anywhere, probe-free (the tests' CPU runs).
"""
import logging
import math
import os

import numpy as np
import pyopencl as cl

from ..dtypes import cl_type
from ..kernels import program
from ..tensor import Tensor
from ..utils import round_up
from .quantize import Q4_GROUP
from .recurrent_persistent import _real_gpu

__all__ = ["BLOCK_TENSORS", "DecoderBlockDims", "DecoderLayerOps", "misplaced"]

log = logging.getLogger(__name__)

TEAM = 32           # work-items a weight row (a warp on NVIDIA)
GPU_TEAMS = 16      # teams a work-group on GPUs (512 work-items)
CPU_TEAMS = 2
SPINS = 1 << 24     # counter reads before a grid barrier gives up (seconds, not steps)
PROBE_SPINS = 1 << 16
VEC = 8             # values a load: rows and offsets must be multiples of it
UNROLL = 4          # loads a work-item of a product asks for before it uses any
# and of a product of one weight (the output, down, and ungated MLP products; a pair takes
# UNROLL of each weight): H200, TinyLlama's block, fp16, decode_block_phases.py, one call:
# down 8.67 -> 8.03 us, 1.233 -> 1.190 ms a token (8 against 4)
SINGLE_UNROLL = 8
# The rest of a block's weights (output, MLP and down products) is asked of the L2 cache as
# each work-group ends attention (NVIDIA), where it is at most this many bytes (read from
# the cache, GPT-2's products took 9.8 us a block instead of 11.8); more than the cache
# can keep while the products stream past it gained nothing (TinyLlama's 8.4 MB output
# product and the MLP's first rows: a block 46.6 -> 46.9 us, attention's slowest work-
# groups waiting on the prefetches' traffic). H200, fp16, decode_block_phases.py, one call.
PREFETCH_BYTES = 16 << 20
# Blocks a launch at most (its table of the blocks' tensors is local memory): a step is one
# launch for most decoders. Where a block's launch ends, its slowest work-group's tail and
# the next launch's start cost about 7 us against a grid barrier's 2-3 (H200, TinyLlama's
# blocks: 52.4 us a launch, 47.1 of phases).
MAX_BLOCKS = 64
# a block's tensors in the kernel's order (None where the block has none)
BLOCK_TENSORS = ("norm1", "norm1_b", "w_qkv", "s_qkv", "b_qkv", "w_o", "s_o", "b_o", "norm2",
                 "norm2_b", "w_gate", "s_gate", "b_gate", "w_up", "s_up", "b_up", "w_down",
                 "s_down", "b_down", "keys", "values")
_BLOCK_BYTES = 8 * len(BLOCK_TENSORS) + 4  # (a block's deltas and attention scale)


def misplaced(first, block):
    """The first of BLOCK_TENSORS that ``block`` does not hold where one launch with
    ``first`` finds it (the same buffer and storage as ``first``'s, or absent from both),
    or None. Blocks: dicts of tensors, an absent one None or missing."""
    for name in BLOCK_TENSORS:
        t, t0 = block.get(name), first.get(name)
        if (t is None) != (t0 is None) or \
                (t is not None and (t.buffer != t0.buffer or t.dtype != t0.dtype)):
            return name
    return None


ACTIVATIONS = ("silu", "gelu", "gelu_tanh", "relu", "tanh", "sigmoid")


class DecoderBlockDims:
    """The shapes of a block: ``hidden``, ``inner`` (the MLP's), ``heads``, ``kv_heads``,
    ``width`` (a head's), ``context`` (the cache's positions), ``vocab`` (the token
    table's rows), ``window`` (0 or a sliding window's keys), ``qkv_bias``, ``out_bias``,
    ``mlp_bias`` (the MLP's products); the family: ``norm`` ("rms", or "layer":
    LayerNorm with a bias), ``rotary``, ``gated`` (SwiGLU-style gate and up, else one
    product), ``activation`` (the MLP's: ACTIVATIONS), ``pos_embed`` (a learned position
    table added to the first block's residual)."""

    def __init__(self, hidden, inner, heads, kv_heads, width, context, vocab, window=0,
                 qkv_bias=False, out_bias=False, mlp_bias=False, norm="rms", rotary=True,
                 gated=True, activation="silu", pos_embed=False):
        self.hidden, self.inner, self.heads, self.kv_heads = hidden, inner, heads, kv_heads
        self.width, self.context, self.vocab, self.window = width, context, vocab, window
        self.qkv_bias, self.out_bias = bool(qkv_bias), bool(out_bias)
        self.mlp_bias, self.norm, self.rotary = bool(mlp_bias), norm, bool(rotary)
        self.gated, self.activation, self.pos_embed = bool(gated), activation, bool(pos_embed)

    def unsupported(self):
        """Why the kernel cannot take this block (None: it can)."""
        if self.norm not in ("rms", "layer"):
            return "the norm %r (rms or layer)" % (self.norm,)
        if self.activation not in ACTIVATIONS:
            return "the MLP's activation %r" % (self.activation,)
        if self.heads % self.kv_heads:
            return "query heads not a multiple of key/value heads"
        for what, n in (("hidden", self.hidden), ("inner", self.inner),
                        ("heads x width", self.heads * self.width),
                        ("head width", self.width)):
            if n % VEC:
                return "%s %d is not a multiple of %d" % (what, n, VEC)
        return None


def _type(dtype):
    return cl_type(np.dtype(dtype))


class DecoderLayerOps:
    """The launches of the blocks of one decoder at one token: ``weight_dtype`` (float32,
    float16, bfloat16, int8 with a float32 scale a row, or uint8: 4-bit values with a
    float32 scale a group of Q4_GROUP, core/quantize.py's ``quantize_q4``), ``cache_dtype``,
    ``table_dtype`` (the rotary tables), ``embed_dtype`` (the token table; int8 with a
    scale a row), ``bias_dtype``, ``pos_dtype`` (the learned position table, where the
    family adds one). ``groups``: work-groups (None: a compute unit each, on
    GPUs that pass the probe; else unusable: ``self.usable`` False); ``teams``: teams of
    TEAM work-items a work-group; ``unroll``: the loads a work-item asks for at once in
    the products; ``timing``: the phases' clocks written (NVIDIA)."""

    def __init__(self, ctx, dims, weight_dtype, cache_dtype, table_dtype, embed_dtype,
                 bias_dtype=np.float32, groups=None, teams=None, unroll=UNROLL, timing=False,
                 pos_dtype=np.float32):
        self.ctx, self.dims = ctx, dims
        why = dims.unsupported()
        if why is None and not dims.rotary and ctx.facts.vendor_id == "intel" and \
                not ctx.facts.is_gpu:
            # (its compiler, 2025's, crashes in a pass over values kept across barriers on
            # this variant, whose phases hold no table reads; other devices build it)
            why = "Intel's CPU compiler fails on blocks without a rotary embedding"
        if why is not None:
            raise ValueError("DecoderLayerOps: %s" % why)
        gpu = _real_gpu(ctx)
        nvidia = gpu and ctx.facts.vendor_id == "nvidia"
        self.teams = int(teams or (GPU_TEAMS if gpu else CPU_TEAMS))
        self.teams = min(self.teams, max(1, ctx.facts.max_work_group // TEAM))
        self.threads = self.teams * TEAM
        self.groups = int(groups) if groups is not None else ctx.facts.compute_units
        d = dims
        # (the staged vectors in whole blocks of 8 x TEAM: the kernel's PERM)
        vl = max(round_up(max(d.hidden, d.inner, d.heads * d.width), VEC * TEAM),
                 self.teams * (d.width + TEAM))
        base = 4 * (vl + self.threads) + 64
        self.max_blocks = max(1, min(MAX_BLOCKS, (ctx.facts.local_mem - base) // _BLOCK_BYTES))
        self.local_bytes = base + self.max_blocks * _BLOCK_BYTES
        types = {name: _type(t) for name, t in (("W_T", weight_dtype), ("C_T", cache_dtype),
                                                 ("T_T", table_dtype), ("E_T", embed_dtype),
                                                 ("B_T", bias_dtype), ("P_T", pos_dtype))}
        self.params = dict(
            H=d.hidden, I=d.inner, QH=d.heads, KVH=d.kv_heads, D=d.width, CONTEXT=d.context,
            VOCAB=d.vocab, WINDOW=d.window, QKV_BIAS=int(d.qkv_bias), O_BIAS=int(d.out_bias),
            MLP_BIAS=int(d.mlp_bias), NORM=d.norm, ROTARY=int(d.rotary), GATED=int(d.gated),
            ACT=d.activation, POS_EMBED=int(d.pos_embed),
            SCALE=int(types["W_T"] == "char"), Q4=Q4_GROUP if types["W_T"] == "uchar" else 0,
            E_SCALE=int(types["E_T"] == "char"),
            TEAM=TEAM, TEAMS=self.teams, MULTI=int(self.groups > 1),
            SHUFFLE=int(nvidia), VL=vl,
            UNROLL=int(unroll), SINGLE_UNROLL=max(SINGLE_UNROLL, int(unroll)),
            TIMING=int(bool(timing)), BLOCK_TENSORS=",".join(BLOCK_TENSORS),
            MAX_BLOCKS=self.max_blocks, **types)
        # (4-bit weights: half a byte a value and a float32 scale a group)
        itemsize = 0.5 + 4 / Q4_GROUP if self.params["Q4"] else np.dtype(weight_dtype).itemsize
        self.params["PREFETCH"] = self._prefetches(nvidia, itemsize)
        self.usable = self.local_bytes <= ctx.facts.local_mem and \
            (groups is not None or nvidia)

    def _prefetches(self, nvidia, itemsize):
        """Whether attention's end asks the L2 cache for the rest of the block's weights
        (PREFETCH_BYTES; ``DLPRIM_DECODE_PREFETCH_MB`` overrides it)."""
        budget = float(os.environ.get("DLPRIM_DECODE_PREFETCH_MB", PREFETCH_BYTES / 2**20))
        d = self.dims
        rest = d.hidden * (d.heads * d.width + d.inner * (3 if d.gated else 2)) * itemsize
        return int(nvidia and rest <= budget * 2**20)

    def program(self, embed):
        """The built program; ``embed``: the first block's (its residual the token's row)."""
        return program.get(self.ctx, "decoder_layer", EMBED=int(embed), **self.params)

    def scratch(self):
        """The float32 scratch every block shares: {x, qkv, part, att, mlp}, each head's
        count of chunks done (``count``, uint32, zero between launches) and the barrier's
        counter and failure flag (``sync``, two uint64, zero)."""
        d, ctx = self.dims, self.ctx
        chunks = -(-d.context // TEAM)
        sizes = {"x": d.hidden, "qkv": (d.heads + 2 * d.kv_heads) * d.width,
                 "part": d.heads * chunks * (d.width + 2), "att": d.heads * d.width,
                 "mlp": d.inner}
        out = {name: Tensor(ctx, (n,)) for name, n in sizes.items()}
        out["count"] = Tensor.zeros(ctx, (d.heads,), "uint32")
        out["sync"] = Tensor.zeros(ctx, (2,), "uint64")
        return out

    def launch(self, embed, scratch, tokens, pos, table, table_scale, blocks, tables, eps,
               scales=None, spins=SPINS, clock=None, pos_table=None):
        """One launch of ``blocks`` (at most ``max_blocks``), each a dict of BLOCK_TENSORS
        (absent norm biases, scales, biases and gate: None or missing; ``keys`` and
        ``values`` its caches): each block's tensor lies in the buffer of the first block's
        (the Net's parameters). ``embed``: the first block is the decoder's first (its
        residual is the token's row of ``table``, ``table_scale`` its rows' scales or None,
        plus the position's row of ``pos_table`` with ``pos_embed``); ``tables`` (cos, sin;
        None without rotary); ``scales`` each block's attention scale (None: 1 / sqrt(width));
        ``clock``: with ``timing``, uint64 (blocks, groups, 16) the phases' clocks go to."""
        if not 1 <= len(blocks) <= self.max_blocks:
            raise ValueError("DecoderLayerOps: %d blocks a launch (1 to %d)"
                             % (len(blocks), self.max_blocks))
        absent = scratch["x"]  # (a valid buffer for an absent tensor; never read)
        first = [blocks[0].get(k) for k in BLOCK_TENSORS]
        deltas = np.zeros((len(blocks), len(BLOCK_TENSORS)), np.int64)
        for b, block in enumerate(blocks):
            name = misplaced(blocks[0], block)
            if name is not None:
                t0 = blocks[0].get(name)
                raise ValueError("DecoderLayerOps: block %d's %s is not in the first block's "
                                 "buffer as %s" % (b, name, None if t0 is None else t0.dtype))
            for k, name in enumerate(BLOCK_TENSORS):
                if first[k] is not None:
                    deltas[b, k] = block[name].offset - first[k].offset
        default = 1.0 / math.sqrt(self.dims.width)
        scales = np.array([default if s is None else s
                           for s in (scales or [None] * len(blocks))], np.float32)
        mf = cl.mem_flags
        # (buffers of their own: the launch holds them)
        deltas_buf, scales_buf = (cl.Buffer(self.ctx.cl_context, mf.READ_ONLY | mf.COPY_HOST_PTR,
                                            hostbuf=a) for a in (deltas, scales))
        s = scratch
        tables = tables or (None, None)

        def t(v):
            return absent if v is None else v
        args = [tokens, pos, s["x"].buffer, t(table), t(table_scale), t(pos_table)] + \
            [t(v) for v in first] + \
            [deltas_buf, scales_buf, np.uint32(len(blocks)), t(tables[0]), t(tables[1]),
             s["qkv"].buffer, s["part"].buffer, s["count"].buffer, s["att"].buffer,
             s["mlp"].buffer, s["sync"].buffer, np.uint32(spins), np.float32(eps)] + \
            ([clock.buffer] if self.params["TIMING"] else [])
        return program.Launch(self.program(embed), "decoder_layer",
                              (self.groups * self.threads,), (self.threads,), args)
