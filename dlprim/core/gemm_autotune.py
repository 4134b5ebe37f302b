"""GEMM tiles measured per shape on the device, as cuDNN's benchmark mode: opt-in
(``DLPRIM_AUTOTUNE=1`` in the environment, or ``set_autotune(True)``).

The shape-class tables and the wave plan (``tuning``) choose well for the shapes they
were measured on, but a transformer's GEMMs at a few thousand rows fall between them: on
an H200, GPT-2's weight gradients ran their chosen tile at 20-32 TFLOP/s where another
candidate reached 30-35. With autotuning on, the first float32 Gemm of a shape on a GPU
times the shape-class choice and every candidate tile (``tuning.candidates``), keeps the
fastest with its split of K in ``gemm_tuning.json`` under the device and driver
(``tuning_cache``), and every later Gemm of that shape, in this process or the next,
takes it from there. A Net plans its GEMMs once, so it pays the timing when it is built;
the kernels it builds are cached like any other.
"""
import logging
import os
import time

from ..tensor import Tensor
from . import tuning
from .copy import fill
from .tuning_cache import store_tuned, tuned_entry

__all__ = ["set_autotune", "autotuning", "shape_key", "tuned_choice"]

log = logging.getLogger(__name__)

_on = [os.environ.get("DLPRIM_AUTOTUNE", "").strip() not in ("", "0")]
_measuring = [False]  # the candidates' own Gemms choose as without autotuning
SPLIT = "SPLIT_K"  # the stored entry's split of K, beside the tile's keys
TIMED_SECONDS = 0.02  # each candidate runs about this long (at least once, at most 50 times)


def set_autotune(on=True):
    """Turn per-shape GEMM autotuning on or off for this process."""
    _on[0] = bool(on)


def autotuning():
    """Whether a new float32 GPU Gemm of an untuned shape measures its tiles."""
    return _on[0] and not _measuring[0]


def shape_key(M, N, K, trans_a, trans_b):
    """The stored entry's name: 'shape MxNxK NT' (A, B transposed or not)."""
    return "shape %dx%dx%d %s%s" % (M, N, K, "T" if trans_a else "N", "T" if trans_b else "N")


def tuned_choice(ctx, M, N, K, trans_a, trans_b, make):
    """(tile, split_k) for a float32 M x N x K GEMM on ``ctx``: stored, else measured now
    (``make(tile)``: the Gemm of this shape on ``tile``, None for the class choice) and
    stored; None where the stored entry no longer fits the device's limits."""
    key = shape_key(M, N, K, trans_a, trans_b)
    entry = tuned_entry(ctx.facts, "gemm", key)
    if entry is None:
        entry = _measure(ctx, M, N, K, trans_a, trans_b, make)
        store_tuned(ctx.facts, {key: entry})
    try:
        split = int(entry[SPLIT])
        tile = tuning.check_tile({k: entry[k] for k in tuning.TILE_KEYS}, ctx.facts)
    except (KeyError, TypeError, ValueError):
        return None
    return tile, split


def _measure(ctx, M, N, K, trans_a, trans_b, make):
    """The fastest of the shape-class choice and the candidates, as a stored entry."""
    a = Tensor(ctx, (K, M) if trans_a else (M, K))
    b = Tensor(ctx, (N, K) if trans_b else (K, N))
    c = Tensor(ctx, (M, N))
    for t in (a, b, c):  # values that neither overflow nor take a slow path
        fill(ctx, t, 0.5)
    timed = []
    _measuring[0] = True
    try:
        choices = [None] + tuning.candidates(ctx.facts)
        for tile in choices:
            op = make(tile)
            timed.append((_seconds(ctx, op.launches(a, b, c)), len(timed), op))
    finally:
        _measuring[0] = False
    seconds, _, best = min(timed)
    log.info("GEMM %s: %.1f GFLOP/s with %s, split %d (the class choice: %.1f)",
             shape_key(M, N, K, trans_a, trans_b), 2e-9 * M * N * K / seconds,
             best.tile, best.splits, 2e-9 * M * N * K / timed[0][0])
    return dict(best.tile, **{SPLIT: best.splits})


def _seconds(ctx, launches):
    """Seconds per run of ``launches``: the best of three timed batches after a first run
    (which builds what it needs)."""
    def run(times):
        start = time.perf_counter()
        for _ in range(times):
            for launch in launches:
                launch(ctx.queue)
        ctx.finish()
        return (time.perf_counter() - start) / times
    once = run(1)
    times = max(1, min(50, int(TIMED_SECONDS / max(once, 1e-6))))
    return min(run(times) for _ in range(3))
