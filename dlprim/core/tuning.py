"""Device tuning in one place: tile tables, split models and the launchers' device
constants, keyed by ``DeviceFacts``. Tiles stored by ``dlprim-tune`` (``tuning_cache``)
come before the tables.

A tile is a dict of ``TILE_KEYS``: ``TILE_M, TILE_N, TILE_K`` (work-group tile),
``BLOCK_M, BLOCK_N`` (per-thread register block), ``VEC`` (1 or 4: width of local-memory
reads, and of the pieces a thread's block is cut into) and ``GROUP`` (tile rows walked
together for cache reuse; 1 = plain order). ``kernels/gemm.cl`` takes all of them,
``kernels/conv_gemm.cl`` the first six (as TM, TN, TK, WM, WN, VEC; GROUP stays 1).

Keys: the GEMM table by ``family(facts)``; the rest by ``facts.is_gpu``. The GPU numbers
were measured on NVIDIA GPUs (H100, H200), the CPU ones on PoCL; other GPUs share the
GPU numbers untested. Split models and work-group sizes are in ``tuning_launch``.
"""
import math
import os

import numpy as np

from ..kernels.program import pow2_at_least
from ..utils import ceil_div, round_up
from .tuning_cache import cache_dir, cache_file, device_key, store_tuned, tuned_entry

__all__ = ["TILE_KEYS", "CPU_VECS", "gemm_kernel", "pack_b", "CLASSES", "CONV_CLASSES",
           "family", "shape_class", "class_tiles", "gemm_class", "default_tile",
           "tuned_tile", "pick_tile", "wave_plan", "check_tile",
           "candidates", "conv_class", "conv_tile", "conv_vec", "conv_mma_tile", "mma_warps", "winograd_sum_tile",
           "prefer_winograd", "prefer_im2col", "cache_dir", "cache_file", "device_key",
           "store_tuned"]

TILE_KEYS = ("TILE_M", "TILE_N", "TILE_K", "BLOCK_M", "BLOCK_N", "VEC", "GROUP")


def _tile(tm, tn, tk, bm, bn, vec=4, group=1):
    return dict(zip(TILE_KEYS, (tm, tn, tk, bm, bn, vec, group)))


# VEC 8 or 16 selects kernels/gemm_cpu.cl: float8/float16 register blocks read straight
# from global memory, no local-memory tiles; meant for CPU drivers, which run a
# work-group as one loop on one core (TILE_K is then its K loop's unroll).
CPU_VECS = (8, 16)


def gemm_kernel(tile):
    """The template a GEMM tile runs on: 'gemm_cpu' for the wide CPU tiles, else 'gemm'."""
    return "gemm_cpu" if tile["VEC"] in CPU_VECS else "gemm"


# gemm_cpu.cl first packs op(B) into contiguous strips (one pass over B) where at least
# this many rows of C read each strip; below, the copy costs more than it saves
CPU_PACK_MIN_M = 64
CPU_PACK_K = 64  # rows of a strip one work-item of gemm_pack_b packs (4 KiB of 16-wide rows)
# On CPUs a Gemm with 16-bit operands copies them to float32 and runs the float32 kernels
# above (core/gemm.py): the tiled template that reads half directly ran resnet18's
# classifier 30x slower than gemm_cpu.cl (PoCL, 2 cores), and the copies are one pass
# over each operand against K products per element
CPU_HALF_AS_FLOAT = True


def pack_b(tile, M):
    """Whether a GEMM with this tile and M rows of C packs B first (kernels/gemm_cpu.cl)."""
    return gemm_kernel(tile) == "gemm_cpu" and M >= CPU_PACK_MIN_M


# Below CPU_PACK_MIN_M rows, C is computed CPU_SMALL_M_BLOCK rows at a time by
# gemm_small_m (kernels/gemm_cpu.cl), a work-item on 2 rows of a transposed B (dot
# products along K) or on 16 columns of a row-major B
CPU_SMALL_M_BLOCK = 4


def gemm_small_m(tile, M):
    """Whether a GEMM of M rows runs on the few-rows CPU kernel."""
    return gemm_kernel(tile) == "gemm_cpu" and M < CPU_PACK_MIN_M


def cpu_small_n(trans_b):
    """Columns of C per work-item of gemm_small_m."""
    return 2 if trans_b else 16


def pack_a(tile, M, trans_a):
    """Whether a GEMM packs a transposed A into row strips first (kernels/gemm_cpu.cl):
    read in place, each k of a block's rows is a new page of A."""
    return bool(trans_a) and pack_b(tile, M)


def family(facts):
    """The GEMM table's device family: 'gpu' (NVIDIA, AMD), 'intel' (Intel and other
    GPUs), 'cpu', 'other'."""
    if facts.is_cpu:
        return "cpu"
    if facts.vendor_id in ("nvidia", "amd"):
        return "gpu"
    if facts.vendor_id == "intel":
        return "intel"
    return "other" if not facts.is_gpu else "intel"


# ----- GEMM (kernels/gemm.cl): benchmarks/gemm.py on an H100 (docs/benchmarks.md, "GEMM")
GEMV_MAX_ROWS = 8  # GPU GEMMs of at most this many rows (B^T) run kernels/gemv.cl


def gemv_rows(facts, M, typed_b=False):
    """Whether a GEMM of M rows (with B transposed) runs the few-rows kernel
    (kernels/gemv.cl): on GPUs, a decoder's step streams its weights once, in one launch;
    anywhere, over a B the CPU kernels would otherwise copy to float32 first (``typed_b``:
    int8 or bfloat16 weights); on CPUs, one row over float32 weights too (a decoder's
    step: its weights come from memory, not the caches, where gemm_small_m reads them
    at half the rate; GPT-2 decoding on the 2-core EPYC, Intel's runtime, `llm_decode.py
    --device cpu --context 128 --new 16`: 27.7-28.2 -> 17.4-18.0 ms a token, 24.0 with
    only the 154 MB LM head on it. Alone, weights in the caches, gemm_small_m is faster:
    2304 x 768 at one row 0.13 ms against 0.18)."""
    return (facts.is_gpu or typed_b) and 0 < M <= GEMV_MAX_ROWS or \
        (facts.is_cpu and M == 1)


# Values a work item of the GPU few-rows kernel loads a step from aligned rows, of every
# storage: float32 as two float4 loads, 16-bit and int8 values as one load of their bits,
# widened after the turn's loads are all asked for (GEMV_GPU_UNROLL). H200, device time of
# one launch over cold weights, 8 against 4 before the turns: float32 50257 x 768 39.2
# against 47.7 us, 2048 x 5632 16.1 against 18.8; float16 weights through vloada_half8,
# which widens as it loads, were slower (32000 x 2048 73.4 against 43.5 us)
GEMV_GPU_VEC = 8
# and steps a turn whose loads are in flight together. H200, float16, one launch over
# cold weights, the tree of one step at a time widening as it loaded against 4 steps a turn
# at 8 values (docs/benchmarks.md, "Language-model decoding"): 2048 x 5632 15.6 -> 13.4
# us at one row, 37.2 -> 17.2 at four; 1, 2, 4 and 8 steps a turn within 1-2 us of each
# other at one row, where a launch's own cost dominates
GEMV_GPU_UNROLL = 4


