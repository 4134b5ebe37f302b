"""Memory-bound kernels: pointwise, reductions, transposes, random fills (FP32).

    dlprim-benchmark pointwise [--device gpu] [--repeat 50]

Each row is the median of OpenCL profiling events over ``--repeat`` runs after a
warm-up (all launches of an op summed), with the bytes it must move and the resulting
GB/s; ``clEnqueueCopyBuffer`` of the same bytes is the device's practical ceiling.
When PyTorch with CUDA is importable the same operation is timed with CUDA events.
"""
import argparse
import statistics

import pyopencl as cl

import dlprim as dp
from dlprim.core.copy import TransposeCopy
from dlprim.core.pointwise import PointwiseBroadcast, PointwiseBroadcastReduce
from dlprim.core.random import RandomFill
from .harness import time_cuda as time_torch, time_launches


def cases(ctx):
    """(name, launches, bytes moved, torch callable factory or None)."""
    f = "float"
    nchw, c = (64, 64, 56, 56), (1, 64, 1, 1)
    x, y, b = dp.Tensor(ctx, nchw), dp.Tensor(ctx, nchw), dp.Tensor(ctx, c)
    n = x.size
    out = []
    op = PointwiseBroadcast(ctx, [(nchw, f)], [(nchw, f)], "y0 = x0 * 2.0f;")
    out.append(("scale x*2 64x64x56x56", op.launches([x], [y]), 8 * n, lambda t: lambda: t * 2))
    op = PointwiseBroadcast(ctx, [(nchw, f), (c, f)], [(nchw, f)], "y0 = max(x0 + x1, 0.0f);")
    out.append(("relu(x+bias) NCHW + (1,C,1,1)", op.launches([x, b], [y]), 8 * n,
                lambda t: lambda: (t + t[:1, :, :1, :1]).relu()))
    for shape, ys, dims in [(nchw, c, (0, 2, 3)), ((256, 256, 14, 14), (1, 256, 1, 1), (0, 2, 3)),
                            ((8192, 1000), (8192, 1), (1,)), ((8192, 1000), (1, 1000), (0,)),
                            ((1 << 24,), (1,), (0,))]:
        xs, r = dp.Tensor(ctx, shape), dp.Tensor(ctx, ys)
        op = PointwiseBroadcastReduce(ctx, [(shape, f)], [(ys, f)], "y0 = x0;")
        name = "sum %s -> %s (%d pass)" % ("x".join(map(str, shape)), "x".join(map(str, ys)),
                                           2 if op.chunks > 1 else 1)
        out.append((name, op.launches([xs], [r]), 4 * xs.size,
                    (lambda d: lambda t: lambda: t.sum(dim=d, keepdim=True))(dims), shape))
    y2 = dp.Tensor(ctx, (64, 56, 56, 64))
    out.append(("transpose NCHW->NHWC", TransposeCopy(ctx, nchw, (0, 2, 3, 1)).launches(x, y2), 8 * n,
                lambda t: lambda: t.permute(0, 2, 3, 1).contiguous()))
    sq, sq2 = dp.Tensor(ctx, (4096, 4096)), dp.Tensor(ctx, (4096, 4096))
    out.append(("transpose 4096x4096", TransposeCopy(ctx, (4096, 4096), (1, 0)).launches(sq, sq2),
                8 * sq.size, lambda t: lambda: t.t().contiguous(), (4096, 4096)))
    flat = x.view((n,))
    out.append(("uniform fill 12.8M", RandomFill(ctx, (n,), "uniform").launches(flat, 1, 0, True),
                4 * n, lambda t: lambda: t.uniform_()))
    out.append(("normal fill 12.8M", RandomFill(ctx, (n,), "normal").launches(flat, 1, 0, True),
                4 * n, lambda t: lambda: t.normal_()))
    return out, nchw


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default=None)
    ap.add_argument("--repeat", type=int, default=50)
    args = ap.parse_args(argv)
    ctx = dp.Context(args.device, profiling=True)
    try:
        import torch
        use_torch = torch.cuda.is_available()
    except ImportError:
        use_torch = False
    print("device: %s, driver %s" % (ctx.name, ctx.facts.driver_version))
    rows, nchw = cases(ctx)
    src, dst = dp.Tensor(ctx, nchw), dp.Tensor(ctx, nchw)
    times = []
    for _ in range(args.repeat):
        e = cl.enqueue_copy(ctx.queue, dst.buffer, src.buffer, byte_count=src.nbytes)
        e.wait()
        times.append((e.profile.end - e.profile.start) * 1e-3)
    copy_us = statistics.median(times)
    print("%-44s %9s %9s %10s" % ("operation", "us", "GB/s", "torch us"))
    print("%-44s %9.1f %9.0f %10s" % ("copy buffer 51 MB (ceiling)", copy_us, 2 * src.nbytes / copy_us / 1e3, ""))
    for row in rows:
        name, launches, nbytes, torch_fn = row[:4]
        shape = row[4] if len(row) > 4 else nchw
        us = time_launches(ctx, launches, args.repeat)
        tus = ""
        if use_torch:
            t = torch.randn(shape, device="cuda")
            tus = "%.1f" % time_torch(torch_fn(t), args.repeat)
        print("%-44s %9.1f %9.0f %10s" % (name, us, nbytes / us / 1e3, tus))


if __name__ == "__main__":
    main()
