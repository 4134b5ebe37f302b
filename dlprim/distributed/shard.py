"""Each rank's part of every global batch, so that N ranks train as one process would.

A global batch of G = N * b samples is the one a single process at batch G would take
(the same slice of the same ``(seed, epoch)`` permutation of the wrapped loader); rank r
takes the r-th of N equal parts of it, ``[r * b, (r + 1) * b)``. With the gradients
averaged over the ranks, a step of 2 ranks at batch 8 is then a step of one process at
batch 16. A partial last batch of n samples is split as evenly as it goes (parts of
n // N or n // N + 1 samples, weighted by their sizes in the average); one with fewer
samples than ranks would leave a rank without data and is not used.

Exact resume is kept: a batch is a function of (seed, epoch, batch index, rank), never of
what was loaded before. Random transforms draw from a generator seeded by
``[seed, epoch, batch]`` on one rank, as the loader's own, and ``[seed, epoch, batch,
rank]`` on several, so that the ranks' parts are not transformed alike: random
augmentation is therefore not the same draw as a single process's, while the samples are.
"""
from typing import Any, Iterator, List, Tuple

import numpy as np

from ..data.loader import run_epoch

__all__ = ["ShardedLoader", "part_bounds"]


def part_bounds(count: int, rank: int, size: int) -> Tuple[int, int]:
    """``[start, stop)`` of rank ``rank``'s part when ``count`` samples are split over
    ``size`` ranks as evenly as they go (equal parts when ``size`` divides ``count``)."""
    return rank * count // size, (rank + 1) * count // size


class ShardedLoader:
    """Rank ``rank`` of ``size``'s parts of the global batches of ``loader`` (a
    ``dlprim.data.BatchLoader`` whose ``batch`` is the per-rank batch).

    It iterates like the loader: ``len()`` global batches per epoch, ``epoch`` and
    ``position`` (global batches handed out, the same number on every rank),
    ``set_epoch``, ``state_dict``; samples, classes and shape are the loader's.
    """

    def __init__(self, loader: Any, rank: int, size: int) -> None:
        if not (0 <= rank < size):
            raise ValueError("rank must be in [0, %d), got %r" % (size, rank))
        self.loader, self.rank, self.size = loader, int(rank), int(size)
        self.batch = loader.batch  # this rank's part of a full batch
        self.global_batch = loader.batch * self.size
        self.epoch, self.position = loader.epoch, loader.position

    def __repr__(self):
        return "ShardedLoader(rank %d of %d, global batch %d, %d batches, of %r)" % (
            self.rank, self.size, self.global_batch, len(self), self.loader)

    def __len__(self) -> int:
        n, g = len(self.loader.source), self.global_batch
        full, rest = divmod(n, g)
        return full + (1 if rest >= self.size and not self.loader.drop_last else 0)

    @property
    def source(self) -> Any:
        """The wrapped loader's source."""
        return self.loader.source

    @property
    def num_classes(self) -> Any:
        """The source's number of classes."""
        return self.loader.num_classes

    @property
    def shape(self) -> Tuple[int, ...]:
        """The shape of one sample, as the wrapped loader gives it."""
        return self.loader.shape

    def set_epoch(self, epoch: int) -> None:
        """Start epoch ``epoch`` from its first global batch at the next iteration."""
        self.epoch, self.position = int(epoch), 0

    def state_dict(self) -> dict:
        """{epoch, position, seed}: where the next global batch comes from."""
        return {"epoch": self.epoch, "position": self.position, "seed": self.loader.seed}

    def indices(self, epoch: int, index: int) -> np.ndarray:
        """This rank's sample indices in global batch ``index`` of ``epoch``."""
        order, g = self.loader.order(epoch), self.global_batch
        whole = order[index * g:(index + 1) * g]
        start, stop = part_bounds(len(whole), self.rank, self.size)
        return whole[start:stop]

    def _key(self, epoch: int, index: int) -> List[int]:
        key = [self.loader.seed, epoch, index]
        return key if self.size == 1 else key + [self.rank]

    def _tasks(self, epoch, start):
        for b in range(start, len(self)):
            yield self._key(epoch, b), self.indices(epoch, b)

    def __iter__(self) -> Iterator[Tuple[np.ndarray, np.ndarray]]:
        return run_epoch(self, self.loader.run_tasks)

    def close(self) -> None:
        """Stop the wrapped loader's workers."""
        self.loader.close()
