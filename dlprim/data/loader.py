"""BatchLoader: shuffled, transformed, prefetched numpy batches from a source.

Reproducibility: epoch ``e`` visits the samples in ``default_rng([seed, e]).permutation``
order, and batch ``b`` of that epoch transforms its samples with a generator seeded from
``[seed, e, b]``. Both depend only on (seed, epoch, batch index), never on what the
prefetch thread or the workers have done, so resuming at (epoch, position) continues the
very same sequence an uninterrupted run would have produced, with any number of workers.
"""
import queue
import threading
from typing import Any, Iterable, Iterator, Optional, Sequence, Tuple

import numpy as np

from ..utils import ceil_div, is_int
from .errors import DataError
from .pipeline import BatchBuilder
from .workers import WORKER_TYPES, WorkerPool

__all__ = ["BatchLoader"]

_DONE = object()


class _Failure:
    """An exception raised in the prefetch thread, carried to the consumer."""

    def __init__(self, error):
        self.error = error


def _batch_size(batch, batch_size):
    """The one batch size given as ``batch`` or (PyTorch's name) ``batch_size``."""
    if batch is not None and batch_size is not None:
        raise ValueError("give batch or batch_size, not both (got %r and %r)"
                         % (batch, batch_size))
    name, value = ("batch_size", batch_size) if batch is None else ("batch", batch)
    if value is None:
        raise ValueError("the batch size is missing: give batch_size (or batch)")
    if not is_int(value) or value <= 0:
        raise ValueError("%s must be a positive integer, got %r" % (name, value))
    return int(value)


