"""Flatten."""
from . import ops
from .module import Module
from .value import Value

__all__ = ["Flatten"]


class Flatten(Module):
    """Axes ``start_dim`` to ``end_dim`` merged into one: (N, C, H, W) -> (N, C*H*W) by
    default (a view: no copy)."""

    def __init__(self, start_dim: int = 1, end_dim: int = -1):
        super().__init__()
        self.start_dim, self.end_dim = start_dim, end_dim

    def forward(self, x: Value) -> Value:
        return ops.flatten(x, self.start_dim, self.end_dim, name=x.trace.own_name())

    def extra_repr(self) -> str:
        return "start_dim=%d, end_dim=%d" % (self.start_dim, self.end_dim)
