"""Where ATen operators on ``ocl`` tensors go: the table of dlprim implementations
(``register``), PyTorch's own decomposition for composite operators, and otherwise a
``NotImplementedError`` naming the operator, or, after ``allow_cpu_fallback()``, the
operator run on the CPU with its tensors copied there and back (a warning the first time
each operator does so)."""
import logging
import threading

import torch

from .tensor import OclTensor, from_numpy, to_cpu, write_into, as_dlprim, route_operators_to

__all__ = ["register", "handle", "allow_cpu_fallback", "cpu_fallback_allowed", "implemented",
           "describe_args"]

log = logging.getLogger("dlprim.torch")

_IMPLS = {}
_fallback = {"allowed": False, "warned": set()}


def register(*ops):
    """Decorator: the implementation of these ATen overloads (or every overload of a packet)."""
    def wrap(fn):
        for op in ops:
            _IMPLS[op] = fn
        return fn
    return wrap


def implemented():
    """The names of the ATen operators with a dlprim implementation, sorted."""
    return sorted(str(op) for op in _IMPLS)


def allow_cpu_fallback(allowed=True):
    """Run operators dlprim does not implement on the CPU (copying their tensors to the host
    and back), with a warning the first time each one does; ``False`` turns it off again."""
    _fallback["allowed"] = bool(allowed)


def cpu_fallback_allowed():
    return _fallback["allowed"]


def describe_args(args, kwargs):
    """The tensors of a call, as 'shape dtype device' (what an error should show)."""
    def one(a):
        if isinstance(a, torch.Tensor):
            return "Tensor%s %s %s" % (list(a.shape), str(a.dtype).replace("torch.", ""), a.device)
        if isinstance(a, (list, tuple)) and any(isinstance(x, torch.Tensor) for x in a):
            return "[%s]" % ", ".join(one(x) for x in a)
        return repr(a)
    parts = [one(a) for a in args] + ["%s=%s" % (k, one(v)) for k, v in kwargs.items()]
    return ", ".join(parts)


def handle(func, args, kwargs):
    """Run one ATen operator whose tensors include ocl tensors."""
    if threading.current_thread() is threading.main_thread():
        return _run(func, args, kwargs)
    # PyTorch runs a device's backward pass on a thread of its own, and an exception raised
    # there ends the process: an operator missing in backward runs on the CPU (with the
    # fallback's warning), and any other error is logged before it propagates
    try:
        return _run(func, args, kwargs)
    except NotImplementedError as err:
        log.warning("%s", err)
        return _on_cpu(func, args, kwargs)
    except Exception as err:
        log.error("dlprim.torch: %s failed in a backward pass: %s: %s", func,
                  type(err).__name__, err)
        raise


def _run(func, args, kwargs):
    impl = _IMPLS.get(func) or _IMPLS.get(func.overloadpacket)
    if impl is not None:
        return impl(*args, **kwargs)
    decomposed = func.decompose(*args, **kwargs)
    if decomposed is not NotImplemented:
        return decomposed
    if _fallback["allowed"]:
        return _on_cpu(func, args, kwargs)
    raise NotImplementedError(
        "dlprim.torch: the operator %s is not implemented for ocl devices (called with %s). "
        "dlprim.torch.allow_cpu_fallback() runs such operators on the CPU, copying their "
        "tensors there and back." % (func, describe_args(args, kwargs)))


def _device_of(args, kwargs):
    for a in list(args) + list(kwargs.values()):
        if isinstance(a, OclTensor):
            return a._ocl_storage.index
        if isinstance(a, (list, tuple)):
            for x in a:
                if isinstance(x, OclTensor):
                    return x._ocl_storage.index
    return 0


def _on_cpu(func, args, kwargs):
    if str(func) not in _fallback["warned"]:
        _fallback["warned"].add(str(func))
        log.warning("dlprim.torch: %s runs on the CPU (no ocl implementation; tensors are "
                    "copied to the host and back)", func)
    index = _device_of(args, kwargs)

    def down(a):
        if isinstance(a, OclTensor):
            return to_cpu(a)
        if isinstance(a, (list, tuple)):
            return type(a)(down(x) for x in a)
        if isinstance(a, torch.device) and a.type == "ocl":
            return torch.device("cpu")
        return a

    cpu_args = [down(a) for a in args]
    cpu_kwargs = {k: down(v) for k, v in kwargs.items()}
    out = func(*cpu_args, **cpu_kwargs)
    # operators that write into their arguments: copy those back
    for arg, cpu_arg, schema_arg in zip(args, cpu_args, func._schema.arguments):
        if schema_arg.alias_info is not None and schema_arg.alias_info.is_write:
            _copy_back(arg, cpu_arg)
    for name, value in kwargs.items():
        spec = next((a for a in func._schema.arguments if a.name == name), None)
        if spec is not None and spec.alias_info is not None and spec.alias_info.is_write:
            _copy_back(value, cpu_kwargs[name])

    def up(o):
        if isinstance(o, torch.Tensor) and o.device.type == "cpu":
            for arg, cpu_arg in zip(args, cpu_args):  # an argument returned (in-place, out=)
                if o is cpu_arg:
                    return arg
            return from_numpy(o.detach().numpy(), index, o.dtype)
        if isinstance(o, (list, tuple)):
            return type(o)(up(x) for x in o)
        return o
    return up(out)


def _copy_back(ocl, cpu):
    if isinstance(ocl, OclTensor):
        fresh = from_numpy(cpu.numpy(), ocl._ocl_storage.index, ocl.dtype)
        write_into(ocl, as_dlprim(fresh))
    elif isinstance(ocl, (list, tuple)):
        for a, b in zip(ocl, cpu):
            _copy_back(a, b)


route_operators_to(handle)
