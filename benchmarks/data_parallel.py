"""Data-parallel training speed: images per second of one net trained with
``dlprim.distributed.DataParallel`` on every rank of the job (one device each), at a
fixed batch per rank, on random data. Run it once per job size, one rank per device:

    mpiexec -n 1 python benchmarks/data_parallel.py --model resnet50 --batch 64
    mpiexec -n 2 python benchmarks/data_parallel.py --model resnet50 --batch 64

Rank 0 prints one table row: ranks, ms per step (median over the ranks' slowest),
images per second over all ranks, the part of a step spent after backward was enqueued
waiting for the gradient average (``DataParallel.step``), and the average's bytes.
Scaling efficiency at N ranks is images/s(N) / (N x images/s(1)).
"""
import argparse
import statistics
import time

import numpy as np

import dlprim as dp
from dlprim import models
from dlprim.distributed import DataParallel, init


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="resnet50")
    p.add_argument("--batch", type=int, default=64, help="images per rank per step")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--bucket-mb", type=float, default=25)
    p.add_argument("--no-overlap", action="store_true",
                   help="average after backward has run (net.backward, then step)")
    p.add_argument("--sum", choices=("shared", "mpi"), default="shared",
                   help="how ranks on one machine add their buckets: through shared host "
                        "memory (the default) or by MPI's allreduce")
    args = p.parse_args()
    comm = init()
    ctx = dp.Context(comm.device)
    net = dp.Net(ctx, getattr(models, args.model)(batch=args.batch), seed=0)
    parallel = DataParallel(net, dp.SGD(net, lr=0.01, momentum=0.9), comm,
                            bucket_bytes=int(args.bucket_mb * 2 ** 20),
                            shared_memory=args.sum == "shared")
    rng = np.random.default_rng(comm.rank)
    data = net.tensor("data")
    data.to_device(rng.standard_normal(data.shape).astype(np.float32))
    label = net.tensor("label")
    label.to_device(np.zeros(label.shape, label.dtype))  # any valid class: speed only

    def step():
        parallel.zero_grad()
        net.forward()
        if args.no_overlap:
            net.backward()
        else:
            parallel.backward()
        start = time.perf_counter()
        parallel.step()
        ctx.queue.finish()
        return time.perf_counter() - start

    for _ in range(args.warmup):
        step()
    steps, waits = [], []
    for _ in range(args.iters):
        comm.barrier()
        start = time.perf_counter()
        waits.append(step())
        steps.append(time.perf_counter() - start)
    # a step is as slow as the slowest rank
    slowest = [max(t) for t in zip(*comm.allgather_object(steps))]
    ms = 1e3 * statistics.median(slowest)
    if comm.rank == 0:
        print("| %s | %d | %d | %.1f | %.0f | %.1f | %.1f | %s | %s |" % (
            args.model, args.batch, comm.size, ms, 1e3 * args.batch * comm.size / ms,
            1e3 * statistics.median(waits), parallel.averager.nbytes / 1e6,
            "after backward" if args.no_overlap else "overlapped",
            "-" if comm.size == 1 else "shared memory" if parallel.averager.shared else "MPI"),
            flush=True)


if __name__ == "__main__":
    main()
