"""Softmax, cross-entropy, interpolation, concat/slice/transpose layers, forward and backward (FP32).

    python benchmarks/softmax_loss_interp.py [--device gpu] [--repeat 50] [name filter ...]

Each layer is set up alone and its forward and backward launch lists are timed with
OpenCL profiling events (median over ``--repeat`` runs after a warm-up, all launches of
a pass summed). With PyTorch and CUDA the same operation is timed with CUDA events.
Labels of loss layers are int32 class indices.
"""
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import dlprim as dp  # noqa: E402
from dlprim.layers import TensorSpec, create  # noqa: E402
from layers import time_launches  # noqa: E402  (benchmarks/layers.py)

MID = (16, 64, 56, 56)


def cases():
    """(title, JSON type, options, input specs [(shape, dtype)], torch function)."""
    try:
        import torch
        import torch.nn.functional as F
    except ImportError:
        torch = F = None
    cuda = torch is not None and torch.cuda.is_available()
    labels = torch.randint(0, 1000, (1024,), device="cuda") if cuda else None
    f32 = lambda *shapes: [(s, "float32") for s in shapes]
    return [
        ("Softmax 1024x1000", "Softmax", {}, f32((1024, 1000)), lambda x: F.softmax(x, 1)),
        ("Softmax 256x32000", "Softmax", {}, f32((256, 32000)), lambda x: F.softmax(x, 1)),
        ("Softmax log 16x21x128x128", "Softmax", {"log": True}, f32((16, 21, 128, 128)),
         lambda x: F.log_softmax(x, 1)),
        ("SoftmaxWithLoss 1024x1000", "SoftmaxWithLoss", {}, [((1024, 1000), "float32"), ((1024,), "int32")],
         lambda x: F.cross_entropy(x, labels)),
        ("Interpolation nearest x2 16x64x56x56", "Interpolation",
         {"method": "nearest", "scale_y": 2.0, "scale_x": 2.0}, f32(MID),
         lambda x: F.interpolate(x, scale_factor=2.0, mode="nearest")),
        ("Interpolation bilinear x2 16x64x56x56", "Interpolation",
         {"method": "bilinear", "scale_y": 2.0, "scale_x": 2.0}, f32(MID),
         lambda x: F.interpolate(x, scale_factor=2.0, mode="bilinear")),
        ("Concat 2x 16x64x56x56", "Concat", {}, f32(MID, MID), lambda a, b: torch.cat([a, b], 1)),
        ("Slice channels 16:48 of 16x64x56x56", "Slice", {"begin": 16, "end": 48}, f32(MID),
         lambda x: x[:, 16:48].contiguous()),
        ("Transpose NCHW->NHWC 16x64x56x56", "Transpose", {"dims": [0, 2, 3, 1]}, f32(MID),
         lambda x: x.permute(0, 2, 3, 1).contiguous()),
        ("Reduction mean over HW 16x64x56x56", "Reduction", {"method": "mean", "dims": [2, 3]},
         f32(MID), lambda x: x.mean((2, 3), keepdim=True)),
    ]


def time_layer(ctx, type_name, options, specs, repeat):
    layer = create(ctx, type_name, "layer", options)
    outs, _, ws_bytes = layer.setup([TensorSpec(s, d) for s, d in specs])
    rng = np.random.default_rng(0)
    xs = [dp.Tensor.from_numpy(ctx, rng.standard_normal(s).astype(np.float32) if d == "float32"
                               else rng.integers(0, specs[0][0][1], s).astype(d)) for s, d in specs]
    dxs = [dp.Tensor(ctx, s) if d == "float32" else None for s, d in specs]
    ys = [dp.Tensor(ctx, o.shape) for o in outs]
    dys = [dp.Tensor.from_numpy(ctx, rng.standard_normal(o.shape).astype(np.float32)) for o in outs]
    ws = dp.Tensor(ctx, (ws_bytes,), "uint8") if ws_bytes else None
    fwd = layer.forward(xs, ys, [], ws)
    bwd = layer.backward(xs, dxs, ys, dys, [], [], ws, [False] * len(xs))
    return time_launches(ctx, fwd, repeat), time_launches(ctx, bwd, repeat), len(fwd), len(bwd)


def time_torch(fn, specs, repeat):
    from layers import time_torch as median_fwd_bwd
    return median_fwd_bwd(fn, [s for s, d in specs if d == "float32"], repeat)


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
    for title, type_name, options, specs, fn in cases():
        if args.names and not any(n in title for n in args.names):
            continue
        f, b, nf, nb = time_layer(ctx, type_name, options, specs, args.repeat)
        tf, tb = time_torch(fn, specs, args.repeat) if have_torch else (float("nan"),) * 2
        print("| %s | %d/%d | %.1f | %.1f | %.1f | %.1f |" % (title, nf, nb, f, b, tf, tb))


if __name__ == "__main__":
    main()
