"""Sequential and ModuleList: modules held under integer names "0", "1", ... (or the
names of an OrderedDict), so that parameters are named "features.0.weight" as in PyTorch."""
from collections import OrderedDict
from typing import Iterable

from .module import Module
from .value import Value

__all__ = ["Sequential", "ModuleList"]


class ModuleList(Module):
    """A list of modules named by their index; it has no forward of its own."""

    def __init__(self, modules=()):
        super().__init__()
        for m in modules:
            self.append(m)

    def append(self, module: Module) -> "ModuleList":
        """Add ``module`` under the next index."""
        self.add_module(str(len(self._modules)), module)
        return self

    def extend(self, modules: Iterable[Module]) -> "ModuleList":
        """Add each of ``modules``."""
        for m in modules:
            self.append(m)
        return self

    def __getitem__(self, index):
        if isinstance(index, slice):
            return ModuleList(list(self._modules.values())[index])
        return list(self._modules.values())[index]

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(list(self._modules.values()))


class Sequential(ModuleList):
    """Modules applied one after the other: ``Sequential(a, b, c)`` names them "0", "1",
    "2"; ``Sequential(OrderedDict([("conv", a), ...]))`` by the dict's keys."""

    def __init__(self, *modules):
        if len(modules) == 1 and isinstance(modules[0], OrderedDict):
            Module.__init__(self)
            for name, m in modules[0].items():
                self.add_module(name, m)
        else:
            super().__init__(modules)

    def __getitem__(self, index):
        if isinstance(index, slice):   # keeps the names, as PyTorch's does
            return Sequential(OrderedDict(list(self._modules.items())[index]))
        return super().__getitem__(index)

    def forward(self, x: Value) -> Value:
        for m in self:
            x = m(x)
        return x
