"""A device's ceilings and how close dlprim's kernels come to them, as DLPrimitives'
dlprim_flops tool measures them.

    dlprim-benchmark flops [--device gpu] [--size tiny|small|full] [--only gemm conv ...]

Sections: ``peak`` (GFLOP/s of multiply-add chains, float and half where the device has
cl_khr_fp16, vector widths 1..16, the best counted), ``memory`` (GB/s reading, writing
and copying a buffer, best vector width), ``gemm`` (dlprim's GEMM, all four transposes),
``conv`` (dlprim's convolution, forward / backward-data / backward-filter, the algorithm
each picks) and ``broadcast`` (the pointwise-broadcast-reduce generator: y = x0 + w x1
summed over the axes the output lacks, float32, int32 and int64). Every row after the
ceilings says which one it is closer to, in percent.

Times are medians of OpenCL profiling events over ``--repeat`` runs after a warm-up.
``--size`` defaults to ``full`` on GPUs and ``small`` on CPU devices (seconds on PoCL);
``tiny`` is for tests. Kernel builds are not timed.
"""
import argparse

import numpy as np

import dlprim as dp
from dlprim.core.conv import ConvBackwardData, ConvBackwardFilter, ConvForward, ConvGeometry
from dlprim.core.gemm import Gemm
from dlprim.core.pointwise import PointwiseBroadcast, PointwiseBroadcastReduce, broadcast_shape
from dlprim.kernels import program

from .harness import time_launches

SECTIONS = ("peak", "memory", "gemm", "conv", "broadcast")
WIDTHS = (1, 2, 4, 8, 16)
CHAINS = 8  # independent accumulators per work-item
CONV_OPS = {"forward": ConvForward, "bwd-data": ConvBackwardData, "bwd-filter": ConvBackwardFilter}

# per size: work-items and iterations of the chains, floats per memory buffer, GEMM
# (M, N, K), convolutions (c_in, c_out, kernel, stride, side, groups) at one batch, and
# broadcast-reduce cases (x0, x1, y shapes): same shape, a per-channel operand, sums per
# channel and per sample, row sums, a whole-tensor sum
SIZES = {
    "full": dict(items=1 << 20, iters=4096, floats=1 << 27, batch=64,
                 gemm=[(512, 512, 512), (1024, 1024, 1024), (1025, 1025, 1025),
                       (2048, 2048, 2048), (4096, 4096, 4096), (64, 2048, 2048),
                       (2048, 64, 2048), (2048, 2048, 64)],
                 conv=[(3, 64, 7, 2, 224, 1), (64, 64, 3, 1, 56, 1), (64, 256, 1, 1, 56, 1),
                       (256, 256, 3, 1, 14, 1), (1024, 2048, 1, 2, 14, 1), (64, 64, 3, 1, 224, 1),
                       (512, 512, 3, 1, 28, 1), (144, 144, 3, 1, 56, 144),
                       (960, 960, 3, 1, 7, 960), (144, 24, 1, 1, 56, 1)],
                 broadcast=(64, 512, 24, 24, 256, 1000)),
    "small": dict(items=1 << 12, iters=2048, floats=1 << 24, batch=4,
                  gemm=[(128, 128, 128), (129, 129, 129), (256, 256, 256), (16, 256, 256),
                        (256, 16, 256), (256, 256, 16)],
                  conv=[(3, 16, 7, 2, 64, 1), (16, 16, 3, 1, 28, 1), (16, 64, 1, 1, 28, 1),
                        (64, 64, 3, 1, 14, 1), (32, 32, 3, 1, 28, 32)],
                  broadcast=(16, 64, 24, 24, 256, 1000)),
    "tiny": dict(items=256, iters=16, floats=1 << 12, batch=1,
                 gemm=[(17, 9, 5)], conv=[(3, 4, 3, 1, 6, 1)],
                 broadcast=(2, 3, 4, 4, 3, 7)),
}


def row(section, case, seconds, flop=0.0, nbytes=0.0, note=""):
    """One result: GFLOP/s and GB/s from the work done in ``seconds``."""
    return {"section": section, "case": case, "ms": seconds * 1e3,
            "gflops": flop / seconds * 1e-9, "gbs": nbytes / seconds * 1e-9, "note": note}


def _seconds(ctx, launches, repeat):
    return time_launches(ctx, launches, repeat) * 1e-6


def chain_launch(ctx, y, kind, width, iters, m=0.9999, c=1e-4):
    """The launch of ``y.size`` work-items, each running CHAINS chains a = a * m + c of
    ``width``-wide vectors of ``kind`` ("float" or "half") ``iters`` times and writing the
    sum of their lanes to ``y``; it does 2 * CHAINS * width * iters FLOP per item."""
    prg = program.get(ctx, "flops", TYPE=kind, WIDTH=width, CHAINS=CHAINS, ITERS=iters)
    return program.Launch(prg, "flops_mad", (y.size,), None, [y, np.float32(m), np.float32(c)])


