"""Tune kernels for the current device: ``dlprim-tune gemm [--sizes ...]`` or
``dlprim-tune conv [--shapes ...]``.

For each shape class the sizes or layer shapes fall in (``dlprim.core.tuning.shape_class``
for GEMM, ``conv_class`` per direction of the implicit-GEMM convolution), every candidate
tile is timed (median of ``--repeat`` runs after a warm-up) and the fastest is stored per
(device name, driver version, shape class) in ``gemm_tuning.json`` or ``conv_tuning.json``
under the user cache dir (``DLPRIM_CACHE_DIR`` overrides it). Tuning only picks among
correct kernels; it is never needed for correctness.
"""
import argparse
import re
import statistics
import sys
import time

import numpy as np

from ..context import Context
from ..core import tuning
from ..core.conv_gemm import ConvGemm
from ..core.conv_geometry import ConvGeometry
from ..core.gemm import Gemm
from ..tensor import Tensor

__all__ = ["main", "tune_gemm", "tune_conv", "parse_size", "parse_shape"]

# one size per shape class (the class of a size depends on the device's compute units)
DEFAULT_SIZES = {"gpu": ["4096", "2048", "1024", "64x50176x576", "50176x64x576", "32x8192x2048",
                         "8192x32x2048", "32x32x4096"],
                 "cpu": ["1024", "256", "128", "64x512x64", "512x64x64", "16x256x256", "256x16x256",
                         "16x16x256"]}
# layer shapes IN_CxHxW:OUT_CxK[/STRIDE]: ResNet-50's on GPUs, small ones on CPUs
DEFAULT_SHAPES = {"gpu": ["3x224x224:64x7/2", "64x56x56:64x3", "128x56x56:128x3/2",
                          "256x14x14:256x3", "512x7x7:512x3", "1024x14x14:2048x1/2"],
                  "cpu": ["8x32x32:16x3", "32x16x16:32x3/2", "64x8x8:64x3", "64x8x8:128x1/2"]}
MODES = ("forward", "backward_data", "backward_filter")


def parse_size(text):
    """'1024' -> (1024, 1024, 1024); '64x3136x576' -> (64, 3136, 576)."""
    parts = [int(p) for p in text.lower().split("x")]
    if len(parts) == 1:
        parts *= 3
    if len(parts) != 3 or min(parts) <= 0:
        raise ValueError("size %r: expected N or MxNxK with positive integers" % text)
    return tuple(parts)


