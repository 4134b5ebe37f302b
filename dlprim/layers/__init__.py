"""Graph operators. Every module in this package registers its layers by JSON "type"."""
import importlib
import pkgutil

from .base import (Layer, LayerError, ParamSpec, REGISTRY, TensorSpec, PREDICT, TRAIN,  # noqa: F401
                   create, register, run)

# importing every family module fills REGISTRY; a new file here needs no other edit
for _m in pkgutil.iter_modules(__path__):
    if _m.name != "base" and not _m.name.startswith("_"):
        importlib.import_module("." + _m.name, __name__)
