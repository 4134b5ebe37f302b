"""Where ATen operators on ``ocl`` tensors go, in this order:

1. the table of dlprim implementations (``register``);
2. an ``out=`` overload without one whose functional overload resolves: the functional
   result copied into ``out``, resized by PyTorch's ``resize_output`` rules;
3. PyTorch's own decomposition (the composite's C++ one, else ``torch._decomp``'s), so an
   operator made of implemented operators runs on the device;
4. after ``allow_cpu_fallback()`` (and for an operator missing inside a backward pass,
   which is not stopped there), the operator on the CPU, its ocl tensors copied to the
   host and back (``cpu_fallback.run``), with a warning the first time each operator does so;
5. otherwise a ``NotImplementedError`` naming the operator, its arguments and the
   operator whose decomposition reached it.

An error inside a backward pass cannot leave the autograd engine's device thread as a
Python exception (see ``handle``): it is held and raised from ``.backward()`` instead."""
import contextlib
import logging
import math
import threading
import warnings

import pyopencl as cl
import torch

from ..core.copy import contiguous_strides
from . import cpu_fallback
from .cpu_fallback import _device_of, _leaves, _tree
from .tensor import OclTensor, Storage, empty, route_operators_to, strided_copy

__all__ = ["register", "register_by_name", "handle", "allow_cpu_fallback",
           "counting_operators", "cpu_fallback_allowed", "implemented", "describe_args",
           "resize_output"]

log = logging.getLogger("dlprim.torch")

_IMPLS = {}
_IMPLS_BY_NAME = {}  # "namespace.op.overload" -> implementation (register_by_name)
_fallback = {"allowed": False, "warned": set()}
_local = threading.local()  # .decomposing: the operators whose decomposition is running


def register(*ops):
    """Decorator: the implementation of these ATen overloads (or every overload of a packet)."""
    def wrap(fn):
        for op in ops:
            _IMPLS[op] = fn
        return fn
    return wrap


def register_by_name(*names):
    """Decorator: the implementation of operators known by their qualified overload name
    ("torchvision.nms.default"). Operators of libraries loaded later (torchvision's) have no
    OpOverload to key ``register`` by until that library is imported; ``_run`` looks such
    a name up when the overload itself has no entry."""
    def wrap(fn):
        for name in names:
            _IMPLS_BY_NAME[name] = fn
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


# ----- the entry point, and errors inside a backward pass
def handle(func, args, kwargs):
    """Run one ATen operator whose tensors include ocl tensors."""
    try:
        return _run(func, args, kwargs)
    except Exception as err:
        mixed = _two_devices(args, kwargs) if isinstance(err, cl.Error) else None
        if mixed is not None:  # the driver's answer to another context's buffer
            err = RuntimeError("Expected all tensors to be on the same device, but found at "
                               "least two devices, %s and %s! (%s)" % (mixed + (func,)))
        if not _in_engine_node():
            if mixed is not None:
                raise err from None
            raise
        return _defer(func, args, kwargs, err)


def _two_devices(args, kwargs):
    """Two of the ocl devices the operator's tensors are on (as "ocl:N"), or None: checked
    only after an OpenCL error, so the common call pays nothing for it."""
    seen = sorted({a._ocl_storage.index for a in _leaves([args, kwargs])
                   if isinstance(a, OclTensor)})
    return None if len(seen) < 2 else ("ocl:%d" % seen[0], "ocl:%d" % seen[1])


def _in_engine_node():
    """Whether a C++ node of the autograd engine called this operator. An exception raised
    back into one unwinds through the engine's stream guard with Python's error indicator
    still set; the guard's destructor (noexcept) asks the Python device guard for its type,
    that call fails, and the process ends in std::terminate. A Python node (a custom
    Function's backward) persists the error before any guard sees it, so it is safe."""
    node = torch._C._current_autograd_node()
    return node is not None and not isinstance(node, torch.autograd.function.BackwardCFunction)


_pending = {}  # graph task id -> the first error of that backward pass


def _defer(func, args, kwargs, err):
    """Hold ``err`` until the engine's final callback raises it in the caller of
    ``.backward()`` (the engine persists a callback's Python error); the node gets NaNs of
    the right shape meanwhile, so that nothing reaches the leaves unnoticed."""
    task = torch._C._current_graph_task_id()
    if task not in _pending:
        while len(_pending) >= 8:  # passes that ended on an error of PyTorch's own
            _pending.pop(next(iter(_pending)))
        _pending[task] = err
        torch.autograd.Variable._execution_engine.queue_callback(lambda: _raise_held(task))
    log.debug("dlprim.torch: %s failed in a backward pass (raised at its end): %s: %s", func,
              type(err).__name__, err)
    try:
        return _placeholder(func, args, kwargs)
    except Exception:  # noqa: BLE001 - nothing may leave this thread as a Python error
        # no result to stand in: None makes PyTorch's C++ fail (an error of its own, with
        # no Python error pending, which unwinds safely); this log names the real cause
        _pending.pop(task, None)
        log.error("dlprim.torch: %s failed in a backward pass: %s: %s", func,
                  type(err).__name__, err)
        return None


