"""The float16 attention kernels on tensor cores (attention_mma.cl) pass by pass: each of
the forward, dQ and dK/dV launches timed alone (OpenCL events, median of ``--iters``), at
B rows of L x D, with the table's blocks, or with the warpgroup forward's entry of the
table changed (``--forms``: each a comma-separated list of KEY=VALUE, "" for the table;
the forms alternate). ``--ptxas``: NVIDIA's register and spill report of each build.

    python benchmarks/attention_mma_passes.py --rows 32 --lengths 4096 16384 --dims 64 128
    python benchmarks/attention_mma_passes.py --dims 64 --forms "" OVERLAP=0 BK=64
"""
import argparse

import numpy as np

import dlprim as dp
from dlprim.benchmarks.harness import time_launches
from dlprim.core import attention


def passes(ctx, b, n, d, dtype, causal, iters):
    """{pass: ms} of one shape, each launch alone after those before it ran once."""
    rng = np.random.default_rng(0)

    def rand(*shape):
        return dp.Tensor.from_numpy(ctx, rng.standard_normal(shape).astype(dtype))
    q, k, v, dout = rand(b, n, d), rand(b, n, d), rand(b, n, d), rand(b, n, d)
    o, dq, dk, dv = (dp.Tensor(ctx, (b, n, d), dtype) for _ in range(4))
    stats, delta = dp.Tensor(ctx, (b, n, 2)), dp.Tensor(ctx, (b, n))
    ops = attention.AttentionOps(ctx, b, n, n, d, d, causal=causal, dtype=dtype)
    if ops.kernels != "mma":
        raise SystemExit("attention_mma_passes: this device runs %s kernels, not the "
                         "tensor cores'" % ops.kernels)
    forward = ops.launches(q, k, v, o, stats)
    backward = ops.backward_launches(q, k, v, o, stats, dout, dq, dk, dv, delta)
    launches = [l for l in forward + backward if ops.is_own(l)]
    for launch in forward + backward:
        launch(ctx.queue)
    ctx.finish()
    return {name: time_launches(ctx, [l], iters) * 1e-3
            for name, l in zip(("forward", "dq", "dkdv"), launches)}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default=None)
    p.add_argument("--rows", type=int, default=32, help="batch x heads")
    p.add_argument("--lengths", type=int, nargs="+", default=[4096])
    p.add_argument("--dims", type=int, nargs="+", default=[64])
    p.add_argument("--causal", action="store_true")
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--forms", nargs="+", default=[""],
                   help="changes of the warpgroup forward's blocks, e.g. OVERLAP=0,BK=64")
    p.add_argument("--ptxas", action="store_true", help="print ptxas's report of each build")
    args = p.parse_args()
    ctx = dp.Context(args.device, profiling=True)
    dtype = np.float16
    if args.ptxas:
        _report_ptxas()
    print("device: %s; float16, %d rows%s" % (ctx.name, args.rows,
                                              ", causal" if args.causal else ""))
    print("| L | D | form | forward | dq | dkdv |\n|---:|---:|---|---:|---:|---:|")
    for n in args.lengths:
        for d in args.dims:
            for form in args.forms:
                table = attention.WGMMA_BLOCKS.get(d, {}).get("forward", {})
                kept = dict(table)
                table.update((k, int(v)) for k, v in (
                    kv.split("=") for kv in form.split(",") if kv))
                try:
                    ms = passes(ctx, args.rows, n, d, dtype, args.causal, args.iters)
                finally:
                    table.clear()
                    table.update(kept)
                print("| %d | %d | %s | %.3f | %.3f | %.3f |"
                      % (n, d, form or "table", ms["forward"], ms["dq"], ms["dkdv"]),
                      flush=True)


def _report_ptxas():
    """NVIDIA's ptxas report (registers, spills) of every attention_mma build, printed."""
    import pyopencl as cl
    from dlprim.kernels import build_worker, program

    def build(cl_context, source, options):
        built = build_worker.build(cl_context, source, options + ["-cl-nv-verbose"])
        if "attention_mma_" in source:
            for line in built.get_build_info(cl_context.devices[0],
                                             cl.program_build_info.LOG).splitlines():
                if "registers" in line or "spill" in line or "Compiling" in line:
                    print("  ptxas:", line.strip())
        return built
    program.build = build


if __name__ == "__main__":
    main()
