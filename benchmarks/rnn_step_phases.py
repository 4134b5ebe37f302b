"""Where a step of the recurrent layers' one-launch loop goes (``kernels/
recurrent_persistent.cl``, NVIDIA GPUs): the kernels built with TIMING write the SM's
clock at each step's phases, and this prints the phases' microseconds (median over the
steps after the first, for the median work-group and the slowest).

    python benchmarks/rnn_step_phases.py --device gpu --cell lstm --batch 64 --hidden 1024

Forward phases: the product h_prev W_hh^T (its rounds' copies included), the gates, the
grid barrier. Backward: the gate gradients, this work-group's shares of dh_prev written,
the grid barrier, the shares summed (or, without shares, the staged product).
"""
import argparse
import itertools
import time

import numpy as np

import dlprim as dp
from dlprim.core import recurrent_persistent as rp
from dlprim.core.recurrent_seq import Seq
from dlprim.tensor import Tensor


def phases(times, groups, steps, count, first=1):
    """Per phase i -> i+1 (i < count - 1): (median work-group, slowest) of each step's
    cycles, medians over the steps from ``first``."""
    t = times.reshape(groups, steps, 8)[:, first:, :count].astype(np.int64)
    d = np.diff(t, axis=2)                       # groups x steps x phases
    return [(float(np.median(np.median(d[:, :, i], axis=0))),
             float(np.median(np.max(d[:, :, i], axis=0)))) for i in range(count - 1)]


def run(ctx, cell, N, H, L, iters, rows=None):
    p = rp.plan(ctx, cell, N, H)
    if p is None:
        raise SystemExit("no one-launch plan for %s %d x %d on %s" % (cell, N, H, ctx.name))
    if rows is not None:  # the forward's rows forced, the backward's plan kept
        back = p.backward_plan
        p = rp.PersistentPlan(ctx, cell, N, H, local_bytes=p.local_bytes, rows=rows)
        p.backward_plan = back
    G = p.G * H
    z = lambda *shape: Tensor.zeros(ctx, shape)  # noqa: E731
    rng = np.random.default_rng(0)
    w = z(G, H)
    w.to_device((rng.standard_normal((G, H)) / np.sqrt(H)).astype(np.float32))
    xg, h0, y, cells, gates = z(L * N * G), z(N, H), z(L * N * H), z(L * N * H), z(L * N * 4 * H)
    sync = Tensor.zeros(ctx, (2,), "uint32")
    times = Tensor.zeros(ctx, (p.groups * L * 8,), "uint64")
    fwd = p.forward_launches(L, False, Seq(xg, 0, N * G, G), w, None, h0, h0,
                             Seq(y, 0, N * H, H), sync, cells=cells, gates=gates, times=times)
    dh, dc, dxg, dhg = z(N, H), z(N, H), z(L * N * G), z(L * N * G)
    b = p.backward_plan
    parts = z(b.parts_elements()) if b.sums else None
    bwd = b.backward_launches(L, False, w, dh, dc, gates, dxg, dhg, sync, cells=cells, c0=h0,
                              hseq=Seq(y, 0, N * H, H), h0=h0, parts=parts, times=times)
    clock = ctx.device.max_clock_frequency  # cycles a microsecond (MHz)
    out = {"plan": dict(groups=p.groups, units=p.units, threads=p.threads, rows=p.rows,
                        back_rows=b.rows, back_threads=b.threads,
                        ksplit=p.ksplit, kc=p.kc, stages=p.stages, weights=p.weights,
                        sums=p.sums, local_kib=p.local_bytes // 1024)}
    for name, launches, count in (("forward", fwd, 4), ("backward", bwd, 5)):
        for _ in range(2):
            for launch in launches:
                launch(ctx.queue)
        ctx.finish()
        start = time.perf_counter()
        for _ in range(iters):
            for launch in launches:
                launch(ctx.queue)
        ctx.finish()
        step_us = 1e6 * (time.perf_counter() - start) / iters / L
        got = phases(times.numpy(), p.groups, L, count, first=1)
        out[name] = (step_us, [(a / clock, b / clock) for a, b in got])
    return out


FORWARD = ("product", "gates", "barrier")
BACKWARD = ("gate grads", "shares out", "barrier", "shares in")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default=None)
    ap.add_argument("--cell", default="lstm,gru")
    ap.add_argument("--batch", default="64")
    ap.add_argument("--hidden", default="512,1024")
    ap.add_argument("--steps", type=int, default=64)
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--rows", default=None,
                    help="the forward's batch rows a work-item, comma-separated (default: "
                         "the plan's)")
    a = ap.parse_args()
    ctx = dp.Context(a.device)
    print("device:", ctx.name, "| us a step: the median work-group / the slowest")
    choices = [None] if a.rows is None else [int(r) for r in a.rows.split(",")]
    for cell in a.cell.split(","):
        for N in map(int, a.batch.split(",")):
            for H, rows in itertools.product(map(int, a.hidden.split(",")), choices):
                r = run(ctx, cell, N, H, a.steps, a.iters, rows)
                print("\n%s %d x %d: %s" % (cell, N, H, r["plan"]))
                for name, labels in (("forward", FORWARD), ("backward", BACKWARD)):
                    step, got = r[name]
                    cells = ", ".join("%s %.2f / %.2f" % (lab, m, s)
                                      for lab, (m, s) in zip(labels, got))
                    print("  %-8s %.2f us a step (wall): %s" % (name, step, cells))


if __name__ == "__main__":
    main()
