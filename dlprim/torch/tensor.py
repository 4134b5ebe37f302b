"""``OclTensor``: a PyTorch tensor on an ``ocl`` device.

PyTorch keeps the metadata (sizes, strides, storage offset, dtype, autograd state); the
data lives in a ``Storage``, a flat dlprim Tensor from the device's memory pool shared by
every view of it. Views are metadata over the same storage; a kernel that needs its
operand contiguous gets a view of the storage when the operand is, else a copy
(``as_dlprim``).
"""
import itertools
import math

import numpy as np
import torch

from ..core.copy import StridedCast, StridedCopy, contiguous_strides
from ..core.pointwise import memo, pointwise
from ..dtypes import bfloat16, cl_cast
from ..kernels.program import Recording
from ..tensor import Tensor
from . import device

__all__ = ["OclTensor", "Storage", "empty", "as_dlprim", "from_numpy", "to_numpy", "to_cpu",
           "host_array", "numpy_dtype", "accumulate_dtype", "check_device_dtype", "write_into",
           "assign", "enqueue", "enqueue_recorded", "route_operators_to"]

# torch dtype -> the numpy dtype of its storage (bool is stored as one byte, 0 or 1;
# bfloat16 as its 16 bits, dlprim.dtypes.bfloat16; float64 where the device has fp64)
_NUMPY = {torch.float32: np.float32, torch.float16: np.float16, torch.bfloat16: bfloat16,
          torch.float64: np.float64, torch.int8: np.int8, torch.int16: np.int16,
          torch.int32: np.int32, torch.int64: np.int64, torch.uint8: np.uint8,
          torch.bool: np.uint8}


_NUMPY = {k: np.dtype(v) for k, v in _NUMPY.items()}
# the dtype whose values a conversion goes by: bool's bytes are uint8, its values are not
# (a float converts to it as != 0)
_VALUES = {**_NUMPY, torch.bool: np.dtype(np.bool_)}


def numpy_dtype(dtype):
    """The numpy dtype that stores a torch dtype on the device; TypeError where none does."""
    try:
        return _NUMPY[dtype]
    except KeyError:
        raise TypeError("dlprim.torch: dtype %s is not supported on ocl devices (supported: %s)"
                        % (dtype, ", ".join(str(d) for d in _NUMPY))) from None


