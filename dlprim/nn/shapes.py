"""Size arguments as PyTorch takes them, and the output size of a sliding window.

The window rule is the one ``core/conv_geometry.py`` and ``core/pooling.py`` apply on the
device; it is restated here because dlprim.nn builds graphs without OpenCL (those modules
import it), and the graph it builds is checked again by the layers when a Net is set up.
"""
from typing import Any, Optional, Sequence, Tuple, Union

from ..utils import ceil_div, is_int

__all__ = ["Size2", "positive_int", "pair", "window_output"]

# a size given for height and width at once, or as (height, width)
Size2 = Union[int, Sequence[int]]


def positive_int(value: Any, what: str) -> int:
    """``value`` if it is an int of at least 1; a TypeError or ValueError naming ``what``."""
    if not is_int(value):
        raise TypeError("%s must be an int, got %r" % (what, value))
    if value < 1:
        raise ValueError("%s must be at least 1, got %r" % (what, value))
    return int(value)


def pair(value: Any, what: str, minimum: int = 1) -> Tuple[int, int]:
    """``value`` (an int, or a pair of ints for height and width) as a (h, w) tuple, each
    at least ``minimum``; a TypeError or ValueError naming ``what`` otherwise."""
    items = tuple(value) if isinstance(value, (list, tuple)) else (value, value)
    if len(items) != 2 or not all(is_int(v) for v in items):
        raise TypeError("%s must be an int or a pair of ints, got %r" % (what, value))
    if min(items) < minimum:
        raise ValueError("%s must be at least %d, got %r" % (what, minimum, value))
    return tuple(int(v) for v in items)


def window_output(size: int, kernel: int, stride: int, pad_before: int, pad_after: Optional[int] = None,
                  dilation: int = 1, ceil_mode: bool = False) -> int:
    """Output length of a window sliding along one axis of ``size``; 0 or less when the
    (dilated) kernel does not fit the padded input. ``ceil_mode`` keeps a last partial
    window that still starts inside the input or its leading padding (PyTorch's rule)."""
    pad_after = pad_before if pad_after is None else pad_after
    span = size + pad_before + pad_after - (dilation * (kernel - 1) + 1)
    if span < 0:
        return 0
    if not ceil_mode:
        return span // stride + 1
    out = ceil_div(span, stride) + 1
    if (out - 1) * stride >= size + pad_before:
        out -= 1
    return out
