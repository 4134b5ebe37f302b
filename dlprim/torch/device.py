"""The ``ocl`` devices: ``ocl:N`` is the N-th OpenCL device in the order ``dlprim-devices``
lists them (platform by platform), each with one dlprim Context, made on first use."""
import threading

from ..context import Context, list_devices

__all__ = ["context", "device_count", "current_device", "set_device"]

_contexts = {}
_lock = threading.Lock()
_current = [0]


def device_count():
    """How many OpenCL devices there are (every platform's)."""
    return len(list_devices())


def context(index=None):
    """The dlprim Context of device ``ocl:index`` (the current device when None)."""
    index = _current[0] if index is None else int(index)
    with _lock:
        ctx = _contexts.get(index)
        if ctx is None:
            count = device_count()
            if not 0 <= index < count:
                raise RuntimeError("ocl:%d does not exist: there are %d OpenCL devices "
                                   "(ocl:0 .. ocl:%d; see dlprim-devices)"
                                   % (index, count, count - 1))
            ctx = _contexts[index] = Context(str(index))
        return ctx


def current_device():
    """The index ``torch.device("ocl")`` without an index means."""
    return _current[0]


def set_device(index):
    """Make ``ocl:index`` the current device."""
    context(index)  # checks that it exists
    _current[0] = int(index)