def gemv_gpu_unroll(rows):
    """Steps a turn of the GPU few-rows kernel for ``rows`` rows of A (each row's bits are
    held a step: at most 8 loads of A a turn)."""
    return max(1, min(GEMV_GPU_UNROLL, 8 // rows))


def gemv_shuffle(facts, ptx_runs):
    """Whether the GPU few-rows kernel's teams of 32 add their sums by warp shuffles (inline
    PTX: NVIDIA GPUs where ``ptx_runs()``, ``gemm.inline_ptx``, says so) instead of a tree
    in local memory. DLPRIM_GEMV_SHUFFLE=0 turns them off."""
    if os.environ.get("DLPRIM_GEMV_SHUFFLE") == "0":
        return False
    return facts.is_gpu and facts.vendor_id == "nvidia" and ptx_runs()


# GPUs' few-rows kernel with A's rows staged in local memory by each work-group
# (gemv.cl STAGE), normalized there where a norm comes first: at most this many bytes of
# rows, and only at VEC 8. H200, a decoder's head (float32 rows, float16 weights, cold,
# gemv_cold.py --activations float32 --norm rms|layer), us against the rows read and
# normalized on the way by each team: 50257 x 768 RMSNorm 57.6 -> 33.2, LayerNorm 112.2
# -> 40.5; TinyLlama's 32000 x 2048 head in its step 92.3 -> 46.8
GEMV_STAGE_BYTES = 32768


def gemv_stage(K, rows, vec, normalizes):
    """K rounded up to the staged layout's blocks (gemv.cl KS) where the GPU few-rows
    kernel stages A's ``rows`` rows of K values (``normalizes``: a norm comes first), else
    0. DLPRIM_GEMV_STAGE=1 stages every product that fits, 0 none."""
    forced = os.environ.get("DLPRIM_GEMV_STAGE")
    ks = round_up(K, 8 * 32)  # (blocks of 8 values a work-item of a team of 32)
    if vec != 8 or rows * ks * 4 > GEMV_STAGE_BYTES or forced == "0":
        return 0
    return ks if normalizes or forced == "1" else 0


# CPUs' few-rows kernel (gemv.cl's gemv_cpu): columns of C a work-item on Intel's runtime
# (PoCL: 2). GPT-2 decoding on the 2-core EPYC (`llm_decode.py --models gpt2 --device
# cpu --context 128 --new 16`, ms a token, two calls each), 1 column against 2: float16
# weights 16.9 / 17.4 against 20.9 / 22.0 (4 and 8 columns between, in the kernel's own
# time), bfloat16 16.7 / 18.8 against 20.8 / 20.3, q4 15.7 / 14.4 against 16.2 / 16.2;
# int8 12.4 / 15.2 against 11.8 / 11.9 with one sum a column, then 8.4 / 10.3 against
# 15.9 / 17.5 with four (below). PoCL: float16 92.3 against 74.2, bfloat16 40.2
# against 38.8 at 1 and 2; then, with four sums (`--device 1:0`, one call each),
# float32 / float16 at 2 columns 48.7 / 77.2 and 44.4 / 80.6, at 4 34.5 / 70.3, at 8
# 30.5 / 60.2 and 30.0 / 60.4, at 16 49.5 / 63.5, at 32 40.3 / 63.7: 8
# Float32 weights on Intel's runtime take 8 columns: on a 2-core Intel Xeon (Emerald
# Rapids), GPT-2 float32 decoding 30.4, 32.1 and 33.3 ms a token at 1 column against
# 24.9, 22.5 and 20.9 at 8 (alternating), its 50257-row head 9.1 -> 4.2 ms alone; the
# other storages moved less there (int8 13.5-14.4 -> 8.5-13.4, float16 20.2-25.1 ->
# 18.9-20.7, q4 15.9-16.9 -> 15.9-16.7) and keep the EPYC's 1 column
# 4-bit weights read a group a turn (GEMV_CPU_Q4_GROUPS) take 8 columns there too: the
# same Xeon, Intel's runtime, one launch (OpenCL events, us) at 1 / 2 / 4 / 8 columns:
# 2304 x 768 231 / 183 / 143 / 133, 5632 x 2048 1116 / 916 / 811 / 771 (docs/benchmarks.md)
GEMV_CPU_COLS = 1
GEMV_CPU_COLS_FLOAT32 = 8
GEMV_CPU_COLS_Q4 = 8
GEMV_CPU_COLS_POCL = 8


def gemv_cpu_cols(facts, weights=np.float32):
    """Columns of C a work-item of gemv_cpu takes on the CPU ``facts`` describe, for
    weights (B) stored as ``weights`` (uint8: 4 bits)."""
    if facts.vendor_id == "pocl":
        return GEMV_CPU_COLS_POCL
    weights = np.dtype(weights)
    if weights == np.uint8 and GEMV_CPU_Q4_GROUPS:
        return GEMV_CPU_COLS_Q4
    return GEMV_CPU_COLS_FLOAT32 if weights == np.float32 else GEMV_CPU_COLS


# and independent sums a column, each fma otherwise waiting on the one before: the float16
# step's kernel time 13.6 (1 sum), 9.7-10.1 (2), 8.7-9.1 ms (4); float32 weights, bound by
# memory, moved within the noise (int8: above); PoCL unchanged (float16 81.1 against 81.3)
GEMV_CPU_SUMS = 4
# 4-bit weights on CPUs a group of 32 a turn as 16-wide vectors (gemv.cl Q4_GROUPS: A split
# by parity, the nibbles widened in place, the scale once a group) instead of eight values
# a step interleaved into float8 (docs/benchmarks.md)
GEMV_CPU_Q4_GROUPS = True


SMALL = 64  # M or N under this is a "small" side: big tiles would leave most threads idle
CLASSES = ("huge", "large", "medium", "narrow_m", "narrow_n", "small_m", "small_n", "small")

# family -> shape class -> tile; CPUs (PoCL) get one wide tile (kernels/gemm_cpu.cl) for
# every class, which also keeps the number of builds low there: 64x64 work-groups of
# 4x16 float8 blocks (8 accumulators, within AVX2's 16 registers) led 16x64, 32x64,
# 6x16, 8x8 and float16 blocks at 512-2048 on a 2-core EPYC (docs/benchmarks.md).
_GEMM = {
    "gpu": {"huge": _tile(128, 256, 8, 8, 16, 4, 8), "large": _tile(128, 128, 16, 8, 8, 4, 8),
            "medium": _tile(128, 64, 16, 8, 8, 4, 8),
            "narrow_m": _tile(64, 128, 16, 8, 8), "narrow_n": _tile(128, 64, 16, 8, 8),
            "small_m": _tile(32, 32, 16, 4, 4), "small_n": _tile(32, 32, 16, 4, 4),
            "small": _tile(32, 32, 16, 4, 4)},
    "intel": dict({"huge": _tile(64, 64, 16, 4, 4), "large": _tile(64, 64, 16, 4, 4),
                   "small_m": _tile(32, 64, 16, 4, 4), "small_n": _tile(64, 32, 16, 4, 4),
                   "small": _tile(32, 32, 16, 4, 4)},
                  medium=_tile(32, 32, 16, 4, 4), narrow_m=_tile(64, 64, 16, 4, 4),
                  narrow_n=_tile(64, 64, 16, 4, 4)),
    "cpu": dict.fromkeys(CLASSES, _tile(64, 64, 8, 4, 16, 8)),
    "other": dict.fromkeys(CLASSES, _tile(32, 32, 8, 4, 4)),
}


# The classes' thresholds count the tiles of the family's own table ('large', 'huge'):
# 'medium' is where the large tile leaves compute units without one (less than one large
# tile of outputs per compute unit), 'huge' where the huge tile fills 2.5 waves. Counted
# in 128x128 tiles on Intel's table (64x64 large tiles, 512 compute units: its vector
# engines), every square GEMM up to 2816x2816 was 'medium' and ran the 32x32 tile, which
# at 2048x2048 made 4096 work-groups of 64 threads where 1024 of 256 (two a compute unit,
# as many threads) read A and B from global memory half as often; now up to 1408x1408.
# The CPU and 'other' tables are one tile for every class (there the class only keys
# tuned tiles): they keep the 'gpu' sizes.
def class_tiles(table):
    """((TILE_M, TILE_N) of 'large', of 'huge') that the classes of GEMM table ``table``
    ('gpu', 'intel', 'cpu', 'other') count."""
    tiles = _GEMM[table if table in ("gpu", "intel") else "gpu"]
    return tuple((tiles[c]["TILE_M"], tiles[c]["TILE_N"]) for c in ("large", "huge"))


def shape_class(M, N, batch=1, compute_units=0, table="gpu"):
    """Which tile shape of GEMM table ``table`` (``family(facts)``) suits C's shape.

    'small' (M and N under 64), 'small_m' / 'small_n' (one side under 64), 'narrow_m' /
    'narrow_n' (one side 64..127, where a 128-high tile would idle half its threads),
    'medium' (too few of the table's large tiles, 128x128 on 'gpu', to give every compute
    unit one), 'huge' (enough of its huge tiles, 128x256 on 'gpu', for 2.5 per compute
    unit, so the last partial wave costs little), else 'large'.
    """
    small_m, small_n = M < SMALL, N < SMALL
    if small_m and small_n:
        return "small"
    if small_m or small_n:
        return "small_m" if small_m else "small_n"
    if M < 2 * SMALL:
        return "narrow_m"
    if N < 2 * SMALL:
        return "narrow_n"
    (lm, ln), (hm, hn) = class_tiles(table)
    if ceil_div(M, lm) * ceil_div(N, ln) * batch < compute_units:
        return "medium"
    if ceil_div(M, hm) * ceil_div(N, hn) * batch * 2 >= 5 * compute_units:
        return "huge"
    return "large"


def gemm_class(facts, M, N, batch=1):
    """``shape_class`` of C on ``facts``' device: its table and compute units."""
    return shape_class(M, N, batch, facts.compute_units, family(facts))


# CPUs whose native vectors hold 16 floats (AVX-512) take float16 register blocks of
# 8 x 32 in the same 64x64 work-groups (16 accumulators of AVX-512's 32 registers). Two
# 512-bit FMA units of 4 cycles' latency need 8 independent sums in flight: a 4 x 32
# block's 8 left an Intel Xeon (Emerald Rapids) no slack, and 8 x 32 ran 2-14%
# faster there on every transformer projection measured; on a 2-core AVX-512 EPYC (Zen 4,
# 512-bit FMAs on 256-bit halves) the two were within 2% of each other, both 8-17% faster
# than float8 blocks (docs/benchmarks.md, "CPU GEMM tiles by vector width"). Where the
# compiler cannot take float16 vectors (max_float_vector, old PoCL) the float8 tile stays.
_CPU_WIDE_TILE = _tile(64, 64, 8, 8, 32, 16)


def cpu_vector_width(facts):
    """The float vector width of CPU kernels' register blocks: 16 where the CPU's native
    vectors hold 16 floats (AVX-512) and the compiler takes float16 vectors, else 8.
    DLPRIM_CPU_VECTOR_WIDTH=8 or 16 decides instead (a driver that reports another
    width than its code uses: Intel's runtime told to write AVX2 code on an AVX-512 CPU,
    CL_CONFIG_CPU_TARGET_ARCH=core-avx2, still reports 16)."""
    forced = os.environ.get("DLPRIM_CPU_VECTOR_WIDTH", "").strip()
    if forced:
        if forced not in ("8", "16"):
            raise ValueError("DLPRIM_CPU_VECTOR_WIDTH must be 8 or 16, got %r" % forced)
        if int(forced) > getattr(facts, "max_float_vector", 16):
            raise ValueError("DLPRIM_CPU_VECTOR_WIDTH=%s: this device's compiler takes float "
                             "vectors of up to %d" % (forced, facts.max_float_vector))
        return int(forced)
    wide = getattr(facts, "float_lanes", 8) >= 16 and getattr(facts, "max_float_vector", 16) >= 16
    return 16 if wide else 8


def default_tile(facts, cls, kernel="gemm"):
    """The table's tile for a shape class of ``kernel`` ('gemm' or 'conv')."""
    if kernel == "conv":
        return dict(_CONV["gpu" if facts.is_gpu else "cpu"][cls])
    if family(facts) == "cpu" and cpu_vector_width(facts) == 16:
        return dict(_CPU_WIDE_TILE)
    return dict(_GEMM[family(facts)][cls])


def tuned_tile(facts, cls, kernel="gemm"):
    """The stored best tile for this device, driver and shape class, or None."""
    entry = tuned_entry(facts, kernel, cls)
    if not entry:
        return None
    try:
        return check_tile(entry, facts, kernel)
    except (ValueError, TypeError):
        return None  # stale or foreign entry: fall back to the table


def pick_tile(facts, M, N, batch=1):
    """The GEMM tile for C (M x N, ``batch`` of them): tuned, else the table."""
    cls = gemm_class(facts, M, N, batch)
    return tuned_tile(facts, cls) or default_tile(facts, cls)


def half_tile(facts, M, N, batch=1):
    """The GEMM tile where an operand is float16: ``pick_tile``'s where it runs on the
    tiled template (kernels/gemm.cl), else the GPU table's for the shape class, since
    gemm_cpu.cl reads float32 only (CPUs gain nothing from half storage; it must work)."""
    tile = pick_tile(facts, M, N, batch)
    if gemm_kernel(tile) == "gemm":
        return tile
    return dict(_GEMM["gpu"][shape_class(M, N, batch, facts.compute_units, "gpu")])


# ----- tensor cores (kernels/gemm_mma.cl, precision "tf32"): a 128x128 tile per
# work-group of 2 x 2 warps, each warp 64x64 of C as 4 x 8 fragments of 16x8; K staged 16
# at a time into two local buffers. As a tile dict the work-group is (32 lanes, 4 warps):
# BLOCK_M = 128 / 4, BLOCK_N = 128 / 32, so Gemm's grid arithmetic serves both kernels.
# Measured on an H200 (8192^3, TFLOP/s): 2 x 2 warps 115, 2 x 4 warps (64x32 each) 86,
# 128x256 or 256x128 tiles of 8 warps 118-123 at 8192^3 but 78-85 on transformer shapes,
# K staged 32 at a time through one buffer 91 (docs/benchmarks.md, "Tensor cores").
MMA_TILE = _tile(128, 128, 16, 32, 4, 4, 8)
# The FP16 and BF16 products (precision "fp16", "bf16") stage K 32 at a time: each k16 is
# one m16n8k16 per fragment pair, so K 16 deep paid a barrier per 32 products. On an H100
# (half operands, TFLOP/s at 8192^3 A·B / A·Bᵀ, 12608x2304x768 A·Bᵀ, 3072x768x12608 Aᵀ·B):
# K 16 107.9 111.8 104.7 57.6; K 32 146.5 189.3 131.7 78.9; K 32 through one buffer
# 152.5 132.5 117.6 77.6; K 64 through one buffer 127.9 163.4 90.3 62.2
MMA_TILE_16BIT = _tile(128, 128, 32, 32, 4, 4, 8)
MMA_STAGES = 2
# 16-bit operands whose rows start 16-byte aligned skip the registers: cp.async copies
# their tiles (gemm_mma.cl ASYNC), MMA_ASYNC_STAGES of them in flight. H200, FP16
# TFLOP/s at 8192^3 A·B / A·Bᵀ, then ViT-B's qkv forward and fc1 weight gradient:
# through registers 142.8 183.1 132.6 81.5; cp.async K 32, 2 stages 297.2 284.2 184.3
# 171.0; K 16, 3 or 4 stages 294-300 260-264 163 175-178 (4 x 10.5 KiB of the 48 KiB a
# work-group may have); 128x256 tiles of 8 warps 173-252 (docs/benchmarks.md)
MMA_COPY_ASYNC = True
MMA_ASYNC_STAGES = 2
# Hopper's warpgroup products where the device has them (gemm_wgmma.cl): for those
# tiles and for TF32; each stage holds 64 or 128 bytes of K of every row of the tile, and
# the products of WGMMA_IN_FLIGHT tiles may still run past the next barrier. NVIDIA's
# driver reports 48 KiB of local memory a work-group, but builds and runs kernels whose
# __local arrays take up to 227 KiB on Hopper (checked, launched and read back on an
# H200). H200, FP16 TFLOP/s at 8192^3 / ViT-B's qkv forward (12608x2304x768, B
# transposed) / fc1 weight gradient (3072x768x12608) / fc1 data gradient
# (12608x768x3072), cuBLAS 760 / 655 / 662 / 727: 3 stages of 64 bytes, none in flight
# 448 / 218 / 264 / 318; 4 stages 455 / 222 / 271 / 325; 6 stages, one in flight 457 /
# 228 / 300 / 342; then the epilogue through local memory (C written along its rows: it
# had taken as long as the products at K = 768) 3 stages 461 / 355 / 274 / 364; 6
# stages, one in flight 477 / 361 / 315 / 410; 128x256 tiles, 4 stages of 64 bytes 532 /
# 375 / 273 / 281. TF32 at 8192^3 222 -> 236.
MMA_WARPGROUP = True
WGMMA_IN_FLIGHT = 1
# The tiles (TILE_M, TILE_N, bytes of K a stage, stages, FP16 TFLOP/s on a whole H200 at
# 8192^3). Stages of 128 bytes (twice the products between barriers) pay on the tiles
# that fill a compute unit alone: 128x256 579 against 532 with 64 (H200; TF32 286
# against 236), 128x128 in 3 such stages 491 against 481. Which tile wins depends on how
# C's tiles fill the waves (wgmma_plan): ViT-B's fc1 data gradient (12608x768x3072)
# 409 / 411 / 512 / 390 on the first four, its qkv forward 362 / 413 / 393 / 392. The
# three smaller tiles are for small products; their rates are 128x128's scaled as
# MMA_SPEED says (not measured).
WGMMA_TILES = ((128, 128, 64, 6, 481), (128, 256, 128, 4, 579), (128, 192, 128, 5, 542),
               (256, 128, 128, 4, 554), (128, 64, 64, 6, 346), (64, 128, 64, 6, 346),
               (64, 64, 64, 6, 240))
# a compute unit's local memory (Hopper: 228 KiB, 1 KiB of it reserved a work-group)
WGMMA_CU_LOCAL = 228 * 1024
# each wave of tiles costs this beyond its products: filling the stages, the epilogue
# (fitted on ViT-B's K = 768 rows: 3.8 us a wave on both 128x128 and 128x256)
WGMMA_WAVE_OVERHEAD_S = 3.8e-6
# split-K's partial sums, written and read in float32, and the summing launch
WGMMA_REDUCE_BYTES_S = 3e12
WGMMA_REDUCE_LAUNCH_S = 5e-6
WGMMA_MAX_PARTS = 16


def wgmma_local_bytes(tm, tn, k_bytes, stages):
    """Local memory of a gemm_wgmma.cl work-group: its stages, or the float32 tile of C
    the epilogue stores through (TILE_N + 8 a row), whichever is larger."""
    return max(stages * (tm + tn) * k_bytes, tm * (tn + 8) * 4)


def wgmma_plan(compute_units, M, N, K, batch=1, value_bytes=2, split_k=None, tiles=None):
    """(tile, parts) of an M x N x K warpgroup product (``batch`` of them, operands of
    ``value_bytes``): of WGMMA_TILES and split-K into 1..WGMMA_MAX_PARTS parts (or
    ``split_k``), the pair with the least predicted time. A wave of tiles fills every
    compute unit with as many work-groups as its local memory holds, and takes the
    tile's products at the tile's rate plus WGMMA_WAVE_OVERHEAD_S; parts beyond one add
    the partial sums' traffic. ``tile``: TILE_M, TILE_N, TILE_K (values), STAGES;
    ``tiles``: the candidates, as WGMMA_TILES (the default)."""
    best = None
    for tm, tn, k_bytes, stages, rate in tiles or WGMMA_TILES:
        tk = k_bytes // value_bytes
        per_cu = min(WGMMA_CU_LOCAL // (wgmma_local_bytes(tm, tn, k_bytes, stages) + 1024),
                     2048 // (2 * tm))
        slots = compute_units * per_cu
        tiles = ceil_div(M, tm) * ceil_div(N, tn) * batch
        for want in ([split_k] if split_k else range(1, WGMMA_MAX_PARTS + 1)):
            chunk = round_up(ceil_div(K, want), tk) if want > 1 and K else K
            parts = ceil_div(K, chunk) if want > 1 and K else 1
            if not split_k and want > 1 and (chunk < 256 or parts < want):
                if chunk < 256:
                    break
                continue  # rounded to the same count as a smaller want
            time = ceil_div(tiles * parts, slots) * (
                2.0 * tm * tn * chunk * slots / (rate * 1e12) + WGMMA_WAVE_OVERHEAD_S)
            if parts > 1:
                time += 8.0 * parts * M * N * batch / WGMMA_REDUCE_BYTES_S + WGMMA_REDUCE_LAUNCH_S
            if best is None or time < best[0]:
                best = (time, dict(TILE_M=tm, TILE_N=tn, TILE_K=tk, STAGES=stages), parts)
    return best[1], best[2]


# TF32 products on them pack A and B first (rounded, K-major): a pass of 8 (M + N) K
# bytes against 2 M N K products, so it pays only where M N / (M + N) is large. H200s,
# TFLOP/s, warpgroup (packing included) against mma.sync, two calls: 8192^3 221 / 115,
# ViT-B qkv forward (12608x2304x768) 146 / 98, fc1 weight gradient (3072x768x12608)
# 106 / 83, out_proj forward (12608x768x768) 104 / 75, but out_proj weight gradient
# (768x768x12608, M N / (M + N) = 384) 78 / 83: hence 512.
WGMMA_TF32_MIN_SIZE = 512


# A float32 operand beside a 16-bit one (an fp16 net's float32 weights) kept the product
# off the warpgroup kernel, which reads both operands as the products take them:
# gemm_mma.cl read the float32 one through registers (ViT-B's projections at batch 64 in
# an fp16 net ran at 119-132 TFLOP/s on an H200, 360-410 after narrowing). So does a
# 16-bit operand whose rows do not start 16-byte aligned (GPT-2's head at batch 64 read
# the 50,257-wide logits' gradient so: 15.7 ms backward against 3.6 forward). Staging
# such an operand into the workspace first costs a pass of 4-6 bytes an element and a
# launch of a few microseconds; predicted to pay where the other operand has
# STAGE_MIN_ROWS rows or more (the pass is then small beside the products) and the
# product is large enough to hide the launch (STAGE_MIN_PRODUCTS multiply-adds, about
# 1.5 us of products saved).
STAGE_MIN_ROWS = 256
STAGE_MIN_PRODUCTS = 2 ** 28


def staging_pays(M, N, K, which):
    """Whether copying operand ``which`` ("a" or "b") of an M x N x K 16-bit product
    into the workspace as the warpgroup kernel takes it pays for itself (see
    STAGE_MIN_ROWS)."""
    return (N if which == "a" else M) >= STAGE_MIN_ROWS and M * N * K >= STAGE_MIN_PRODUCTS


# Intel's subgroup matrix products (gemm_subgroup_mma.cl): 4 subgroups of 32 rows, each
# item on 2 columns; the tile is fixed by the kernel's layout (no Intel GPU measured yet)
def subgroup_mma_tile(subgroup):
    """The tile of gemm_subgroup_mma.cl at ``subgroup`` items a subgroup (8 or 16)."""
    return _tile(128, 2 * subgroup, 16, 32, 2, 1, 8)


def wgmma_packs_pay(M, N):
    """Whether an M x N TF32 product runs the warpgroup kernel (its packing pass pays)."""
    return M * N >= WGMMA_TF32_MIN_SIZE * (M + N)


# "fp32" products as three TF32 warpgroup products (core/gemm.py's split_tf32): A and B
# packed in two TF32 parts each, three times K for the products, each 4 tiles' products
# (128 values of K) summed by the tensor cores, then by rounded float32 adds
# (SPLIT_TF32_PROMOTE; the tensor cores truncate). Those sums beside the accumulators
# take registers: one 128x192 tile a compute unit (248 registers, 5 stages of 128 bytes),
# which beat 128x128 (188 registers: one a unit too), 128x64 (two a unit) and every
# 128x128 tile of the tensor cores' own sums that keeps K whole. H200, microseconds,
# split / float32 kernels (not autotuned) / cuBLAS FP32 (TF32 off), GPT-2 training at
# 8x256: qkv forward (2048x2304x768) 153 / 254 / 193, fc data gradient (2048x768x3072) 186
# / 260 / 212, fc weight gradient (3072x768x2048) 204 / 305 / 246, LM head forward
# (2048x50257x768) 2130 / 4041 / 3107. Where the TF32 kernel's packing does not pay (768 x
# 768, attention's projection weight gradient) the float32 kernels run, hence the same
# rule as TF32's. Error against float64, all-positive 1024 x 1024 x 8192: 9.6e-7 (float32
# kernels 1.5e-6, cuBLAS 1.6e-6; the tensor cores' own sums 4.0e-5; 8 tiles a sum 1.7e-6).
FP32_SPLIT_TF32 = True
SPLIT_TF32_PROMOTE = 4
SPLIT_TF32_TILES = ((128, 192, 128, 5, 542),)


def split_tf32_pays(M, N, K):
    """Whether an M x N x K "fp32" product runs as three TF32 warpgroup products."""
    return FP32_SPLIT_TF32 and K > 0 and wgmma_packs_pay(M, N)
# Smaller tiles of the same 2 x 2 warps, for products whose M or N leave most of a
# 128x128 tile empty: a ResNet's 1x1 layers run one GEMM per image (N = H W, 49 at 7x7),
# MobileNet's have 16 to 96 channels. MMA_SPEED: each tile's throughput relative to
# 128x128 on a full device (TF32 at 8192^3 on an H200: 64x128 / 128x64 82-85 TFLOP/s
# against 115; 64x64 taken as half).
MMA_SMALLER = ((128, 64), (64, 128), (64, 64))
MMA_SPEED = {(128, 128): 1.0, (128, 64): 0.72, (64, 128): 0.72, (64, 64): 0.5}


def mma_tile(precision, M=None, N=None):
    """The tensor-core GEMM's tile for ``precision``'s products (tf32, fp16 or bf16): of
    128x128 and MMA_SMALLER, the one with the least padded work per MMA_SPEED for an M x N
    product (128x128 where M and N are not given)."""
    base = MMA_TILE if precision == "tf32" else MMA_TILE_16BIT
    if M is None or N is None:
        return dict(base)

    def cost(shape):
        tm, tn = shape
        return ceil_div(M, tm) * tm * ceil_div(N, tn) * tn / MMA_SPEED[shape]

    tm, tn = min(((128, 128),) + MMA_SMALLER, key=cost)
    # the work-group stays 2 x 2 warps: BLOCK_M x BLOCK_N = TILE / (4 rows, 32 lanes)
    return dict(base, TILE_M=tm, TILE_N=tn, BLOCK_M=tm // 4, BLOCK_N=tn // 32)

# ----- tensor cores in the implicit-GEMM convolution (kernels/conv_gemm.cl, MMA): K
# staged 32 deep (16-bit tap-major and backward-filter: CONV_MMA_DEEP_K); work-groups of
# 2 x (threads / 64) warps. Largest first: 128x128 (8
# warps of 64x32), 64x128 (4 of 32x64), 64x64 (4 of 32x32).
CONV_MMA_TILES = (_tile(128, 128, 32, 8, 8, 1), _tile(64, 128, 32, 8, 8, 1),
                  _tile(64, 64, 32, 8, 4, 1))


# 16-bit products stage K 64 deep (H200, fp16, batch 64, TFLOP/s forward / backward-data:
# 128->128 3x3 at 28x28 153/166 -> 179/191, 256->256 at 14x14 113/120 -> 135/143) where
# a tap-major layer's channels pad little to 64 (else 32); TF32 tiles, twice the bytes,
# stay 32 deep
CONV_MMA_DEEP_K = 64


def conv_mma_tile(facts, m, n, groups=1):
    """The tensor-core convolution tile for an m x n output (times ``groups`` independent
    ones): the largest whose work-groups give every compute unit two, not taller than m
    needs; else the smallest (split-K then fills the device)."""
    for t in CONV_MMA_TILES:
        if t["TILE_M"] > 64 and m <= 64:
            continue
        work_groups = math.ceil(m / t["TILE_M"]) * math.ceil(n / t["TILE_N"]) * groups
        if work_groups >= 2 * facts.compute_units:
            return dict(t)
    return dict(CONV_MMA_TILES[-1])


# Tap-major tiles (conv_gemm.cl TAPS, 16-bit products) pad each tap's channels to the
# tile: taken where that adds at most CONV_TAPS_MAX_PADDING of the work. The filter
# gradient's columns pad to TN, so it takes a tile CONV_MMA_NARROW_N wide where that pads
# less.
CONV_TAPS_MAX_PADDING = 1.25
# Tap-major layers load runs of up to 8 pixels, one load and one local store a run, not
# value by value (conv_gemm.cl K_RUN, N_RUN): backward-filter's dy (and a plain 1x1's x),
# a plain 1x1's forward and backward-data B
CONV_RUNS = True
CONV_MMA_NARROW_N = 64
CONV_MMA_NARROW = {128: _tile(128, 64, 32, 8, 8, 1), 64: _tile(64, 64, 32, 8, 4, 1)}
# Where the tap-major implicit GEMM is taken over Winograd (H200, fp16, batch 64, 3x3
# layers of resnet50 and vgg16): forward 107-148 TFLOP/s against Winograd's best 58-159,
# backward-data 112-163 against 58-159, so everywhere; backward-filter 74-99 against
# 36-165, Winograd ahead from 256->256 at 56x56 and 512->512 at 28x28 (in_c * out_c *
# pixels 2^27.6), behind from 256->256 at 14x14 down (2^23.6)
CONV_TAPS_FILTER_MAX_WORK = 2 ** 25


def taps_beat_winograd(direction, in_c, out_c, pixels):
    """Whether the tap-major implicit GEMM beats Winograd for a 3x3 layer both serve."""
    return direction != "backward_filter" or in_c * out_c * pixels < CONV_TAPS_FILTER_MAX_WORK


def conv_taps_padding(channels, width):
    """The work of ``channels`` padded to a multiple of ``width``, relative to unpadded."""
    return ceil_div(channels, width) * width / float(channels)


def mma_warps(tile):
    """(WARPS_M, WARPS_N) of a tensor-core GEMM or convolution tile: two warps down M,
    the rest across N."""
    threads = (tile["TILE_M"] // tile["BLOCK_M"]) * (tile["TILE_N"] // tile["BLOCK_N"])
    return 2, threads // 64


# ----- the wave plan: whole waves of one-per-compute-unit tiles
# A 128x256 work-group (8x16 per thread) holds a compute unit alone, so a GEMM runs in
# waves of compute_units work-groups and a last partial wave idles the rest: at 12608 x
# 768 (a transformer's tokens x width) its 297 tiles make 2.25 waves on an H100's 132
# units and it ran at 33.5-36.2 TFLOP/s, where 128x192 tiles (4 across, 3.0 waves) ran at
# 41.8-43.2. Each candidate is (tile, speed at full waves relative to 128x256 with B read
# along K (transposed, as an inner product's weights), and with B read along N), measured
# on that H100 at whole waves on 12608-row shapes (benchmarks: docs/benchmarks.md, GEMM).
WAVE_TILES = ((_tile(128, 256, 8, 8, 16, 4, 8), 1.0, 1.0),
              (_tile(128, 192, 8, 8, 12, 4, 8), 0.93, 0.89),
              (_tile(192, 128, 8, 12, 8, 4, 8), 0.89, 0.94))
WAVE_MIN_SPEED = 0.9  # the plan is taken when it predicts this share of the 128x256 speed
WAVE_MIN_CHUNK = 1024  # shortest K slice of a split in the plan
WAVE_MAX_PARTS = 16
# the partial sums cost ~8 bytes a value (written, then read by gemm_reduce), a byte the
# time of ~15 FLOPs at full speed: relative cost 60 * parts / K
WAVE_BYTE_FLOPS = 15


def wave_plan(facts, M, N, K, batch=1, trans_b=False):
    """``(tile, parts)`` for C = M x N (``batch`` of them) with a K-long reduction on the
    tiles that fill whole waves (``WAVE_TILES``, split-K into ``parts`` where K is long),
    or None where no such plan reaches ``WAVE_MIN_SPEED`` of the 128x256 tile at full
    waves (the shape-class table and its split rule then decide), off the 'gpu' family,
    or where a tuned tile is stored for the shape's class. The predicted speed counts the
    tile's own speed, the share of its rows and columns inside C, the last wave's idle
    units and the partial sums' traffic."""
    if family(facts) != "gpu" or min(M, N) < 2 * SMALL or K == 0 or batch == 0:
        return None
    if tuned_tile(facts, gemm_class(facts, M, N, batch)):
        return None
    cus = facts.compute_units
    best, best_cost = None, 1.0 / WAVE_MIN_SPEED
    for tile, speed_kb, speed_nb in WAVE_TILES:
        rows, cols = ceil_div(M, tile["TILE_M"]), ceil_div(N, tile["TILE_N"])
        inside = M * N / float(rows * tile["TILE_M"] * cols * tile["TILE_N"])
        speed = (speed_kb if trans_b else speed_nb) * inside
        for parts in range(1, WAVE_MAX_PARTS + 1):
            if parts > 1 and K // parts < WAVE_MIN_CHUNK:
                break
            waves = rows * cols * batch * parts / float(cus)
            fill = waves / math.ceil(waves)
            cost = 1.0 / (speed * fill) + (8.0 * WAVE_BYTE_FLOPS * parts / (2 * K) if parts > 1 else 0)
            if cost < best_cost - 1e-9:
                best, best_cost = (dict(tile), parts), cost
    return best


# ----- implicit-GEMM convolution (kernels/conv_gemm.cl): benchmarks/conv.py on an H100
# (tiles per batch size to fill the GPU) and an H200; every one satisfies the template's
# load mappings (work-group size a multiple of TM, TN and TK, tiles of the work-group)
CONV_CLASSES = ("large", "medium", "small", "tiny")
_CONV_SHAPES = {"large": (128, 128), "medium": (64, 128), "small": (64, 64), "tiny": (32, 64)}
_CONV = {"gpu": {"large": _tile(128, 128, 16, 8, 8), "medium": _tile(64, 128, 16, 8, 8),
                 "small": _tile(64, 64, 16, 4, 4), "tiny": _tile(32, 64, 16, 4, 4)},
         "cpu": dict.fromkeys(CONV_CLASSES, _tile(32, 32, 8, 4, 4, vec=1))}
# float4 local-memory reads where the tile allows (benchmarks/conv.py --compare-vec)
CONV_VEC_READS = True
CONV_VEC_MIN_K = 256  # below, the strided epilogue stores dominate: plain reads


# strided backward-data with its phases merged into one launch (conv_gemm.cl MERGED):
# up to this many phases their sizes are constants of a switch, a GEMM body per phase
# (stride 2's four, as measured); beyond, one body reads them from a table. vit_b_16's
# 16x16 stride-16 patch embedding has 256 phases: its fp16 backward built for over 70 s
# on an H200 as a switch
CONV_MERGED_SWITCH_MAX = 4


def conv_class(facts, mode, m, n, groups=1):
    """The shape class of an m x n convolution GEMM (``groups`` of them, a float where
    stride phases weigh in): the largest of the class shapes (large 128x128, medium
    64x128, small 64x64, tiny 32x64) that does not overhang m and n and, except in
    backward-filter (which splits its reduction instead), still gives three quarters of
    the compute units a work-group; the smallest fitting one where none does."""
    fitting = [c for c in CONV_CLASSES if _CONV_SHAPES[c][0] <= max(32, pow2_at_least(m))
               and _CONV_SHAPES[c][1] <= max(64, pow2_at_least(n))]
    if mode == "backward_filter":
        return fitting[0]
    want = facts.compute_units * 3 // 4
    for c in fitting:
        tm, tn = _CONV_SHAPES[c]
        if ceil_div(m, tm) * ceil_div(n, tn) * groups >= want:
            return c
    return fitting[-1]


def conv_tile(facts, mode, m, n, groups=1):
    """The convolution tile: tuned for '<mode>.<class>', else the table's for the class."""
    cls = conv_class(facts, mode, m, n, groups)
    return tuned_tile(facts, "%s.%s" % (mode, cls), "conv") or default_tile(facts, cls, "conv")


def conv_vec(tile, mode, k):
    """The VEC a convolution kernel is built with: the tile's, unless the reduction is short."""
    if CONV_VEC_READS and (mode == "backward_filter" or k >= CONV_VEC_MIN_K):
        return tile["VEC"]
    return 1


def check_tile(tile, facts, kernel="gemm"):
    """The tile as ints; ValueError naming the first parameter ``kernel`` cannot take."""
    what = "%s tile" % kernel
    missing = [k for k in TILE_KEYS if k not in tile]
    if missing:
        raise ValueError("%s: missing %s" % (what, ", ".join(missing)))
    t = {k: int(tile[k]) for k in TILE_KEYS}
    if any(v <= 0 for v in t.values()):
        raise ValueError("%s: every parameter must be positive, got %s" % (what, t))
    wide = kernel == "gemm" and t["VEC"] in CPU_VECS
    widest = getattr(facts, "max_float_vector", 16)
    if wide and t["VEC"] > widest:
        raise ValueError("%s: VEC=%d is wider than this device's compiler takes (float%d at "
                         "most: PoCL on LLVM 14 aborts on float16 arithmetic)"
                         % (what, t["VEC"], widest))
    if t["VEC"] not in (1, 4) and not wide:
        raise ValueError("%s: VEC must be 1 or 4%s, got %d"
                         % (what, " (8 or 16: kernels/gemm_cpu.cl)" if kernel == "gemm" else "",
                            t["VEC"]))
    for side in "MN":
        tm, bm = t["TILE_" + side], t["BLOCK_" + side]
        if wide:  # only B rows are read VEC wide; A is broadcast one value at a time
            if tm % bm or (side == "N" and bm % t["VEC"]):
                raise ValueError("%s: TILE_%s=%d must be a multiple of BLOCK_%s=%d%s"
                                 % (what, side, tm, side, bm, ", itself a multiple of VEC=%d"
                                    % t["VEC"] if side == "N" else ""))
            continue
        if tm % bm or bm % t["VEC"] or tm % 4:
            raise ValueError("%s: TILE_%s=%d must be a multiple of 4 and of BLOCK_%s=%d, "
                             "itself a multiple of VEC=%d" % (what, side, tm, side, bm, t["VEC"]))
    if t["TILE_K"] % 4:
        raise ValueError("%s: TILE_K=%d must be a multiple of 4" % (what, t["TILE_K"]))
    threads = (t["TILE_M"] // t["BLOCK_M"]) * (t["TILE_N"] // t["BLOCK_N"])
    if threads > facts.max_work_group:
        raise ValueError("%s: %d threads per work-group, the device allows %d"
                         % (what, threads, facts.max_work_group))
    if kernel == "conv":
        tm, tn, tk = t["TILE_M"], t["TILE_N"], t["TILE_K"]
        if t["GROUP"] != 1:
            raise ValueError("%s: GROUP must be 1 (tiles run in plain order), got %d"
                             % (what, t["GROUP"]))
        if threads % tm or threads % tn or threads % tk or (tm * tk) % threads \
                or (tk * tn) % threads:
            raise ValueError("%s: %d threads must be a multiple of TILE_M=%d, TILE_N=%d and "
                             "TILE_K=%d and divide TILE_M*TILE_K and TILE_K*TILE_N (the "
                             "kernel's load mappings)" % (what, threads, tm, tn, tk))
        pad = 4 if t["VEC"] == 4 else 1
        local = tk * (tm + tn + 2 * pad) * 4
    elif wide:
        local = 0
    else:
        local = 2 * t["TILE_K"] * (t["TILE_M"] + t["TILE_N"] + 8) * 4
    if local > facts.local_mem:
        raise ValueError("%s: needs %d bytes of local memory, the device has %d"
                         % (what, local, facts.local_mem))
    return t


# what dlprim-tune tries, most promising first: (TILE_M, TILE_N, TILE_K, BLOCK_M, BLOCK_N,
# VEC, GROUP); the GEMM lists by facts.is_cpu, the convolution lists by facts.is_gpu
_CANDIDATES = {
    "gemm": {"gpu": [(128, 128, 16, 8, 8, 4, 8), (128, 128, 8, 8, 8, 4, 8),
                     (256, 128, 8, 16, 8, 4, 8), (128, 256, 8, 8, 16, 4, 8),
                     (128, 128, 16, 8, 8, 4, 1), (64, 128, 16, 8, 8, 4, 8),
                     (128, 64, 16, 8, 8, 4, 8), (64, 128, 16, 4, 8, 4, 8),
                     (128, 64, 16, 8, 4, 4, 8), (64, 64, 16, 4, 4, 4, 8),
                     (64, 64, 16, 8, 8, 4, 8), (32, 64, 16, 4, 4, 4, 1),
                     (64, 32, 16, 4, 4, 4, 1), (32, 32, 16, 4, 4, 4, 1)],
             # (with AVX2 code on an Intel Xeon, 4 x 24 and 6 x 16 float8 blocks, 12 sums,
             # ran 5-15% faster than the table's 4 x 16 on most transformer shapes; with
             # AVX-512 code 4 x 64 about as fast as the table's 8 x 32: docs/benchmarks.md)
             "cpu": [(64, 64, 8, 4, 16, 8, 1), (16, 64, 8, 4, 16, 8, 1), (64, 64, 8, 4, 64, 16, 1),
                     (16, 32, 8, 4, 32, 16, 1), (48, 64, 8, 6, 16, 8, 1), (64, 96, 8, 4, 24, 8, 1),
                     (64, 64, 8, 8, 8, 8, 1), (32, 32, 16, 4, 4, 4, 1)]},
    "conv": {"gpu": [(128, 128, 16, 8, 8, 4, 1), (64, 128, 16, 8, 8, 4, 1),
                     (64, 64, 16, 4, 4, 4, 1), (32, 64, 16, 4, 4, 4, 1),
                     (128, 64, 16, 8, 8, 4, 1), (128, 128, 8, 8, 8, 4, 1),
                     (64, 64, 16, 8, 8, 4, 1), (32, 32, 16, 4, 4, 4, 1)],
             "cpu": [(32, 32, 8, 4, 4, 1, 1), (16, 16, 8, 4, 4, 1, 1), (64, 64, 8, 8, 8, 1, 1),
                     (32, 64, 8, 4, 4, 1, 1), (32, 32, 8, 4, 4, 4, 1)]},
}


def candidates(facts, kernel="gemm"):
    """The tiles dlprim-tune times for ``kernel`` ('gemm' or 'conv') that fit the device."""
    if kernel == "conv":
        rows = _CANDIDATES["conv"]["gpu" if facts.is_gpu else "cpu"]
    else:
        rows = _CANDIDATES["gemm"]["cpu" if facts.is_cpu else "gpu"]
    out = []
    for row in rows:
        try:
            out.append(check_tile(_tile(*row), facts, kernel))
        except ValueError:
            pass
    return out


# ----- Winograd and the algorithm choice: benchmarks/conv.py on an H100/H200
WINOGRAD_FILTER_SUM = "auto"  # "gemm", "split" or "auto" (gemm unless a split is forced)
WINOGRAD_MIN_CHANNELS = 64
CPU_WINOGRAD_MIN_PIXELS = 28 * 28
# 5x5 layers: F(4x4, 5x5)'s 6.25x fewer products win by far more (PoCL, 2 cores, batch 4,
# ms im2col / F(4x4, 5x5), forward, backward-data, backward-filter: 64->192 at 27x27
# 98.9 / 30.3, 110.6 / 28.8, 93.7 / 23.5; 64->64 at 56x56 148.9 / 39.8, 157.3 / 41.5,
# 153.4 / 39.2), down to AlexNet's 27x27, the smallest measured
CPU_WINOGRAD_K5_MIN_PIXELS = 27 * 27
# on CPUs of 16-float vectors Winograd's forward and backward-data also win at 14x14
# (256 -> 256, batch 4, 2-core AVX-512 EPYC, Intel's runtime, two runs, ms im2col /
# Winograd: forward 7.30 / 6.24 and 9.22 / 6.87, backward-data 7.92 / 6.00 and 9.38 /
# 6.56; the filter gradient 6.55 / 9.22 and 6.94 / 9.46); at 7x7 the two runs disagreed
CPU_WIDE_WINOGRAD_MIN_PIXELS = 14 * 14

# Winograd's tile. F(4x4,3x3) does 4x fewer products than direct convolution, F(2x2,3x3)
# 2.25x, but F(4x4) rounds worse: its float32 sums over the input channels in the
# transform domain run over terms that the output transform (entries up to 8) then
# cancels. Against DLPrimitives' own test cases (tests/dlprim_cases: eps 1e-5, scaled by
# std(reference) above 1; PoCL, float64 PyTorch reference), worst error / eps F(4x4) ->
# F(2x2): 1->2 at 32x32 input gradient 1.10 -> 0.08; 3->8 at 20x20 input gradient
# 1.29 -> 0.10 (F(4x4) 0.4-0.9 elsewhere on 1-8 channels); 128->64 at 4x4-19x19,
# batch 1-3, forward 1.2-3.9 and input gradient 1.7-3.9 -> 0 (exact on its half-integer
# data); transposed 64->128 at 4x4 forward 2.3 -> 0. So F(2x2) where F(4x4) buys nothing:
# - fewer than WINOGRAD_MIN_CHANNELS channels on both sides: the automatic choice never
#   takes Winograd there (prefer_winograd), only a forced algorithm reaches it;
# - forward and backward-data under WINOGRAD_F4_MIN_PIXELS output pixels (batch * out_h *
#   out_w): F(4x4) exceeds DLPrimitives' eps by 2-5x on 64+ channels up to 2 x 32x32
#   (128->64 at 20x20 and 32x32, batch 2: forward 2.2-3.7, input gradient 2.9-3.5;
#   transposed 64->128 at 20x20: forward 1.8, input gradient 4.9; mostly the
#   transform-domain float32 sums themselves: a numpy model with them exact gives 0.7
#   eps, and the points 0, +-1, 1/2, -2 instead of 0, +-1, +-2 cut it only 2.5x). The
#   one benchmarked layer below it, 512->512 at 7x7 batch 16 (784 pixels), runs F(2x2)
#   faster on an H200 (GFLOP/s F(2x2) / F(4x4): forward 41185 / 38217, backward-data
#   40635 / 37148);
# - backward-filter under WINOGRAD_F4_FILTER_MIN_PIXELS: its F(4x4) stays within eps on
#   those cases, and F(2x2) would cost it (7x7 batch 16: 29312 / 42455).
WINOGRAD_F4_MIN_PIXELS = 2 * 32 * 32 + 1
WINOGRAD_F4_FILTER_MIN_PIXELS = 28 * 28
# With tensor cores (a precision other than "fp32" on a device that has them), F(2x2)'s
# batched GEMMs multiply TF32 while F(4x4)'s stay float32 (conv_winograd.gemm_precision),
# and F(2x2) wins on wide layers: at least WINOGRAD_TC_F2_MIN_CHANNELS channels on both
# sides (WINOGRAD_TC_F2_FILTER_MIN_CHANNELS for the filter gradient). GFLOP/s F(2x2) /
# F(4x4), fp16, batch 64, H200 (dlprim-benchmark conv --precision fp16): 512->512 at 28x28
# forward 158656 / 131805, filter 163097 / 130494; 256->256 at 14x14 forward 87020 /
# 73564; 128->128 at 112x112 filter 87824 / 69622; but 128->256 at 56x56 forward 93876 /
# 106733 and 64->128 at 112x112 filter 57122 / 81787 (docs/benchmarks.md).
WINOGRAD_TC_F2_MIN_CHANNELS = 256
WINOGRAD_TC_F2_FILTER_MIN_CHANNELS = 128


def winograd_tile(in_c, out_c, out_hw, batch, filter_pass=False, tensor_cores=False):
    """M of Winograd F(MxM, RxR) (3x3 and 5x5 filters alike) for a pass over ``out_hw``
    output planes of ``batch`` images: 4 (fewest products) unless the output is under
    4x4, both channel counts are under WINOGRAD_MIN_CHANNELS or the problem is under
    WINOGRAD_F4_MIN_PIXELS (WINOGRAD_F4_FILTER_MIN_PIXELS for the filter gradient), where
    F(2x2)'s smaller rounding errors cost nothing, or (``tensor_cores``: F(2x2) would
    multiply on them) the layer is wide enough for F(2x2)'s tensor-core GEMMs to win
    (above). A 5x5 layer runs Winograd only where this gives 4
    (``conv_winograd.automatic_tile_serves``)."""
    if min(out_hw) < 4 or max(in_c, out_c) < WINOGRAD_MIN_CHANNELS:
        return 2
    wide = WINOGRAD_TC_F2_FILTER_MIN_CHANNELS if filter_pass else WINOGRAD_TC_F2_MIN_CHANNELS
    if tensor_cores and min(in_c, out_c) >= wide:
        return 2
    least = WINOGRAD_F4_FILTER_MIN_PIXELS if filter_pass else WINOGRAD_F4_MIN_PIXELS
    return 2 if batch * out_hw[0] * out_hw[1] < least else 4


def winograd_sum_tile(facts, in_c):
    """The batched Gemm tile of Winograd's filter sum: 64 x 128 on GPUs where in_c fills it
    (it led the other tilings and split-K on an H200), else None (the Gemm's own)."""
    return _tile(64, 128, 16, 8, 8, 4, 1) if facts.is_gpu and in_c >= 128 else None


# ----- im2col + GEMM (core/conv_im2col.py): on CPUs every direction of ungrouped layers
# (forward and backward-data not for plain 1x1 ones, a GEMM already); 64->64 3x3 at
# 56x56, batch 2, on a 2-core EPYC under PoCL (docs/benchmarks.md "CPU (PoCL)")
IM2COL_WORKSPACE_BYTES = 64 << 20  # columns of this many bytes at most: chunks of the batch


def prefer_im2col(facts, direction, plain_1x1):
    """Whether ``direction`` of an ungrouped convolution runs as im2col + GEMM."""
    return facts.is_cpu and (direction == "backward_filter" or not plain_1x1)


# ----- direct convolution (core/conv_direct.py): on CPUs where the channels a direction
# writes (out_c forward, in_c backward-data) or sums per tap (out_c backward-filter) are
# fewer than this, the GEMM of im2col would run on its few-rows kernel and its columns
# cost as much as the products
CPU_DIRECT_MAX_CHANNELS = 64
# CPUs of 16-float vectors (tuning.cpu_vector_width: AVX-512's 32 registers hold 64
# channels by 4 pixels) take the direct forward and backward-data up to this many written
# channels, ahead of Winograd and im2col. resnet18's 3x3 layers at batch 4, 2-core AVX-512
# EPYC, Intel's runtime, ms im2col / Winograd / direct (PyTorch CPU): 64 -> 64 at 56x56
# forward 9.47 / 11.30 / 5.10 (6.23), backward-data 15.18 / 11.11 / 5.05 (7.28); 128 ->
# 128 at 28x28 forward 8.17 / 5.35 / 5.12, backward-data 11.32 / 5.96 / 5.54; 64 -> 128 at
# stride 2 forward 4.26 / - / 3.09; 256 -> 256 at 14x14 forward 7.30 / 6.24 / 6.54. The
# filter gradient's direct kernel in float16 vectors of 64 channels takes every layer of
# more than one tap there (ms im2col / Winograd / direct, batch 4): 64 -> 64 at 56x56
# 13.45 / 11.51 / 5.23, 256 -> 256 at 14x14 6.55 / 9.22 / 4.98, 512 -> 512 at 7x7 9.32 /
# 9.80 / 8.14, 128 -> 256 at stride 2 3.87 / - / 2.47, the 7x7 stem 16.70 / - / 12.55, but
# 128 -> 128 at 28x28 8.29 / 5.61 / 6.84; a 1x1 layer's is one GEMM (64 -> 256 at 56x56
# 5.08 / - / 14.72).
CPU_WIDE_DIRECT_MAX_CHANNELS = 128


def prefer_direct(facts, direction, in_c, out_c, taps=9, plain_1x1=False):
    """Whether ``direction`` of an ungrouped convolution of ``taps`` (KH x KW) runs as a
    direct convolution (``plain_1x1``: a 1x1 layer of stride 1, a GEMM as it is)."""
    if not facts.is_cpu:
        return False
    few = in_c if direction == "backward_data" else out_c
    if cpu_vector_width(facts) == 16:
        if direction == "backward_filter":
            return taps > 1
        return few <= CPU_WIDE_DIRECT_MAX_CHANNELS and not plain_1x1
    return few < CPU_DIRECT_MAX_CHANNELS


def prefer_winograd(facts, direction, in_c, out_c, pixels=0, kernel=3):
    """Whether Winograd beats the implicit GEMM for a layer it can serve: on GPUs, once
    the channels its GEMMs sum over (in_c forward, out_c backward-data) and the other
    side are at least WINOGRAD_MIN_CHANNELS -- with 3 input channels the implicit GEMM wins
    forward and backward-filter, Winograd still backward-data. On CPUs, where the other
    choice is im2col, with WINOGRAD_MIN_CHANNELS on both sides and at least
    CPU_WINOGRAD_MIN_PIXELS output pixels (``pixels``): at 28x28 and above its 4x fewer
    products win by 25-40% in every direction, at 14x14 and below the transforms and the
    smaller GEMMs lose (PoCL, 2 cores, batch 4); for 5x5 layers (``kernel``) at least
    CPU_WINOGRAD_K5_MIN_PIXELS; on CPUs of 16-float vectors, forward and backward-data,
    at least CPU_WIDE_WINOGRAD_MIN_PIXELS."""
    if facts.is_cpu:
        least = CPU_WINOGRAD_K5_MIN_PIXELS if kernel == 5 else CPU_WINOGRAD_MIN_PIXELS
        if direction != "backward_filter" and cpu_vector_width(facts) == 16:
            least = min(least, CPU_WIDE_WINOGRAD_MIN_PIXELS)
        return (in_c >= WINOGRAD_MIN_CHANNELS and out_c >= WINOGRAD_MIN_CHANNELS
                and pixels >= least)
    if not facts.is_gpu:
        return False
    if direction == "backward_data":
        return out_c >= WINOGRAD_MIN_CHANNELS
    return in_c >= WINOGRAD_MIN_CHANNELS and out_c >= WINOGRAD_MIN_CHANNELS
