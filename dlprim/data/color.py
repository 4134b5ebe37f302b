"""ColorJitter: random brightness, contrast, saturation and hue, in numpy.

Pixel values are taken to lie in [0, 255] for a Pillow image (8 bits) and in [0, 1] for
a float array (as PyTorch takes them), and results are clipped to that range after each
adjustment. Grey is the ITU-R 601 luma (0.299 R + 0.587 G + 0.114 B), Pillow's "L".
"""
from typing import Any, Sequence, Tuple, Union

import numpy as np

from .transform_base import Transform, is_image, number, number_range, pillow, register

__all__ = ["ColorJitter", "rgb_to_hsv", "hsv_to_rgb"]

Strength = Union[float, Sequence[float]]  # d, or [min, max]
_LUMA = np.array([0.299, 0.587, 0.114], np.float32).reshape(3, 1, 1)


def rgb_to_hsv(rgb: np.ndarray) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(3, ...) RGB in any unit -> hue in [0, 1), saturation in [0, 1], value in the unit."""
    r, g, b = rgb
    v = rgb.max(axis=0)
    delta = v - rgb.min(axis=0)
    s = np.where(v > 0, delta / np.where(v > 0, v, 1), 0)
    d = np.where(delta > 0, delta, 1)
    # the sector of the colour hexagon is fixed by the largest component
    h = np.where(v == r, (g - b) / d, np.where(v == g, 2 + (b - r) / d, 4 + (r - g) / d))
    h = np.where(delta > 0, (h / 6) % 1.0, 0)
    return h, s, v


def hsv_to_rgb(h: np.ndarray, s: np.ndarray, v: np.ndarray) -> np.ndarray:
    """The inverse of ``rgb_to_hsv``: (3, ...) RGB in the unit of ``v``."""
    h6 = (h % 1.0) * 6
    sector = np.floor(h6).astype(np.int64) % 6
    f = h6 - np.floor(h6)
    p, q, t = v * (1 - s), v * (1 - s * f), v * (1 - s * (1 - f))
    table = ((v, q, p, p, t, v), (t, v, v, q, p, p), (p, p, t, v, v, q))
    return np.stack([np.choose(sector, column) for column in table])


def _factor_range(name, value, centre):
    """A jitter strength: a number d >= 0 gives [centre - d, centre + d] (factors kept
    >= 0), [min, max] is taken as given; None when it changes nothing."""
    if isinstance(value, (list, tuple)):
        lo, hi = number_range(name, value, 0 if centre else -0.5, None if centre else 0.5)
    else:
        d = number(name, value, 0, None if centre else 0.5)
        lo, hi = max(0.0, centre - d) if centre else -d, centre + d
    return None if lo == hi == centre else (lo, hi)


@register("color_jitter")
class ColorJitter(Transform):
    """Change brightness, contrast, saturation and hue by random amounts, in a random
    order (PyTorch's ColorJitter): a factor uniform in [1 - d, 1 + d] (or [min, max])
    for the first three, a hue shift uniform in [-hue, hue] turns of the colour circle
    (hue <= 0.5). Saturation and hue leave one-channel images as they are."""
    on_pixels = True

    def __init__(self, brightness: Strength = 0.0, contrast: Strength = 0.0,
                 saturation: Strength = 0.0, hue: Strength = 0.0) -> None:
        self.brightness = _factor_range("brightness", brightness, 1.0)
        self.contrast = _factor_range("contrast", contrast, 1.0)
        self.saturation = _factor_range("saturation", saturation, 1.0)
        self.hue = _factor_range("hue", hue, 0.0)

    def __call__(self, x: Any, rng: np.random.Generator) -> Any:
        steps = [(r, op) for r, op in ((self.brightness, _brightness), (self.contrast, _contrast),
                                       (self.saturation, _saturation), (self.hue, _hue)) if r]
        if not steps:
            return x
        image = x if is_image(x) else None
        if image is not None:
            a = np.asarray(image, dtype=np.float32)
            x = a[None] if a.ndim == 2 else a.transpose(2, 0, 1)
        top = 255.0 if image is not None else 1.0
        y = np.asarray(x, dtype=np.float32)
        for k in rng.permutation(len(steps)):
            (lo, hi), op = steps[k]
            y = op(y, float(rng.uniform(lo, hi)), top)
        if image is None:
            return y.astype(np.float32, copy=False)
        y = np.rint(y).astype(np.uint8)
        return pillow().fromarray(y[0] if y.shape[0] == 1 else y.transpose(1, 2, 0).copy())


def _grey(y):
    return y[0] if y.shape[0] == 1 else (y * _LUMA).sum(axis=0)


def _blend(y, other, factor, top):
    return np.clip(factor * y + (1 - factor) * other, 0, top, dtype=np.float32)


def _brightness(y, factor, top):
    return _blend(y, 0.0, factor, top)


def _contrast(y, factor, top):
    return _blend(y, np.float32(_grey(y).mean()), factor, top)


def _saturation(y, factor, top):
    return y if y.shape[0] != 3 else _blend(y, _grey(y)[None], factor, top)


def _hue(y, shift, top):
    if y.shape[0] != 3:
        return y
    h, s, v = rgb_to_hsv(y)
    return np.clip(hsv_to_rgb(h + shift, s, v), 0, top).astype(np.float32, copy=False)
