"""Host-to-device copies of image batches: ``Tensor.to_device`` (page-locked staging
memory from 16 MiB: ``dlprim/staging.py``) beside the driver's plain pageable write, the
staging memory with other thread counts, and PyTorch's ``.cuda()`` from pageable and
from pinned memory when PyTorch with CUDA is importable.

    dlprim-benchmark transfer [--device gpu] [--batches 16 64 128] [--repeat 20]

Each figure is the mean wall time of ``--repeat`` blocking copies after one warm-up, of
a float32 batch of 3x224x224 images.
"""
import argparse
import time

import numpy as np
import pyopencl as cl

import dlprim as dp
from dlprim.staging import HostStaging


def mean_ms(fn, finish, repeat):
    fn()
    finish()
    start = time.perf_counter()
    for _ in range(repeat):
        fn()
    finish()
    return (time.perf_counter() - start) / repeat * 1e3


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default=None)
    ap.add_argument("--batches", type=int, nargs="+", default=[16, 64, 128])
    ap.add_argument("--repeat", type=int, default=20)
    args = ap.parse_args(argv)
    ctx = dp.Context(args.device)
    try:
        import torch
        torch = torch if torch.cuda.is_available() else None
    except ImportError:
        torch = None
    print("device: %s, driver %s" % (ctx.name, ctx.facts.driver_version))
    cols = ["pageable write", "to_device", "staged 2 threads", "staged 8 threads"] + \
        (["PyTorch pageable", "PyTorch pinned"] if torch else [])
    print("| batch | MB | " + " | ".join(cols) + " |")
    print("|---:|---:|" + "---:|" * len(cols))
    for batch in args.batches:
        a = np.random.default_rng(0).random((batch, 3, 224, 224), np.float32)
        t = dp.Tensor(ctx, a.shape, np.float32)
        ms = [mean_ms(lambda: cl.enqueue_copy(ctx.queue, t.buffer, a, is_blocking=True),
                      ctx.finish, args.repeat),
              mean_ms(lambda: t.to_device(a), ctx.finish, args.repeat)]
        for threads in (2, 8):
            staging = HostStaging(ctx, min_bytes=0, threads=threads, enabled=True)
            ms.append(mean_ms(lambda: staging.write(ctx.queue, t.buffer, 0, a), ctx.finish,
                              args.repeat))
            staging.close()
        if not np.array_equal(t.numpy(), a):
            raise SystemExit("transfer: the copied batch differs from the host's")
        if torch:
            pageable = torch.from_numpy(a)
            pinned = pageable.pin_memory()
            ms.append(mean_ms(lambda: pageable.cuda(), torch.cuda.synchronize, args.repeat))
            ms.append(mean_ms(lambda: pinned.cuda(non_blocking=True), torch.cuda.synchronize,
                              args.repeat))
        print("| %d | %.1f | %s |" % (batch, a.nbytes / 1e6, " | ".join("%.2f" % v for v in ms)),
              flush=True)


if __name__ == "__main__":
    main()
