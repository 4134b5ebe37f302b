"""How launches fill a device: the split models (how many parts a reduction is cut into
when its outputs alone leave the device idle) and the launchers' work-group sizes, keyed
by ``DeviceFacts``. GPU numbers from NVIDIA GPUs (H100, H200), CPU ones from PoCL.
"""
import math
import re

from ..utils import ceil_div, round_up

__all__ = ["split_k", "split_parts", "depthwise_chunks", "reduce_chunks", "reduce_wg",
           "depthwise_filter_wg", "gpu_local", "depthwise_on_cpu", "depthwise_cpu_rows",
           "depthwise_cpu_filter_plan"]

# ----- split models
SPLIT_GROUPS_PER_CU = 4  # what a split reduction aims at (conv and depthwise filters, reduce)
GEMM_CU_THREADS = 2048  # resident threads per compute unit (H100) in the GEMM split model
GEMM_FEW_ROWS_FILL = 0.1  # below this share of them filled, a few-rows GEMM splits K finely
GEMM_MAX_PARTS = 16
CONV_MIN_CHUNK = 512  # shortest slice of a convolution reduction one work-group sums
WINOGRAD_SUM_MIN_CHUNK = 128  # Winograd's filter sum over batch*tiles is short: finer
# CPUs split the implicit GEMM's filter-gradient reduction for precision: a work-item
# summing all of batch*pixels in float32 in one running sum erred 1.85x DLPrimitives' eps
# (transposed 1x1 stride-2 1->1 at 20x20, batch 2: one weight, 800 terms); in slices of
# 128 or more (at most 16) its gemm cases stay under 0.3x. The time of grouped 3x3
# filter gradients on PoCL (2 cores) moved less than the noise (+-15%)
CPU_FILTER_MIN_CHUNK = 128
CPU_FILTER_MAX_PARTS = 16


def split_k(k, parts, tile_k):
    """(parts, slice): k cut into at most ``parts`` slices of a multiple of ``tile_k``."""
    chunk = round_up(ceil_div(k, parts), tile_k)
    return ceil_div(k, chunk), chunk


