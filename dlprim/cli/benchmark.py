"""dlprim-benchmark: time a whole net (inference or a training step) as DLPrimitives does.

A timed iteration is: host->device copy of the batch, forward (+ loss, backward and an
Adam step with --train), device->host copy of the output; ``ctx.finish()`` closes it.
Warm-up iterations come first; the mean and median of the timed ones are reported.

    dlprim-benchmark resnet18 --batch 16 --train
    dlprim-benchmark net.json --batch 64 --profile
    dlprim-benchmark gemm            # the GEMM micro-benchmark
    dlprim-benchmark flops           # peak FLOP/s and GB/s, GEMM, convolution, broadcast
    dlprim-benchmark transfer        # host-to-device copies of image batches
"""
import argparse
import json
import os
import sys
import time

import numpy as np

from ..core.precision import PRECISIONS


def build_graph(net, batch, image_size, classes, train):
    """A graph dict from a JSON file or a ``dlprim.models`` builder name."""
    if os.path.isfile(net):
        with open(net) as f:
            graph = json.load(f)
        for inp in graph.get("inputs", []):
            inp["shape"] = [batch] + list(inp["shape"][1:])
        return graph
    from .. import models
    builder = getattr(models, net, None)
    if builder is None or net.startswith("_"):
        raise SystemExit("dlprim-benchmark: %r is neither a file nor a model in dlprim.models "
                         "(%s)" % (net, ", ".join(models.__all__)))
    import inspect
    wanted = dict(batch=batch, image_size=image_size, classes=classes, train=train)
    accepted = inspect.signature(builder).parameters
    return builder(**{k: v for k, v in wanted.items() if k in accepted}).to_dict()


def _inputs(net, rng, graph):
    """Random values for the net's inputs: normal floats; integers below 2 (valid labels
    for any classifier), or for an Embedding's indices spread over its whole table, as
    real tokens are (indices crowded into a few rows would time the gradient's
    contention instead)."""
    tables = {}
    graph = graph if isinstance(graph, dict) else graph.to_dict()
    for op in graph.get("operators", []):
        if op.get("type") == "Embedding":
            for src in op.get("inputs", [])[:1]:
                rows = op.get("options", {}).get("num_embeddings", 2)
                tables[src] = min(tables.get(src, rows), rows)
    arrays = {}
    for name in net.input_names:
        t = net.tensor(name)
        if t.dtype.kind == "f":
            arrays[name] = rng.standard_normal(t.shape).astype(t.dtype)
        else:
            arrays[name] = rng.integers(0, tables.get(name, 2), size=t.shape).astype(t.dtype)
    return arrays


def run_net(ctx, graph, train=False, warmup=5, iters=20, profile=False, seed=0,
            precision="fp32"):
    """Time ``graph``; returns a dict of figures (and the per-kernel profile if asked).
    ``first_step_s``: from the Net's construction to the end of its first step, the kernels
    it builds included (the start-up a user waits through); ``build_s`` and ``builds``:
    what of it the driver's compiler took, by template (the slowest first)."""
    from ..kernels import program
    from ..net import PREDICT, TRAIN, Net
    from ..solvers import Adam
    built_before = {name: list(spent) for name, spent in program.build_seconds.items()}
    begin = time.perf_counter()
    net = Net(ctx, graph, mode=TRAIN if train else PREDICT, seed=seed, precision=precision)
    solver = Adam(net, lr=1e-4) if train else None
    rng = np.random.default_rng(seed)
    arrays = _inputs(net, rng, graph)
    out_name = [n for n in net.output_names if not n.startswith("loss")] or net.output_names
    out = net.tensor(out_name[0])
    host_out = np.empty(out.shape, out.dtype)

    def iteration():
        # a blocking copy, as PyTorch's ``x.cuda()``: from pageable memory it is also the
        # faster one on NVIDIA's driver (38.5 MB: 2.6 ms, 3.3 ms without waiting; H200)
        for name, a in arrays.items():
            net.tensor(name).to_device(a)
        if train:
            solver.zero_grad()
        net.forward()
        if train:
            net.backward()
            solver.apply()
        out.to_host(host_out)

    iteration()  # the first step: what it builds and plans is the start-up
    ctx.finish()
    first_step = time.perf_counter() - begin
    builds = _builds_since(built_before, program.build_seconds)
    for _ in range(warmup - 1):
        iteration()
    ctx.finish()
    times = []
    for _ in range(iters):
        start = time.perf_counter()
        iteration()
        ctx.finish()
        times.append(time.perf_counter() - start)
    # host time spent enqueueing one pass, measured with the device kept busy
    launches = len(net.plan.forward) + (len(net.plan.backward) if train else 0)
    start = time.perf_counter()
    for launch in net.plan.forward:
        launch(ctx.queue)
    host = time.perf_counter() - start
    ctx.finish()
    result = {"mean_ms": 1e3 * float(np.mean(times)), "median_ms": 1e3 * float(np.median(times)),
              "launches": launches, "host_us_per_launch": 1e6 * host / max(len(net.plan.forward), 1),
              "memory": net.memory_stats(), "pool_peak_bytes": ctx.memory.peak_bytes,
              "first_step_s": first_step, "build_s": sum(s for _, _, s in builds),
              "builds": builds}
    if profile:
        result["profile"] = _profile(ctx, net, train)
    return result


