"""Per-sample image transforms over CHW arrays, composable and seeded.

A transform is called as ``t(x, rng)`` with one image ``x`` (C, H, W) and a
``numpy.random.Generator``; random ones draw from ``rng`` only, so the loader makes the
whole pipeline reproducible by handing each batch a generator seeded from
(seed, epoch, batch index). In a config each transform is ``{"type": NAME, options...}``
with the constructor's keyword arguments as options.
"""
import inspect

import numpy as np

from .errors import DataError, require_pillow

__all__ = ["Transform", "Compose", "ToFloat", "Normalize", "RandomCrop", "HorizontalFlip",
           "Resize", "CenterCrop", "TRANSFORMS", "from_config"]

TRANSFORMS = {}


def _register(name):
    def wrap(cls):
        cls.config_name = name
        TRANSFORMS[name] = cls
        return cls
    return wrap


def _pair(name, value):
    """An int or [h, w] of positive ints, as a tuple (h, w)."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        value = (value, value)
    if (not isinstance(value, (list, tuple)) or len(value) != 2
            or not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in value)):
        raise ValueError("%s: must be an integer or [height, width], got %r" % (name, value))
    if min(value) <= 0:
        raise ValueError("%s: must be > 0, got %r" % (name, value))
    return int(value[0]), int(value[1])


class Transform:
    """Base: subclasses implement ``__call__(x, rng)`` returning the new image."""
    config_name = None

    def __call__(self, x, rng):
        raise NotImplementedError

    def __repr__(self):
        args = ", ".join("%s=%r" % kv for kv in vars(self).items())
        return "%s(%s)" % (type(self).__name__, args)


class Compose(Transform):
    """Apply ``transforms`` in order."""

    def __init__(self, transforms):
        self.transforms = list(transforms)

    def __call__(self, x, rng):
        for t in self.transforms:
            x = t(x, rng)
        return x


@_register("to_float")
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


@_register("normalize")
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


@_register("random_crop")
class RandomCrop(Transform):
    """Pad every side by ``padding`` with ``fill``, then crop ``size`` at a random place."""

    def __init__(self, size, padding=0, fill=0.0):
        self.size = _pair("size", size)
        if not isinstance(padding, int) or isinstance(padding, bool) or padding < 0:
            raise ValueError("padding: must be an integer >= 0, got %r" % (padding,))
        if not isinstance(fill, (int, float)):
            raise ValueError("fill: must be a number, got %r" % (fill,))
        self.padding, self.fill = padding, fill

    def __call__(self, x, rng):
        p = self.padding
        if p:
            x = np.pad(x, ((0, 0), (p, p), (p, p)), constant_values=self.fill)
        (h, w), (H, W) = self.size, x.shape[1:]
        if h > H or w > W:
            raise DataError("random_crop: crop %dx%d larger than the padded image %dx%d"
                            % (h, w, H, W))
        top = int(rng.integers(0, H - h + 1))
        left = int(rng.integers(0, W - w + 1))
        return x[:, top:top + h, left:left + w]


@_register("flip")
class HorizontalFlip(Transform):
    """Mirror left-right with probability ``p``."""

    def __init__(self, p=0.5):
        if not isinstance(p, (int, float)) or not 0 <= p <= 1:
            raise ValueError("p: must be a probability in [0, 1], got %r" % (p,))
        self.p = p

    def __call__(self, x, rng):
        return x[:, :, ::-1] if rng.random() < self.p else x


@_register("resize")
class Resize(Transform):
    """Bilinear resize (Pillow): an int sets the shorter side, keeping the aspect ratio;
    [h, w] sets both."""

    def __init__(self, size):
        if isinstance(size, (int, np.integer)) and not isinstance(size, bool):
            if size <= 0:
                raise ValueError("size: must be > 0, got %r" % (size,))
            self.size = int(size)
        else:
            self.size = _pair("size", size)
        self._image = require_pillow("the resize transform")

    def _target(self, H, W):
        if isinstance(self.size, tuple):
            return self.size
        s = self.size
        return (s, max(1, round(W * s / H))) if H <= W else (max(1, round(H * s / W)), s)

    def __call__(self, x, rng=None):
        h, w = self._target(*x.shape[1:])
        if (h, w) == x.shape[1:]:
            return x
        image = self._image
        bilinear = getattr(image, "Resampling", image).BILINEAR
        # a 2-D float32 array becomes a Pillow "F" (32-bit float) image: no rounding
        chans = [np.asarray(image.fromarray(np.ascontiguousarray(c, dtype=np.float32))
                            .resize((w, h), bilinear)) for c in x]
        return np.stack(chans).astype(np.float32, copy=False)


@_register("center_crop")
class CenterCrop(Transform):
    """Crop ``size`` from the middle; a smaller image is first padded with zeros."""

    def __init__(self, size):
        self.size = _pair("size", size)

    def __call__(self, x, rng=None):
        (h, w), (H, W) = self.size, x.shape[1:]
        ph, pw = max(0, h - H), max(0, w - W)
        if ph or pw:
            x = np.pad(x, ((0, 0), (ph // 2, ph - ph // 2), (pw // 2, pw - pw // 2)))
            H, W = x.shape[1:]
        top, left = (H - h) // 2, (W - w) // 2
        return x[:, top:top + h, left:left + w]


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
