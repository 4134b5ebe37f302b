"""Tune kernels for the current device: ``python -m dlprim.cli.tune gemm [--sizes ...]``.

For each shape class (see ``dlprim.core.tuning.shape_class``) given by the sizes,
every candidate tile is timed (median of ``--repeat`` runs after a warm-up) and the
fastest is stored per (device name, driver version, shape class) in
``gemm_tuning.json`` under the user cache dir (``DLPRIM_CACHE_DIR`` overrides it).
Tuning only picks among correct kernels; it is never needed for correctness.
"""
import argparse
import statistics
import sys
import time

import numpy as np

from ..context import Context
from ..core import tuning
from ..core.gemm import Gemm
from ..tensor import Tensor

__all__ = ["main", "gemm_candidates", "tune_gemm"]


def _tiles(*rows):
    return [dict(zip(tuning.TILE_KEYS, r)) for r in rows]


# (TILE_M, TILE_N, TILE_K, BLOCK_M, BLOCK_N, VEC, GROUP), most promising first
_GPU = _tiles((128, 128, 16, 8, 8, 4, 8), (128, 128, 8, 8, 8, 4, 8), (256, 128, 8, 16, 8, 4, 8),
              (128, 256, 8, 8, 16, 4, 8), (128, 128, 16, 8, 8, 4, 1), (64, 128, 16, 8, 8, 4, 8),
              (128, 64, 16, 8, 8, 4, 8), (64, 128, 16, 4, 8, 4, 8), (128, 64, 16, 8, 4, 4, 8),
              (64, 64, 16, 4, 4, 4, 8), (64, 64, 16, 8, 8, 4, 8), (32, 64, 16, 4, 4, 4, 1),
              (64, 32, 16, 4, 4, 4, 1), (32, 32, 16, 4, 4, 4, 1))
_CPU = _tiles((32, 32, 16, 4, 4, 4, 1), (16, 16, 16, 4, 4, 4, 1), (64, 64, 16, 8, 8, 4, 1),
              (32, 32, 8, 4, 4, 1, 1))

# one size per shape class (the class of a size depends on the device's compute units)
DEFAULT_SIZES = {"gpu": ["4096", "2048", "1024", "64x50176x576", "50176x64x576", "32x8192x2048",
                         "8192x32x2048", "32x32x4096"],
                 "cpu": ["1024", "256", "128", "64x512x64", "512x64x64", "16x256x256", "256x16x256",
                         "16x16x256"]}


def gemm_candidates(facts):
    """Candidate tiles that fit the device (work-group size, local memory)."""
    out = []
    for tile in (_CPU if facts.is_cpu else _GPU):
        try:
            out.append(tuning.check_tile(tile, facts))
        except ValueError:
            pass
    return out


def parse_size(text):
    """'1024' -> (1024, 1024, 1024); '64x3136x576' -> (64, 3136, 576)."""
    parts = [int(p) for p in text.lower().split("x")]
    if len(parts) == 1:
        parts *= 3
    if len(parts) != 3 or min(parts) <= 0:
        raise ValueError("size %r: expected N or MxNxK with positive integers" % text)
    return tuple(parts)


def _time(ctx, op, args, repeat):
    op(*args)  # warm-up (and build)
    ctx.finish()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        op(*args)
        ctx.finish()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def tune_gemm(ctx, sizes, candidates, repeat=5, out=None):
    """{shape class: best tile} over the given sizes; prints one line per measurement."""
    out = out or sys.stdout
    rng = np.random.default_rng(0)
    by_class = {}
    for M, N, K in sizes:
        by_class.setdefault(tuning.shape_class(M, N, 1, ctx.facts.compute_units), []).append((M, N, K))
    best = {}
    for cls, shapes in by_class.items():
        totals = []
        for tile in candidates:
            total = 0.0
            for M, N, K in shapes:
                A = Tensor.from_numpy(ctx, rng.standard_normal((M, K), np.float32))
                B = Tensor.from_numpy(ctx, rng.standard_normal((K, N), np.float32))
                C = Tensor(ctx, (M, N))
                seconds = _time(ctx, Gemm(ctx, M, N, K, tile=tile), (A, B, C), repeat)
                total += seconds
                print("%-8s %5dx%5dx%5d  %-34s %9.3f ms %8.1f GFLOP/s"
                      % (cls, M, N, K, _describe(tile), seconds * 1e3,
                         2 * M * N * K / seconds / 1e9), file=out)
            totals.append((total, tile))
        best[cls] = min(totals, key=lambda x: x[0])[1]
        print("best for %s: %s" % (cls, _describe(best[cls])), file=out)
    return best


def _describe(tile):
    return "%dx%dx%d block %dx%d vec%d group%d" % tuple(tile[k] for k in tuning.TILE_KEYS)


def main(argv=None, ctx=None):
    """The dlprim-tune program (``ctx`` for tests); returns the exit status."""
    parser = argparse.ArgumentParser(prog="dlprim-tune", description=__doc__.splitlines()[0])
    parser.add_argument("kernel", choices=["gemm"])
    parser.add_argument("--sizes", nargs="+", help="N or MxNxK; default: one per shape class")
    parser.add_argument("--device", help="device string (default: DLPRIM_DEVICE or first GPU)")
    parser.add_argument("--repeat", type=int, default=5, help="timed runs per candidate")
    parser.add_argument("--candidates", type=int, help="try only the first N candidates")
    args = parser.parse_args(argv)
    ctx = ctx or Context(args.device)
    family = "cpu" if ctx.facts.is_cpu else "gpu"
    sizes = [parse_size(s) for s in (args.sizes or DEFAULT_SIZES[family])]
    candidates = gemm_candidates(ctx.facts)[:args.candidates]
    print("tuning gemm on %s (driver %s)" % (ctx.name, ctx.facts.driver_version))
    best = tune_gemm(ctx, sizes, candidates, max(1, args.repeat))
    path = tuning.store_tuned(ctx.facts, best)
    print("stored in %s" % path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
