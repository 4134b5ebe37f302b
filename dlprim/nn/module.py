"""Module: the base of every dlprim.nn model and layer, as PyTorch's ``nn.Module``.

A model subclasses Module, assigns its layers as attributes in ``__init__`` and writes
``forward(self, x)`` over Values (symbolic tensors). ``model.netconfig(input_shape)`` runs
that forward once to record the net, which ``dlprim.Net`` then builds; parameters are
named by the attribute path, as PyTorch's state dict spells them ("layer1.0.conv1.weight").
"""
from collections import OrderedDict
from typing import Any, Iterator, Optional, Sequence, Tuple

from ..net.netconfig import NetConfig
from . import lowering
from .value import Value

__all__ = ["Module"]


class Module:
    """Base class of models and layers: submodules assigned as attributes are registered
    in assignment order (their names make the parameters' names); ``forward`` says what
    the module computes from Values; calling the module runs it in its naming scope."""

    def __init__(self):
        object.__setattr__(self, "_modules", OrderedDict())

    # ----- the module tree
    def __setattr__(self, name, value):
        modules = self.__dict__.get("_modules")
        if isinstance(value, Module):
            if modules is None:
                raise TypeError("%s: call super().__init__() before assigning the submodule %r"
                                % (type(self).__name__, name))
            modules[name] = value
        elif modules is not None and name in modules:
            del modules[name]   # a submodule replaced by something else (None) is gone
        object.__setattr__(self, name, value)

    def __delattr__(self, name):
        self.__dict__.get("_modules", {}).pop(name, None)
        object.__delattr__(self, name)

    def add_module(self, name: str, module: "Module") -> None:
        """Register ``module`` under ``name`` (as ``setattr``; names such as "0" too)."""
        if not isinstance(name, str) or not name or "." in name:
            raise ValueError("%s: a submodule name must be a non-empty string without '.', "
                             "got %r" % (type(self).__name__, name))
        if not isinstance(module, Module):
            raise TypeError("%s: %r must be a dlprim.nn Module, got %s"
                            % (type(self).__name__, name, type(module).__name__))
        setattr(self, name, module)

    def named_children(self) -> Iterator[Tuple[str, "Module"]]:
        """(name, module) of the direct submodules, in registration order."""
        self._check_init()
        return iter(self._modules.items())

    def children(self) -> Iterator["Module"]:
        """The direct submodules, in registration order."""
        return (m for _, m in self.named_children())

    def named_modules(self, prefix: str = "") -> Iterator[Tuple[str, "Module"]]:
        """(path, module) of this module and every submodule below it, depth first; a
        module reached twice is listed once, at its first path (as PyTorch does)."""
        seen, stack = set(), [(prefix, self)]
        while stack:
            path, module = stack.pop()
            if id(module) in seen:
                continue
            seen.add(id(module))
            yield path, module
            below = [(path + "." + n if path else n, m) for n, m in module.named_children()]
            stack.extend(reversed(below))

    def modules(self) -> Iterator["Module"]:
        """This module and every submodule below it."""
        return (m for _, m in self.named_modules())

    def own_parameters(self) -> list:
        """Names of the parameters this module itself holds ("weight", "bias" ...), in
        the order its operator lists them; none for containers and activations."""
        return []

    def parameter_names(self) -> list:
        """Every parameter's state-dict name ("layer1.0.bn1.running_mean" ...): the names
        ``net.set_parameters`` takes, as PyTorch's ``state_dict`` keys (less BatchNorm's
        ``num_batches_tracked``, which dlprim does not keep)."""
        return [path + "." + p if path else p
                for path, m in self.named_modules() for p in m.own_parameters()]

    # ----- running
    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """What the module computes from its input Values; subclasses write it."""
        raise NotImplementedError("%s has no forward(self, x): write one that computes its "
                                  "output from x" % type(self).__name__)

    def __call__(self, *args, **kwargs):
        values = [a for a in list(args) + list(kwargs.values()) if isinstance(a, Value)]
        if not values:
            raise TypeError("%s runs on the symbolic Values of a net being built: give the "
                            "model to model.netconfig(input_shape) or dlprim.Net(ctx, model, "
                            "input_shape=...), not arrays" % type(self).__name__)
        with values[0].trace.scope(self):
            return self.forward(*args, **kwargs)

    def netconfig(self, input_shape: Sequence[int], loss: Optional[str] = None,
                  dtype: Any = "float") -> NetConfig:
        """The NetConfig of this model on an input ``data`` of ``input_shape`` (the full
        shape, batch first) and ``dtype``. ``loss`` None: the model's output is the net's
        output; "cross_entropy" (or another of ``dlprim.nn.LOSSES``) adds the inputs the
        loss needs (``label``) and its output ``loss``, as ``dlprim.models`` writes
        training nets."""
        return lowering.netconfig(self, input_shape, loss, dtype)

    def output_shape(self, input_shape: Sequence[int], dtype: Any = "float") -> Any:
        """The shape of the module's output for an input of ``input_shape`` (a tuple; a
        list of them where forward returns several), found without building a net."""
        _, outputs = lowering.run(self, input_shape, dtype)
        shapes = [v.shape for v in outputs]
        return shapes[0] if len(shapes) == 1 else shapes

    # ----- display
    def extra_repr(self) -> str:
        """The arguments shown in the module's repr (PyTorch's convention)."""
        return ""

    def __repr__(self):
        lines = ["(%s): %s" % (n, repr(m).replace("\n", "\n  ")) for n, m in self.named_children()]
        head = "%s(%s" % (type(self).__name__, self.extra_repr())
        if not lines:
            return head + ")"
        return head + "\n  " + "\n  ".join(lines) + "\n)"

    def _check_init(self):
        if "_modules" not in self.__dict__:
            raise TypeError("%s.__init__ must call super().__init__() first"
                            % type(self).__name__)
