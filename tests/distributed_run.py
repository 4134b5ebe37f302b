"""Programs that tests/test_distributed.py runs under ``mpiexec -n 2``.

    python distributed_run.py steps OUT [mpi]
                                           5 SGD steps, DataParallel over ShardedLoader;
                                           each rank writes OUT/rank<r>.npz (sums through
                                           shared memory, or by MPI's allreduce with mpi)
    python distributed_run.py shared_sum [MACHINES]
                                           SharedSum of host arrays against numpy's sum,
                                           the ranks split into MACHINES pretend machines
    python distributed_run.py raise        rank 1 raises after one step, rank 0 goes on
                                           (the job must end, not wait for rank 1)
"""
import os
import sys

import numpy as np

import dlprim as dp
from dlprim.data import ArraySource, BatchLoader
from dlprim.distributed import DataParallel, ShardedLoader, init

SAMPLES = 75  # 4 global batches of 16 and a last one of 11 (split 5 + 6 over 2 ranks)
CLASSES = 5


def source():
    rng = np.random.default_rng(5)
    images = rng.standard_normal((SAMPLES, 1, 4, 4)).astype(np.float32)
    return ArraySource(images, rng.integers(0, CLASSES, SAMPLES), num_classes=CLASSES)


def netconfig(batch):
    """conv -> BatchNorm on its running statistics (use_global_stats) -> relu -> fc -> loss.
    A BatchNorm normalising with each rank's own batch would make ranks differ from one
    process by design (docs/distributed.md); on its running statistics it does not."""
    cfg = dp.NetConfig()
    cfg.add_input("data", [batch, 1, 4, 4])
    cfg.add_input("label", [batch], "int32")
    cfg.add("Convolution2D", name="conv", inputs="data", outputs="c",
            options={"channels_out": 4, "kernel": 3, "pad": 1})
    cfg.add("BatchNorm", name="bn", inputs="c", outputs="c",
            options={"use_global_stats": True})
    cfg.add("Activation", name="relu", inputs="c", outputs="c", options={"activation": "relu"})
    cfg.add("InnerProduct", name="fc", inputs="c", outputs="logits", options={"outputs": CLASSES})
    cfg.add("SoftmaxWithLoss", name="loss", inputs=["logits", "label"], outputs="loss")
    cfg.set_outputs(["loss"])
    return cfg


def solver(net):
    return dp.SGD(net, lr=0.1, momentum=0.9, weight_decay=1e-3)


def steps(out, shared_memory=True):
    comm = init()
    net = dp.Net(dp.Context(comm.device), netconfig(8), seed=10 + comm.rank)  # made equal
    model = DataParallel(net, solver(net), comm, bucket_bytes=256,  # several buckets
                         shared_memory=shared_memory)
    print("rank %d sums by %s" % (comm.rank, "shared memory" if model.averager.shared
                                  else "MPI"), flush=True)
    loader = ShardedLoader(BatchLoader(source(), 8, seed=3, prefetch=0), comm.rank, comm.size)
    for x, y in loader:
        model.zero_grad()
        net(data=x, label=y)
        net.backward()
        model.step(samples=len(y))
    np.savez(os.path.join(out, "rank%d.npz" % comm.rank), **net.get_parameters())


def shared_sum(machines):
    """Buckets of odd sizes (slices of 0 to a few elements among them) and one large
    enough for several threads, each rank with its own weight, summed in rank order."""
    from dlprim.distributed.shared_sum import MIN_CHUNK, SharedSum
    comm = init()
    world = comm.comm
    per = comm.size // machines
    local = world.Split(comm.rank // per, key=comm.rank)
    cross = world.Split(comm.rank % per, key=comm.rank)
    count = 3 * MIN_CHUNK + 7
    summer = SharedSum(comm, count, threads=3, local=local, cross=cross)
    values = [np.random.default_rng(r).standard_normal(count).astype(np.float32)
              for r in range(comm.size)]
    weights = [0.5 + r for r in range(comm.size)]
    edges = [0, 1, 3, 100, 101, count]
    for step in range(2):
        for a, b in zip(edges[:-1], edges[1:]):
            host = values[comm.rank][a:b].copy()
            summer.sum(host, a, b, weights[comm.rank])
            expected = np.zeros(b - a, np.float32)
            for r in range(comm.size):
                expected += np.float32(weights[r]) * values[r][a:b]
            np.testing.assert_allclose(host, expected, rtol=1e-5, atol=1e-5)
            everyone = world.allgather(host.tobytes())
            assert all(h == everyone[0] for h in everyone), "ranks differ in bits"
        summer.finish(len(edges) - 1)
    print("rank %d of %d: shared sums over %d machines match" % (comm.rank, comm.size, machines),
          flush=True)


def fail_on_rank_1():
    comm = init()
    net = dp.Net(dp.Context(comm.device), netconfig(8))
    model = DataParallel(net, solver(net), comm)
    x, y = np.zeros((8, 1, 4, 4), np.float32), np.zeros(8, np.int32)
    for step in range(2):
        if step == 1 and comm.rank == 1:
            raise RuntimeError("a deliberate failure on rank 1")
        model.zero_grad()
        net(data=x, label=y)
        net.backward()
        model.step()  # rank 0 waits here for rank 1 at the second step
    print("rank %d finished, which it must not" % comm.rank, flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "steps":
        steps(sys.argv[2], sys.argv[3:] != ["mpi"])
    elif sys.argv[1] == "shared_sum":
        shared_sum(int(sys.argv[2]) if len(sys.argv) > 2 else 1)
    else:
        fail_on_rank_1()
