"""Time of one gradient average of dlprim.distributed per step, for real nets' gradient
arenas: device -> pinned host copies, bucketed non-blocking allreduces, copies back
(``GradientAverager.average``), and the plain MPI allreduce of the same bytes in host
memory beside it. Run under the launcher, one rank per device:

    mpiexec -n 2 python benchmarks/allreduce.py
    mpiexec -n 8 -f hosts python benchmarks/allreduce.py --models resnet50 --bucket-mb 25
    mpiexec -n 2 python benchmarks/allreduce.py --elements 25557056 86567680

``--elements`` times bare arenas of those sizes (resnet50's and vit_b_16's trainable
parameters with the arena's padding) instead of building the nets, whose kernels take
minutes to compile on a fresh machine.

Rank 0 prints, per net: the bytes each rank sends, ms per average, ms per host-only
allreduce, and the bus bandwidth these reach (ring allreduce: 2 (n-1)/n x bytes / time).
"""
import argparse
import time
from types import SimpleNamespace

import numpy as np

import dlprim as dp
from dlprim import models
from dlprim.distributed import GradientAverager, init


def timed(run, iters, comm):
    run()  # the first call pays for first touches
    comm.barrier()
    start = time.perf_counter()
    for _ in range(iters):
        run()
    return (time.perf_counter() - start) / iters


def arena(count, ctx):
    """What GradientAverager reads of a net, for a bare gradient arena of ``count``."""
    return SimpleNamespace(ctx=ctx, trainable_size=count,
                           grad_arena=dp.Tensor.zeros(ctx, (count,), np.float32))


def measure(name, comm, ctx, bucket_bytes, iters, shared_memory):
    net = (arena(int(name), ctx) if name.isdigit()
           else dp.Net(ctx, getattr(models, name)(batch=1), seed=0))
    net.grad_arena.to_device(np.full(net.grad_arena.shape, comm.rank + 1, np.float32))
    averager = GradientAverager(net, comm, bucket_bytes, shared_memory)

    def average():
        averager.average(1.0 / comm.size)
        ctx.finish()  # the sums are back on the device
    host = np.ones(net.trainable_size, np.float32)
    seconds = timed(average, iters, comm)
    host_seconds = timed(lambda: comm.allreduce(host), iters, comm)
    return averager.nbytes, seconds, host_seconds, len(averager.buckets)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", nargs="+", default=["resnet50", "vit_b_16"])
    p.add_argument("--elements", nargs="+", type=int,
                   help="bare gradient arenas of these sizes instead of --models")
    p.add_argument("--bucket-mb", type=float, default=25)
    p.add_argument("--iters", type=int, default=5)
    p.add_argument("--sum", choices=("shared", "mpi"), default="shared",
                   help="ranks on one machine add their buckets through shared host memory "
                        "(the default) or by MPI's allreduce")
    args = p.parse_args()
    comm = init()
    ctx = dp.Context(comm.device)
    bus = 2.0 * (comm.size - 1) / comm.size
    print("rank %d: %s (%s)" % (comm.rank, ctx.name, ctx.device_string), flush=True)
    comm.barrier()
    if comm.rank == 0:
        print("%d ranks on %s, buckets of %g MiB, sums by %s" % (
            comm.size, ctx.name, args.bucket_mb,
            "shared memory" if args.sum == "shared" else "MPI allreduce"))
        print("| net | MB per rank | buckets | ms per average | GB/s (bus) "
              "| ms host allreduce | GB/s (bus) |")
        print("|---|---|---|---|---|---|---|")
    for name in [str(n) for n in args.elements] if args.elements else args.models:
        nbytes, seconds, host_seconds, count = measure(
            name, comm, ctx, int(args.bucket_mb * 2 ** 20), args.iters, args.sum == "shared")
        if comm.rank == 0:
            print("| %s | %.1f | %d | %.1f | %.2f | %.1f | %.2f |" % (
                name, nbytes / 1e6, count, 1e3 * seconds, bus * nbytes / seconds / 1e9,
                1e3 * host_seconds, bus * nbytes / host_seconds / 1e9), flush=True)


if __name__ == "__main__":
    main()