def accumulate_dtype(dtype):
    """The dtype a floating dtype's sums and statistics are kept in on the device: float64
    for float64 (computed in double), float32 for the others (16-bit values widen)."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def check_device_dtype(ctx, dtype):
    """TypeError where the device of ``ctx`` cannot hold ``dtype`` (float64 without
    cl_khr_fp64), as PyTorch refuses float64 on MPS."""
    if dtype is torch.float64 and not ctx.facts.fp64:
        raise TypeError("dlprim.torch: float64 is not supported on %s (no cl_khr_fp64); "
                        "use float32" % ctx.facts.name)


_route = [None]  # what runs an ATen operator: dispatch.handle, set by route_operators_to


def route_operators_to(handler):
    """Send every ATen operator on ocl tensors to ``handler(func, args, kwargs)``."""
    _route[0] = handler


_next_address = [1 << 56]  # Storage.address: from 2^56 up, no pointer of this process


# (device index, torch dtype) -> (the device's context, the numpy dtype storing it): a
# device index names one context for the life of the process (device.context)
_storing = {}


class Storage:
    """A flat buffer of ``size`` elements on device ``index``; views share it."""
    __slots__ = ("flat", "index", "_address", "__weakref__")

    def __init__(self, index, size, dtype):
        where = _storing.get((index, dtype))
        if where is None:
            where = _storing[index, dtype] = (device.context(index), numpy_dtype(dtype))
        ctx, dt = where
        check_device_dtype(ctx, dtype)  # (each time: it reads the device's facts)
        self.index = index
        self.flat = Tensor(ctx, (max(int(size), 1),), dt)

    @classmethod
    def over(cls, index, tensor):
        """A storage on device ``index`` whose memory is the dlprim Tensor ``tensor`` (a
        Net's parameter, say): shared, not copied."""
        storage = cls.__new__(cls)
        storage.index, storage.flat = index, tensor.view((tensor.size,))
        return storage

    @property
    def ctx(self):
        return self.flat.ctx

    @property
    def address(self):
        """What ``data_ptr()`` and ``untyped_storage().data_ptr()`` say of tensors over this
        storage: an address of its own, not a host or device pointer (nothing may
        dereference it), given when first asked, spaced so that no two storages' ranges
        overlap even as they grow. Libraries compare these to find tensors that share
        memory (safetensors, HuggingFace's tied weights)."""
        address = getattr(self, "_address", None)
        if address is None:
            nbytes = self.flat.size * self.flat.dtype.itemsize
            address = self._address = _next_address[0]
            # room for the storage to grow twofold, then the next 4 KiB page
            _next_address[0] += (2 * nbytes // 4096 + 2) * 4096
        return address

    def at(self, offset, shape):
        """A dlprim Tensor of ``shape`` (a tuple of ints: PyTorch's sizes) over the storage
        from element ``offset``, in place."""
        return self.flat._view(shape, offset, self.flat.dtype)


_devices = {}  # index -> torch.device("ocl", index), made once


def torch_device(index):
    d = _devices.get(index)
    if d is None:
        d = _devices[index] = torch.device("ocl", index)
    return d


_TENSOR_DATA = torch.Tensor.data  # the descriptor OclTensor.data wraps


_META_STAMPS = itertools.count(1)


class OclTensor(torch.Tensor):
    """A tensor whose data is a dlprim ``Storage`` on an OpenCL device."""

    # a stamp of its own each time ``.data =`` (and so every in-place view operator,
    # resize_ and set_) gives it other sizes, strides or memory: what caches of facts
    # about a tensor object (the multi-tensor plans) compare, besides its storage
    _ocl_meta = 0

    @staticmethod
    def __new__(cls, storage, size, stride, offset, dtype, requires_grad=False):
        t = torch.Tensor._make_wrapper_subclass(
            cls, size, strides=stride, storage_offset=offset, dtype=dtype,
            device=torch_device(storage.index), requires_grad=requires_grad)
        t._ocl_storage = storage
        return t

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        return _route[0](func, args, kwargs or {})

    def __repr__(self, *, tensor_contents=None):
        text = repr(to_cpu(self))
        where = "device='ocl:%d'" % self._ocl_storage.index
        return text[:-1] + ", " + where + ")" if text.endswith(")") else text

    __str__ = __repr__

    def tolist(self):
        return to_cpu(self).tolist()

    @property
    def data(self):
        return _TENSOR_DATA.__get__(self)

    @data.setter
    def data(self, new):
        # PyTorch copies sizes, strides and offset into this tensor; the values live in
        # the Storage, a Python attribute, which it does not know about
        if not isinstance(new, OclTensor):
            raise RuntimeError("ocl tensor.data = ...: the new data must be an ocl tensor too, "
                               "got %s on %s (move it with .to('ocl') first)"
                               % (type(new).__name__, new.device))
        _TENSOR_DATA.__set__(self, new)
        self._ocl_storage = new._ocl_storage
        self._ocl_meta = next(_META_STAMPS)

    def data_ptr(self):
        return self._ocl_storage.address + self.storage_offset() * self.element_size()

    def untyped_storage(self):
        """A stand-in for the storage (PyTorch keeps none for a Python device): its device,
        ``nbytes()`` and ``data_ptr()`` (see ``Storage.address``) are right; it holds no
        data."""
        storage = self._ocl_storage
        return torch._C._construct_storage_from_data_pointer(
            storage.address, self.device, storage.flat.size * storage.flat.dtype.itemsize)

    def numpy(self, *, force=False):
        raise TypeError("can't convert ocl device tensor to numpy: use tensor.cpu() to copy "
                        "it to the host first (as for cuda)")


_contiguous = {}  # shape -> its contiguous strides (a step asks for the same shapes again)


def empty(size, dtype, index, stride=None):
    """A new tensor of ``size`` on ``ocl:index`` (contiguous unless ``stride`` is given)."""
    size = tuple(size) if type(size) is torch.Size else tuple(int(n) for n in size)
    if stride is None:
        stride, extent = _contiguous_strides(size), math.prod(size)
    else:
        stride = tuple(int(s) for s in stride)
        extent = 1 + sum((n - 1) * s for n, s in zip(size, stride)) if all(size) else 0
    return OclTensor(Storage(index, extent, dtype), size, stride, 0, dtype)


def empty_list(sizes, dtype, index, align=64):
    """New contiguous tensors of ``sizes`` on ``ocl:index`` over one storage, each starting
    at a multiple of ``align`` elements: a _foreach_ operator's outputs. One allocation
    instead of one per tensor, and the pool hands the same memory back to the next
    step's temporaries, so a replayed multi-tensor launch finds its arguments in place."""
    sizes = [tuple(s) if type(s) is torch.Size else tuple(int(n) for n in s) for s in sizes]
    starts, total = [], 0
    for size in sizes:
        starts.append(total)
        total += -(-math.prod(size) // align) * align
    storage = Storage(index, total, dtype)
    return [OclTensor(storage, size, _contiguous_strides(size), start, dtype)
            for size, start in zip(sizes, starts)]


def _contiguous_strides(size):
    """contiguous_strides(size), kept per shape (a step asks for the same shapes again)."""
    stride = _contiguous.get(size)
    if stride is None:
        stride = _contiguous[size] = contiguous_strides(size)
    return stride


def enqueue(ctx, launches):
    """Enqueue prepared launches on the context's queue now (eager operators)."""
    ctx.run(launches)


# launchers pick programs by how a tensor's offset aligns (vector loads of up to 16
# values): a recording serves the tensors whose offsets agree with its own modulo this
RECORDING_ALIGN = 16


def enqueue_recorded(ctx, key, tensors, make):
    """Enqueue now the launches ``make()`` prepares over the dlprim tensors ``tensors``
    (None for an absent optional one). The first call for a ``key`` records them; later
    calls replay the recording over their own tensors without preparing anything
    (``program.Recording``). The key must name everything else the launches depend on:
    the op and every scalar argument; the tensors' offsets modulo RECORDING_ALIGN join
    it, since a program built for aligned rows must not replay over a view that is not."""
    key = ("recording", key, tuple(None if t is None else t.offset % RECORDING_ALIGN
                                   for t in tensors))
    recording = ctx.ops.get(key)
    if recording is not None:
        recording.replay(ctx.queue, tensors)
        ctx.enqueued(len(recording.steps))
        return
    launches = make()
    enqueue(ctx, launches)
    recording = Recording.of(launches, tensors)
    if recording is not None:
        ctx.ops[key] = recording


def strided_copy(ctx, shape, src, src_strides, dst, dst_strides):
    """dst[idx] = src[idx] over ``shape``: src and dst are dlprim Tensors at their start
    element, strides in elements; another dtype for dst converts (``dtypes.cl_cast``)."""
    shape = tuple(shape)
    if src.dtype == dst.dtype:
        op = memo(ctx, ("torch_strided_copy", shape, tuple(src_strides), tuple(dst_strides),
                         src.dtype),
                   lambda: StridedCopy(ctx, shape, src_strides, dst_strides, src.dtype))
    else:
        op = memo(ctx, ("torch_strided_cast", shape, tuple(src_strides), tuple(dst_strides),
                         src.dtype, dst.dtype),
                   lambda: StridedCast(ctx, shape, src_strides, dst_strides, src.dtype,
                                       dst.dtype))
    op(src, dst)


def _start(t):
    """A dlprim Tensor at t's first element (strided kernels walk on from there)."""
    return t._ocl_storage.at(t.storage_offset(), (1,))


def _start_values(t):
    """``_start(t)`` typed by its values (bool as numpy's bool: conversions to it test != 0)."""
    start = _start(t)
    dt = _VALUES[t.dtype]
    return start if dt == start.dtype else start._view(start.shape, 0, dt)


def as_dlprim(t):
    """A contiguous dlprim Tensor with t's values: a view of its storage where t is
    contiguous, else a copy in a new buffer."""
    storage = t._ocl_storage
    shape = tuple(t.shape)
    if t.is_contiguous():
        return storage.at(t.storage_offset(), shape)
    out = Tensor(storage.ctx, shape, storage.flat.dtype)
    strided_copy(storage.ctx, shape, _start(t), t.stride(), out, contiguous_strides(shape))
    return out


def write_into(t, values):
    """t[...] = values (a contiguous dlprim Tensor of t's shape), whatever t's strides."""
    dst = _start(t)
    if t.is_contiguous() and dst.buffer is values.buffer and dst.offset == values.offset:
        return t  # values is t's own storage already
    strided_copy(t._ocl_storage.ctx, tuple(t.shape), values, contiguous_strides(tuple(t.shape)),
                 dst, t.stride())
    return t


def assign(dst, src):
    """dst[...] = src for ocl tensors of one shape on one device, whatever the strides of
    either (an expanded src too): one strided copy, nothing staged; another dtype converts
    on the way as PyTorch converts."""
    if dst.numel() == 0:
        return dst
    ctx = dst._ocl_storage.ctx
    if src.dtype is dst.dtype:
        a, b = _start(src), _start(dst)
    elif src.is_contiguous() and dst.is_contiguous():
        # the pointwise generator has kernels of its own for CPU drivers (a row per loop,
        # vectorised): int64 -> float32 of 1M elements took 5 ms on Intel's CPU runtime
        # (2-core EPYC), 22 through StridedCast
        pointwise(ctx, [as_dlprim(src)], [as_dlprim(dst)], _cast_code(src.dtype, dst.dtype))
        return dst
    else:
        a, b = _start_values(src), _start_values(dst)
    strided_copy(ctx, tuple(dst.shape), a, src.stride(), b, dst.stride())
    return dst


_cast_codes = {}  # (torch dtype, torch dtype) -> the pointwise code converting x0 into y0


def _cast_code(src, dst):
    code = _cast_codes.get((src, dst))
    if code is None:
        code = _cast_codes[src, dst] = "y0 = %s;" % cl_cast(_VALUES[src], _VALUES[dst], "x0")
    return code


def host_array(t):
    """The numpy array of the storage bytes of a CPU torch tensor (bfloat16 as its bits,
    dlprim.dtypes.bfloat16; bool as uint8 0/1), C-contiguous, sharing t's memory where
    it can."""
    t = t.detach().contiguous()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(bfloat16)
    array = t.numpy()
    return array.view(np.uint8) if t.dtype == torch.bool else array


def from_numpy(array, index, dtype):
    """A new ocl tensor holding ``array`` (copied to the device); a CPU torch tensor is
    taken too (bfloat16 included)."""
    if isinstance(array, torch.Tensor):
        array = host_array(array.to(dtype))
    elif _NUMPY.get(dtype) == bfloat16 and np.asarray(array).dtype != bfloat16:
        array = host_array(torch.as_tensor(np.asarray(array)).to(dtype))
    array = np.asarray(array, dtype=numpy_dtype(dtype), order="C")
    t = empty(array.shape, dtype, index)
    if array.size:
        t._ocl_storage.at(0, array.shape).to_device(array)
    return t


def to_numpy(t):
    """t's stored values on the host (waits for the device): bfloat16 as its bits
    (dlprim.dtypes.bfloat16), bool as uint8."""
    values = as_dlprim(t)
    if values.size == 0:
        return np.empty(tuple(t.shape), values.dtype)
    return values.to_host().reshape(tuple(t.shape))


def to_cpu(t):
    """A CPU torch tensor with t's values and dtype."""
    array = np.asarray(to_numpy(t), order="C")  # (ascontiguousarray makes 0-dim 1-dim)
    if t.dtype == torch.bfloat16:
        return torch.from_numpy(array.view(np.int16)).view(torch.bfloat16)
    out = torch.from_numpy(array)
    return out.to(torch.bool) if t.dtype == torch.bool else out
