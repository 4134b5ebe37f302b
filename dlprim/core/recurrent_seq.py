"""A recurrent layer's sequences as strided views of a tensor (``Seq``): time-major and
batch-first tensors, and one direction's half of a bidirectional output, are read and
written in place by both time loops (``core/recurrent.py``, ``core/recurrent_persistent.py``)."""
from collections import namedtuple

import numpy as np

from ..tensor import Tensor

__all__ = ["Seq"]


class Seq(namedtuple("Seq", "tensor offset step row")):
    """Step t, batch row n of a sequence at ``offset + t * step + n * row`` elements."""
    __slots__ = ()

    def start(self, t: int, rows: int, width: int) -> Tensor:
        """A 1-D view from step t's first element over ``rows`` rows of ``width``."""
        return self.tensor.view(((rows - 1) * self.row + width,), self.offset + t * self.step)

    def args(self, t: int) -> list:
        """Kernel arguments of step t: buffer, offset of its first element, row stride."""
        return [self.tensor.buffer, np.uint64(self.tensor.offset + self.offset + t * self.step),
                np.uint64(self.row)]
