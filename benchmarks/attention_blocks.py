"""The fused attention's tiled kernels (attention_tiles.cl) on every block that fits, pass
by pass, at one shape: which blocks the table (``core.attention.BLOCKS``) should list
first for it. OpenCL events, median of ``--iters`` runs of each pass alone, float32.

    python benchmarks/attention_blocks.py --rows 96 --length 256 --dim 64 --causal

``--rows``: batch x heads (GPT-2 at 8x256: 96; BERT-base at 16x128: 192, not causal).
"""
import argparse
import itertools

import numpy as np

import dlprim as dp
from dlprim.benchmarks.harness import time_launches
import pyopencl as cl

from dlprim.core.attention import _MAX_TILE, BLOCKS, AttentionOps, _tile_floats


def _candidates(ctx, d):
    """{pass: [blocks]} of every (BQ, BK, TX, TY) from small powers of two that fits."""
    out = {}
    for pass_ in BLOCKS:
        fits = []
        for bq, bk, tx, ty in itertools.product((16, 32, 64, 128), (16, 32, 64), (4, 8, 16),
                                                (4, 8, 16)):
            b = dict(BQ=bq, BK=bk, TX=tx, TY=ty)
            if _tile_floats(pass_, d, d, bq, bk, tx, ty) > _MAX_TILE:
                continue  # register tiles the table keeps out (they spill)
            try:
                AttentionOps(ctx, 1, 4, 4, d, d, kernels="tiles", blocks={pass_: b})
            except ValueError:
                continue
            fits.append(b)
        out[pass_] = fits
    return out


def _time(ctx, launches, which, iters):
    """ms of launch ``which`` alone, after the launches before it ran once (the delta the
    backward kernels read)."""
    for launch in launches[:which]:
        launch(ctx.queue)
    return time_launches(ctx, [launches[which]], iters) * 1e-3


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default=None)
    p.add_argument("--rows", type=int, default=96)
    p.add_argument("--length", type=int, default=256)
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--causal", action="store_true")
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--dropout", type=float, default=0.0, help="attention dropout p")
    p.add_argument("--table-only", action="store_true", help="time the table's blocks only")
    args = p.parse_args()
    ctx = dp.Context(args.device, profiling=True)
    b, n, d = args.rows, args.length, args.dim
    rng = np.random.default_rng(0)

    def rand(*shape):
        return dp.Tensor.from_numpy(ctx, rng.standard_normal(shape).astype(np.float32))
    q, k, v, dout = rand(b, n, d), rand(b, n, d), rand(b, n, d), rand(b, n, d)
    o, dq, dk, dv = (dp.Tensor(ctx, (b, n, d)) for _ in range(4))
    stats, delta = dp.Tensor(ctx, (b, n, 2)), dp.Tensor(ctx, (b, n))
    kinds = dict(causal=args.causal, kernels="tiles", dropout=args.dropout)
    table = AttentionOps(ctx, b, n, n, d, d, **kinds)
    print("device: %s; rows %d, length %d, D %d%s%s; table: %s" % (
        ctx.name, b, n, d, ", causal" if args.causal else "",
        ", dropout %g" % args.dropout if args.dropout else "", table.blocks))
    for launch in table.launches(q, k, v, o, stats):
        launch(ctx.queue)
    candidates = {pass_: [table.blocks[pass_]] for pass_ in BLOCKS} if args.table_only \
        else _candidates(ctx, d)
    for pass_, fits in candidates.items():
        rows = []
        for blocks in fits:
            ops = AttentionOps(ctx, b, n, n, d, d, blocks={pass_: blocks}, **kinds)
            if pass_ == "forward":
                launches, which = ops.launches(q, k, v, o, stats), 0
            else:
                launches = ops.backward_launches(q, k, v, o, stats, dout, dq, dk, dv, delta)
                which = 1 if pass_ == "dq" else 2
            try:
                rows.append((_time(ctx, launches, which, args.iters), blocks))
            except cl.Error:  # more work items than this kernel may have on the device
                continue
        rows.sort(key=lambda r: r[0])
        mine = next((ms for ms, bl in rows if bl == table.blocks[pass_]), float("nan"))
        print("%-8s table %.3f ms; best: %s" % (pass_, mine, "; ".join(
            "%.3f BQ%d BK%d TX%d TY%d" % ((ms,) + tuple(bl[x] for x in ("BQ", "BK", "TX", "TY")))
            for ms, bl in rows[:5])), flush=True)


if __name__ == "__main__":
    main()
