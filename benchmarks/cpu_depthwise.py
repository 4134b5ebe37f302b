"""Depthwise 3x3 convolutions (MobileNet-V2's shapes) on a CPU OpenCL driver beside
PyTorch CPU: forward, backward-data and backward-filter, ms, best of ``--repeat`` after a
warm-up (wall time of the prepared launches until ``ctx.finish()``; a shared CPU only
ever slows a run down).

    python benchmarks/cpu_depthwise.py --threads 2
"""
import argparse

import numpy as np

import dlprim as dp
from dlprim.core.conv import ConvBackwardData, ConvBackwardFilter, ConvForward, ConvGeometry

import cpu_side_by_side  # this folder: the timing protocol shared with the other CPU benchmarks

SHAPES = [(32, 112, 1), (96, 112, 2), (144, 56, 1), (192, 28, 1), (384, 14, 1), (960, 7, 1)]


def best(run, finish, repeat):
    """Milliseconds: cpu_side_by_side's best-of-repeats, after its warm-up."""
    return cpu_side_by_side.best(run, finish, repeat) * 1e3


def rows(ctx, torch, batch, repeat):
    rng = np.random.default_rng(0)
    for c, hw, s in SHAPES:
        g = ConvGeometry(c, c, (hw, hw), (3, 3), (s, s), (1, 1, 1, 1), groups=c)
        x, w, dy = (rng.standard_normal(v, dtype=np.float32)
                    for v in (g.in_shape(batch), g.weight_shape, g.out_shape(batch)))
        X, W, DY = (dp.Tensor.from_numpy(ctx, v) for v in (x, w, dy))
        Y, DX, DW = (dp.Tensor(ctx, v) for v in (g.out_shape(batch), g.in_shape(batch),
                                                  g.weight_shape))
        fwd, bwd_data = ConvForward(ctx, g, batch=batch), ConvBackwardData(ctx, g, batch=batch)
        bwd_filter = ConvBackwardFilter(ctx, g, batch=batch)
        need = max(op.workspace_bytes(batch) for op in (fwd, bwd_data, bwd_filter))
        ws = dp.Tensor(ctx, (need,), "uint8") if need else None
        # launches prepared once, as a Net's plan holds them
        plans = [fwd.launches(X, W, Y, ws=ws), bwd_data.launches(DY, W, DX, ws=ws),
                 bwd_filter.launches(X, DY, DW, ws=ws, beta=0.0)]
        ours = [best(lambda: [launch(ctx.queue) for launch in plan], ctx.finish, repeat)
                for plan in plans]
        theirs = ["-"] * 3
        if torch is not None:
            xt, wt, dyt = (torch.from_numpy(v) for v in (x, w, dy))

            def back(mask):
                return lambda: torch.ops.aten.convolution_backward(
                    dyt, xt, wt, None, [s, s], [1, 1], [1, 1], False, [0, 0], c, mask)
            theirs = ["%.2f" % best(f, lambda: None, repeat) for f in (
                lambda: torch.nn.functional.conv2d(xt, wt, stride=s, padding=1, groups=c),
                back([True, False, False]), back([False, True, False]))]
        print("| C=%d %dx%d s%d | %s |" % (c, hw, hw, s, " | ".join(
            "%.2f (torch %s)" % (t, o) for t, o in zip(ours, theirs))))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2, help="torch.set_num_threads")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--no-torch", action="store_true")
    args = parser.parse_args()
    ctx = dp.Context(args.device)
    print(ctx.name, "batch", args.batch)
    print("| layer | forward | backward-data | backward-filter |")
    print("|---|---|---|---|")
    torch = None
    if not args.no_torch:
        try:
            import torch
            torch.set_num_threads(args.threads)
        except ImportError:
            pass
    rows(ctx, torch, args.batch, args.repeat)


if __name__ == "__main__":
    main()
