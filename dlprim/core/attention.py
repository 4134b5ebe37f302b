"""Fused scaled dot-product attention, forward and backward:
``O = softmax(scale Q K^T + mask) V`` without storing the L x S score matrix, so memory
grows linearly with the sequence length.

Tensors are contiguous. ``layout="nhld"`` (the default): q (B, L, D), k (B, S, D), v (B,
S, DV), o (B, L, DV) and the row statistics stats (B, L, 2), with B = batch * heads.
``"nlhd"``: the heads of a position side by side, q (N, L, H, D), k (N, S, H, D), v (N,
S, H, DV), o (N, L, H, DV), stats (N, L, H, 2) -- a Linear's output split into heads by a
reshape alone, no transposes. ``"packed"``: q, k and v interleaved as one (N, L, 3, H, D)
tensor (a single Linear's qkv output; self-attention, S = L, DV = D), given as q with k
and v None, its gradient likewise as dq; o (N, L, H, D), stats (N, L, H, 2). The mask is
additive (a boolean mask becomes 0 / -inf first), read through element strides over
(batch, head, L, S), 0 where it broadcasts; ``causal`` drops key j > query i. A query row
whose keys are all masked (-inf) gives zeros and no gradient (PyTorch's safe softmax).
Scores round as the unfused ``fl(fl(scale q.k) + mask)``, so a row hidden whole by a
large finite mask (float32's lowest value, as PyTorch's and HuggingFace's exporters
write causal and padding masks) has equal scores and weighs every key alike, as eager
PyTorch and onnxruntime do. The row statistics are the scores' maximum m and log l,
l = sum_j exp(s_j - m), kept apart (not as one log-sum-exp m + log l, which rounds to m
where m is that large): the backward recomputes each probability exp(s - m - log l) from
them, ``dq`` walking the keys per query row and ``dk``/``dv`` the queries per key row, so
no atomics are needed.

Storage: q, k, v, o and the gradients dout, dq, dk, dv are ``dtype`` (float32, float16 or
bfloat16), the mask ``mask_dtype``. 16-bit storage is only storage: every load widens to
float32 and every store rounds to nearest even, so scores, softmax and sums are float32
as with float32 tensors; stats and delta, the kernels' own row statistics, are float32
always (the delta pass reads dout and o as stored and sums in float32).

Four kernel families compute it. ``attention_mma.cl`` ("mma": the same blocks as products
of NVIDIA's tensor cores, a warp's mma.sync on 16-bit operands with float32 sums, the
weights P and dS rounded to the storage's 16 bits between products) is the choice for
float16 and bfloat16 storage where the device passes the tensor-core probe
(``gemm.tensor_cores``) and the widths are multiples of 16 up to ``MMA_MAX_WIDTH``. Where
the device also runs Hopper's warpgroup products (``gemm.warpgroup_products``) and both
widths are multiples of 64, its passes take them instead (the warpgroup form,
``wgmma_blocks``): a warpgroup of four warps owns 64 rows and the other side's blocks are
read by the tensor cores in place. ``attention_tiles.cl`` (FlashAttention-2's blocks: each
work-group multiplies blocks of rows staged in local memory, each work item a register
tile) needs widths that are multiples of 4 and blocks that fit local memory; it is the
choice on other GPUs and for float32. ``attention.cl`` (one row per work item) takes any
width and is the choice on CPUs for what "gemm" does not take, where a work-group's items
run as vector lanes of one core and the row form beat the tiles (docs/benchmarks.md).
"gemm" stores the scores: S = scale Q K^T and O = P V (and the backward's five products)
on ``Gemm``, the softmax, the dropout factors and the gradient row by row
(``attention_gemm.cl``), in a float32 scratch of two (B, L, S) arrays
(``workspace_bytes``); it is the choice on CPUs in float32 while one such array stays
within ``GEMM_SCORES_MAX_BYTES``: there the products run at GEMM speed, 4x the row
kernel's at GPT-sized heads. In the "nlhd" and "packed" layouts it runs a product per
head.

A forward pass over a few query rows a batch row (at most ``SPLIT_MAX_ROWS``: a decoder's
step, one token or the G query heads of a key/value head) gives the block kernels one
work-group per batch row, each walking every key alone. On GPUs it runs
``attention_split.cl`` instead ("split"): the keys are divided into chunks, enough for
about two work-groups per compute unit, each work-group (chunk, batch row) writes its
rows' partial softmax (m, l and unnormalised sums) to the workspace, and a second kernel
merges them (one chunk: the first writes o itself; on NVIDIA GPUs the last work-group of
a batch row merges them in the first kernel's launch, ``merges_in_launch``). Keys the mask hides (a cache's
positions past a sequence's length) weigh exactly nothing whatever they hold, and blocks
of them are not read (the other families multiply a hidden NaN by 0, as eager PyTorch). It writes the same
statistics, so the backward pass is the other families'; with dropout the block kernels
keep the forward.

With ``dropout`` p > 0 each attention weight is dropped with probability p and the rest
scaled by 1 / (1 - p); the mask is a function of (seed, offset) and the weight's place
(Philox, as ``core/random.py``; one draw of four words serves four keys of a query row),
so the backward pass recomputes it rather than storing an L x S mask. The tiled kernels
draw a block's factors together into local memory, each draw used whole. A step uses
``counters()`` values of the stream from its offset.
"""
import math

import numpy as np
import pyopencl as cl

from ..dtypes import HALF_TYPES, as_dtype, cl_type, dtype_name
from ..kernels import program
from ..tensor import Tensor
from ..utils import round_up
from .copy import fill_launches
from .gemm import Gemm, inline_ptx, memo_probe, tensor_cores, warpgroup_products
from .pointwise import pointwise_reduce_launches

__all__ = ["AttentionOps", "tile_blocks", "mma_blocks", "wgmma_blocks", "split_plan",
           "native_exp2_is_accurate", "LAYOUTS", "STORAGES"]

