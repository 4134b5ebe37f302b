"""Data-parallel training over MPI: one process per device, on one machine or several.

    comm = dlprim.distributed.init()          # rank, size, local_rank, device
    ctx = dlprim.Context(comm.device)
    net = dlprim.Net(ctx, graph); solver = dlprim.SGD(net, lr=0.1)
    model = dlprim.distributed.DataParallel(net, solver, comm)
    loader = dlprim.distributed.ShardedLoader(BatchLoader(source, 8), comm.rank, comm.size)
    for x, y in loader:                       # this rank's part of each global batch
        ...write x, y...; model.zero_grad(); net.forward(); net.backward(); model.step()

Run it with ``mpiexec -n 4 python train.py`` (``dlprim-train`` does all of this from a
config). Without an MPI launcher ``init()`` is a single process of size 1 and mpi4py is
not needed; docs/distributed.md has the launch on several machines, what happens when a
rank fails, and the scaling model.

``init`` and the sharding import without OpenCL (the command line asks for the
communicator before it opens a device); the names that move gradients load on first use.
"""
from .comm import Communicator, DistributedError, MPICommunicator, init, launcher_variable
from .shard import ShardedLoader, part_bounds

__all__ = ["init", "Communicator", "MPICommunicator", "DistributedError", "launcher_variable",
           "DataParallel", "GradientAverager", "DEFAULT_BUCKET_BYTES", "ShardedLoader",
           "part_bounds"]


def __getattr__(name):
    # "from .x import y" form: "from . import x" would ask this function for x again
    if name == "DataParallel":
        from .data_parallel import DataParallel as value
    elif name == "GradientAverager":
        from .gradients import GradientAverager as value
    elif name == "DEFAULT_BUCKET_BYTES":
        from .gradients import DEFAULT_BUCKET_BYTES as value
    else:
        raise AttributeError("module 'dlprim.distributed' has no attribute %r" % name)
    globals()[name] = value
    return value
