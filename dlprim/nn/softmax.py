"""Softmax and LogSoftmax over the class axis (axis 1: dlprim's Softmax operator)."""
from . import ops
from .module import Module
from .value import Value

__all__ = ["Softmax", "LogSoftmax"]


class Softmax(Module):
    """exp(x) / sum(exp(x)) over ``dim``, which must be axis 1 of the input."""

    def __init__(self, dim: int = 1):
        super().__init__()
        self.dim = dim

    def forward(self, x: Value) -> Value:
        return ops.softmax(x, self.dim, name=x.trace.own_name())

    def extra_repr(self) -> str:
        return "dim=%d" % self.dim


class LogSoftmax(Softmax):
    """log(softmax(x)) over ``dim``, which must be axis 1 of the input."""

    def forward(self, x: Value) -> Value:
        return ops.log_softmax(x, self.dim, name=x.trace.own_name())