def split_parts(facts, kind, k, work_groups, threads, flops=0.0, out_bytes=0.0,
                min_chunk=CONV_MIN_CHUNK, few_rows=False):
    """Into how many parts a GEMM reduction of length ``k`` is cut when its output gives
    ``work_groups`` work-groups of ``threads``; 1 off GPUs. ``kind``:

    - 'gemm' (core/gemm.py; H100, H200): under 3% of the GPU's threads filled, enough
      parts for ~25%, at most GEMM_MAX_PARTS (64x1000x2048: 2.0 -> 11.9 TFLOP/s with 16
      parts); under 20%, two parts (256x12544x2304: 32.7 -> 40.3; more lost to the extra
      pass and partial waves; 1024^3 and 512x3136x2048 lost 6-7% with 8 parts); past 20%
      splitting lost (2048x3136x512: 31.0 -> 27.5 with 2 parts). ``few_rows`` (M or N at
      most one small tile: an inner product's batch, which reads its weights once and is
      bound by how many loads are in flight): under GEMM_FEW_ROWS_FILL, enough parts for
      ~50% (AlexNet's classifier on an H200: 16x4096x9216 232 -> 124 us, 16x4096x4096
      110 -> 62 us, 64x9216x4096 224 -> 155 us with 15-16 parts instead of 2).
    - 'conv' (forward and backward-data of the implicit GEMM; H200): the count minimising
      a model of the time -- ``flops`` at a fixed rate slowed by the share of the GPU the
      work-groups leave idle (three 128-thread or two 256-thread work-groups fit per
      compute unit), plus the partials' ``out_bytes`` written and read at 10 FLOPs a byte.
    - 'conv_filter' (backward-filter: small output, long reduction; H200): enough parts
      for SPLIT_GROUPS_PER_CU work-groups per compute unit, each summing at least
      ``min_chunk`` (less where that leaves the reduction whole or the GPU mostly idle).
      On CPUs slices of CPU_FILTER_MIN_CHUNK, for shorter float32 running sums.
    """
    if not facts.is_gpu:
        if kind == "conv_filter" and facts.is_cpu:
            return max(1, min(k // CPU_FILTER_MIN_CHUNK, CPU_FILTER_MAX_PARTS))
        return 1
    cus = facts.compute_units
    if kind == "gemm":
        fill = threads * work_groups / (cus * float(GEMM_CU_THREADS))
        if work_groups == 0 or k < 256:
            return 1
        low, share = (GEMM_FEW_ROWS_FILL, 0.5) if few_rows else (0.03, 0.25)
        if fill < low:
            return min(math.ceil(share / fill), k // 128, GEMM_MAX_PARTS)
        return 2 if fill < 0.2 and k >= 1024 else 1
    if kind == "conv_filter":
        want = ceil_div(SPLIT_GROUPS_PER_CU * cus, work_groups)
        chunk = min_chunk
        if k // chunk < 2:
            chunk = min(chunk, 192)  # a short reduction still splits
        if work_groups * min(want, k // chunk) < cus:
            chunk = min(chunk, 128)  # under one work-group per compute unit: go finer
        return max(1, min(want, k // chunk, 256))
    if kind != "conv":
        raise ValueError("split_parts: unknown kind %r; known: gemm, conv, conv_filter" % kind)
    fit = cus * (3 if threads <= 128 else 2)
    best, best_cost = 1, None
    for parts in range(1, 17):
        if parts > 1 and k // parts < min_chunk:
            break
        cost = flops / min(1.0, work_groups * parts / fit) + \
            (10.0 * (parts + 1) * out_bytes if parts > 1 else 0.0)
        if best_cost is None or cost < best_cost:
            best, best_cost = parts, cost
    return best


def depthwise_chunks(facts, out_c, total, wg):
    """Chunks of the batch*pixels sum in depthwise backward-filter (``out_c`` work-groups
    each): SPLIT_GROUPS_PER_CU per compute unit, at least 16 items per work-item."""
    want = ceil_div(SPLIT_GROUPS_PER_CU * facts.compute_units, out_c)
    return max(1, min(want, total // (16 * wg)))


# CPU depthwise kernels (kernels/conv_depthwise_cpu.cl): PoCL runs a work-item as one
# thread's loop, so a work-item computes whole rows and a few dozen fill the cores. On
# PoCL, MobileNet-V2's layers at batch 4 moved less than the noise between 4096 and 65536
# outputs and between 2 and 16 work-items per core (docs/benchmarks.md)
DEPTHWISE_CPU_ITEM_OUTPUTS = 16384  # outputs one work-item computes, at least
DEPTHWISE_CPU_ITEMS_PER_CU = 4  # work-items per core where the rows allow: even finish


def depthwise_on_cpu(facts):
    """Whether depthwise convolutions run on the CPU-shaped kernels."""
    return facts.is_cpu and not facts.is_gpu


def depthwise_cpu_rows(facts, rows, row_len):
    """(work-items, rows each) for ``rows`` output rows of ``row_len`` in the CPU
    depthwise forward and backward-data."""
    items = max(DEPTHWISE_CPU_ITEMS_PER_CU * facts.compute_units,
                ceil_div(rows * row_len, DEPTHWISE_CPU_ITEM_OUTPUTS))
    chunk = ceil_div(rows, min(items, rows))
    return ceil_div(rows, chunk), chunk


def depthwise_cpu_filter_plan(facts, channels, rows, row_len):
    """(channels per work-item, splits, rows per split) of the CPU depthwise
    backward-filter: whole channels per work-item where there are enough of them, else
    each channel's ``rows`` split (partial sums added by a second launch)."""
    least = DEPTHWISE_CPU_ITEMS_PER_CU * facts.compute_units
    items = max(least, ceil_div(channels * rows * row_len, DEPTHWISE_CPU_ITEM_OUTPUTS))
    splits = 1 if channels >= least else min(rows, ceil_div(least, channels))
    chunk = ceil_div(rows, splits)
    return ceil_div(channels, min(items, channels)), ceil_div(rows, chunk), chunk


DIRECT_FILTER_ITEMS_PER_CU = 8  # work-items per core the direct filter gradient aims at


def direct_filter_parts(facts, items, batch):
    """Parts the batch is cut into for the direct convolution's filter gradient
    (core/conv_direct.py), whose ``items`` work-items each sum a whole batch: one where
    they give every core DIRECT_FILTER_ITEMS_PER_CU, else enough parts for that (at most
    one per image; the partial sums cost a second launch)."""
    least = DIRECT_FILTER_ITEMS_PER_CU * facts.compute_units
    return max(1, min(batch, ceil_div(least, items))) if items < least else 1


def reduce_chunks(facts, groups, reduced, lr):
    """Chunks of a pointwise reduction whose ``groups`` work-groups (``lr`` threads on each
    output) fall short of SPLIT_GROUPS_PER_CU per compute unit and whose ``reduced``
    length is long enough (64 per thread) to pay for a second pass."""
    target = SPLIT_GROUPS_PER_CU * facts.compute_units
    if groups < target and reduced >= lr * 64:
        return min(ceil_div(target, groups), reduced // (lr * 16), 1024)
    return 1


def reduce_cpu_chunks(facts, outputs, reduced):
    """Chunks of a pointwise reduction on a CPU (one work-item per output and chunk): as
    many as bring the work-items to POINTWISE_CPU_ITEMS_PER_CU per core, none shorter than
    POINTWISE_CPU_MIN_CHUNK elements."""
    target = POINTWISE_CPU_ITEMS_PER_CU * facts.compute_units
    if outputs >= target or outputs == 0:  # an empty output launches nothing
        return 1
    return max(1, min(ceil_div(target, outputs), reduced // POINTWISE_CPU_MIN_CHUNK, 1024))


# ----- launch sizes
POINTWISE_WG = 256
POINTWISE_ELEMS = 4  # elements per work-item: loads in flight (H200: 2.4 -> 3.4 TB/s on a scale)
REDUCE_ELEMS = 4  # loads in flight per pass of a reduction loop
REDUCE_CPU_WG = 8  # CPU drivers run a work-group's items in one thread: 2-6x faster on PoCL
REDUCE_CPU_COLUMNS = 64  # outputs side by side a work-item of a CPU column sum
CONV_REDUCE_WG = 256  # conv_split_reduce
DEPTHWISE_WG = 64  # depthwise forward/backward-data and the filter-gradient sum
DEPTHWISE_CPU_VEC = 8  # floats per vector of the CPU depthwise kernels (one AVX2 register)
WINOGRAD_WG = 64  # Winograd transforms; packs channels where an image has fewer tiles (H200)
WINOGRAD_MATRIX_WG = 16  # filter transforms: 16x16 work-groups


POINTWISE_CPU_MIN_CHUNK = 4096  # elements a CPU work-item takes at least (launch cost)
POINTWISE_CPU_ITEMS_PER_CU = 4  # work-items per core: the last ones balance the load


def pointwise_cpu_chunk(facts, size):
    """Contiguous elements per work-item of a pointwise kernel on a CPU: enough work-items
    for every core to take a few, never so few elements that launching one costs more,
    a multiple of 64 so that chunks start on cache lines."""
    want = ceil_div(size, POINTWISE_CPU_ITEMS_PER_CU * facts.compute_units)
    return round_up(max(want, POINTWISE_CPU_MIN_CHUNK), 64)


# math functions that a CPU driver computes by a library call per element unless it
# vectorizes the work-items themselves
_TRANSCENDENTAL = re.compile(r"\b(?:exp|exp2|exp10|expm1|log|log2|log10|log1p|pow|pown|powr|"
                             r"rootn|tanh|sinh|cosh|asinh|acosh|atanh|erf|erfc|sin|cos|tan|"
                             r"asin|acos|atan|atan2|lgamma|tgamma|cbrt)\s*\(")


def pointwise_cpu_items(facts, code):
    """Whether a pointwise kernel on a CPU takes one element per work-item, in work-groups
    the driver picks, rather than a contiguous chunk per work-item: on Intel's CPU runtime,
    for statements that call a transcendental function, which it vectorizes across the
    work-items of a group (its vector math library) and computes by a scalar call per
    element inside a chunk's loop. 2-core EPYC, (512, 1024) float32, ms: sigmoid 2.27 ->
    1.17, gelu_tanh 2.62 -> 1.32; a relu stays chunked (0.18 against 0.62 per element)."""
    return facts.is_cpu and facts.vendor_id == "intel" and bool(_TRANSCENDENTAL.search(code))


def reduce_wg(facts):
    """The largest work-group of a pointwise reduction (before the device's limit)."""
    return REDUCE_CPU_WG if facts.is_cpu else POINTWISE_WG


def depthwise_filter_wg(facts):
    """Work-items reducing one filter tap in depthwise backward-filter."""
    return 256 if facts.is_gpu else 32


def gpu_local(facts, local):
    """``local`` on GPUs; None elsewhere, where the driver picks the work-group."""
    return local if facts.is_gpu else None
