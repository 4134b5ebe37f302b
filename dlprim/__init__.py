"""dlprim: a pure-Python deep-learning microframework on OpenCL."""
from .context import Context, ExecutionContext, DeviceError, list_devices
from .tensor import Tensor
from .kernels.program import KernelBuildError

__version__ = "0.1.0"

__all__ = ["Context", "ExecutionContext", "DeviceError", "list_devices", "Tensor",
           "KernelBuildError", "__version__"]
