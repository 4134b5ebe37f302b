"""Value: a tensor of the net being built, as a dlprim.nn ``forward`` sees it.

A Value has a shape (batch first) and a dtype but no data; what is done to it is recorded
as operators of the net. Its methods and operators are the PyTorch tensor methods that a
dlprim layer computes (``x + y``, ``x.relu()``, ``x.flatten(1)`` ...), each one
``dlprim.nn.functional`` function.
"""
from typing import Optional, Tuple, Union

from . import ops

__all__ = ["Value"]


class Value:
    """A symbolic tensor: ``shape`` (a tuple of ints, batch first), ``dtype`` (a
    DLPrimitives dtype name such as "float" or "int64"), and the operator producing it."""
    __slots__ = ("trace", "shape", "dtype", "node", "name")

    def __init__(self, trace, shape, dtype="float", node=None):
        self.trace = trace
        self.shape = tuple(int(s) for s in shape)
        self.dtype = dtype
        self.node = node      # the trace's Node writing it; None for a net input
        self.name = None      # the net's tensor name, given when the NetConfig is written

    @property
    def ndim(self) -> int:
        """The number of dimensions."""
        return len(self.shape)

    def dim(self) -> int:
        """The number of dimensions (PyTorch's ``Tensor.dim``)."""
        return len(self.shape)

    def size(self, dim: Optional[int] = None) -> Union[int, Tuple[int, ...]]:
        """The shape, or the size of dimension ``dim`` (PyTorch's ``Tensor.size``)."""
        if dim is None:
            return self.shape
        return self.shape[ops.axis(self, dim)]

    # arithmetic: two Values, numpy broadcasting (Elementwise)
    def __add__(self, other):
        return ops.add(self, other)

    def __sub__(self, other):
        return ops.sub(self, other)

    def __mul__(self, other):
        return ops.mul(self, other)

    def __truediv__(self, other):
        return ops.div(self, other)

    def __matmul__(self, other):
        return ops.matmul(self, other)

    def __bool__(self):
        raise TypeError("a dlprim.nn Value has no data while the net is built, so it cannot "
                        "decide an if or a loop; branch on shapes (x.shape) instead")

    def __iter__(self):
        raise TypeError("a dlprim.nn Value cannot be iterated while the net is built; "
                        "x.shape gives its sizes")

    # the PyTorch tensor methods a layer computes
    def relu(self) -> "Value":
        """max(x, 0)."""
        return ops.activation(self, "relu")

    def sigmoid(self) -> "Value":
        """1 / (1 + exp(-x))."""
        return ops.activation(self, "sigmoid")

    def tanh(self) -> "Value":
        """tanh(x)."""
        return ops.activation(self, "tanh")

    def flatten(self, start_dim: int = 1, end_dim: int = -1) -> "Value":
        """Dimensions ``start_dim`` to ``end_dim`` merged into one."""
        return ops.flatten(self, start_dim, end_dim)

    def reshape(self, *shape: int) -> "Value":
        """The same elements in ``shape`` (one entry may be -1); no copy."""
        return ops.reshape(self, *shape)

    view = reshape

    def permute(self, *dims: int) -> "Value":
        """The axes in the order ``dims``."""
        return ops.permute(self, *dims)

    def transpose(self, dim0: int, dim1: int) -> "Value":
        """Axes ``dim0`` and ``dim1`` swapped."""
        return ops.transpose(self, dim0, dim1)

    def softmax(self, dim: int) -> "Value":
        """Softmax over ``dim`` (dlprim's Softmax works over axis 1)."""
        return ops.softmax(self, dim)

    def log_softmax(self, dim: int) -> "Value":
        """Log-softmax over ``dim`` (axis 1)."""
        return ops.log_softmax(self, dim)

    def __repr__(self):
        producer = self.node.name if self.node is not None else "input"
        return "Value(%s, shape=%s, dtype=%s)" % (producer, self.shape, self.dtype)
