"""Dropout (inverted dropout in train mode, the identity when predicting)."""
from . import ops
from .module import Module
from .value import Value

__all__ = ["Dropout"]


class Dropout(Module):
    """Zeroes each element with probability ``p`` in train mode and scales the rest by
    1 / (1 - p); the Net's mode decides, as ``model.train()`` / ``eval()`` do in PyTorch."""

    def __init__(self, p: float = 0.5, inplace: bool = False):
        super().__init__()
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0 <= p < 1:
            raise ValueError("Dropout p must be in [0, 1), got %r" % (p,))
        self.p, self.inplace = float(p), bool(inplace)

    def forward(self, x: Value) -> Value:
        return ops.dropout(x, self.p, True, self.inplace, name=x.trace.own_name())

    def extra_repr(self) -> str:
        return "p=%g%s" % (self.p, ", inplace=True" if self.inplace else "")