def _raise_held(task):
    err = _pending.pop(task, None)
    if err is not None:
        raise err


def _placeholder(func, args, kwargs):
    """NaN-filled ocl results shaped as PyTorch's meta kernel says; mutated arguments as
    themselves."""
    back, index = {}, _device_of(args, kwargs)

    def down(a):
        m = _meta(a)
        if m is not a:
            back[id(m)] = a
        return m
    out = func(*_tree(args, down), **_tree(kwargs, down))

    def up(m):
        if id(m) in back:  # an argument the operator returns (in place, out=)
            if tuple(back[id(m)].shape) != tuple(m.shape):
                _resize(back[id(m)], m.shape)
            return back[id(m)]
        t = empty(m.shape, m.dtype, index, m.stride()) if m.device.type == "meta" else m
        if t.is_floating_point() and t.numel():
            t.fill_(float("nan"))
        return t
    return _tree(out, up)




def _meta(t):
    """A meta tensor with an ocl tensor's sizes, strides, offset and dtype; others as they are."""
    if not isinstance(t, OclTensor):
        return t.to("meta") if isinstance(t, torch.Tensor) and t.device.type != "meta" else t
    base = torch.empty((t._ocl_storage.flat.size,), dtype=t.dtype, device="meta")
    return base.as_strided(t.shape, t.stride(), t.storage_offset())


# ----- implementation, out=, decomposition, fallback, refusal
def _run(func, args, kwargs):
    """The routes of the module's docstring, in its order."""
    impl = _IMPLS.get(func) or _IMPLS.get(func.overloadpacket)
    if impl is None and _IMPLS_BY_NAME:
        impl = _IMPLS_BY_NAME.get(str(func))
        if impl is not None:
            _IMPLS[func] = impl  # found by name once; by the overload from now on
    if impl is not None:
        return impl(*args, **kwargs)
    decomposing = _decomposing()
    functional = _functional_of(func)
    if functional is not None and func not in decomposing and _has_ocl_route(functional) \
            and any(isinstance(a, OclTensor) for a in _leaves([args, _not_out(func, kwargs)])):
        decomposing.append(func)  # (a refusal inside names the out= overload too)
        try:
            return _out_via(func, functional, args, kwargs)
        finally:
            decomposing.pop()
    if func not in decomposing:
        decomposing.append(func)
        try:
            out = func.decompose(*args, **kwargs)
            if out is NotImplemented and func in _decompositions():
                out = _decompositions()[func](*args, **kwargs)
        finally:
            decomposing.pop()
        if out is not NotImplemented:
            return out
    if _fallback["allowed"] or _in_engine_node():  # (a backward pass does not stop there)
        return cpu_fallback.run(func, args, kwargs, _fallback["warned"])
    chain = [str(op) for op in decomposing if op is not func]
    via = ", reached through %s" % " -> ".join(chain) if chain else ""
    raise NotImplementedError(
        "dlprim.torch: the operator %s is not implemented for ocl devices (called with %s%s). "
        "dlprim.torch.allow_cpu_fallback() runs such operators on the CPU, copying their "
        "tensors there and back." % (func, describe_args(args, kwargs), via))


def _decomposing():
    stack = getattr(_local, "decomposing", None)
    if stack is None:
        stack = _local.decomposing = []
    return stack


_tables = []


def _decompositions():
    """PyTorch's decompositions into core ATen operators (the wider table's others lower
    to prims, which no device here implements)."""
    if not _tables:
        from torch._decomp import core_aten_decompositions
        _tables.append(dict(core_aten_decompositions().items()))
    return _tables[0]




# ----- out= overloads through their functional overload
_functionals = {}  # out overload -> its functional overload, or None


def _out_names(func):
    return [a.name for a in func._schema.arguments
            if a.kwarg_only and a.alias_info is not None and a.alias_info.is_write]


def _not_out(func, kwargs):
    names = _out_names(func)
    return {k: v for k, v in kwargs.items() if k not in names}


