"""``dlprim.nn.functional``: PyTorch's functional names over dlprim.nn Values, for use in
a ``forward``. Each call adds one operator, named after the function inside the calling
module's path ("layer1.0.add"); ``name=`` gives another name.

Arithmetic (``add``, ``sub``, ``mul``, ``div``, ``matmul``) combines two Values with numpy
broadcasting; ``x + y`` and ``x @ y`` are the same calls.
"""
from typing import Optional

from .ops import (add, cat, div, dropout, flatten, hardtanh, log_softmax, matmul, mul,
                  permute, reshape, softmax, sub, transpose)
from .ops import activation as _activation
from .ops import pointwise as _pointwise
from .. import ops as _library
from .pooling import (adaptive_avg_pool2d, adaptive_max_pool2d, avg_pool2d, max_pool2d)
from .value import Value

__all__ = ["relu", "relu6", "sigmoid", "tanh", "gelu", "silu", "leaky_relu", "elu", "hardswish",
           "hardsigmoid", "mish", "softplus", "hardtanh", "add", "sub", "mul", "div", "matmul",
           "cat", "concat", "flatten", "reshape", "permute", "transpose", "softmax",
           "log_softmax", "dropout", "max_pool2d", "avg_pool2d", "adaptive_avg_pool2d",
           "adaptive_max_pool2d"]

concat = cat


def relu(x: Value, inplace: bool = False, name: Optional[str] = None) -> Value:
    """max(x, 0)."""
    return _activation(x, "relu", inplace, name)


def relu6(x: Value, inplace: bool = False, name: Optional[str] = None) -> Value:
    """min(max(x, 0), 6)."""
    return _activation(x, "relu6", inplace, name)


def sigmoid(x: Value, name: Optional[str] = None) -> Value:
    """1 / (1 + exp(-x))."""
    return _activation(x, "sigmoid", False, name)


def tanh(x: Value, name: Optional[str] = None) -> Value:
    """tanh(x)."""
    return _activation(x, "tanh", False, name)


def gelu(x: Value, approximate: str = "none", name: Optional[str] = None) -> Value:
    """x * Phi(x); ``approximate="tanh"`` for the tanh formula."""
    if approximate not in ("none", "tanh"):
        raise ValueError("gelu approximate must be 'none' or 'tanh', got %r" % (approximate,))
    return _activation(x, "gelu" if approximate == "none" else "gelu_tanh", False, name)


def silu(x: Value, inplace: bool = False, name: Optional[str] = None) -> Value:
    """x * sigmoid(x)."""
    return _activation(x, "silu", inplace, name)


def leaky_relu(x: Value, negative_slope: float = 0.01, inplace: bool = False,
               name: Optional[str] = None) -> Value:
    """x for x > 0, else negative_slope * x."""
    return _activation(x, "leaky_relu", inplace, name, negative_slope=negative_slope)


def elu(x: Value, alpha: float = 1.0, inplace: bool = False, name: Optional[str] = None) -> Value:
    """x for x > 0, else alpha * (exp(x) - 1)."""
    return _activation(x, "elu", inplace, name, alpha=alpha)


def hardswish(x: Value, inplace: bool = False, name: Optional[str] = None) -> Value:
    """x * relu6(x + 3) / 6."""
    return _activation(x, "hardswish", inplace, name)


def hardsigmoid(x: Value, inplace: bool = False, name: Optional[str] = None) -> Value:
    """relu6(x + 3) / 6."""
    return _activation(x, "hardsigmoid", inplace, name)


def mish(x: Value, inplace: bool = False, name: Optional[str] = None) -> Value:
    """x * tanh(softplus(x))."""
    return _activation(x, "mish", inplace, name)


def softplus(x: Value, beta: float = 1.0, threshold: float = 20.0,
             name: Optional[str] = None) -> Value:
    """log(1 + exp(beta x)) / beta, x itself where beta x > threshold."""
    return _activation(x, "softplus", False, name, beta=beta, threshold=threshold)



def _library_function(op):
    def function(x: Value, name: Optional[str] = None) -> Value:
        return _pointwise(x, op.name, name)
    function.__name__ = function.__qualname__ = op.name
    function.__doc__ = "%s (the operator library's ``%s``)." % (op.doc[:1].upper() + op.doc[1:],
                                                             op.name)
    return function


# one function per one-input float operator of the library that has no name here yet
# (sin, exp, log, erf, floor ...): each adds a Pointwise layer
for _name in _library.layer_operators():
    if _name not in globals():
        globals()[_name] = _library_function(_library.get(_name))
        __all__.append(_name)
