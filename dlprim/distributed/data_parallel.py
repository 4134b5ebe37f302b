"""DataParallel: a solver's zero_grad/step with the gradients averaged over the ranks.

Every rank holds the whole net and runs it on its part of each batch; before the update
the trainable gradients are averaged (``GradientAverager``), so every rank applies the
same update to the same parameters and they stay equal without being sent again.

What is and is not kept equal:

- parameters: broadcast from rank 0 when DataParallel is made (and by
  ``broadcast_parameters``), then equal by construction;
- BatchNorm running statistics are not gradients: each rank keeps the mean and variance
  of its own batches during training. ``sync_statistics`` copies rank 0's onto every
  rank; dlprim-train calls it before each validation and before saving, so evaluation
  and every saved file use rank 0's statistics. The normalisation inside a training
  step uses the rank's own batch (as PyTorch's DistributedDataParallel without
  SyncBatchNorm), so with BatchNorm a step of N ranks at batch b is not exactly one
  process's step at batch N*b; without BatchNorm (or with ``use_global_stats``) it is,
  up to float rounding.
"""
from typing import Any, Optional

import numpy as np

from .comm import Communicator, init
from .gradients import DEFAULT_BUCKET_BYTES, GradientAverager

__all__ = ["DataParallel"]


class DataParallel:
    """``net`` and ``solver`` trained data-parallel over ``comm`` (default ``init()``).

    A training loop written for one process becomes data-parallel by calling this
    object's ``zero_grad()`` and ``step()`` instead of the solver's, each rank feeding
    its own part of the batch::

        dp_net = dlprim.distributed.DataParallel(net, solver)
        dp_net.zero_grad(); net.forward(); dp_net.backward(); dp_net.step()

    ``backward()`` is ``net.backward()`` with each bucket of gradients sent on its way to
    the host as soon as the backward pass has finished it, so the average overlaps the
    rest of the backward pass; after a plain ``net.backward()`` it starts at ``step()``.

    ``step(samples=n)`` weighs each rank's gradient by its share of the samples (ranks
    with unequal parts, as in a last partial batch); without it every rank counts the
    same. Gradients travel in buckets of ``bucket_bytes``, summed through the shared
    memory of ranks on one machine unless ``shared_memory`` is False (then by MPI's
    allreduce; ``GradientAverager``).
    """

    def __init__(self, net: Any, solver: Any, comm: Optional[Communicator] = None,
                 bucket_bytes: int = DEFAULT_BUCKET_BYTES, shared_memory: bool = True) -> None:
        self.net, self.solver = net, solver
        self.comm = init() if comm is None else comm
        if solver.net is not net:
            solver.init(net)
        self.averager = GradientAverager(net, self.comm, bucket_bytes, shared_memory)
        self.broadcast_parameters()

    @property
    def rank(self) -> int:
        """This process's rank."""
        return self.comm.rank

    @property
    def size(self) -> int:
        """The number of ranks."""
        return self.comm.size

    def zero_grad(self, net: Any = None, e: Any = None) -> None:
        """Zero the parameter gradients (the solver's ``zero_grad``)."""
        self.solver.zero_grad(self.net, e)

    def backward(self) -> None:
        """Enqueue the net's backward pass, the gradients' copies for the average in it."""
        if self.comm.size > 1:
            self.averager.backward()
        else:
            self.net.backward()

    def step(self, samples: Optional[int] = None) -> None:
        """Average the gradients over the ranks, then update the parameters (enqueued).

        ``samples``: how many samples (labels) this rank's loss was the mean over; the
        average is then weighted by them, which is the gradient of the mean over all the
        ranks' samples. Every rank must call it, in the same order as the others."""
        if self.comm.size > 1:
            if samples is None:
                weight = 1.0 / self.comm.size
            else:
                total = self.comm.sum_values([samples])[0]
                weight = float(samples) / total if total else 0.0
            self.averager.average(weight)
        self.solver.apply(self.net)

    def apply(self, net: Any = None, e: Any = None) -> None:
        """The solver's name for ``step()`` (every rank counting the same)."""
        self.step()

    def broadcast_parameters(self, root: int = 0) -> None:
        """Every parameter and statistic of rank ``root`` onto all ranks."""
        self._broadcast(0, self.net.store.total_size, root)

    def sync_statistics(self, root: int = 0) -> None:
        """Rank ``root``'s values of what is not trained by gradients (BatchNorm running
        statistics, frozen parameters) onto all ranks; trainable ones are already equal."""
        self._broadcast(self.net.trainable_size, self.net.store.total_size, root)

    def _broadcast(self, start, stop, root):
        if self.comm.size == 1 or stop <= start:
            return
        view = self.net.param_arena.view((stop - start,), start)
        host = np.ascontiguousarray(view.to_host(), dtype=np.float32)
        self.comm.bcast(host, root)
        view.to_device(host)

    def __repr__(self):
        return "DataParallel(%r, %r, rank %d of %d, %d gradient bytes in %d buckets)" % (
            self.net, self.solver, self.comm.rank, self.comm.size, self.averager.nbytes,
            len(self.averager.buckets))