def _functional_of(func):
    """The overload of func's packet with func's arguments less its ``out`` ones, mutating
    nothing; None where func is no ``out=`` overload or has no such twin."""
    if func in _functionals:
        return _functionals[func]
    found = None
    outs = _out_names(func)
    if outs:
        want = [(a.name, str(a.type)) for a in func._schema.arguments if a.name not in outs]
        for name in func.overloadpacket.overloads():
            other = getattr(func.overloadpacket, name)
            args = other._schema.arguments
            if all(a.alias_info is None or not a.alias_info.is_write for a in args) \
                    and [(a.name, str(a.type)) for a in args] == want:
                found = other
                break
    _functionals[func] = found
    return found


def _has_ocl_route(func):
    return func in _IMPLS or func.overloadpacket in _IMPLS or func in _decompositions() \
        or torch._C._dispatch_has_kernel_for_dispatch_key(func.name(),
                                                          "CompositeImplicitAutograd")


def _out_via(func, functional, args, kwargs):
    """``func(..., out=o)`` as ``o.copy_(functional(...))``. The out overload on meta
    tensors first: PyTorch's own checks (dtypes that cannot be cast), its output shapes and
    its warning when a non-empty ``out`` is resized."""
    names = _out_names(func)
    outs = [kwargs[n] for n in names]
    for out in outs:
        if not isinstance(out, OclTensor):
            raise RuntimeError("Expected all tensors to be on the same device, but found at "
                               "least two devices, ocl:%d and %s! (%s's %s)"
                               % (_device_of(args, kwargs), out.device, func, "out"))
    try:
        metas = func(*_tree(args, _meta), **_tree(kwargs, _meta))
        metas = list(metas) if isinstance(metas, (list, tuple)) else [metas]
    except NotImplementedError:  # no meta kernel: PyTorch's rules by hand
        metas = None
    result = _run(functional, args, _not_out(func, kwargs))
    results = list(result) if isinstance(result, (list, tuple)) else [result]
    for i, (out, value) in enumerate(zip(outs, results)):
        if metas is None:
            if not torch.can_cast(value.dtype, out.dtype):
                raise RuntimeError("result type %s can't be cast to the desired output type %s"
                                   % (_name(value.dtype), _name(out.dtype)))
            resize_output(out, value.shape)
        elif tuple(out.shape) != tuple(metas[i].shape):
            _resize(out, metas[i].shape)  # (the meta call warned)
        out.copy_(value)
    return outs[0] if len(outs) == 1 else tuple(outs)


def _name(dtype):
    return {torch.float32: "Float", torch.float64: "Double", torch.float16: "Half",
            torch.bfloat16: "BFloat16", torch.int64: "Long", torch.int32: "Int",
            torch.int16: "Short", torch.int8: "Char", torch.uint8: "Byte",
            torch.bool: "Bool"}.get(dtype, str(dtype))


def resize_output(out, shape):
    """PyTorch's ``resize_output``: ``out`` resized to ``shape`` where it differs, with
    PyTorch's warning when it held elements; True when it was resized."""
    shape = tuple(int(n) for n in shape)
    if tuple(out.shape) == shape:
        return False
    if out.numel() != 0:
        warnings.warn(
            "An output with one or more elements was resized since it had shape %s, which "
            "does not match the required output shape %s. This behavior is deprecated, and in "
            "a future PyTorch release outputs will not be resized unless they have zero "
            "elements. You can explicitly reuse an out tensor t by resizing it, inplace, to "
            "zero elements with t.resize_(0)." % (list(out.shape), list(shape)), UserWarning)
    _resize(out, shape)
    return True


def _resize(t, shape):
    """t.resize_(shape) for an ocl tensor: contiguous from its offset; a larger storage
    (its old elements copied) where the old one is too small."""
    shape = tuple(int(n) for n in shape)
    storage, offset = t._ocl_storage, t.storage_offset()
    need = offset + math.prod(shape)
    if need > storage.flat.size:
        grown = Storage(storage.index, need, t.dtype)
        n = storage.flat.size
        strided_copy(storage.ctx, (n,), storage.at(0, (n,)), (1,), grown.at(0, (n,)), (1,))
        storage = grown
    t.data = OclTensor(storage, shape, contiguous_strides(shape), offset, t.dtype)


route_operators_to(handle)


@contextlib.contextmanager
def counting_operators():
    """Count the ATen operators that reach the ocl device meanwhile (a model step's
    operator count, to divide its host time by): ``with counting_operators() as count:
    ...`` then ``count[0]``."""
    count = [0]

    def counted(func, args, kwargs):
        count[0] += 1
        return handle(func, args, kwargs)
    route_operators_to(counted)
    try:
        yield count
    finally:
        route_operators_to(handle)
