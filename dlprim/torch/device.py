"""The ``ocl`` devices, each with one dlprim Context, made on first use. ``ocl:0`` is
dlprim's default device (``DLPRIM_DEVICE``, else the first GPU, else the first CPU);
``ocl:1`` and on are the other OpenCL devices in the order ``dlprim-devices`` lists them.

Why the default device is ``ocl:0``: PyTorch fills in the index of a bare ``"ocl"`` from
its device guard, which for a device registered from Python always answers 0 (a CPU
tensor's ``.to("ocl")`` arrives as ``ocl:0``), so ``ocl:0`` must be the device a bare
``"ocl"`` means everywhere else too."""
import threading

from ..context import Context, default_device_string, list_devices

__all__ = ["context", "device_count", "current_device", "set_device", "location"]

_contexts = {}
_lock = threading.Lock()
_current = [0]  # ocl:0, dlprim's default device, until set_device
_order = []  # (platform, device) of ocl:0, ocl:1, ...


def _devices():
    if not _order:
        default = tuple(int(v) for v in default_device_string().split(":"))
        others = [(p, d) for p, d, _, _ in list_devices() if (p, d) != default]
        _order.extend([default] + others)
    return _order


def device_count():
    """How many OpenCL devices there are (every platform's)."""
    return len(_devices())


def location(index):
    """The ``"P:D"`` (platform, device) of ``ocl:index``, as dlprim-devices lists it."""
    return "%d:%d" % _devices()[index]


def context(index=None):
    """The dlprim Context of device ``ocl:index`` (the current device when None)."""
    index = current_device() if index is None else int(index)
    ctx = _contexts.get(index)
    if ctx is not None:
        return ctx
    made = False
    with _lock:
        ctx = _contexts.get(index)
        if ctx is None:
            count = device_count()
            if not 0 <= index < count:
                raise RuntimeError("ocl:%d does not exist: there are %d OpenCL devices "
                                   "(ocl:0 .. ocl:%d; see dlprim-devices)"
                                   % (index, count, count - 1))
            ctx = _contexts[index] = Context(location(index))
            made = True
    if made:  # whether autograd can reach the device (once a process)
        from . import autograd_engine
        autograd_engine.check(index)
    return ctx


def current_device():
    """The index ``torch.device("ocl")`` without an index means in dlprim's own operators:
    0 (the default device), or set_device's."""
    return _current[0]


def set_device(index):
    """Make ``ocl:index`` the current device of dlprim's own operators and factories.
    PyTorch's copies from the CPU (``tensor.to("ocl")``) still take ``ocl:0``, as their
    index comes from PyTorch's guard: name the device (``"ocl:%d"``) where it is not 0."""
    context(index)  # checks that it exists
    _current[0] = int(index)
