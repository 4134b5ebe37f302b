"""BatchLoader: shuffled, transformed, prefetched numpy batches from a source.

Reproducibility: epoch ``e`` visits the samples in ``default_rng([seed, e]).permutation``
order, and batch ``b`` of that epoch transforms its samples with a generator seeded from
``[seed, e, b]``. Both depend only on (seed, epoch, batch index), never on what the
prefetch thread has done, so resuming at (epoch, position) continues the very same
sequence an uninterrupted run would have produced.
"""
import queue
import threading
from typing import Any

import numpy as np

from ..utils import ceil_div
from .errors import DataError
from .transforms import Compose

__all__ = ["BatchLoader"]

_DONE = object()


class _Failure:
    """An exception raised in the prefetch thread, carried to the consumer."""

    def __init__(self, error):
        self.error = error


class BatchLoader:
    """Iterate ``(x, y)`` batches: x C-contiguous of the source's dtype (float32 NCHW
    images; int64 tokens of a TextSource), y the labels (int32 (N,) for images).

    The last partial batch is yielded (smaller N) unless ``drop_last``. With
    ``prefetch > 0`` a background thread prepares up to that many batches ahead; an
    exception there is re-raised in the caller. A ``for`` loop over the loader runs the
    current epoch from ``position`` and then moves ``epoch`` on by one; ``set_epoch(n)``
    chooses the epoch explicitly. ``state_dict()``/``load_state_dict()`` give and restore
    (epoch, position), position counting the batches already handed out this epoch.
    """

    def __init__(self, source: Any, batch: int, shuffle: bool = True, seed: int = 0,
                 drop_last: bool = False, transforms: Any = None,
                 prefetch: int = 2) -> None:
        if not isinstance(batch, (int, np.integer)) or isinstance(batch, bool) or batch <= 0:
            raise ValueError("batch must be a positive integer, got %r" % (batch,))
        if not isinstance(prefetch, (int, np.integer)) or prefetch < 0:
            raise ValueError("prefetch must be an integer >= 0, got %r" % (prefetch,))
        if len(source) == 0:
            raise DataError("%s: no samples" % getattr(source, "name", "data"))
        self.source, self.batch, self.shuffle = source, int(batch), bool(shuffle)
        self.seed, self.drop_last, self.prefetch = int(seed), bool(drop_last), int(prefetch)
        if transforms is not None and not callable(transforms):
            transforms = Compose(transforms)
        if isinstance(transforms, Compose) and not transforms.transforms:
            transforms = None  # nothing to do: batches go straight from the source
        self.transforms = transforms
        self.epoch, self.position = 0, 0
        self._shape = None
        self._order = (None, None)  # (epoch, its order): computed once per epoch

    def __repr__(self):
        return "BatchLoader(%r, batch %d, %d batches%s%s, epoch %d at batch %d)" % (
            getattr(self.source, "name", type(self.source).__name__), self.batch, len(self),
            ", shuffled" if self.shuffle else "", ", drop_last" if self.drop_last else "",
            self.epoch, self.position)

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
        if self._shape is None:
            x, _ = self._build(np.array([0]), np.random.default_rng([self.seed, 0, 0]))
            self._shape = x.shape[1:]
        return self._shape

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
        images, labels = self.source.fetch(indices)
        if self.transforms is None and isinstance(images, np.ndarray):
            return np.ascontiguousarray(images, dtype=self.source.dtype), labels
        if self.transforms is not None:
            images = [self.transforms(x, rng) for x in images]
        expected = self._shape or images[0].shape
        for i, x in zip(indices, images):
            if x.shape != expected:
                raise DataError("%s: image at %s is %s, expected %s"
                                % (self.source.name, self.source.describe(int(i)),
                                   "x".join(map(str, x.shape)), "x".join(map(str, expected))))
        return np.ascontiguousarray(np.stack(images), dtype=self.source.dtype), labels

    def __iter__(self):
        epoch, start = self.epoch, self.position
        if self._shape is None:
            self.shape  # noqa: B018 -- fixes the expected sample shape before batching
        batches = (self.batch_at(epoch, b) for b in range(start, len(self)))
        produced = self._prefetched(batches) if self.prefetch else batches
        try:
            for item in produced:
                self.position += 1
                yield item
        finally:
            produced.close()
        self.epoch, self.position = epoch + 1, 0

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