class BatchLoader:
    """Iterate ``(x, y)`` batches: x C-contiguous of the source's dtype (float32 NCHW
    images; int64 tokens of a TextSource), y the labels (int32 (N,) for images).

    The batch size is ``batch`` or, as PyTorch's DataLoader names it, ``batch_size``
    (one of them). The last partial batch is yielded (smaller N) unless ``drop_last``.

    With ``num_workers`` = 0, a background thread prepares up to ``prefetch`` batches
    ahead (none with ``prefetch=0``). With ``num_workers`` > 0, that many workers
    (processes, or threads with ``worker_type="thread"``) prepare batches, ``prefetch``
    each ahead; they are started at the first iteration and kept for the next epochs
    until ``close()`` or the loader is garbage-collected. A batch is the same whatever
    the number of workers. An exception while preparing a batch is re-raised in the
    caller, naming the file or sample where it can.

    A ``for`` loop over the loader runs the current epoch from ``position`` and then
    moves ``epoch`` on by one; ``set_epoch(n)`` chooses the epoch explicitly.
    ``state_dict()``/``load_state_dict()`` give and restore (epoch, position), position
    counting the batches already handed out this epoch.
    """

    def __init__(self, source: Any, batch: Optional[int] = None, shuffle: bool = True,
                 seed: int = 0, drop_last: bool = False, transforms: Any = None,
                 prefetch: int = 2, *, batch_size: Optional[int] = None,
                 num_workers: int = 0, worker_type: str = "process") -> None:
        batch = _batch_size(batch, batch_size)
        if not is_int(prefetch) or prefetch < 0:
            raise ValueError("prefetch must be an integer >= 0, got %r" % (prefetch,))
        if not is_int(num_workers) or num_workers < 0:
            raise ValueError("num_workers must be an integer >= 0, got %r" % (num_workers,))
        if worker_type not in WORKER_TYPES:
            raise ValueError("worker_type must be one of %s, got %r"
                             % (", ".join(WORKER_TYPES), worker_type))
        if len(source) == 0:
            raise DataError("%s: no samples" % getattr(source, "name", "data"))
        self.source, self.batch, self.shuffle = source, batch, bool(shuffle)
        self.seed, self.drop_last, self.prefetch = int(seed), bool(drop_last), int(prefetch)
        self.num_workers, self.worker_type = int(num_workers), worker_type
        self._builder = BatchBuilder(source, transforms)
        self.transforms = self._builder.transforms
        self.epoch, self.position = 0, 0
        self._order = (None, None)  # (epoch, its order): computed once per epoch
        self._pool = None

    @property
    def batch_size(self) -> int:
        """The batch size (``batch``), by PyTorch's name."""
        return self.batch

    def __repr__(self):
        workers = (", %d %s workers" % (self.num_workers, self.worker_type)
                   if self.num_workers else "")
        return "BatchLoader(%r, batch %d, %d batches%s%s%s, epoch %d at batch %d)" % (
            getattr(self.source, "name", type(self.source).__name__), self.batch, len(self),
            ", shuffled" if self.shuffle else "", ", drop_last" if self.drop_last else "",
            workers, self.epoch, self.position)

    def __len__(self):
        n = len(self.source)
        return n // self.batch if self.drop_last else ceil_div(n, self.batch)

    @property
    def num_classes(self):
        """The source's number of classes."""
        return self.source.num_classes

    @property
    def shape(self):
        """The shape of one sample as the batches carry it (after the transforms): (C, H, W)
        of an image, (context,) of a text window."""
        if self._builder.shape is None:
            x, _ = self._build(np.array([0]), np.random.default_rng([self.seed, 0, 0]))
            self._builder.shape = x.shape[1:]
        return self._builder.shape

    def set_epoch(self, epoch):
        """Start epoch ``epoch`` from its first batch at the next iteration."""
        self.epoch, self.position = int(epoch), 0

    def state_dict(self):
        """{epoch, position, seed}: where the next batch comes from."""
        return {"epoch": self.epoch, "position": self.position, "seed": self.seed}

    def load_state_dict(self, state):
        """Resume at a ``state_dict()`` (the seed must match)."""
        if state.get("seed", self.seed) != self.seed:
            raise ValueError("loader state was saved with seed %r, this loader has %r"
                             % (state["seed"], self.seed))
        self.epoch, self.position = int(state["epoch"]), int(state["position"])

    def order(self, epoch):
        """The sample indices of ``epoch`` in visiting order."""
        if self._order[0] != epoch:
            n = len(self.source)
            order = (np.random.default_rng([self.seed, epoch]).permutation(n) if self.shuffle
                     else np.arange(n))
            self._order = (epoch, order)
        return self._order[1]

    def batch_at(self, epoch, index):
        """Batch ``index`` of ``epoch``, computed directly (no prefetch, no state change)."""
        order = self.order(epoch)
        picked = order[index * self.batch:(index + 1) * self.batch]
        return self._build(picked, np.random.default_rng([self.seed, epoch, index]))

    def _build(self, indices, rng):
        return self._builder.build(indices, rng)

    def _tasks(self, epoch, start):
        """(seed key, sample indices) of the batches of ``epoch`` from ``start``."""
        order = self.order(epoch)
        for b in range(start, len(self)):
            yield [self.seed, epoch, b], order[b * self.batch:(b + 1) * self.batch]

    def __iter__(self):
        return run_epoch(self, self.run_tasks)

    def run_tasks(self, tasks: Iterable[Tuple[Any, Sequence[int]]]
                  ) -> Iterator[Tuple[np.ndarray, np.ndarray]]:
        """The batches of ``tasks``, pairs of (generator seed key, sample indices), in
        order: made by the workers, or ``prefetch`` ahead in a thread. ``__iter__`` runs
        the epoch's batches through it; a sharded loader (``dlprim.distributed``) its own."""
        self.shape  # noqa: B018 -- fixes the expected sample shape before batching
        if self.num_workers:
            return self._workers().run(tasks)
        batches = (self._build(indices, np.random.default_rng(key)) for key, indices in tasks)
        return self._prefetched(batches) if self.prefetch else batches

    def _workers(self):
        if self._pool is None or self._pool.closed:
            self._pool = WorkerPool(self._builder, self.num_workers, self.worker_type,
                                    self.num_workers * max(1, self.prefetch),
                                    (self.batch,) + tuple(self.shape), self._builder.dtype,
                                    getattr(self.source, "name", "data"))
        return self._pool

    def close(self) -> None:
        """Stop the workers, if any were started (the next iteration starts new ones)."""
        if self._pool is not None:
            self._pool.close()
            self._pool = None

    def _prefetched(self, batches):
        """Run the ``batches`` generator in a thread, ``prefetch`` items ahead."""
        ready = queue.Queue(maxsize=self.prefetch)
        stop = threading.Event()

        def put(item):
            while not stop.is_set():
                try:
                    ready.put(item, timeout=0.05)
                    return True
                except queue.Full:
                    continue
            return False

        def work():
            try:
                for item in batches:
                    if not put(item):
                        return
            except BaseException as e:  # carried to the consumer, re-raised there
                put(_Failure(e))
                return
            put(_DONE)

        thread = threading.Thread(target=work, name="dlprim-prefetch", daemon=True)
        thread.start()
        try:
            while True:
                item = ready.get()
                if item is _DONE:
                    return
                if isinstance(item, _Failure):
                    raise item.error
                yield item
        finally:
            stop.set()
            thread.join()


def run_epoch(loader, run_tasks):
    """The batches of ``loader``'s current epoch from its ``position`` on: ``run_tasks``
    over ``loader._tasks(epoch, position)``, counting ``position`` per batch handed out;
    once the epoch is through, ``epoch`` moves on by one (BatchLoader, ShardedLoader)."""
    epoch, start = loader.epoch, loader.position
    produced = run_tasks(loader._tasks(epoch, start))
    try:
        for item in produced:
            loader.position += 1
            yield item
    finally:
        produced.close()
    loader.epoch, loader.position = epoch + 1, 0
