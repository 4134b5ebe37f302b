"""dlprim: a pure-Python deep-learning microframework on OpenCL."""
from .context import Context, ExecutionContext, DeviceError, list_devices
from .tensor import Tensor
from .kernels.program import KernelBuildError
from .layers.base import TRAIN, PREDICT
from .net import Net
from .netconfig import NetConfig
from . import solvers, lr_schedules  # noqa: F401
from .solvers import SGD, Adam, AdamW

__version__ = "0.1.0"

__all__ = ["Context", "ExecutionContext", "DeviceError", "list_devices", "Tensor",
           "KernelBuildError", "Net", "NetConfig", "TRAIN", "PREDICT",
           "SGD", "Adam", "AdamW", "solvers", "lr_schedules", "__version__"]