LAYOUTS = ("nhld", "nlhd", "packed")
_F32 = np.dtype(np.float32)
STORAGES = (_F32,) + HALF_TYPES  # of q, k, v and their kin, and of the mask

# (BQ, BK, TY) per pass, best first; TX is the first of 8, 16, 4 that divides both widths
# and keeps the register tiles within _MAX_TILE floats
# (measured on an H100 at vit_b_16's and a 4096-long shape, D = 64: docs/benchmarks.md)
BLOCKS = {"forward": ((64, 32, 8), (64, 32, 16), (32, 32, 8), (32, 16, 8), (16, 16, 4)),
          "dq": ((64, 16, 8), (32, 32, 8), (32, 16, 8), (16, 16, 4)),
          "dkdv": ((32, 32, 8), (32, 16, 8), (16, 16, 4))}
_MAX_TILE = 96

# the "mma" family (attention_mma.cl): warps of a work-group, and the rows of the other
# side's blocks per pass, by the wider of D and DV (its register tiles grow with both)
MMA_WARPS = 4
MMA_MAX_WIDTH = 128


def mma_blocks(d, dv):
    """The blocks of attention_mma.cl for widths d, dv: {pass: {WARPS, MW, BQ, BK}}, or
    None where it does not take them (widths multiples of 16, at most MMA_MAX_WIDTH)."""
    if d % 16 or dv % 16 or max(d, dv) > MMA_MAX_WIDTH:
        return None
    # two stages of the other side's blocks in local memory: 2 x 64 rows of 64 + 8 (or
    # 2 x 32 of 128 + 8) 16-bit values each for the two operands, 36 KiB. Two tiles of 16
    # rows per warp (MW) halve the local-memory reads per product, but the backward's
    # register tiles then spill at width 128 (D = 128's dK/dV with MW = 2: 18.3 ms against
    # 2.5). Measured on an H200 at B = 32 rows of 4096 (docs/benchmarks.md), each pass
    # over WARPS 2-8, MW 1-2 and the other side 16-64 rows; the best of each.
    if max(d, dv) <= 64:
        return {"forward": dict(WARPS=MMA_WARPS, MW=2, BQ=128, BK=64),
                "dq": dict(WARPS=MMA_WARPS, MW=2, BQ=128, BK=16),
                "dkdv": dict(WARPS=MMA_WARPS, MW=1, BQ=64, BK=64)}
    return {"forward": dict(WARPS=MMA_WARPS, MW=1, BQ=64, BK=32),
            "dq": dict(WARPS=MMA_WARPS, MW=1, BQ=64, BK=32),
            "dkdv": dict(WARPS=MMA_WARPS, MW=1, BQ=32, BK=64)}


# the passes that run on Hopper's warpgroup products where the device takes them
# (attention_mma.cl's WGMMA), by the wider of D and DV (both multiples of 64): warpgroups
# of 64 own rows per work-group and the other side's rows per block (BK: keys of the
# forward and dq; BQ: queries of dkdv)
# (measured on an H200 at B = 32 rows of 4096, each pass over 1-3 warpgroups and the
# other side's 32-192 rows, causal and not: docs/benchmarks.md)
# OVERLAP: the forward's scores of one key block issued beside the previous one's P V
# (at D = 64 it takes 198 registers a work-item against 168, two work-groups a compute
# unit instead of three, and was slower: docs/benchmarks.md)
WGMMA_BLOCKS = {64: {"forward": dict(WARPGROUPS=1, BK=128),
                     "dq": dict(WARPGROUPS=1, BK=128), "dkdv": dict(WARPGROUPS=1, BQ=128)},
                128: {"forward": dict(WARPGROUPS=2, BK=128, OVERLAP=1),
                      "dq": dict(WARPGROUPS=2, BK=64),
                      "dkdv": dict(WARPGROUPS=2, BQ=64)}}


def wgmma_blocks(d, dv):
    """{pass: {WARPGROUPS, BK or BQ}} of attention_mma.cl's warpgroup form for widths d,
    dv, or None where it does not take them."""
    return WGMMA_BLOCKS.get(max(d, dv)) if d % 64 == 0 and dv % 64 == 0 else None


def _mma_local_bytes(pass_, d, dv, b):
    """Local memory of a kernel of attention_mma.cl: two stages of the other side's two
    operands (rows of W + 8 16-bit values; the own block staged there first), the row
    statistics (dkdv)."""
    own, other = (b["BK"], b["BQ"]) if pass_ == "dkdv" else (b["BQ"], b["BK"])
    return 2 * max(2 * other, own) * (d + 8 + dv + 8) + (12 * b["BQ"] if pass_ == "dkdv" else 0)


def _checked_mma_blocks(facts, d, dv, given):
    """``given`` ({pass: {WARPS, MW, BQ, BK}}, for some passes), each checked against what
    attention_mma.cl takes, else a ValueError naming it."""
    for pass_, b in (given or {}).items():
        if pass_ not in BLOCKS or set(b) != {"WARPS", "MW", "BQ", "BK"}:
            raise ValueError("attention: the mma kernels' blocks are {pass: {WARPS, MW, BQ, "
                             "BK}} for passes %s, got %r for %r" % (", ".join(BLOCKS), b, pass_))
        own, other = (b["BK"], b["BQ"]) if pass_ == "dkdv" else (b["BQ"], b["BK"])
        if min(b["WARPS"], b["MW"]) < 1 or own != 16 * b["MW"] * b["WARPS"] or other % 16 \
                or other < 16 or 32 * b["WARPS"] > facts.max_work_group or \
                _mma_local_bytes(pass_, d, dv, b) > facts.local_mem:
            raise ValueError("attention: blocks %r of the %s pass do not fit the mma kernels "
                             "(MW tiles of 16 rows per warp on its own side, the other side a "
                             "multiple of 16 rows, within local memory)" % (b, pass_))
    return given or {}


def _mma_precision(dtype):
    """The tensor-core precision of 16-bit storage ``dtype`` ("fp16" or "bf16")."""
    return "fp16" if dtype == HALF_TYPES[0] else "bf16"


