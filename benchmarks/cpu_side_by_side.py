"""dlprim on a CPU OpenCL driver (PoCL) beside numpy (OpenBLAS) and PyTorch CPU.

SGEMM C = A·B (n x n, float32) through ``dlprim.core.gemm.Gemm`` and numpy's matmul, then
ResNet-ish convolutions at batch 2 (forward, backward-data, backward-filter) through
``dlprim.core.conv`` and torch. Wall time after ``ctx.finish()``, best of ``--repeat``
after a warm-up: a CPU shared with other work only ever slows a run down. Give the
libraries the cores PoCL uses:

    OPENBLAS_NUM_THREADS=2 python benchmarks/cpu_side_by_side.py --threads 2
"""
import argparse
import time

import numpy as np

import dlprim as dp
from dlprim.core.conv import ConvBackwardData, ConvBackwardFilter, ConvForward, ConvGeometry
from dlprim.core.gemm import Gemm

CONVS = [(64, 64, 56, 3, 1), (64, 256, 56, 1, 0), (128, 128, 28, 3, 1)]  # cin, cout, hw, k, pad


def best(run, finish, repeat):
    run()
    finish()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        run()
        finish()
        times.append(time.perf_counter() - start)
    return min(times)


def gemm_rows(ctx, sizes, repeat):
    rng = np.random.default_rng(0)
    for n in sizes:
        a, b = (rng.standard_normal((n, n), dtype=np.float32) for _ in range(2))
        A, B, C = dp.Tensor.from_numpy(ctx, a), dp.Tensor.from_numpy(ctx, b), dp.Tensor(ctx, (n, n))
        op = Gemm(ctx, n, n, n)
        t = best(lambda: op(A, B, C), ctx.finish, repeat)
        t_np = best(lambda: a @ b, lambda: None, repeat)
        flop = 2.0 * n ** 3 * 1e-9
        print("gemm %5d: dlprim %6.1f GFLOP/s, numpy %6.1f GFLOP/s (%.0f%%)"
              % (n, flop / t, flop / t_np, 100 * t_np / t))


def conv_rows(ctx, torch, batch, repeat):
    rng = np.random.default_rng(0)
    for cin, cout, hw, k, p in CONVS:
        g = ConvGeometry(cin, cout, (hw, hw), (k, k), (1, 1), (p,) * 4)
        x, w, dy = (rng.standard_normal(s, dtype=np.float32)
                    for s in (g.in_shape(batch), g.weight_shape, g.out_shape(batch)))
        X, W, DY = (dp.Tensor.from_numpy(ctx, v) for v in (x, w, dy))
        Y, DX, DW = (dp.Tensor(ctx, s) for s in (g.out_shape(batch), g.in_shape(batch),
                                                  g.weight_shape))
        xt, wt, dyt = (torch.from_numpy(v) for v in (x, w, dy))
        ops = {"forward": (ConvForward(ctx, g, batch=batch), lambda op, ws: op(X, W, Y, ws=ws)),
               "backward_data": (ConvBackwardData(ctx, g, batch=batch),
                                 lambda op, ws: op(DY, W, DX, ws=ws)),
               "backward_filter": (ConvBackwardFilter(ctx, g, batch=batch),
                                   lambda op, ws: op(X, DY, DW, ws=ws, beta=0.0))}
        masks = {"backward_data": [True, False, False], "backward_filter": [False, True, False]}
        cells = []
        for name, (op, call) in ops.items():
            need = op.workspace_bytes(batch)
            ws = dp.Tensor(ctx, (need,), "uint8") if need else None
            t = best(lambda: call(op, ws), ctx.finish, repeat)
            if name == "forward":
                ref = lambda: torch.nn.functional.conv2d(xt, wt, padding=p)  # noqa: E731
            else:
                ref = lambda: torch.ops.aten.convolution_backward(  # noqa: E731
                    dyt, xt, wt, None, [1, 1], [p, p], [1, 1], False, [0, 0], 1, masks[name])
            cells.append("%s %.1f ms (torch %.1f)" % (name, t * 1e3,
                                                      best(ref, lambda: None, repeat) * 1e3))
        print("conv %d->%d %dx%d at %dx%d, batch %d: %s"
              % (cin, cout, k, k, hw, hw, batch, "; ".join(cells)))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[256, 512, 1024, 2048])
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2, help="torch.set_num_threads")
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    ctx = dp.Context(args.device)
    print(ctx.name)
    gemm_rows(ctx, args.sizes, args.repeat)
    try:
        import torch
    except ImportError:
        return
    torch.set_num_threads(args.threads)
    conv_rows(ctx, torch, args.batch, args.repeat)


if __name__ == "__main__":
    main()