def memory_launches(ctx, x, y, width):
    """{"read": ..., "write": ..., "copy": ...}: (one launch, passes over the buffer) each,
    in ``width``-wide vectors; read leaves ``y`` alone, write fills it with 1, copy x to y."""
    prg = program.get(ctx, "flops", TYPE="float", WIDTH=width, CHAINS=1, ITERS=1)
    items = (x.size // width,)
    return {"read": (program.Launch(prg, "mem_read", items, None, [x, y, np.float32(-1)]), 1),
            "write": (program.Launch(prg, "mem_write", items, None, [y, np.float32(1)]), 1),
            "copy": (program.Launch(prg, "mem_copy", items, None, [x, y]), 2)}


def peak(ctx, size, repeat):
    """Multiply-add chains per type and vector width: the FLOP/s ceiling."""
    y = dp.Tensor(ctx, (size["items"],))
    rows = []
    for kind in ("float", "half") if ctx.facts.fp16 else ("float",):
        for width in WIDTHS:
            launch = chain_launch(ctx, y, kind, width, size["iters"])
            flop = 2.0 * CHAINS * width * size["iters"] * size["items"]
            rows.append(row("peak", "%s x%d" % (kind, width),
                            _seconds(ctx, [launch], repeat), flop=flop))
    if not np.isfinite(y.numpy()).all():
        raise ArithmeticError("flops: the multiply-add chains did not stay finite")
    return rows


def memory(ctx, size, repeat):
    """Reading, writing and copying one buffer, best vector width each: the GB/s ceiling."""
    n = size["floats"]
    x, y = dp.Tensor.zeros(ctx, (n,)), dp.Tensor(ctx, (n,))
    best = {}
    for width in WIDTHS:
        for name, (launch, passes) in memory_launches(ctx, x, y, width).items():
            r = row("memory", "%s %s" % (name, _mib(4 * n)),
                    _seconds(ctx, [launch], repeat), nbytes=4.0 * n * passes, note="x%d" % width)
            if name not in best or r["gbs"] > best[name]["gbs"]:
                best[name] = r
    return list(best.values())


def gemm(ctx, size, repeat):
    """dlprim's GEMM over the size's shapes, each with A and/or B stored transposed."""
    rng = np.random.default_rng(0)
    rows = []
    for M, N, K in size["gemm"]:
        for ta, tb in ((0, 0), (0, 1), (1, 0), (1, 1)):
            op = Gemm(ctx, M, N, K, trans_a=ta, trans_b=tb)
            a = (rng.standard_normal((K, M) if ta else (M, K)) / np.sqrt(K)).astype(np.float32)
            b = rng.standard_normal((N, K) if tb else (K, N), np.float32)
            A, B, C = dp.Tensor.from_numpy(ctx, a), dp.Tensor.from_numpy(ctx, b), dp.Tensor(ctx, (M, N))
            t = _seconds(ctx, op.launches(A, B, C), repeat)
            rows.append(row("gemm", "%s%s %dx%dx%d" % ("NT"[ta], "NT"[tb], M, N, K), t,
                            flop=2.0 * M * N * K, nbytes=4.0 * (M * K + K * N + M * N)))
    return rows


def conv(ctx, size, repeat):
    """dlprim's convolution in its three directions, the algorithm it picks for each."""
    rng = np.random.default_rng(0)
    batch, rows = size["batch"], []
    for cin, cout, k, s, side, groups in size["conv"]:
        p = k // 2
        geom = ConvGeometry(cin, cout, (side, side), (k, k), (s, s), (p, p, p, p), (1, 1), groups)
        x = dp.Tensor.from_numpy(ctx, rng.standard_normal(geom.in_shape(batch), np.float32))
        w = dp.Tensor.from_numpy(ctx, rng.standard_normal(geom.weight_shape, np.float32))
        y = dp.Tensor.from_numpy(ctx, rng.standard_normal(geom.out_shape(batch), np.float32))
        for name, cls in CONV_OPS.items():
            op = cls(ctx, geom, batch=batch)
            ws_bytes = op.workspace_bytes(batch)
            ws = dp.Tensor(ctx, (ws_bytes,), "uint8") if ws_bytes else None
            if name == "forward":
                launches = op.launches(x, w, y, ws=ws)
            elif name == "bwd-data":
                launches = op.launches(y, w, x, ws=ws)
            else:
                launches = op.launches(x, y, w, ws=ws, beta=0.0)
            # the filter is read and written by backward-filter, as DLPrimitives counts it
            nbytes = x.nbytes + y.nbytes + w.nbytes * (2 if name == "bwd-filter" else 1)
            case = "%s b%d %d->%d k%d s%d %d%s" % (name, batch, cin, cout, k, s, side,
                                                  " g%d" % groups if groups > 1 else "")
            rows.append(row("conv", case, _seconds(ctx, launches, repeat),
                            flop=float(geom.flops(batch)), nbytes=nbytes, note=op.algo))
    return rows


def broadcast_cases(n, c, h, w, rows, cols):
    """(x0 shape, x1 shape, y shape) of the broadcast-reduce cases at these sizes."""
    nchw = (n, c, h, w)
    return [(nchw, nchw, nchw), (nchw, (c, 1, 1), nchw), (nchw, (1, c, 1, 1), (1, c, 1, 1)),
            (nchw, nchw, (1, c, 1, 1)), (nchw, nchw, (n, 1, 1, 1)), ((rows, cols), (rows, 1), (1,))]


def broadcast(ctx, size, repeat):
    """y = x0 + w x1 over the broadcast shape, summed over the axes y lacks; where it
    lacks none, the elementwise generator runs it, as dlprim's layers do."""
    rng = np.random.default_rng(0)
    rows = []
    for dtype in ("float32", "int32", "int64"):
        for sa, sb, sc in broadcast_cases(*size["broadcast"]):
            specs, code = ([(sa, dtype), (sb, dtype)], [(sc, dtype)]), "y0 = x0 + w0 * x1;"
            full = int(np.prod(broadcast_shape([sa, sb])))
            out = int(np.prod(sc))
            if out == full:
                op = PointwiseBroadcast(ctx, *specs, code, params=[dtype], name="flops_bcast")
            else:
                op = PointwiseBroadcastReduce(ctx, *specs, code, params=[dtype],
                                              name="flops_bcast_reduce")
            xs = [dp.Tensor.from_numpy(ctx, rng.integers(0, 17, s).astype(dtype)) for s in (sa, sb)]
            y = dp.Tensor(ctx, sc, dtype)
            flop = 2.0 * full + (full // out - 1) * out  # the expression, then the sums
            nbytes = float(sum(t.nbytes for t in xs) + y.nbytes)
            case = "%s %s + %s -> %s" % (dtype, _dims(sa), _dims(sb), _dims(sc))
            rows.append(row("broadcast", case, _seconds(ctx, op.launches(xs, [y], [2]), repeat),
                            flop=flop, nbytes=nbytes))
    return rows


def _dims(shape):
    return "x".join(str(d) for d in shape)


def _mib(nbytes):
    return "%g MiB" % (nbytes / 2 ** 20) if nbytes >= 2 ** 20 else "%g KiB" % (nbytes / 1024)


def _number(value):
    """A rate for the table: one decimal, or three significant digits below 10."""
    return "" if not value else "%.1f" % value if value >= 10 else "%.3g" % value


RUNNERS = {"peak": peak, "memory": memory, "gemm": gemm, "conv": conv, "broadcast": broadcast}


def run(ctx, size, sections=SECTIONS, repeat=5):
    """Rows of every section asked for (``size``: a name of SIZES or such a dict), each
    with ``limit``: the share of the measured ceiling it is closer to."""
    size = SIZES[size] if isinstance(size, str) else size
    rows = []
    for name in SECTIONS:
        if name in sections:
            rows += RUNNERS[name](ctx, size, repeat)
    flops = max([r["gflops"] for r in rows if r["section"] == "peak"] or [0.0])
    gbs = max([r["gbs"] for r in rows if r["section"] == "memory"] or [0.0])
    for r in rows:
        share = [(r["gflops"] / flops if flops and r["gflops"] else 0.0, "compute"),
                 (r["gbs"] / gbs if gbs and r["gbs"] else 0.0, "memory")]
        fraction, kind = max(share)
        r["limit"] = "%s %.0f%%" % (kind, 100 * fraction) if fraction else ""
    return rows


def table(rows):
    """The rows as a markdown table."""
    lines = ["| section | case | ms | GFLOP/s | GB/s | closest ceiling | note |",
             "|---|---|---:|---:|---:|---|---|"]
    for r in rows:
        lines.append("| %s | %s | %.3f | %s | %s | %s | %s |" % (
            r["section"], r["case"], r["ms"], _number(r["gflops"]), _number(r["gbs"]),
            r["limit"], r["note"]))
    return "\n".join(lines)


def main(argv=None):
    """``dlprim-benchmark flops``: print the table; returns the exit status."""
    ap = argparse.ArgumentParser(prog="dlprim-benchmark flops", description=__doc__.split("\n")[0])
    ap.add_argument("--device", default=None)
    ap.add_argument("--size", choices=sorted(SIZES), default=None,
                    help="problem sizes (default: full on GPUs, small on CPU devices)")
    ap.add_argument("--only", nargs="+", choices=SECTIONS, default=list(SECTIONS))
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args(argv)
    if args.repeat < 1:
        ap.error("--repeat must be >= 1")
    ctx = dp.Context(args.device, profiling=True)
    size = args.size or ("small" if ctx.facts.is_cpu else "full")
    print("device: %s, driver %s; sizes %s" % (ctx.name, ctx.facts.driver_version, size), flush=True)
    print(table(run(ctx, size, args.only, args.repeat)))
    return 0


if __name__ == "__main__":
    main()
