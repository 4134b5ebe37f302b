"""Layers on the pointwise generator and the pooling kernels, forward and backward (FP32).

    python benchmarks/layers.py [--device gpu] [--repeat 50] [name filter ...]

Each layer is set up alone, its planned forward and backward launch lists are timed with
OpenCL profiling events (median over ``--repeat`` runs after a warm-up, all launches of a
pass summed). When PyTorch with CUDA is importable the same layer is timed with CUDA
events: its forward, and its backward alone (``autograd.grad`` over a kept graph).
"""
import argparse
import os
import statistics
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import dlprim as dp  # noqa: E402
from dlprim.layers import TensorSpec, create  # noqa: E402

BIG, MID = (16, 64, 112, 112), (16, 64, 56, 56)


def cases():
    """(title, JSON type, options, input shapes, torch function)."""
    try:
        import torch.nn.functional as F
    except ImportError:
        F = None
    return [
        ("BatchNorm train 16x64x112x112", "BatchNorm", {}, [BIG],
         lambda x: F.batch_norm(x, None, None, training=True)),
        ("MaxPool 3x3/2 pad 1 16x64x112x112", "Pooling2D", {"kernel": 3, "stride": 2, "pad": 1}, [BIG],
         lambda x: F.max_pool2d(x, 3, 2, 1)),
        ("AvgPool 2x2/2 16x64x112x112", "Pooling2D", {"mode": "avg", "kernel": 2, "stride": 2}, [BIG],
         lambda x: F.avg_pool2d(x, 2, 2)),
        ("GlobalPooling avg 16x512x7x7", "GlobalPooling", {"mode": "avg"}, [(16, 512, 7, 7)],
         lambda x: x.mean((2, 3), keepdim=True)),
        ("ReLU 16x64x112x112", "Activation", {"activation": "relu"}, [BIG], F.relu),
        ("GELU 16x64x112x112", "Activation", {"activation": "gelu"}, [BIG], F.gelu),
        ("Elementwise sum+relu 16x64x56x56", "Elementwise", {"activation": "relu"}, [MID, MID],
         lambda a, b: F.relu(a + b)),
        ("Elementwise prod, b (64,1,1)", "Elementwise", {"operation": "prod"}, [MID, (64, 1, 1)],
         lambda a, b: a * b),
        ("Dropout 0.5 16x64x112x112", "Dropout", {}, [BIG], lambda x: F.dropout(x, 0.5, True)),
    ]


def time_launches(ctx, launches, repeat):
    for launch in launches:
        launch(ctx.queue)
    ctx.finish()
    times = []
    for _ in range(repeat):
        events = [launch(ctx.queue) for launch in launches]
        ctx.finish()
        times.append(sum(e.profile.end - e.profile.start for e in events) * 1e-3)
    return statistics.median(times)


def time_layer(ctx, type_name, options, shapes, repeat):
    layer = create(ctx, type_name, "layer", options)
    layer.mode = "train"
    outs, pspecs, _ = layer.setup([TensorSpec(s) for s in shapes])
    rng = np.random.default_rng(0)
    tensor = lambda s: dp.Tensor.from_numpy(ctx, rng.standard_normal(s).astype(np.float32))
    xs, dxs = [tensor(s) for s in shapes], [dp.Tensor(ctx, s) for s in shapes]
    ys, dys = [dp.Tensor(ctx, o.shape) for o in outs], [tensor(o.shape) for o in outs]
    ps = [dp.Tensor.from_numpy(ctx, np.ones(p.shape, np.float32)) for p in pspecs]
    dps = [dp.Tensor.zeros(ctx, p.shape) if p.trainable else None for p in pspecs]
    fwd = layer.forward(xs, ys, ps, None)
    bwd = layer.backward(xs, dxs, ys, dys, ps, dps, None, [False] * len(xs))
    return time_launches(ctx, fwd, repeat), time_launches(ctx, bwd, repeat), len(fwd), len(bwd)


def time_torch(fn, shapes, repeat):
    import torch
    xs = [torch.randn(s, device="cuda", requires_grad=True) for s in shapes]
    y = fn(*xs)
    dy = torch.randn_like(y)

    def median(step):
        step()
        torch.cuda.synchronize()
        times = []
        for _ in range(repeat):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            step()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end) * 1e3)
        return statistics.median(times)
    with torch.no_grad():
        f = median(lambda: fn(*xs))
    b = median(lambda: torch.autograd.grad(y, xs, dy, retain_graph=True))
    return f, b


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default=None)
    ap.add_argument("--repeat", type=int, default=50)
    ap.add_argument("names", nargs="*", help="only layers whose title contains one of these")
    args = ap.parse_args()
    ctx = dp.Context(args.device, profiling=True)
    try:
        import torch
        have_torch = torch.cuda.is_available()
    except ImportError:
        have_torch = False
    print("device: %s, driver %s" % (ctx.name, ctx.facts.driver_version))
    print("| layer | launches fwd/bwd | fwd us | bwd us | torch fwd us | torch bwd us |")
    print("|---|---:|---:|---:|---:|---:|")
    for title, type_name, options, shapes, fn in cases():
        if args.names and not any(n in title for n in args.names):
            continue
        f, b, nf, nb = time_layer(ctx, type_name, options, shapes, args.repeat)
        tf, tb = time_torch(fn, shapes, args.repeat) if have_torch else (float("nan"),) * 2
        print("| %s | %d/%d | %.1f | %.1f | %.1f | %.1f |" % (title, nf, nb, f, b, tf, tb))


if __name__ == "__main__":
    main()