def parse_shape(text):
    """'64x56x56:128x3/2' -> ConvGeometry(64 -> 128 channels, 56x56, 3x3 kernel, stride 2,
    padding kernel // 2)."""
    match = re.fullmatch(r"(\d+)x(\d+)x(\d+):(\d+)x(\d+)(?:/(\d+))?", text.strip().lower())
    if not match:
        raise ValueError("conv shape %r: expected IN_CxHxW:OUT_CxK[/STRIDE], e.g. "
                         "64x56x56:128x3/2" % text)
    in_c, h, w, out_c, k, stride = (int(v) if v else 1 for v in match.groups())
    if min(in_c, h, w, out_c, k, stride) <= 0:
        raise ValueError("conv shape %r: every number must be positive" % text)
    return ConvGeometry(in_c, out_c, (h, w), (k, k), (stride, stride), (k // 2,) * 4)


def _time(ctx, run, repeat):
    run()  # warm-up (and build)
    ctx.finish()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        run()
        ctx.finish()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _describe(tile):
    return "%dx%dx%d block %dx%d vec%d group%d" % tuple(tile[k] for k in tuning.TILE_KEYS)


def _shape_text(geom):
    return "%dx%dx%d:%dx%d/%d" % (geom.in_c, geom.in_h, geom.in_w, geom.out_c, geom.kh, geom.sh)


def _best(cls, totals, out):
    best = min(totals, key=lambda x: x[0])[1]
    print("best for %s: %s" % (cls, _describe(best)), file=out)
    return best


def tune_gemm(ctx, sizes, candidates, repeat=5, out=None):
    """{shape class: best tile} over the given (M, N, K) sizes; prints one line per
    measurement."""
    out = out or sys.stdout
    rng = np.random.default_rng(0)
    by_class = {}
    for M, N, K in sizes:
        by_class.setdefault(tuning.gemm_class(ctx.facts, M, N), []).append((M, N, K))
    best = {}
    for cls, shapes in by_class.items():
        totals = []
        for tile in candidates:
            total = 0.0
            for M, N, K in shapes:
                A = Tensor.from_numpy(ctx, rng.standard_normal((M, K), np.float32))
                B = Tensor.from_numpy(ctx, rng.standard_normal((K, N), np.float32))
                C = Tensor(ctx, (M, N))
                op = Gemm(ctx, M, N, K, tile=tile)
                seconds = _time(ctx, lambda: op(A, B, C), repeat)
                total += seconds
                print("%-8s %5dx%5dx%5d  %-34s %9.3f ms %8.1f GFLOP/s"
                      % (cls, M, N, K, _describe(tile), seconds * 1e3,
                         2 * M * N * K / seconds / 1e9), file=out)
            totals.append((total, tile))
        best[cls] = _best(cls, totals, out)
    return best


def _conv_operands(ctx, geom, mode, batch, rng):
    """(a, b, out) of ConvGemm.launches for ``mode``: (w, x, y), (w, dy, dx) or (dy, x, dw)."""
    def rand(shape):
        return Tensor.from_numpy(ctx, rng.standard_normal(shape, np.float32))
    x, dy, w = rand(geom.in_shape(batch)), rand(geom.out_shape(batch)), rand(geom.weight_shape)
    if mode == "forward":
        return w, x, Tensor(ctx, geom.out_shape(batch))
    if mode == "backward_data":
        return w, dy, Tensor(ctx, geom.in_shape(batch))
    return dy, x, Tensor(ctx, geom.weight_shape)


def tune_conv(ctx, geoms, candidates, batch=16, repeat=5, out=None):
    """{'<direction>.<class>': best tile} of the implicit-GEMM convolution over the given
    geometries at ``batch``; prints one line per measurement. Plain 1x1 layers run forward
    and backward-data on the Gemm (tune those with ``gemm``), so only their
    backward-filter counts here."""
    out = out or sys.stdout
    rng = np.random.default_rng(0)
    by_class = {}
    for geom in geoms:
        for mode in MODES:
            if geom.is_plain_1x1 and mode != "backward_filter":
                continue
            probe = ConvGemm(ctx, geom, mode, batch=batch, tile=candidates[0])
            m, n, _ = probe.dims(batch)
            cls = "%s.%s" % (mode, tuning.conv_class(ctx.facts, mode, m, n, probe.share))
            by_class.setdefault(cls, []).append((geom, mode))
    best = {}
    for cls, layers in by_class.items():
        totals = []
        for tile in candidates:
            total = 0.0
            for geom, mode in layers:
                op = ConvGemm(ctx, geom, mode, batch=batch, tile=tile)
                a, b, dst = _conv_operands(ctx, geom, mode, batch, rng)
                size = op.workspace_bytes(batch)
                ws = Tensor(ctx, (size,), "uint8") if size else None
                launches = op.launches(batch, a, b, dst, ws=ws)
                seconds = _time(ctx, lambda: [launch(ctx.queue) for launch in launches], repeat)
                total += seconds
                print("%-24s %-18s %-34s %9.3f ms %8.1f GFLOP/s"
                      % (cls, _shape_text(geom), _describe(tile), seconds * 1e3,
                         geom.flops(batch) / seconds / 1e9), file=out)
            totals.append((total, tile))
        best[cls] = _best(cls, totals, out)
    return best


def main(argv=None, ctx=None):
    """The dlprim-tune program (``ctx`` for tests); returns the exit status."""
    parser = argparse.ArgumentParser(prog="dlprim-tune", description=__doc__.splitlines()[0])
    parser.add_argument("kernel", choices=["gemm", "conv"])
    parser.add_argument("--sizes", nargs="+", help="gemm: N or MxNxK; default: one per shape class")
    parser.add_argument("--shapes", nargs="+",
                        help="conv: IN_CxHxW:OUT_CxK[/STRIDE] (padding K // 2); default: a few "
                             "ResNet-50 layers on GPUs, small layers elsewhere")
    parser.add_argument("--batch", type=int, default=16, help="conv: batch size (default 16)")
    parser.add_argument("--device", help="device string (default: DLPRIM_DEVICE or first GPU)")
    parser.add_argument("--repeat", type=int, default=5, help="timed runs per candidate")
    parser.add_argument("--candidates", type=int, help="try only the first N candidates")
    args = parser.parse_args(argv)
    gemm = args.kernel == "gemm"
    if (args.shapes if gemm else args.sizes):
        parser.error("%s is for %s" % (("--shapes", "conv") if gemm else ("--sizes", "gemm")))
    if args.batch < 1:
        parser.error("--batch must be at least 1, got %d" % args.batch)
    parse, defaults = (parse_size, DEFAULT_SIZES) if gemm else (parse_shape, DEFAULT_SHAPES)
    try:
        shapes = [parse(s) for s in (args.sizes if gemm else args.shapes) or []]
    except ValueError as err:
        parser.error(str(err))
    ctx = ctx or Context(args.device)
    shapes = shapes or [parse(s) for s in defaults["cpu" if ctx.facts.is_cpu else "gpu"]]
    candidates = tuning.candidates(ctx.facts, args.kernel)[:args.candidates]
    if not candidates:
        parser.error("no %s candidate tile to time on %s" % (args.kernel, ctx.name))
    print("tuning %s on %s (driver %s)" % (args.kernel, ctx.name, ctx.facts.driver_version))
    repeat = max(1, args.repeat)
    if gemm:
        best = tune_gemm(ctx, shapes, candidates, repeat)
    else:
        best = tune_conv(ctx, shapes, candidates, args.batch, repeat)
    path = tuning.store_tuned(ctx.facts, best, args.kernel)
    print("stored in %s" % path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
