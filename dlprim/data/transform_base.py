"""What every transform shares: the base class, the registry of config names, option
checks, and the Pillow helpers of the transforms that work on decoded images.

A transform is called as ``t(x, rng)``. ``x`` is a float CHW array, or, for transforms
with ``on_pixels`` true, also a Pillow image: an image folder's sample stays a uint8
Pillow image through the leading run of such transforms and becomes float only after
them (see ``transforms.split_stages``). So geometry is computed on 8-bit pixels, and a
JPEG that is not decoded yet may be decoded at a reduced size (``decode_reduced``).
"""
import math
import numbers
from typing import Any, Optional, Sequence, Tuple

import numpy as np

from ..utils import is_int
from .errors import require_pillow

__all__ = ["Transform", "TRANSFORMS", "register", "size_pair", "number", "number_range",
           "is_image", "pillow", "resample", "decode_reduced", "resize_array",
           "DRAFT_REDUCING_GAP"]

TRANSFORMS = {}

# A JPEG is decoded at 1/2, 1/4 or 1/8 of its size only where what is left stays at least
# this many times the size the resize produces, so the resize still filters the final
# reduction (Pillow's thumbnail() uses the same gap). With 1 instead, pixels at sharp
# edges move by up to 27 levels of 255 against a full decode; with 2, by up to 11, and
# 0.3 to 0.5 levels on average (measured on a 1280x960 JPEG resized to 64, 112, 224).
DRAFT_REDUCING_GAP = 2.0


def register(name: str) -> Any:
    """Class decorator: the transform's config ``type`` is ``name``."""
    def wrap(cls):
        cls.config_name = name
        TRANSFORMS[name] = cls
        return cls
    return wrap


class Transform:
    """Base: subclasses implement ``__call__(x, rng)`` returning the new image.

    ``on_pixels`` says that the transform also takes a Pillow image (and gives one back),
    so that it can run before the conversion to float; it may depend on the options (a
    crop padded with a non-zero float value must see float pixels)."""
    config_name = None
    on_pixels = False

    def __call__(self, x: Any, rng: Optional[np.random.Generator]) -> Any:
        raise NotImplementedError

    def __repr__(self):
        args = ", ".join("%s=%r" % kv for kv in vars(self).items() if not kv[0].startswith("_"))
        return "%s(%s)" % (type(self).__name__, args)


# ---- option checks: each raises ValueError("option: problem") for from_config to place

def size_pair(name: str, value: Any) -> Tuple[int, int]:
    """An int or [h, w] of positive ints, as a tuple (h, w)."""
    if is_int(value):
        value = (value, value)
    if not isinstance(value, (list, tuple)) or len(value) != 2 or not all(map(is_int, value)):
        raise ValueError("%s: must be an integer or [height, width], got %r" % (name, value))
    if min(value) <= 0:
        raise ValueError("%s: must be > 0, got %r" % (name, value))
    return int(value[0]), int(value[1])


def number(name: str, value: Any, low: Optional[float] = None,
           high: Optional[float] = None) -> float:
    """A finite real number within [low, high] (where given), as a float."""
    if not isinstance(value, numbers.Real) or isinstance(value, bool) or not math.isfinite(value):
        raise ValueError("%s: must be a finite number, got %r" % (name, value))
    if (low is not None and value < low) or (high is not None and value > high):
        raise ValueError("%s: must be in [%s, %s], got %r"
                         % (name, "-inf" if low is None else "%g" % low,
                            "inf" if high is None else "%g" % high, value))
    return float(value)


def number_range(name: str, value: Any, low: Optional[float] = None,
                 high: Optional[float] = None) -> Tuple[float, float]:
    """[lo, hi] of finite numbers within [low, high] with lo <= hi, as a tuple."""
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        raise ValueError("%s: must be [min, max], got %r" % (name, value))
    lo, hi = (number(name, v, low, high) for v in value)
    if lo > hi:
        raise ValueError("%s: min %g is above max %g" % (name, lo, hi))
    return lo, hi


# ---- Pillow images

def pillow(what: str = "image transforms") -> Any:
    """The PIL.Image module (a DataError naming ``what`` and the extra when Pillow is
    missing)."""
    return require_pillow(what)


def is_image(x: Any) -> bool:
    """True for a Pillow image (checked without importing Pillow)."""
    return type(x).__module__.startswith("PIL.") and hasattr(x, "getbands")


def resample(image_module: Any, name: str) -> Any:
    """A Pillow resampling filter by name ("BILINEAR", "NEAREST"), for old and new Pillow."""
    return getattr(getattr(image_module, "Resampling", image_module), name)


def decode_reduced(im: Any, need_w: float, need_h: float) -> float:
    """Ask the JPEG decoder of ``im`` (not decoded yet) for 1/2, 1/4 or 1/8 of the full
    size where at least DRAFT_REDUCING_GAP x (need_w, need_h) remains. Returns the factor
    from full-size coordinates to those of the image as it will decode (1.0 when nothing
    is reduced: another format, an image already decoded, a target that is not small)."""
    full_w = im.size[0]
    gap = DRAFT_REDUCING_GAP
    request = (max(1, math.ceil(need_w * gap)), max(1, math.ceil(need_h * gap)))
    if request[0] * 2 > im.size[0] or request[1] * 2 > im.size[1]:
        return 1.0
    answer = im.draft(im.mode, request)  # None where the format cannot or it is too late
    if not answer:
        return 1.0
    return answer[1][2] / full_w  # the box of the full image in reduced coordinates


def resize_array(x: np.ndarray, h: int, w: int,
                 box: Optional[Sequence[float]] = None) -> np.ndarray:
    """Bilinear resize of each channel of a CHW array to (h, w), from ``box`` (left, top,
    right, bottom) of it when given; in float32 (Pillow "F" images), so nothing rounds."""
    Image = pillow()
    bilinear = resample(Image, "BILINEAR")
    chans = [np.asarray(Image.fromarray(np.ascontiguousarray(c, dtype=np.float32))
                        .resize((w, h), bilinear, box=box)) for c in x]
    return np.stack(chans).astype(np.float32, copy=False)
