"""Activation modules: the activations of dlprim's table (core/activation.py) under
PyTorch's class names and arguments, each one Activation operator (folded into a
convolution, linear layer or sum before it where that kernel applies it)."""
from . import ops
from .module import Module
from .value import Value

__all__ = ["ReLU", "ReLU6", "Sigmoid", "Tanh", "GELU", "SiLU", "LeakyReLU", "ELU", "Hardswish",
           "Hardsigmoid", "Mish", "Softplus", "Hardtanh"]


class _Activation(Module):
    """One activation of the table, ``KIND``; ``inplace`` writes over the input's tensor."""
    KIND = None

    def __init__(self, inplace: bool = False):
        super().__init__()
        self.inplace = bool(inplace)

    def params(self) -> dict:
        """The activation's parameters as the table names them."""
        return {}

    def forward(self, x: Value) -> Value:
        return ops.activation(x, self.KIND, self.inplace, name=x.trace.own_name(), **self.params())

    def extra_repr(self) -> str:
        shown = ["%s=%g" % kv for kv in self.params().items()]
        return ", ".join(shown + (["inplace=True"] if self.inplace else []))


class ReLU(_Activation):
    """max(x, 0)."""
    KIND = "relu"


class ReLU6(_Activation):
    """min(max(x, 0), 6)."""
    KIND = "relu6"


class SiLU(_Activation):
    """x * sigmoid(x)."""
    KIND = "silu"


class Hardswish(_Activation):
    """x * relu6(x + 3) / 6."""
    KIND = "hardswish"


class Hardsigmoid(_Activation):
    """relu6(x + 3) / 6."""
    KIND = "hardsigmoid"


class Mish(_Activation):
    """x * tanh(softplus(x))."""
    KIND = "mish"


class Sigmoid(_Activation):
    """1 / (1 + exp(-x))."""
    KIND = "sigmoid"

    def __init__(self):
        super().__init__()


class Tanh(_Activation):
    """tanh(x)."""
    KIND = "tanh"

    def __init__(self):
        super().__init__()


class GELU(_Activation):
    """x * Phi(x); ``approximate="tanh"`` for the tanh formula."""

    def __init__(self, approximate: str = "none"):
        super().__init__()
        if approximate not in ("none", "tanh"):
            raise ValueError("GELU approximate must be 'none' or 'tanh', got %r" % (approximate,))
        self.KIND = "gelu" if approximate == "none" else "gelu_tanh"


class LeakyReLU(_Activation):
    """x for x > 0, else negative_slope * x."""
    KIND = "leaky_relu"

    def __init__(self, negative_slope: float = 0.01, inplace: bool = False):
        super().__init__(inplace)
        self.negative_slope = float(negative_slope)

    def params(self) -> dict:
        return {"negative_slope": self.negative_slope}


class ELU(_Activation):
    """x for x > 0, else alpha * (exp(x) - 1)."""
    KIND = "elu"

    def __init__(self, alpha: float = 1.0, inplace: bool = False):
        super().__init__(inplace)
        self.alpha = float(alpha)

    def params(self) -> dict:
        return {"alpha": self.alpha}


class Softplus(_Activation):
    """log(1 + exp(beta x)) / beta, x itself where beta x > threshold."""
    KIND = "softplus"

    def __init__(self, beta: float = 1.0, threshold: float = 20.0):
        super().__init__()
        if not beta:
            raise ValueError("Softplus beta must not be 0")
        self.beta, self.threshold = float(beta), float(threshold)

    def params(self) -> dict:
        return {"beta": self.beta, "threshold": self.threshold}


class Hardtanh(Module):
    """min(max(x, min_val), max_val) (the Hardtanh operator)."""

    def __init__(self, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False):
        super().__init__()
        if not min_val < max_val:
            raise ValueError("Hardtanh min_val %r must be below max_val %r" % (min_val, max_val))
        self.min_val, self.max_val, self.inplace = float(min_val), float(max_val), bool(inplace)

    def forward(self, x: Value) -> Value:
        return ops.hardtanh(x, self.min_val, self.max_val, self.inplace, name=x.trace.own_name())

    def extra_repr(self) -> str:
        return "min_val=%g, max_val=%g" % (self.min_val, self.max_val)