# the "gemm" family's forward over a cache's positions (CPUs): at most this many query
# rows a batch row run attention_gemm_cached, a pass over only the keys each row sees
# (a decode step: one token, or the G query heads of a key/value head); more rows keep
# the products, which share each key among the rows
CACHED_MAX_ROWS = 16

# the "split" forward (attention_split.cl): query rows a batch row it takes at most, and
# the work-groups it aims at per compute unit (its chunks of keys fill the device where
# the batch rows alone do not)
SPLIT_MAX_ROWS = 16
SPLIT_GROUPS_PER_UNIT = 2


def merges_in_launch(facts):
    """Whether the split forward's last work-group of a batch row merges the chunks in the
    partial kernel's own launch (``MERGE``: a count per row and a device-wide fence) instead
    of a second launch: NVIDIA GPUs, where a launch costs 5-9 us of host and 4-5 of device
    time (a decoder's step has one such merge a layer; TinyLlama 22). Elsewhere the
    ordering of one work-group's global writes before another's reads within a launch is
    not promised by OpenCL 1.2, so the second launch stays."""
    return facts.vendor_id == "nvidia"


def _split_local_bytes(qr, lanes, bk, d, dv):
    """Local memory of attention_split_partial: q rows, the key-then-value block, the
    weights, a float per work item and a flag."""
    return 4 * (qr * (d + 4) + bk * (max(d, dv) + 4) + qr * (bk + 4) + qr * lanes + 1)