def _builds_since(before, now):
    """[(template, builds, seconds)] built between two snapshots of
    ``program.build_seconds``, the most seconds first."""
    rows = []
    for name, (count, seconds) in now.items():
        was_count, was_seconds = before.get(name, (0, 0.0))
        if count > was_count:
            rows.append((name, count - was_count, seconds - was_seconds))
    return sorted(rows, key=lambda row: -row[2])


def _profile(ctx, net, train):
    """Per-operator forward and backward times from OpenCL events, then the backward
    time per kernel (which kernels a slow backward spends its time in)."""
    import pyopencl as cl
    if not ctx.queue.properties & cl.command_queue_properties.PROFILING_ENABLE:
        raise SystemExit("dlprim-benchmark: --profile needs a profiling queue")
    plan = net.plan

    def ms(e):
        return 0.0 if e is None else (e.profile.end - e.profile.start) * 1e-6

    events = [launch(ctx.queue) for launch in plan.forward]
    bwd = [(launch, launch(ctx.queue)) for launch in plan.backward] if train else []
    ctx.finish()
    rows, k = [], 0
    for op, count in zip(net.graph.ops, plan.op_forward):
        rows.append(("forward", op.name, op.type, sum(ms(e) for e in events[k:k + count])))
        k += count
    # plan.backward_done: op index -> launches run once its backward has; before the
    # first op's, the gradients' fills
    k = plan.backward_fills if train else 0
    if k:
        rows.append(("backward", "(loss gradients)", "Fill", sum(ms(e) for _, e in bwd[:k])))
    for i, end in sorted(plan.backward_done.items(), key=lambda kv: kv[1]):
        op = net.graph.ops[i]
        rows.append(("backward", op.name, op.type, sum(ms(e) for _, e in bwd[k:end])))
        k = end
    by_kernel = {}
    for launch, e in bwd:
        name = getattr(launch, "name", type(launch).__name__)
        by_kernel[name] = by_kernel.get(name, 0.0) + ms(e)
    rows += [("bwd-kernel", name, "kernel", t)
             for name, t in sorted(by_kernel.items(), key=lambda kv: -kv[1])]
    return rows


def _format_profile(rows):
    lines = ["%-10s %-28s %-22s %9s" % ("pass", "operator / kernel", "type", "ms")]
    for p, name, kind, ms in rows:
        lines.append("%-10s %-28s %-22s %9.3f" % (p, name[:28], kind[:22], ms))
    return "\n".join(lines)


MICRO = ("gemm", "conv", "pointwise", "layers", "softmax_loss_interp", "flops", "transfer")


def _micro(name, argv):
    """A kernel micro-benchmark of dlprim.benchmarks (beside PyTorch when it is installed),
    or ``flops``: the device's ceilings and dlprim's kernels measured against them."""
    from ..benchmarks import conv, flops, gemm, layers, pointwise, softmax_loss_interp, transfer
    module = {"gemm": gemm, "conv": conv, "pointwise": pointwise, "layers": layers,
              "softmax_loss_interp": softmax_loss_interp, "flops": flops,
              "transfer": transfer}[name]
    module.main(argv)
    return 0


def main(argv=None):
    """The dlprim-benchmark program; returns the exit status."""
    from ..context import Context
    p = argparse.ArgumentParser(prog="dlprim-benchmark", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("net", help="net JSON file or a dlprim.models name; or a micro-benchmark "
                   "(%s) followed by its own options" % ", ".join(MICRO))
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--train", action="store_true", help="forward + loss + backward + Adam step")
    p.add_argument("--warmup", type=int, default=5,
                   help="untimed steps first (at least one: the first step, which builds "
                        "the kernels, is timed as the start-up instead)")
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--device", default=None)
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--classes", type=int, default=1000)
    p.add_argument("--profile", action="store_true", help="per-layer table from OpenCL events")
    p.add_argument("--precision", default="fp32", choices=PRECISIONS,
                   help="fp32 (exact), tf32 (TF32 products on tensor cores where present), "
                        "fp16 (half activations, float32 parameters) or bf16 (bfloat16 "
                        "activations; docs/precision.md)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] in MICRO:
        return _micro(argv[0], argv[1:])
    args = p.parse_args(argv)
    if args.warmup < 0 or args.iters < 1 or args.batch < 1:
        p.error("--warmup must be >= 0, --iters and --batch >= 1")
    ctx = Context(args.device, profiling=args.profile)
    graph = build_graph(args.net, args.batch, args.image_size, args.classes, args.train)
    res = run_net(ctx, graph, args.train, args.warmup, args.iters, args.profile,
                  precision=args.precision)
    if args.json:
        print(json.dumps({k: v for k, v in res.items()}, default=str))
        return 0
    mem = res["memory"]
    print("%s  batch %d  %s  %s  on %s" % (args.net, args.batch, "train" if args.train else "infer",
                                          args.precision, ctx.name))
    print("time per batch: mean %.3f ms, median %.3f ms (%d iterations after %d warm-up)"
          % (res["mean_ms"], res["median_ms"], args.iters, max(args.warmup, 1)))
    print("start-up: %.1f s from the net's construction to the end of its first step, "
          "%.1f s of it building %d programs" % (res["first_step_s"], res["build_s"],
                                                 sum(n for _, n, _ in res["builds"])))
    print("launches per iteration: %d; host time %.1f us per launch"
          % (res["launches"], res["host_us_per_launch"]))
    print("device memory: arena %.1f MiB (unplanned %.1f MiB), total %.1f MiB"
          % (mem["arena_bytes"] / 2**20, mem["unplanned_bytes"] / 2**20, mem["total_bytes"] / 2**20))
    if args.profile:
        print(_format_profile(res["profile"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
