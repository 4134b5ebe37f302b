"""The record of one forward pass of a dlprim.nn model over symbolic values.

While ``model.netconfig(...)`` runs ``forward``, every operator a module or a functional
call adds becomes a Node here, in call order. The Trace also knows which module is
running (the scopes ``Module.__call__`` opens), so that operators are named after the
module's attribute path ("layer1.0.conv1") and functional calls after the path of the
module that makes them ("layer1.0.add"); a second call of the same module gets
"<path>/1", "<path>/2" ... and shares the first call's parameters.
"""
from contextlib import contextmanager
from typing import Any, Iterator, NoReturn, Optional, Sequence

from ..net.graph import GraphError
from .value import Value

__all__ = ["Node", "Trace"]


class Node:
    """One operator of the net under construction (a NetConfig entry before the tensor
    names are known): ``inputs`` and ``outputs`` are Values; ``inplace`` writes the output
    under the first input's tensor name."""
    __slots__ = ("type", "name", "inputs", "outputs", "options", "params", "inplace")

    def __init__(self, type, name, inputs, options, params, inplace):
        self.type, self.name, self.inputs = type, name, list(inputs)
        self.options, self.params, self.inplace = dict(options or {}), params, inplace
        self.outputs = []


class Trace:
    """Nodes and net inputs of one traced forward pass, and the module scopes naming them.

    ``paths`` maps ``id(module)`` to its attribute path in the model ("" for the model
    itself), as ``Module.named_modules`` gives it."""

    def __init__(self, paths):
        self.paths = paths
        self.nodes, self.inputs = [], []
        self._scopes = []        # (path, module) of the modules running, innermost last
        self._taken = set()      # operator names given so far

    def input(self, name: str, shape: Sequence[int], dtype: str) -> Value:
        """A net input: its Value."""
        value = Value(self, shape, dtype)
        value.name = name
        self.inputs.append(value)
        return value

    @contextmanager
    def scope(self, module: Any) -> Iterator[None]:
        """Run ``module``: operators added meanwhile are named after its path."""
        path = self.paths.get(id(module))
        if path is None:
            # built inside a forward (``nn.ReLU()(x)``): named in its caller's scope, and
            # without parameters, which would be new random ones at every call
            path = self._join(self.path, type(module).__name__.lower())
            if module.own_parameters():
                raise GraphError("%s: a %s has parameters, so it must be assigned as an "
                                 "attribute in __init__, not created in forward"
                                 % (path, type(module).__name__))
        self._scopes.append((path, module))
        try:
            yield
        finally:
            self._scopes.pop()

    @property
    def path(self) -> str:
        """The attribute path of the module running ("" at the model's top)."""
        return self._scopes[-1][0] if self._scopes else ""

    @property
    def where(self) -> str:
        """The running module, as error messages name it: its path, or the model's class."""
        if self.path:
            return self.path
        return type(self._scopes[-1][1]).__name__ if self._scopes else "the model"

    def fail(self, message: str) -> NoReturn:
        """Raise a GraphError naming the running module."""
        raise GraphError("%s: %s" % (self.where, message))

    def param_names(self, names: Sequence[str]) -> list:
        """State-dict names of the running module's parameters ``names`` ("weight" ...)."""
        return [self._join(self.path, n) for n in names]

    def own_name(self) -> str:
        """A unique operator name for the running module's own operator."""
        return self.unique(self.path or type(self._scopes[-1][1]).__name__.lower())

    def call_name(self, function: str) -> str:
        """A unique operator name for a functional call (``add``, ``relu`` ...) made in the
        running module."""
        return self.unique(self._join(self.path, function))

    def add(self, type: str, inputs: Sequence[Value], shape: Sequence[int], dtype: str = "float",
            options: Optional[dict] = None, params: Optional[list] = None,
            name: Optional[str] = None, inplace: bool = False) -> Value:
        """Append an operator reading Values ``inputs``; returns its output Value of
        ``shape``. ``name`` None names it after the running module."""
        node = Node(type, name or self.own_name(), inputs, options, params, inplace)
        node.outputs.append(Value(self, shape, dtype, node))
        self.nodes.append(node)
        return node.outputs[0]

    @staticmethod
    def _join(path, name):
        return path + "." + name if path else name

    def unique(self, base: str) -> str:
        """``base``, or "base/1", "base/2" ... if taken; reserved from then on."""
        name, n = base, 0
        while name in self._taken:
            n += 1
            name = "%s/%d" % (base, n)
        self._taken.add(name)
        return name