def split_plan(facts, batch, lq, lk, d, dv):
    """The split forward's shape for ``batch`` rows of lq queries over lk keys on a device:
    {QR (query rows held, a power of two >= lq), LANES (work items per row), BK (keys a
    block), chunks, span (keys a chunk)}; None where it does not take them (more than
    SPLIT_MAX_ROWS queries, widths not multiples of 4, blocks beyond local memory)."""
    if not 1 <= lq <= SPLIT_MAX_ROWS or lk < 1 or d % 4 or dv % 4:
        return None
    qr = 1 << (lq - 1).bit_length()
    lanes = max(16, 64 // qr)  # at least 64 items a work-group, 16 a row
    fits = [bk for bk in (64, 32, 16) if bk >= lanes and qr * lanes <= facts.max_work_group
            and _split_local_bytes(qr, lanes, bk, d, dv) <= facts.local_mem]
    if not fits:
        return None
    bk = fits[0]
    wanted = -(-SPLIT_GROUPS_PER_UNIT * facts.compute_units // max(batch, 1))
    chunks = max(1, min(-(-lk // bk), wanted))
    span = -(-(-(-lk // chunks)) // bk) * bk  # whole blocks a chunk
    return dict(QR=qr, LANES=lanes, BK=bk, chunks=-(-lk // span), span=span)


# the "gemm" family's scores, one (B, L, S) float32 array (the scratch holds two): the
# largest that CPUs compute that way (the row kernels never store the scores)
GEMM_SCORES_MAX_BYTES = 32 << 20

# native_exp2 is taken (FAST_EXP) where its relative error stays under this: GPUs'
# hardware exp2 is near 2^-22; Intel's CPU runtime's is 7.5e-5, which shows in the outputs
NATIVE_EXP2_MAX_ERROR = 1e-6
_EXP2_PROBE = """
__kernel void probe(__global float *y, __global const float *x)
{
    y[get_global_id(0)] = native_exp2(x[get_global_id(0)]);
}
"""


def native_exp2_is_accurate(ctx):
    """Whether the device's ``native_exp2`` is within NATIVE_EXP2_MAX_ERROR of 2^x over
    the exponents a softmax takes (-30..0); asked once per context."""
    return memo_probe(ctx, "_native_exp2", "float32", _probe_native_exp2)


def _probe_native_exp2(ctx, precision):
    x = np.linspace(-30.0, 0.0, 4096, dtype=np.float32)
    built = cl.Program(ctx.cl_context, _EXP2_PROBE).build()
    mf = cl.mem_flags
    xb = cl.Buffer(ctx.cl_context, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=x)
    yb = cl.Buffer(ctx.cl_context, mf.WRITE_ONLY, x.nbytes)
    built.probe(ctx.queue, x.shape, None, yb, xb)
    y = np.empty_like(x)
    cl.enqueue_copy(ctx.queue, y, yb)
    exact = np.exp2(x.astype(np.float64))
    return bool(np.max(np.abs(y - exact) / exact) <= NATIVE_EXP2_MAX_ERROR)


def _local_bytes(pass_, d, dv, bq, bk, tx):
    """Local memory of a kernel of attention_tiles.cl for these blocks (its arrays)."""
    dp_, vp = d + 4, dv + 4
    if pass_ == "forward":  # q block, k-then-v block, weights, row maxima
        return 4 * (bq * dp_ + bk * max(dp_, vp) + bq * (bk + 4) + bq * tx)
    if pass_ == "dq":  # q and dO blocks, k and v blocks, dS
        return 4 * (bq * (dp_ + vp) + bk * (dp_ + vp) + bq * (bk + 4))
    # k and v blocks, q and dO blocks, the statistics (m, log l) and delta, P^T and dS^T
    return 4 * (bk * (dp_ + vp) + bq * (dp_ + vp) + 3 * bq + 2 * bk * (bq + 4))


def _tile_floats(pass_, d, dv, bq, bk, tx, ty):
    """Floats of a work item's register tiles (accumulators and scores)."""
    if pass_ == "forward":
        return bq // ty * (dv // tx + bk // tx)
    if pass_ == "dq":
        return bq // ty * (d // tx + 2 * (bk // tx))
    return bk // ty * (d // tx + dv // tx + 2 * (bq // tx))


def _float_type(what, dtype):
    """``dtype`` as one of STORAGES, else a ValueError naming ``what``."""
    try:
        dt = as_dtype(dtype)
    except TypeError:
        dt = None
    if dt not in STORAGES:
        raise ValueError("attention: %s must be float32, float16 or bfloat16, got %s"
                         % (what, dtype_name(dt) if dt is not None else repr(dtype)))
    return dt


def tile_blocks(facts, d, dv):
    """The blocks of attention_tiles.cl for widths d, dv on a device: {pass: {BQ, BK, TX,
    TY}} for "forward", "dq" and "dkdv", or None where some pass has none that fits
    (widths not multiples of 4, or too wide for local memory)."""
    out = {}
    for pass_, table in BLOCKS.items():
        for tx in (8, 16, 4):
            if d % tx or dv % tx:
                continue
            fits = [(bq, bk, ty) for bq, bk, ty in table
                    if bk % tx == 0 and bq % tx == 0 and tx * ty <= facts.max_work_group
                    and _local_bytes(pass_, d, dv, bq, bk, tx) <= facts.local_mem
                    and _tile_floats(pass_, d, dv, bq, bk, tx, ty) <= _MAX_TILE]
            if fits:
                bq, bk, ty = fits[0]
                out[pass_] = dict(BQ=bq, BK=bk, TX=tx, TY=ty)
                break
        else:
            return None
    return out


def _checked_blocks(facts, d, dv, given):
    """``given`` ({pass: {BQ, BK, TX, TY}}, for some passes; None: none), each checked
    against what attention_tiles.cl takes on this device, else a ValueError naming it."""
    for pass_, b in (given or {}).items():
        if pass_ not in BLOCKS or set(b) != {"BQ", "BK", "TX", "TY"}:
            raise ValueError("attention: blocks are {pass: {BQ, BK, TX, TY}} for passes %s, "
                             "got %r for %r" % (", ".join(BLOCKS), b, pass_))
        bq, bk, tx, ty = (int(b[k]) for k in ("BQ", "BK", "TX", "TY"))
        if min(bq, bk, tx, ty) < 1 or d % tx or dv % tx or \
                any(x % tx or x % ty or x % 4 for x in (bq, bk)) or \
                tx * ty > facts.max_work_group or \
                _local_bytes(pass_, d, dv, bq, bk, tx) > facts.local_mem:
            raise ValueError("attention: blocks %r of the %s pass do not fit D=%d DV=%d on "
                             "this device (BQ, BK multiples of TX, TY and 4; D, DV of TX; "
                             "TX x TY items and the blocks' local memory within its limits)"
                             % (b, pass_, d, dv))
    return given or {}


class AttentionOps:
    """Attention over ``batch`` = batch * heads rows of q (L, D), k (S, D), v (S, DV).
    ``blocks`` ({pass: {BQ, BK, TX, TY}}) overrides the tiled kernels' blocks of the
    table (``tile_blocks``) for some passes (benchmarks/attention_blocks.py); for the
    mma kernels, {pass: {WARPS, MW, BQ, BK}} overrides ``mma_blocks``'."""

    def __init__(self, ctx, batch, lq, lk, d, dv, heads=1, causal=False, mask=False, dropout=0.0,
                 kernels=None, layout="nhld", dtype=np.float32, mask_dtype=np.float32,
                 blocks=None, positions=0, pos_dtype=np.int64, window=0):
        self.ctx = ctx
        self.dtype = _float_type("dtype", dtype)
        self.mask_dtype = _float_type("mask_dtype", mask_dtype)
        if layout not in LAYOUTS:
            raise ValueError("attention: layout must be one of %s, got %r"
                             % (", ".join(LAYOUTS), layout))
        self.layout = layout
        if isinstance(dropout, bool) or not isinstance(dropout, (int, float)) or not 0 <= dropout < 1:
            raise ValueError("attention: dropout must be a probability in [0, 1), got %r"
                             % (dropout,))
        self.dropout = float(dropout)
        self.batch, self.lq, self.lk, self.d, self.dv = (int(v) for v in (batch, lq, lk, d, dv))
        self.heads, self.causal, self.mask = int(heads), bool(causal), bool(mask)
        if min(self.d, self.dv) < 1:
            raise ValueError("attention: head widths must be positive, got D=%d DV=%d"
                             % (self.d, self.dv))
        if self.batch % max(self.heads, 1):
            raise ValueError("attention: %d rows are not a whole number of %d heads"
                             % (self.batch, self.heads))
        if layout == "packed" and (self.lq != self.lk or self.d != self.dv):
            raise ValueError("attention: the packed layout is self-attention: L = S and D = DV, "
                             "got L=%d S=%d D=%d DV=%d" % (self.lq, self.lk, self.d, self.dv))
        self.n = self.batch // max(self.heads, 1)
        # a key/value cache's positions (``launches``' ``positions``): query row i is the
        # pass's token i % positions, at the cached count of its sequence plus that
        self.positions, self.pos_dtype = self._checked_positions(positions, pos_dtype)
        # a sliding window (Mistral's): a position's query sees the ``window`` keys that end
        # at it, not those before (0: every key up to it)
        if isinstance(window, bool) or not isinstance(window, (int, np.integer)) or \
                window < 0 or (window and not self.positions):
            raise ValueError("attention: window must be 0 (none) or a positive number of keys, "
                             "with a cache's positions, got %r" % (window,))
        self.window = int(window)
        self.cached = False  # the gemm family's one-pass forward (_gemm_setup)
        flags = dict(MASK=self.mask, CAUSAL=self.causal, DROPOUT=self.dropout > 0,
                     LAYOUT=layout, HEADS=self.heads if layout != "nhld" else 0,
                     ACT_T=cl_type(self.dtype), MASK_T=cl_type(self.mask_dtype),
                     POSITIONS=bool(self.positions), WINDOW=self.window,
                     POS_T="long" if self.pos_dtype == np.int64 else "int")
        if kernels not in (None, "rows", "tiles", "gemm", "mma", "split"):
            raise ValueError("attention: kernels must be None (the device's choice), 'rows', "
                             "'tiles', 'gemm', 'mma' or 'split' (the forward; the backward "
                             "the device's choice), got %r" % (kernels,))
        self.split = self._split_choice(kernels, flags)
        if kernels == "split":
            kernels = None
        # (the tensor-core probe, a kernel build on first use, only where mma may be chosen)
        mma_takes = (kernels in (None, "mma") and self.dtype in HALF_TYPES
                     and mma_blocks(self.d, self.dv) is not None
                     and tensor_cores(ctx, _mma_precision(self.dtype)))
        if kernels == "mma" and not mma_takes:
            raise ValueError("attention: the mma kernels take float16 or bfloat16, widths "
                             "that are multiples of 16 up to %d, and a device with tensor "
                             "cores, got %s D=%d DV=%d" % (MMA_MAX_WIDTH, dtype_name(self.dtype),
                                                          self.d, self.dv))
        if kernels is None and mma_takes:
            kernels = "mma"
        # (16-bit q, k, v on CPUs too: their products read them through float32 copies, where
        # the rows kernels took a GPT-2 decode step's attention 1.1 ms a layer against
        # 0.06 on a 2-core EPYC)
        gemm_takes = ((self.dtype == _F32 or ctx.facts.is_cpu)
                      and 4 * self.batch * self.lq * self.lk <= GEMM_SCORES_MAX_BYTES)
        if kernels == "gemm" and not gemm_takes:
            raise ValueError("attention: the gemm kernels take float32 (any storage on CPUs) "
                             "and (B, L, S) scores of at most %d bytes" % GEMM_SCORES_MAX_BYTES)
        if kernels is None and ctx.facts.is_cpu and gemm_takes:
            kernels = "gemm"
        # (the split forward's partials; the gemm family's scores take the max of both)
        self.workspace_bytes, self._scratch = self._split_bytes(), None
        blocks, blocks_given = tile_blocks(ctx.facts, self.d, self.dv), blocks
        if kernels == "tiles" and blocks is None:
            raise ValueError("attention: the tiled kernels need widths that are multiples of "
                             "4 and fit local memory, got D=%d DV=%d" % (self.d, self.dv))
        if kernels is None:
            kernels = "rows" if ctx.facts.is_cpu or blocks is None else "tiles"
        self.kernels = kernels
        if kernels == "gemm":
            self._gemm_setup(flags)
            return
        blocks_flags = self._fast_exp(flags)
        if kernels == "mma":
            self.blocks = dict(mma_blocks(self.d, self.dv),
                               **_checked_mma_blocks(ctx.facts, self.d, self.dv, blocks_given))
            # passes given blocks keep the warp form they name
            wg = wgmma_blocks(self.d, self.dv) or {}
            self.warpgroup = {p: b for p, b in wg.items() if p not in (blocks_given or {})}
            if self.warpgroup and not warpgroup_products(ctx, _mma_precision(self.dtype)):
                self.warpgroup = {}
            self._flags = blocks_flags
            self.programs = {}
            return
        if kernels == "tiles":
            self.blocks = dict(blocks, **_checked_blocks(ctx.facts, self.d, self.dv, blocks_given))
            self.programs = {
                pass_: program.get(ctx, "attention_tiles", PASS=pass_, D=self.d, DV=self.dv,
                                   **self.blocks[pass_], **blocks_flags)
                for pass_ in ("forward", "dq", "dkdv")}
            return
        facts = ctx.facts
        # a tile of T rows of k and v (or of q, dO, m, log l and delta) in local memory, T
        # the work-group
        t = 64 if not facts.is_cpu else 16
        while t > 8 and 4 * t * (self.d + self.dv + 3) > facts.local_mem // 2:
            t //= 2
        self.tile = min(t, facts.max_work_group)
        one = program.get(ctx, "attention", D=self.d, DV=self.dv, T=self.tile, **flags)
        self.programs = {"forward": one, "dq": one, "dkdv": one}

    def _split_choice(self, kernels, flags):
        """The split forward's plan (``split_plan``) and program where it runs, else None:
        asked for (``kernels="split"``, else a ValueError), or the device's choice on GPUs
        without dropout."""
        ctx = self.ctx
        plan = split_plan(ctx.facts, self.batch, self.lq, self.lk, self.d, self.dv)
        if kernels == "split":
            if plan is None or self.dropout:
                raise ValueError("attention: the split forward takes 1 to %d query rows, "
                                 "widths that are multiples of 4 and no dropout, got L=%d "
                                 "D=%d DV=%d dropout=%g" % (SPLIT_MAX_ROWS, self.lq, self.d,
                                                            self.dv, self.dropout))
        elif kernels is not None or ctx.facts.is_cpu or plan is None or self.dropout:
            return None
        plan["merge"] = plan["chunks"] > 1 and merges_in_launch(ctx.facts)
        ptx = plan["merge"] and inline_ptx(ctx)  # (membar.gl; else mem_fence)
        plan["program"] = program.get(ctx, "attention_split", D=self.d, DV=self.dv,
                                      QR=plan["QR"], LANES=plan["LANES"], BK=plan["BK"],
                                      FINAL=plan["chunks"] == 1, MERGE=int(plan["merge"]),
                                      PTX=int(ptx), **self._fast_exp(flags))
        # (MERGE's counts, one a batch row: zero between launches, each launch's last
        # work-group of a row setting its count back)
        plan["done"] = Tensor.zeros(ctx, (self.batch,), "uint32") if plan["merge"] else None
        return plan

    def _fast_exp(self, flags):
        """``flags`` with FAST_EXP: the blocks' softmax on the device's native exp2 where
        it is accurate (mma, tiles, split)."""
        ctx = self.ctx
        return dict(flags, FAST_EXP=not ctx.facts.is_cpu and native_exp2_is_accurate(ctx))

    def _split_bytes(self):
        """The split forward's partial results in the workspace (none for one chunk)."""
        p = self.split
        if p is None or p["chunks"] == 1:
            return 0
        return 4 * self.batch * p["chunks"] * self.lq * (self.dv + 2)

    def _split_forward(self, qkv, o, stats, scale, masks, workspace):
        p = self.split
        nt, prog = p["QR"] * p["LANES"], p["program"]
        final = p["chunks"] == 1
        # (one chunk writes no partials: stats stands in for the unused argument)
        part = stats if final else self._workspace(workspace).view(
            (self._split_bytes() // 4,))
        head = [np.uint32(self.lq), np.uint32(self.lk), np.float32(scale)] + qkv
        done = [p["done"]] if p["merge"] else []
        out = [program.Launch(prog, "attention_split_partial", (p["chunks"] * nt, self.batch),
                              (nt, 1), head + [np.uint32(p["span"]), part, o, stats] + done
                              + masks)]
        if not final and not p["merge"]:
            out.append(program.Launch(prog, "attention_split_combine",
                                      (round_up(self.lq * self.dv, 64), self.batch), (64, 1),
                                      [np.uint32(self.lq), np.uint32(p["chunks"]), part, o,
                                       stats]))
        return out

    def counters(self):
        """Philox counters one step's dropout mask uses (one per four keys of a query row:
        a draw is four words)."""
        return self.batch * self.lq * (-(-self.lk // 4))

    def _drop_args(self, seed, offset):
        if not self.dropout:
            return []
        threshold = min(int(round(self.dropout * 2.0 ** 32)), 2 ** 32 - 1)
        return [np.uint32(threshold), np.float32(1.0 / (1.0 - self.dropout)),
                np.uint64(seed), np.uint64(offset)]

    @staticmethod
    def set_dropout_counter(launch, seed, offset):
        """Point a launch of these kernels built with dropout at another (seed, offset)."""
        n = len(launch.args)
        launch.set_arg(n - 2, np.uint64(seed))
        launch.set_arg(n - 1, np.uint64(offset))

    def _check(self, what, t, shape, dtype=None):
        """``t`` is a Tensor of ``shape`` stored as ``dtype`` (default: the storage of q,
        k, v and their kin)."""
        dtype = self.dtype if dtype is None else dtype
        if not isinstance(t, Tensor) or t.shape != shape or t.dtype != dtype:
            raise ValueError("attention: %s is %r, expected %s %s"
                             % (what, t, dtype_name(dtype), shape))

    def _shape(self, length, width):
        """The shape of q, k, v, o or a gradient in this layout."""
        if self.layout == "nhld":
            return (self.batch, length, width)
        return (self.n, length, self.heads, width)

    def _row_shape(self):
        """The shape of a per-query-row tensor (delta) in this layout."""
        return (self.batch, self.lq) if self.layout == "nhld" else (self.n, self.lq, self.heads)

    @property
    def stats_shape(self):
        """The shape of the forward's row statistics, float32: (m, log l) per query row."""
        return self._row_shape() + (2,)

    def _inputs(self, q, k, v, names):
        """q, k and v as checked kernel arguments; in the packed layout the three parts of
        q (k and v must be None)."""
        if self.layout != "packed":
            for what, t, shape in zip(names, (q, k, v), (self._shape(self.lq, self.d),
                                                         self._shape(self.lk, self.d),
                                                         self._shape(self.lk, self.dv))):
                self._check(what, t, shape)
            return [q, k, v]
        if k is not None or v is not None:
            raise ValueError("attention: the packed layout takes q, k and v as one tensor "
                             "(given as %s, with %s and %s None)" % names)
        self._check(names[0], q, (self.n, self.lq, 3, self.heads, self.d))
        part = self.heads * self.d
        # the kernels read each part through its offset and the layout's row stride
        return [q.view((q.size - j * part,), j * part) for j in range(3)]

    def _checked_positions(self, positions, pos_dtype):
        if isinstance(positions, bool) or not isinstance(positions, (int, np.integer)) or \
                positions < 0 or (positions and self.lq % positions):
            raise ValueError("attention: positions must be 0 (none) or the pass's tokens, "
                             "a divisor of L=%d (grouped query heads: G x T rows), got %r"
                             % (self.lq, positions))
        pos_dtype = np.dtype(pos_dtype)
        if pos_dtype not in (np.dtype(np.int32), np.dtype(np.int64)):
            raise ValueError("attention: the positions are int32 or int64, got %s"
                             % dtype_name(pos_dtype))
        return int(positions), pos_dtype

    def _mask_args(self, mask, strides, positions=None):
        out = []
        if self.mask:
            if mask is None or strides is None or len(strides) != 4:
                raise ValueError("attention: built with a mask; give it and its 4 strides "
                                 "(batch, head, query, key)")
            if not isinstance(mask, Tensor) or mask.dtype != self.mask_dtype:
                raise ValueError("attention: the mask is %r, expected %s"
                                 % (mask, dtype_name(self.mask_dtype)))
            out = [mask] + [np.uint64(s) for s in strides] + [np.uint32(self.heads)]
        if not self.positions:
            if positions is not None:
                raise ValueError("attention: positions given to an op built without them")
            return out
        if not isinstance(positions, Tensor) or positions.dtype != self.pos_dtype or \
                positions.size not in (1, self.n):
            raise ValueError("attention: built with a cache's positions; give them as %s of "
                             "1 or N=%d elements, got %r" % (dtype_name(self.pos_dtype), self.n,
                                                             positions))
        return out + [positions, np.uint32(max(self.heads, 1)),
                      np.uint32(positions.size > 1), np.uint32(self.positions)]

    def _launch(self, pass_, rows, block, args):
        """A launch of ``pass_`` over ``rows``: one row per work item, or (tiles) one
        work-group of TX x TY items per ``block`` ("BQ" or "BK") of rows, per batch row."""
        if self.kernels == "mma":
            prog, b = self._mma_program(pass_, args)
            count = -(-max(rows, 1) // b[block])
            return program.Launch(prog, "attention_mma_" + pass_,
                                  (count * 32 * b["WARPS"], self.batch),
                                  (32 * b["WARPS"], 1), args)
        if self.kernels == "tiles":
            b = self.blocks[pass_]
            count = -(-max(rows, 1) // b[block])
            grid = (count * b["TX"], b["TY"], self.batch), (b["TX"], b["TY"], 1)
            name = "attention_tiles_" + pass_
        else:
            grid = (round_up(max(rows, 1), self.tile), self.batch), (self.tile, 1)
            name = "attention_" + pass_
        return program.Launch(self.programs[pass_], name, *grid, args)

    def _mma_program(self, pass_, args):
        """attention_mma.cl's ``pass_`` and its blocks ({WARPS, MW, BQ, BK}), staging with
        16-byte loads where every 16-bit tensor of ``args`` starts on 16 bytes (its rows
        do: widths are multiples of 16); the passes of the warpgroup form take its products."""
        aligned = all(a.offset % 8 == 0 for a in args
                      if isinstance(a, Tensor) and a.dtype == self.dtype)
        wg = self.warpgroup.get(pass_)
        if wg is None:
            b, form = self.blocks[pass_], {}
        else:
            n = wg["WARPGROUPS"]
            b = dict(WARPS=4 * n, MW=1, BQ=64 * n, BK=64 * n)
            b.update((k, v) for k, v in wg.items() if k in ("BQ", "BK"))
            form = dict(WGMMA=n, OVERLAP=wg.get("OVERLAP", 0))
        key = (pass_, aligned)
        if key not in self.programs:
            self.programs[key] = program.get(self.ctx, "attention_mma", PASS=pass_,
                                             D=self.d, DV=self.dv, ALIGNED=aligned,
                                             **b, **form, **self._flags)
        return self.programs[key], b

    def is_own(self, launch):
        """Whether ``launch`` runs one of these attention kernels (not a helper's)."""
        return getattr(launch, "program", None) in self.programs.values()

    def scale_of(self, scale):
        """The score scale used: ``scale``, or 1 / sqrt(D) when it is None."""
        return 1.0 / math.sqrt(self.d) if scale is None else float(scale)

    def launches(self, q, k, v, o, stats, scale=None, mask=None, mask_strides=None, seed=0,
                 offset=0, workspace=None, positions=None):
        """o = attention(q, k, v); stats (``stats_shape``) is kept for the backward pass.
        ``seed`` and ``offset`` choose the dropout mask (when built with dropout).
        ``workspace``: a tensor of at least ``workspace_bytes`` for the "gemm" family's
        scores (None: one of the op's own). ``positions`` (built with them): each
        sequence's cached count before this pass, 1 or N integers read on the device;
        query row i then sees the keys j <= positions[n] + i % T (T the ``positions``
        it was built with)."""
        b, lq, lk = self.batch, self.lq, self.lk
        qkv = self._inputs(q, k, v, ("q", "k", "v"))
        self._check("o", o, self._shape(lq, self.dv))
        self._check("stats", stats, self.stats_shape, _F32)
        if b * lq == 0:
            return []
        masks = self._mask_args(mask, mask_strides, positions)
        if self.split is not None:
            return self._split_forward(qkv, o, stats, self.scale_of(scale), masks, workspace)
        if self.kernels == "gemm":
            return self._gemm_forward(qkv, o, stats, self.scale_of(scale), masks, workspace,
                                      self._drop_args(seed, offset))
        head = [np.uint32(lq), np.uint32(lk), np.float32(self.scale_of(scale))]
        return [self._launch("forward", lq, "BQ", head + qkv + [o, stats] + masks
                             + self._drop_args(seed, offset))]

    def backward_launches(self, q, k, v, o, stats, dout, dq, dk, dv, delta, scale=None,
                          mask=None, mask_strides=None, seed=0, offset=0, workspace=None,
                          positions=None):
        """dq, dk, dv of the attention that gave o and stats, for the output gradient
        dout; ``delta`` is a (B, L) scratch tensor (the rows' dO . O, float32); ``seed`` and
        ``offset`` those of the forward pass; ``workspace`` as ``launches``'."""
        b, lq, lk = self.batch, self.lq, self.lk
        qkv = self._inputs(q, k, v, ("q", "k", "v"))
        grads = self._inputs(dq, dk, dv, ("dq", "dk", "dv"))
        self._check("o", o, self._shape(lq, self.dv))
        self._check("dout", dout, self._shape(lq, self.dv))
        self._check("stats", stats, self.stats_shape, _F32)
        self._check("delta", delta, self._row_shape(), _F32)
        if b * lk and lq == 0:  # no query reads the keys: zero gradients
            return fill_launches(self.ctx, dk, 0.0) + fill_launches(self.ctx, dv, 0.0)
        if b * lq == 0:
            return []
        head = [np.uint32(lq), np.uint32(lk), np.float32(self.scale_of(scale))]
        drops = self._drop_args(seed, offset)
        masks = self._mask_args(mask, mask_strides, positions)
        common = head + qkv + [dout, stats, delta]
        rows = (b * lq, self.dv)
        out = pointwise_reduce_launches(self.ctx, [dout.view(rows), o.view(rows)],
                                         [delta.view((b * lq, 1))], "y0 = x0 * x1;")
        if self.kernels == "gemm":
            return out + self._gemm_backward(qkv, stats, dout, grads, delta,
                                             self.scale_of(scale), masks, workspace, drops)
        out.append(self._launch("dq", lq, "BQ", common + grads[:1] + masks + drops))
        if lk:
            out.append(self._launch("dkdv", lk, "BK", common + grads[1:] + masks + drops))
        return out

    # ----- the "gemm" family
    def _gemm_setup(self, flags):
        b, lq, lk, d, dv = self.batch, self.lq, self.lk, self.d, self.dv
        # a cache's few query rows (a decoder's step): one pass over the keys each row sees
        self.cached = bool(self.positions and not self.dropout and lq <= CACHED_MAX_ROWS
                           and d % 8 == 0 and dv % 8 == 0)
        self.programs = {"gemm": program.get(self.ctx, "attention_gemm", **flags, **(
            dict(CACHED=1, D=d, DV=dv) if self.cached else {}))}
        self.workspace_bytes = max(self.workspace_bytes, 2 * 4 * b * lq * lk)
        # "nhld": one product over all B rows. "nlhd" and "packed" interleave the heads of
        # a position, so no one stride steps from row bh to bh + 1: a product per head,
        # over the N sequences (their matrices L H D apart; over the heads of a sequence
        # instead, D apart, they would interleave, which Gemm refuses as overlapping)
        self._slices, batch = (1, b) if self.layout == "nhld" else (self.heads, self.n)
        g = lambda m, n, k_, **kw: Gemm(self.ctx, m, n, k_, batch=batch, **kw)  # noqa: E731
        # (q, k, v, o and their gradients in the storage dtype; the scores float32)
        t, f = self.dtype, _F32
        into_scores, from_scores = (t, t, f), (f, t, t)
        self._qk = g(lq, lk, d, trans_b=True, dtypes=into_scores)      # S = scale Q K^T
        self._pv = g(lq, dv, lk, dtypes=from_scores)                   # O = P V
        self._dv = g(lk, dv, lq, trans_a=True, dtypes=from_scores)     # dV = P^T dO
        self._dp = g(lq, lk, dv, trans_b=True, dtypes=into_scores)     # dP = dO V^T
        self._dq = g(lq, d, lk, dtypes=from_scores)                    # dQ = dS K
        self._dk = g(lk, d, lq, trans_a=True, dtypes=from_scores)      # dK = dS^T Q

    def _workspace(self, workspace):
        """``workspace`` checked (float32, at least ``workspace_bytes``), or the op's own
        scratch where it is None."""
        if workspace is None:
            if self._scratch is None:
                self._scratch = Tensor(self.ctx, (self.workspace_bytes // 4,),
                                       name="attention scratch")
            workspace = self._scratch
        if workspace.dtype != _F32 or workspace.nbytes < self.workspace_bytes:
            raise ValueError("attention: the workspace is %r, the %s kernels need %d bytes "
                             "of float32" % (workspace, "split" if self.split else "gemm",
                                             self.workspace_bytes))
        return workspace

    def _scores(self, workspace):
        """The two (B, L, S) float32 arrays of the scratch."""
        n = self.batch * self.lq * self.lk
        workspace = self._workspace(workspace)
        return workspace.view((n,)), workspace.view((n,), n)

    def _rows(self, kernel, args):
        """A launch of attention_gemm.cl's ``kernel``: a work item per query row (lq, lk
        its first arguments)."""
        wg = 16
        return program.Launch(self.programs["gemm"], "attention_gemm_" + kernel,
                              (round_up(self.lq, wg), self.batch), (wg, 1),
                              [np.uint32(self.lq), np.uint32(self.lk)] + args)

    def _slice(self, x, i, length, width, packed=False):
        """(view, row stride, batch stride) of slice i of x, a tensor of rows of ``width``
        values, ``length`` of them a batch row: q, k, v, o or a gradient (``packed``: a part
        of the packed layout's qkv, whose rows are 3 H D apart), or, with width None, the
        (B, L, S) scores."""
        if self.layout == "nhld":
            return (x, self.lk, self.lq * self.lk) if width is None else (x, width, length * width)
        if width is None:  # the scores, (B, L, S) contiguous, row bh = n H + h
            ls = self.lq * self.lk
            return x.view((x.size - i * ls,), i * ls), self.lk, self.heads * ls
        row = (3 if packed else 1) * self.heads * width
        return x.view((x.size - i * width,), i * width), row, length * row

    def _products(self, op, a, b, c, alpha=1.0):
        """The launches of ``op`` over every slice; a, b, c: (tensor, length, width,
        packed) as ``_slice`` takes them."""
        out = []
        for i in range(self._slices):
            (x, lda, sa), (y, ldb, sb), (z, ldc, sc) = (self._slice(t[0], i, *t[1:])
                                                       for t in (a, b, c))
            out += op.launches(x, y, z, alpha=alpha, lda=lda, ldb=ldb, ldc=ldc,
                               stride_a=sa, stride_b=sb, stride_c=sc)
        return out

    def _gemm_forward(self, qkv, o, stats, scale, masks, workspace, drops):
        if self.cached:  # (attention_gemm.cl's attention_gemm_cached: no scores stored)
            return [program.Launch(self.programs["gemm"], "attention_gemm_cached",
                                   (self.lq, self.batch), (1, 1),
                                   [np.uint32(self.lq), np.uint32(self.lk), np.float32(scale)]
                                   + list(qkv) + [o, stats] + masks)]
        (q, k, v), (lq, lk, d, dv) = qkv, (self.lq, self.lk, self.d, self.dv)
        packed = self.layout == "packed"
        s, _ = self._scores(workspace)
        scores = (s, lq, None)
        out = self._products(self._qk, (q, lq, d, packed), (k, lk, d, packed), scores, scale)
        out.append(self._rows("softmax", [s, stats] + masks + drops))
        return out + self._products(self._pv, scores, (v, lk, dv, packed), (o, lq, dv))

    def _gemm_backward(self, qkv, stats, dout, grads, delta, scale, masks, workspace, drops):
        """P again (the statistics), dP = dO V^T, then one row pass making dS and the
        weights P keep that dV = (P keep)^T dO reads, then the three products."""
        (q, k, v), (dq, dk, dv) = qkv, grads
        lq, lk, d, dvw = self.lq, self.lk, self.d, self.dv
        packed = self.layout == "packed"
        p, dp = self._scores(workspace)
        ps, dps = (p, lq, None), (dp, lq, None)
        out = self._products(self._qk, (q, lq, d, packed), (k, lk, d, packed), ps, scale)
        out.append(self._rows("probs", [p, stats] + masks + drops))
        out += self._products(self._dp, (dout, lq, dvw), (v, lk, dvw, packed), dps)
        out.append(self._rows("dscores", [np.float32(scale), p, dp, delta] + drops))
        out += self._products(self._dv, ps, (dout, lq, dvw), (dv, lk, dvw, packed))
        out += self._products(self._dq, dps, (k, lk, d, packed), (dq, lq, d, packed))
        return out + self._products(self._dk, dps, (q, lq, d, packed), (dk, lk, d, packed))
