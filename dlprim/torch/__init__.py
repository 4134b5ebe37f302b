"""PyTorch on any OpenCL device, in pure Python: ``import dlprim.torch`` makes the device
``ocl`` exist (``torch.device("ocl:0")``: dlprim's default device, then the others),
with tensors whose storage is a dlprim buffer and ATen operators run on dlprim's kernels.
PyTorch's autograd, ``nn.Module.to("ocl")`` and ``torch.optim`` work unchanged.

Operators without an ocl implementation raise ``NotImplementedError`` naming the operator
and its arguments; ``allow_cpu_fallback()`` runs them on the CPU instead (copying their
tensors there and back, with a warning the first time each runs). See docs/pytorch.md.
"""
import torch as _torch

from ..errors import Error as _Error

MIN_TORCH = (2, 9)  # the first PyTorch with PrivateUse1 as a Python backend


def _version(text):
    return tuple(int(p) for p in text.split("+")[0].split(".")[:2])


if _version(_torch.__version__) < MIN_TORCH:
    raise ImportError("dlprim.torch needs PyTorch %d.%d or newer (it registers the ocl device "
                      "as a Python backend); this is PyTorch %s"
                      % (MIN_TORCH + (_torch.__version__,)))

from .device import context, current_device, device_count, set_device  # noqa: E402
from .dispatch import allow_cpu_fallback, cpu_fallback_allowed, implemented  # noqa: E402
from .tensor import OclTensor  # noqa: E402
# (the operator registrations; a later module's registration of an overload wins)
from . import (ops_tensor, ops_math, ops_nn, ops_norm, ops_optim,  # noqa: E402,F401
               ops_index, ops_index_put, ops_attention, ops_library, ops_reduce, ops_shape,
               ops_creation, ops_conv, ops_loss, ops_random, ops_linalg, ops_logic,
               ops_rnn_cells, ops_ctc, serialization, autocast)
from .modules import keep_parameters_shared as _keep_parameters_shared  # noqa: E402

from .compiler import compile_graph as backend, explain, CompileFallbackWarning  # noqa: E402
from .compiler_module import compile, export_net  # noqa: E402,A004

__all__ = ["OclTensor", "context", "device_count", "current_device", "set_device",
           "allow_cpu_fallback", "cpu_fallback_allowed", "implemented", "synchronize",
           "backend", "compile", "explain", "export_net", "CompileFallbackWarning", "MIN_TORCH"]


def synchronize(index=None):
    """Wait until device ``ocl:index`` (the current one when None) has finished its work."""
    context(index).finish()


class _Module:
    """What PyTorch asks of ``torch.ocl``."""
    is_available = staticmethod(lambda: device_count() > 0)
    is_initialized = staticmethod(lambda: True)
    _is_in_bad_fork = staticmethod(lambda: False)
    # torch.autocast("ocl", dtype=...) (autocast.py): the 16-bit types every device computes
    get_amp_supported_dtype = staticmethod(lambda: [_torch.float16, _torch.bfloat16])
    device_count = staticmethod(device_count)
    current_device = staticmethod(current_device)
    set_device = staticmethod(set_device)
    synchronize = staticmethod(synchronize)

    @staticmethod
    def manual_seed_all(seed):
        pass

    # the device draws from keys PyTorch's CPU generator hands out (ops_random), so it has
    # no generator state of its own; torch.random.fork_rng still asks for one
    get_rng_state = staticmethod(lambda device=None: ops_random.get_rng_state(device))
    set_rng_state = staticmethod(lambda state, device=None: ops_random.set_rng_state(state, device))


def _register():
    from torch.utils.backend_registration import _setup_privateuseone_for_python_backend
    if _torch._C._get_privateuse1_backend_name() == "ocl":
        return  # this process registered it already
    if _torch._C._get_privateuse1_backend_name() != "privateuseone":
        raise _Error("dlprim.torch: PyTorch's PrivateUse1 device is already taken by %r"
                     % _torch._C._get_privateuse1_backend_name())
    _setup_privateuseone_for_python_backend("ocl", backend_module=_Module())
    # what reaches the backend key rather than the tensor's Python dispatch: the factories
    # (no ocl tensor among their arguments) and PyTorch's copy between devices
    lib = _torch.library.Library("aten", "IMPL")
    lib.impl("empty.memory_format", ops_tensor.empty_memory_format, "PrivateUse1")
    lib.impl("empty_strided", ops_tensor.empty_strided, "PrivateUse1")
    lib.impl("_copy_from", ops_tensor.copy_from, "PrivateUse1")
    ops_creation.register_factories(lib)
    # a composite operator, decomposed above the device unless the device's autograd key
    # has a kernel of its own
    ops_attention.register_attention(lib)
    ops_ctc.register_ctc_loss(lib)
    _libraries.append(lib)
    every = _torch.library.Library("_", "IMPL")
    autocast.register(every, lib)
    _libraries.append(every)
    _optimizers_take_foreach()
    _keep_parameters_shared()
    serialization.register()


def _optimizers_take_foreach():
    """Let torch.optim's default choose its multi-tensor (``foreach``) path for ocl
    parameters, as it does for CUDA's: it checks the tensor type against a list of plain
    tensor types, which an ``OclTensor`` is not. One ``_foreach_`` call then runs a whole
    parameter list instead of an operator per parameter."""
    import torch.optim.optimizer as optimizer
    import torch.utils._foreach_utils as foreach_utils
    for types in (getattr(optimizer, "_foreach_supported_types", None),
                  getattr(foreach_utils, "_foreach_supported_types", None)):
        if isinstance(types, list) and OclTensor not in types:
            types.append(OclTensor)


_libraries = []
_register()
