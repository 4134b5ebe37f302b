"""The ``ocl`` devices: ``ocl:N`` is the N-th OpenCL device in the order ``dlprim-devices``
lists them (platform by platform), each with one dlprim Context, made on first use."""
import threading

from ..context import Context, default_device_string, list_devices

__all__ = ["context", "device_count", "current_device", "set_device"]

_contexts = {}
_lock = threading.Lock()
_current = [None]  # dlprim's default device (DLPRIM_DEVICE, else the first GPU) until set


def device_count():
    """How many OpenCL devices there are (every platform's)."""
    return len(list_devices())


def context(index=None):
    """The dlprim Context of device ``ocl:index`` (the current device when None)."""
    index = current_device() if index is None else int(index)
    ctx = _contexts.get(index)
    if ctx is not None:
        return ctx
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
    """The index ``torch.device("ocl")`` without an index means: set_device's, else that of
    dlprim's default device (``DLPRIM_DEVICE``, else the first GPU, else the first CPU)."""
    if _current[0] is None:
        p, d = (int(v) for v in default_device_string().split(":"))
        _current[0] = next(k for k, (pi, di, _, _) in enumerate(list_devices())
                           if (pi, di) == (p, d))
    return _current[0]


def set_device(index):
    """Make ``ocl:index`` the current device."""
    context(index)  # checks that it exists
    _current[0] = int(index)
