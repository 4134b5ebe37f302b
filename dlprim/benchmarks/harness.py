"""What the kernel benchmarks share: OpenCL event timing, CUDA event timing, and timing
one layer's planned forward and backward launch lists beside a PyTorch function.

Times are medians in microseconds after one warm-up; an OpenCL pass is the sum of its
launches' profiled durations (the context must be made with ``profiling=True``).
"""
import argparse
import statistics

import numpy as np

import dlprim as dp
from dlprim.layers import TensorSpec, create


def time_launches(ctx, launches, repeat):
    """Median over ``repeat`` runs of the summed event durations of ``launches`` (us)."""
    for launch in launches:
        launch(ctx.queue)
    ctx.finish()
    times = []
    for _ in range(repeat):
        events = [launch(ctx.queue) for launch in launches]
        ctx.finish()
        times.append(sum(e.profile.end - e.profile.start for e in events) * 1e-3)
    return statistics.median(times)


def time_cuda(fn, repeat):
    """Median over ``repeat`` calls of ``fn`` timed with CUDA events (us)."""
    import torch
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeat):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) * 1e3)
    return statistics.median(times)


def time_layer(ctx, type_name, options, specs, repeat):
    """(forward us, backward us, forward launches, backward launches) of one layer set up
    alone in train mode over inputs ``specs`` [(shape, dtype)]; integer inputs (labels)
    hold class numbers below the first input's second dimension."""
    layer = create(ctx, type_name, "layer", options)
    layer.mode = "train"
    setup = layer.setup([TensorSpec(s, d) for s, d in specs])
    outs, pspecs, ws_bytes = setup.outputs, setup.params, setup.workspace
    rng = np.random.default_rng(0)
    floats = lambda s: dp.Tensor.from_numpy(ctx, rng.standard_normal(s).astype(np.float32))
    xs = [floats(s) if d == "float32" else
          dp.Tensor.from_numpy(ctx, rng.integers(0, specs[0][0][1], s).astype(d)) for s, d in specs]
    dxs = [dp.Tensor(ctx, s) if d == "float32" else None for s, d in specs]
    ys, dys = [dp.Tensor(ctx, o.shape) for o in outs], [floats(o.shape) for o in outs]
    ps = [dp.Tensor.from_numpy(ctx, np.ones(p.shape, np.float32)) for p in pspecs]
    dps = [dp.Tensor.zeros(ctx, p.shape) if p.trainable else None for p in pspecs]
    ws = dp.Tensor(ctx, (ws_bytes,), "uint8") if ws_bytes else None
    saved = [dp.Tensor(ctx, s.shape, s.dtype) for s in setup.saved]
    fwd = layer.forward(xs, ys, ps, ws, saved)
    bwd = layer.backward(xs, dxs, ys, dys, ps, dps, ws, saved, [False] * len(xs))
    return time_launches(ctx, fwd, repeat), time_launches(ctx, bwd, repeat), len(fwd), len(bwd)


def time_torch_layer(fn, specs, repeat):
    """(forward us, backward us) of ``fn`` over random float inputs of ``specs``; backward
    alone, as ``autograd.grad`` over a kept graph."""
    import torch
    xs = [torch.randn(s, device="cuda", requires_grad=True) for s, d in specs if d == "float32"]
    y = fn(*xs)
    dy = torch.randn_like(y)
    with torch.no_grad():
        f = time_cuda(lambda: fn(*xs), repeat)
    b = time_cuda(lambda: torch.autograd.grad(y, xs, dy, retain_graph=True), repeat)
    return f, b


def layer_table(description, cases, argv=None):
    """The command line of a layer benchmark: time every case of ``cases()`` —
    (title, JSON type, options, input specs, torch function) — and print a table;
    ``argv`` is the command line (default ``sys.argv[1:]``)."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--device", default=None)
    ap.add_argument("--repeat", type=int, default=50)
    ap.add_argument("names", nargs="*", help="only layers whose title contains one of these")
    args = ap.parse_args(argv)
    ctx = dp.Context(args.device, profiling=True)
    try:
        import torch
        have_torch = torch.cuda.is_available()
    except ImportError:
        have_torch = False
    print("device: %s, driver %s" % (ctx.name, ctx.facts.driver_version))
    print("| layer | launches fwd/bwd | fwd us | bwd us | torch fwd us | torch bwd us |")
    print("|---|---:|---:|---:|---:|---:|")
    for title, type_name, options, specs, fn in cases():
        if args.names and not any(n in title for n in args.names):
            continue
        f, b, nf, nb = time_layer(ctx, type_name, options, specs, args.repeat)
        tf, tb = time_torch_layer(fn, specs, args.repeat) if have_torch else (float("nan"),) * 2
        print("| %s | %d/%d | %.1f | %.1f | %.1f | %.1f |" % (title, nf, nb, f, b, tf, tb))
