"""Transforms that move pixels: resizes, crops, flips, rotations.

Each takes a float CHW array, and also a Pillow image (``on_pixels``), on which it works
in 8 bits and gives a Pillow image back; both draw the same numbers from ``rng``, so
the two forms differ only by the rounding of the 8-bit result. The shrinking ones
(Resize, RandomResizedCrop) let a JPEG that is not decoded yet decode at a reduced size
(``decode_reduced``).
"""
import math
from typing import Any, Optional, Sequence, Tuple, Union

import numpy as np

from .errors import DataError
from .transform_base import (Transform, decode_reduced, is_image, number, number_range,
                             pillow, register, resample, resize_array, size_pair)
from ..utils import is_int

__all__ = ["Resize", "CenterCrop", "RandomCrop", "HorizontalFlip", "RandomResizedCrop",
           "RandomRotation"]


def _size(x):
    """(height, width) of a Pillow image or a CHW array."""
    return (x.size[1], x.size[0]) if is_image(x) else x.shape[1:]


def _crop(x, top, left, h, w):
    """Rows top..top+h, columns left..left+w of ``x``; zeros where that leaves it."""
    if is_image(x):
        return x.crop((left, top, left + w, top + h))  # Pillow fills outside with zeros
    H, W = x.shape[1:]
    pads = ((0, 0), (max(0, -top), max(0, top + h - H)), (max(0, -left), max(0, left + w - W)))
    if any(sum(p) for p in pads):
        x = np.pad(x, pads)
        top, left = top + pads[1][0], left + pads[2][0]
    return x[:, top:top + h, left:left + w]


@register("resize")
class Resize(Transform):
    """Bilinear resize (Pillow, antialiased when shrinking): an int sets the shorter side,
    keeping the aspect ratio; [h, w] sets both."""
    on_pixels = True

    def __init__(self, size: Union[int, Sequence[int]]) -> None:
        if is_int(size):
            if size <= 0:
                raise ValueError("size: must be > 0, got %r" % (size,))
            self.size = int(size)
        else:
            self.size = size_pair("size", size)
        pillow("the resize transform")  # the error comes now, not at the first image

    def _target(self, H, W):
        if isinstance(self.size, tuple):
            return self.size
        s = self.size
        return (s, max(1, round(W * s / H))) if H <= W else (max(1, round(H * s / W)), s)

    def __call__(self, x: Any, rng: Optional[np.random.Generator] = None) -> Any:
        H, W = _size(x)
        h, w = self._target(H, W)
        if (h, w) == (H, W):
            return x
        if not is_image(x):
            return resize_array(x, h, w)
        f = decode_reduced(x, w, h)
        box = (0, 0, W * f, H * f) if f != 1 else None
        return x.resize((w, h), resample(pillow(), "BILINEAR"), box=box)


@register("center_crop")
class CenterCrop(Transform):
    """Crop ``size`` from the middle; a smaller image is first padded with zeros."""
    on_pixels = True

    def __init__(self, size: Union[int, Sequence[int]]) -> None:
        self.size = size_pair("size", size)

    def __call__(self, x: Any, rng: Optional[np.random.Generator] = None) -> Any:
        (h, w), (H, W) = self.size, _size(x)
        if (h, w) == (H, W):
            return x
        # a side that is too short gets half the padding (rounded down) before it
        top = (H - h) // 2 if H >= h else -((h - H) // 2)
        left = (W - w) // 2 if W >= w else -((w - W) // 2)
        return _crop(x, top, left, h, w)


@register("random_crop")
class RandomCrop(Transform):
    """Pad every side by ``padding`` with ``fill``, then crop ``size`` at a random place."""

    def __init__(self, size: Union[int, Sequence[int]], padding: int = 0,
                 fill: float = 0.0) -> None:
        self.size = size_pair("size", size)
        if not is_int(padding) or padding < 0:
            raise ValueError("padding: must be an integer >= 0, got %r" % (padding,))
        self.padding, self.fill = int(padding), number("fill", fill)

    @property
    def on_pixels(self) -> bool:
        # zero is zero before and after the conversion to float; another fill is a float
        return self.padding == 0 or self.fill == 0

    def __call__(self, x: Any, rng: np.random.Generator) -> Any:
        p, (h, w), (H, W) = self.padding, self.size, _size(x)
        if h > H + 2 * p or w > W + 2 * p:
            raise DataError("random_crop: crop %dx%d larger than the padded image %dx%d"
                            % (h, w, H + 2 * p, W + 2 * p))
        top = int(rng.integers(0, H + 2 * p - h + 1)) - p
        left = int(rng.integers(0, W + 2 * p - w + 1)) - p
        if p and self.fill != 0 and not is_image(x):
            x = np.pad(x, ((0, 0), (p, p), (p, p)), constant_values=self.fill)
            top, left = top + p, left + p
        return _crop(x, top, left, h, w)


