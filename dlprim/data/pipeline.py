"""One batch from sample indices and a generator: the work of the loader and its workers.

A sample goes through the transforms in two stages (``transforms.split_stages``): the
leading transforms that take Pillow images see the source's image before it is
converted to float (an image folder's JPEG not yet decoded, so it may be decoded at a
reduced size), then ``source.as_array`` converts it, then the other transforms run on
the float32 CHW array. Samples are transformed one after the other, each stage by each,
so the generator hands out its numbers in the order the transforms are listed, sample
after sample, whatever the stages.
"""
from typing import Any, Optional, Sequence, Tuple

import numpy as np

from .errors import DataError
from .transforms import Compose, split_stages

__all__ = ["BatchBuilder"]

_UNREADABLE = (OSError, SyntaxError, EOFError)  # what Pillow raises on damaged files


class BatchBuilder:
    """Batches of ``source`` through ``transforms`` (a callable, a list of them, or None).

    Picklable, so that worker processes get their own copy. ``shape`` (of one sample,
    after the transforms) is what every sample must have; the loader sets it once known.
    """

    def __init__(self, source: Any, transforms: Any = None) -> None:
        if transforms is not None and not callable(transforms):
            transforms = Compose(transforms)
        if isinstance(transforms, Compose) and not transforms.transforms:
            transforms = None  # nothing to do: batches go straight from the source
        self.source, self.transforms = source, transforms
        self.pixel_steps, self.float_steps = split_stages(transforms)
        self.shape = None

    @property
    def dtype(self) -> np.dtype:
        """The dtype of the batches' samples (the source's)."""
        return np.dtype(self.source.dtype)

    def sample(self, index: int, rng: np.random.Generator) -> Tuple[np.ndarray, int]:
        """(float32 CHW array, label) of sample ``index`` after the transforms."""
        source = self.source
        try:
            x, label = source.sample(index)
        except (ValueError,) + _UNREADABLE as e:  # DataErrors too: "not a regular file"
            raise source.unreadable(index, e) from None
        try:
            for t in self.pixel_steps:
                x = t(x, rng)
            x = source.as_array(x)
        except DataError as e:
            raise self._named(index, e) from None
        except _UNREADABLE as e:
            raise source.unreadable(index, e) from None
        try:
            for t in self.float_steps:
                x = t(x, rng)
        except DataError as e:
            raise self._named(index, e) from None
        return x, label

    def _named(self, index, error):
        """``error`` (a DataError) saying which sample it is about, when it does not."""
        where = self.source.describe(index)
        if where in str(error):
            return error
        return type(error)("%s: %s: %s" % (self.source.name, where, error))

    def build(self, indices: Sequence[int], rng: np.random.Generator,
              out: Optional[np.ndarray] = None) -> Tuple[np.ndarray, np.ndarray]:
        """(x, labels) of the samples at ``indices``: x C-contiguous of ``dtype`` with
        one sample per row (written into ``out[:len(indices)]`` when given), labels
        int32 (those of the source, for a text source its targets)."""
        if self.transforms is None:
            images, labels = self.source.fetch(indices)
            if isinstance(images, np.ndarray):
                if out is None:
                    return np.ascontiguousarray(images, dtype=self.dtype), labels
                x = out[:len(indices)]
                x[...] = images
                return x, labels
        else:
            pairs = [self.sample(int(i), rng) for i in indices]
            images = [p[0] for p in pairs]
            labels = np.array([p[1] for p in pairs], dtype=np.int32)
        expected = self.shape or images[0].shape
        for i, x in zip(indices, images):
            if x.shape != expected:
                raise DataError("%s: image at %s is %s, expected %s"
                                % (self.source.name, self.source.describe(int(i)),
                                   "x".join(map(str, x.shape)), "x".join(map(str, expected))))
        if out is None:
            return np.ascontiguousarray(np.stack(images), dtype=self.dtype), labels
        x = out[:len(images)]
        for row, image in zip(x, images):
            row[...] = image
        return x, labels
