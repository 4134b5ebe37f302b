"""dlprim: a pure-Python deep-learning microframework on OpenCL.

Names and subpackages load on first use (PEP 562), so ``import dlprim`` is quick and the
pure-Python parts (``dlprim.net.graph``, ``dlprim.net.memory_plan``, the training config
checks) import without an OpenCL driver.
"""
import importlib

__version__ = "0.1.0"

# public name -> the module that defines it
_NAMES = {"Context": "context", "ExecutionContext": "context", "DeviceError": "context",
          "list_devices": "context", "Tensor": "tensor", "KernelBuildError": "kernels.program",
          "Net": "net", "NetConfig": "net", "TRAIN": "net", "PREDICT": "net",
          "SGD": "solvers", "Adam": "solvers", "AdamW": "solvers", "Error": "errors",
          "fit": "train.fitting", "evaluate": "train.fitting",
          # DLPrimitives' Python names
          "Shape": "tensor", "ONNXModel": "onnx", "float32": "dtypes", "half": "dtypes",
          "int32": "dtypes", "int64": "dtypes", "uint8": "dtypes", "bfloat16": "dtypes"}
SUBMODULES = ("cli", "context", "core", "data", "distributed", "dtypes", "errors", "kernels",
              "layers", "lr_schedules", "models", "net", "nn", "onnx", "plot", "solvers", "tensor",
              "train", "utils")

__all__ = sorted(_NAMES) + ["__version__"]


def __getattr__(name):
    if name in SUBMODULES:
        return importlib.import_module("." + name, __name__)
    if name in _NAMES:
        value = getattr(importlib.import_module("." + _NAMES[name], __name__), name)
        globals()[name] = value
        return value
    raise AttributeError("module 'dlprim' has no attribute %r" % name)


def __dir__():
    return sorted(set(globals()) | set(__all__) | set(SUBMODULES))


# the ONNX package is light until used (the onnx library loads on first import or export);
# importing it here registers its exporter, so net.to_onnx works after "import dlprim"
from . import onnx as _onnx  # noqa: E402,F401