@register("flip")
class HorizontalFlip(Transform):
    """Mirror left-right with probability ``p``."""
    on_pixels = True

    def __init__(self, p: float = 0.5) -> None:
        self.p = number("p", p, 0, 1)

    def __call__(self, x: Any, rng: np.random.Generator) -> Any:
        if rng.random() >= self.p:
            return x
        if is_image(x):
            Image = pillow()
            return x.transpose(getattr(Image, "Transpose", Image).FLIP_LEFT_RIGHT)
        return x[:, :, ::-1]


@register("random_resized_crop")
class RandomResizedCrop(Transform):
    """A random part of the image resized to ``size`` (bilinear): its area a fraction
    uniform in ``scale`` of the image's, its width/height ratio log-uniform in ``ratio``
    (as PyTorch's; after 10 draws that do not fit, the whole image cut to the nearest
    allowed ratio, centred)."""
    on_pixels = True
    ATTEMPTS = 10

    def __init__(self, size: Union[int, Sequence[int]], scale: Sequence[float] = (0.08, 1.0),
                 ratio: Sequence[float] = (3 / 4, 4 / 3)) -> None:
        self.size = size_pair("size", size)
        self.scale = number_range("scale", scale, 0, 1)
        if self.scale[1] == 0:
            raise ValueError("scale: the largest fraction of the area must be > 0, got %r"
                             % (scale,))
        self.ratio = number_range("ratio", ratio, 0)
        if self.ratio[0] <= 0:
            raise ValueError("ratio: width/height ratios must be > 0, got %r" % (ratio,))
        pillow("the random_resized_crop transform")

    def region(self, H: int, W: int, rng: np.random.Generator) -> Tuple[int, int, int, int]:
        """(top, left, height, width) of the part of an H x W image to resize."""
        log_lo, log_hi = math.log(self.ratio[0]), math.log(self.ratio[1])
        for _ in range(self.ATTEMPTS):
            area = H * W * rng.uniform(*self.scale)
            aspect = math.exp(rng.uniform(log_lo, log_hi))
            w, h = round(math.sqrt(area * aspect)), round(math.sqrt(area / aspect))
            if 0 < w <= W and 0 < h <= H:
                return int(rng.integers(0, H - h + 1)), int(rng.integers(0, W - w + 1)), h, w
        h, w = H, W
        if W / H < self.ratio[0]:
            h = min(H, max(1, round(W / self.ratio[0])))
        elif W / H > self.ratio[1]:
            w = min(W, max(1, round(H * self.ratio[1])))
        return (H - h) // 2, (W - w) // 2, h, w

    def __call__(self, x: Any, rng: np.random.Generator) -> Any:
        (H, W), (out_h, out_w) = _size(x), self.size
        top, left, h, w = self.region(H, W, rng)
        if not is_image(x):
            return resize_array(x, out_h, out_w, box=(left, top, left + w, top + h))
        f = decode_reduced(x, out_w * W / w, out_h * H / h)
        box = (left * f, top * f, (left + w) * f, (top + h) * f)
        return x.resize((out_w, out_h), resample(pillow(), "BILINEAR"), box=box)


@register("random_rotation")
class RandomRotation(Transform):
    """Rotate about the centre by an angle uniform in [-degrees, degrees] (or in
    [min, max]), counter-clockwise, bilinear; the corners are filled with ``fill``."""

    def __init__(self, degrees: Union[float, Sequence[float]], fill: float = 0.0) -> None:
        if isinstance(degrees, (list, tuple)):
            self.degrees = number_range("degrees", degrees, -360, 360)
        else:
            d = number("degrees", degrees, 0, 360)
            self.degrees = (-d, d)
        self.fill = number("fill", fill)
        pillow("the random_rotation transform")

    @property
    def on_pixels(self) -> bool:
        return self.fill == 0

    def __call__(self, x: Any, rng: np.random.Generator) -> Any:
        angle = float(rng.uniform(*self.degrees))
        Image = pillow()
        bilinear = resample(Image, "BILINEAR")
        if is_image(x):
            return x.rotate(angle, bilinear)
        chans = [np.asarray(Image.fromarray(np.ascontiguousarray(c, dtype=np.float32))
                            .rotate(angle, bilinear, fillcolor=self.fill)) for c in x]
        return np.stack(chans).astype(np.float32, copy=False)
