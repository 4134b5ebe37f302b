"""dlprim-train over several ranks (``mpiexec -n N dlprim-train config.json``).

The pieces the Trainer and the command line use when there is more than one rank:
the per-rank batch, the training step with averaged gradients, validation split over
the ranks, a checkpoint's position carried over to another global batch, and the
agreement on setup failures. Collectives must be called by every rank in the same
order, so a failure that only some ranks see is agreed on (``failures``) before the
next collective, and anything read on rank 0 alone travels with its errors
(``from_root``).
"""
from typing import Any, Callable, Dict, List, Optional, Tuple

from ..distributed import Communicator, DistributedError
from ..errors import CheckpointError
from .steps import evaluate_batches, feed, read

__all__ = ["batch_sizes", "failures", "from_root", "train_step", "evaluate", "carry_position"]


def batch_sizes(cfg: Dict[str, Any], size: int) -> Tuple[int, int]:
    """(this rank's batch, the global batch) for ``size`` ranks: ``batch`` per rank by
    default, or ``distributed.global_batch`` split evenly (ValueError when it does not
    split into ``size`` equal parts)."""
    fixed = (cfg.get("distributed") or {}).get("global_batch")
    if fixed is None:
        return cfg["batch"], cfg["batch"] * size
    if fixed % size:
        raise ValueError("distributed.global_batch %d does not split evenly over %d ranks: "
                         "launch a number of ranks that divides it, or change it"
                         % (fixed, size))
    return fixed // size, fixed


def failures(comm: Communicator, failure: Optional[Tuple[int, str]]) -> List[Tuple[int, int, str]]:
    """[(rank, exit status, message)] of every rank whose setup failed, on every rank;
    ``failure`` is this rank's (status, message), or None."""
    return [(rank, f[0], f[1]) for rank, f in enumerate(comm.allgather_object(failure))
            if f is not None]


def from_root(comm: Communicator, make: Callable[[], Any]) -> Any:
    """``make()`` run on rank 0, its result on every rank. When it raises, rank 0 raises
    that error and the others a DistributedError with its message, so no rank is left
    waiting for a result that will not come."""
    result, error = None, None
    if comm.rank == 0:
        try:
            result = make()
        except Exception as err:  # carried to the other ranks, then raised here too
            error = err
    if comm.size > 1:
        shared = comm.bcast_object((result, None if error is None else str(error)))
        if comm.rank != 0:
            result, message = shared
            if message is not None:
                err = DistributedError("rank 0: %s" % message)
                err.from_rank = 0  # repeats rank 0's error, which rank 0 reports
                raise err
    if error is not None:
        raise error
    return result


def train_step(net: Any, parallel: Any, roles: Any, x: Any, y: Any) -> Tuple[float, int]:
    """One step on this rank's part (x, y) of a global batch, the gradients averaged
    over the ranks weighted by their labels; -> (this rank's loss, correct labels)."""
    feed(net, roles, x, y)
    parallel.zero_grad()
    net.forward()
    parallel.backward()
    parallel.step(samples=y.size)
    loss, top = read(net, roles, y)
    return loss, top[1]


def evaluate(net: Any, roles: Any, loader: Any, comm: Communicator,
             what: str = "the validation data") -> Tuple[float, float]:
    """(loss, accuracy) over every label of a sharded ``loader``: each rank runs its
    part, the sums are added over the ranks (the same numbers one process would get)."""
    seen = []

    def counted(batches):
        for x, y in batches:
            seen.append(y.size)
            yield x, y
    loss_sum = correct = 0.0
    if len(loader):
        result = evaluate_batches(net, roles, counted(loader), what=what)
        loss_sum, correct = result["loss"] * sum(seen), result["accuracy"] * sum(seen)
    loss_sum, correct, labels = comm.sum_values([loss_sum, correct, sum(seen)])
    if not labels:
        raise ValueError("%s gave no batches to evaluate" % what)
    return loss_sum / labels, correct / labels


def carry_position(state: Dict[str, Any], global_batch: int, where: str) -> int:
    """The position (global batches into the epoch) at which a checkpoint resumes with
    ``global_batch``: its own where it was saved with the same global batch or at an
    epoch's start, else the same sample count, which must fall on a batch boundary."""
    saved = state.get("global_batch")
    position = state["position"]
    if saved is None or saved == global_batch or not position:
        return position
    samples = position * saved
    if samples % global_batch:
        raise CheckpointError(
            "%s: saved %d samples into epoch %d with a global batch of %d; a global batch "
            "of %d does not resume there on a batch boundary: resume with the global batch "
            "it was saved with (distributed.global_batch: %d, or as many ranks as then), "
            "or from an end-of-epoch checkpoint"
            % (where, samples, state["epoch"] + 1, saved, global_batch, saved))
    return samples // global_batch
