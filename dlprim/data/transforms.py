"""Per-sample image transforms, composable and seeded; the registry of their config names.

A transform is called as ``t(x, rng)`` with one image ``x`` (C, H, W) and a
``numpy.random.Generator``; random ones draw from ``rng`` only, so the loader makes the
whole pipeline reproducible by handing each batch a generator seeded from
(seed, epoch, batch index). In a config each transform is ``{"type": NAME, options...}``
with the constructor's keyword arguments as options.

Images from files are transformed in two stages (``split_stages``): the leading
transforms that work on 8-bit Pillow images (resizes, crops, flips, rotations, colour
jitter: ``on_pixels``) run before the conversion to float32, the rest (``Normalize``,
any other callable) after it. Geometric transforms live in geometric.py, ColorJitter in
color.py, what they share in transform_base.py; this module is their one entry point.
"""
import inspect
from typing import Any, List, Tuple

import numpy as np

from .color import ColorJitter
from .errors import DataError
from .geometric import (CenterCrop, HorizontalFlip, RandomCrop, RandomResizedCrop,
                        RandomRotation, Resize)
from .transform_base import TRANSFORMS, Transform, register

__all__ = ["Transform", "Compose", "ToFloat", "Normalize", "RandomCrop", "HorizontalFlip",
           "Resize", "CenterCrop", "RandomResizedCrop", "ColorJitter", "RandomRotation",
           "TRANSFORMS", "from_config", "options_of", "split_stages"]


class Compose(Transform):
    """Apply ``transforms`` in order."""

    def __init__(self, transforms):
        self.transforms = list(transforms)

    @property
    def on_pixels(self):
        return all(getattr(t, "on_pixels", False) for t in self.transforms)

    def __call__(self, x, rng):
        for t in self.transforms:
            x = t(x, rng)
        return x


def split_stages(transforms: Any) -> Tuple[List[Any], List[Any]]:
    """(the leading transforms that take Pillow images, the rest) of a transform, a
    Compose (nested ones flattened) or None; any other callable is a float transform."""
    steps = []

    def flatten(t):
        if isinstance(t, Compose):
            for s in t.transforms:
                flatten(s)
        elif t is not None:
            steps.append(t)
    flatten(transforms)
    n = 0
    while n < len(steps) and getattr(steps[n], "on_pixels", False):
        n += 1
    return steps[:n], steps[n:]


@register("to_float")
class ToFloat(Transform):
    """float32 copy times ``scale``; by default uint8 -> [0, 1] (x / 255), others unscaled."""

    def __init__(self, scale=None):
        if scale is not None and not isinstance(scale, (int, float)):
            raise ValueError("scale: must be a number, got %r" % (scale,))
        self.scale = scale

    def __call__(self, x, rng=None):
        scale = self.scale
        if scale is None:
            scale = 1.0 / 255 if x.dtype == np.uint8 else 1.0
        y = x.astype(np.float32)
        if scale != 1:
            y *= np.float32(scale)
        return y


@register("normalize")
class Normalize(Transform):
    """y[c] = (x[c] - mean[c]) / std[c]; one value applies to every channel."""

    def __init__(self, mean, std):
        self.mean = self._values("mean", mean)
        self.std = self._values("std", std)
        if np.any(self.std <= 0):
            raise ValueError("std: must be > 0, got %r" % (std,))

    @staticmethod
    def _values(name, value):
        vals = np.atleast_1d(np.asarray(value, dtype=object))
        if vals.ndim != 1 or not all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                     for v in vals):
            raise ValueError("%s: must be a number or a list of numbers, got %r" % (name, value))
        return vals.astype(np.float32)

    def __call__(self, x, rng=None):
        for name, vals in (("mean", self.mean), ("std", self.std)):
            if vals.size not in (1, x.shape[0]):
                raise DataError("normalize: %s has %d values, the image has %d channels"
                                % (name, vals.size, x.shape[0]))
        mean = self.mean.reshape(-1, 1, 1)
        std = self.std.reshape(-1, 1, 1)
        return ((x - mean) / std).astype(np.float32, copy=False)


def options_of(name):
    """(required option names, {optional name: default}) of the transform ``name``."""
    params = list(inspect.signature(TRANSFORMS[name].__init__).parameters.values())[1:]
    required = [p.name for p in params if p.default is p.empty]
    optional = {p.name: p.default for p in params if p.default is not p.empty}
    return required, optional


def from_config(entries):
    """A Compose of the transforms listed as ``[{"type": name, option: value...}]``.

    Raises ValueError naming the entry (``[1].std: must be > 0``) on a bad entry.
    """
    built = []
    for i, entry in enumerate(entries or []):
        options = dict(entry)
        name = options.pop("type", None)
        if name not in TRANSFORMS:
            raise ValueError("[%d].type: unknown transform %r; known: %s"
                             % (i, name, ", ".join(sorted(TRANSFORMS))))
        required, optional = options_of(name)
        missing = [k for k in required if k not in options]
        unknown = [k for k in options if k not in required and k not in optional]
        if missing or unknown:
            key = (missing or unknown)[0]
            raise ValueError("[%d].%s: %s" % (i, key, "required by %s" % name if missing else
                             "unknown option of %s (known: %s)"
                             % (name, ", ".join(required + list(optional)))))
        try:
            built.append(TRANSFORMS[name](**options))
        except DataError as e:
            raise ValueError("[%d]: %s" % (i, e)) from None
        except ValueError as e:
            raise ValueError("[%d].%s" % (i, e)) from None
    return Compose(built)
