"""Tensor: a shape and a dtype over an OpenCL buffer at an element offset.

No autograd lives here. A tensor either owns a buffer from the context's memory pool or
is a view into someone else's (a Net's arena, another tensor). Kernels receive every
tensor as two arguments, ``(__global T *x, ulong x_offset)``, with the offset counted in
elements, so planned tensors can sit anywhere inside one arena.
"""
import math
from typing import TYPE_CHECKING, Any, Optional, Sequence

import numpy as np
import pyopencl as cl

from .dtypes import as_dtype, bfloat16, bfloat16_values, cl_type, dtype_name

__all__ = ["Tensor", "Shape", "ws_view", "fill_bytes", "same_memory"]

# NVIDIA's OpenCL driver faults on a fill of more than 2 GiB (the queue is then dead: the
# next command fails with INVALID_COMMAND_QUEUE or a build with -9999): fills go in pieces
FILL_CHUNK = 1 << 30  # bytes
# It also mishandles fills that reach past 4 GiB into a buffer (driver 580, H200): a
# 1-byte pattern at 4 GiB + 64 writes nothing, and any pattern at 8 GiB + 128 kills the
# queue, while copies at those offsets are right (a Net's arena passes 8 GiB in GPT-2's
# training at batch 64). Ranges that end past FILL_DRIVER_END are copied instead, device
# to device: a block of the pattern that the context keeps (FILL_BLOCK bytes) into the
# range's start, then the filled stretch into what follows it, doubling (at most
# FILL_CHUNK a copy), so a fill of gigabytes is a dozen commands.
FILL_DRIVER_END = 1 << 32  # bytes
FILL_BLOCK = 1 << 20


# Intel's CPU runtime fills with its own command at 2-17 GB/s (7.4 MB: 0.47 ms; 64 MB:
# 38 ms on a 2-core EPYC) where the fill kernel writes 7.4 MB in 0.07 ms and 64 MB in 2;
# there a fill of a 4-byte pattern from this size on is the kernel (PoCL's own fill is the
# faster one: 0.13 against 0.48 ms for 7.4 MB). The kernel's launcher lives with the
# other fills (core/copy.py sets KERNEL_FILL[0]: fn(ctx, queue, buffer, pattern, offset,
# nbytes) -> event); until it is imported, fills take the driver's command.
KERNEL_FILL_MIN = 1 << 16  # bytes
KERNEL_FILL = [None]


def _kernel_fills(ctx, size, offset, nbytes):
    facts = getattr(ctx, "facts", None)
    return (KERNEL_FILL[0] is not None and facts is not None and facts.is_cpu
            and facts.vendor_id == "intel" and size == 4 and nbytes >= KERNEL_FILL_MIN
            and offset % 4 == 0)


def fill_bytes(ctx, queue, buffer, pattern, offset, nbytes):
    """Fill ``nbytes`` bytes at ``offset`` of ``buffer`` with ``pattern`` (a one-element
    array; ``offset`` and ``nbytes`` multiples of its size), in pieces: the driver's fill,
    or copies (``ctx``'s pattern block, then doubling) where the range ends past
    FILL_DRIVER_END; returns the last piece's event."""
    size = pattern.nbytes
    if offset % size or nbytes % size:
        raise ValueError("fill_bytes: offset %d and nbytes %d must be multiples of the "
                         "pattern's %d bytes" % (offset, nbytes, size))
    event = None
    if _kernel_fills(ctx, size, offset, nbytes):
        return KERNEL_FILL[0](ctx, queue, buffer, pattern, offset, nbytes)
    if offset + nbytes <= FILL_DRIVER_END:
        step = FILL_CHUNK - FILL_CHUNK % size
        for start in range(0, nbytes, step):
            event = cl.enqueue_fill_buffer(queue, buffer, pattern, offset + start,
                                           min(step, nbytes - start))
        return event
    if not nbytes:
        return None
    block = _pattern_block(ctx, pattern)
    done = min(FILL_BLOCK, nbytes)
    event = cl.enqueue_copy(queue, buffer, block.buffer, byte_count=done,
                            src_offset=block.byte_offset, dst_offset=offset)
    while done < nbytes:  # the queue is in order: each copy reads what the last wrote
        count = min(done, FILL_CHUNK, nbytes - done)
        event = cl.enqueue_copy(queue, buffer, buffer, byte_count=count, src_offset=offset,
                                dst_offset=offset + done)
        done += count
    return event


def _pattern_block(ctx, pattern):
    """A Tensor of FILL_BLOCK bytes of ``pattern`` repeated, which ``ctx`` keeps (written
    once from the host: no driver fill at all on this path)."""
    blocks = ctx.__dict__.setdefault("_fill_blocks", {})
    # keyed by the pattern repeated to 8 bytes (or its own size, where wider): one block
    # of zeros serves every width, and a 16-byte pattern is told apart by all of it
    raw = np.frombuffer(pattern.tobytes(), np.uint8)
    key = (np.resize(raw, max(8, raw.size)).tobytes(), FILL_BLOCK)
    if key not in blocks:
        blocks[key] = Tensor.from_numpy(ctx, np.resize(raw, FILL_BLOCK))
    return blocks[key]


def _shape_tuple(shape):
    if type(shape) is tuple and all(type(s) is int and s >= 0 for s in shape):
        return shape  # what nearly every call passes
    if isinstance(shape, (int, np.integer)):
        shape = (shape,)
    shape = tuple(int(s) for s in shape)
    if any(s < 0 for s in shape):
        raise ValueError("negative dimension in shape %s" % (shape,))
    return shape

if TYPE_CHECKING:
    from .context import Context


class Shape(tuple):
    """DLPrimitives' shape type: ``Shape(2, 1, 28, 28)``, a tuple of sizes.

    Anything that takes a shape takes one. Passed to ``Tensor.reshape`` it asks for
    DLPrimitives' in-place reshape (the tensor itself changes shape) rather than a view.
    """

    def __new__(cls, *dims: int) -> "Shape":
        return super().__new__(cls, _shape_tuple(dims))

    @property
    def total_size(self) -> int:
        """The number of elements: ``Shape(2, 3).total_size == 6``."""
        return math.prod(self)

    def __repr__(self):
        return "Shape(%s)" % ", ".join(str(d) for d in self)

    def __str__(self):
        return "(%s)" % ",".join(str(d) for d in self)


class Tensor:
    """An n-dimensional array on an OpenCL device.

    ``Tensor(ctx, (2, 3))`` allocates from the context's pool; ``buffer=`` and ``offset=``
    (elements) make a view of existing memory instead. ``name`` says what the memory is
    for when the device cannot hold it (a DeviceMemoryError).
    """

    def __init__(self, ctx: "Context", shape: Sequence[int], dtype: Any = "float32",
                 buffer: Any = None, offset: int = 0, name: Optional[str] = None) -> None:
        self.ctx = ctx
        self.shape = shape = _shape_tuple(shape)
        self.dtype = dtype = as_dtype(dtype)
        self.offset = int(offset)
        if buffer is None:
            if self.offset:
                raise ValueError("an offset needs an existing buffer")
            nbytes = math.prod(shape) * dtype.itemsize
            memory = ctx.memory
            buffer = memory.allocate(nbytes, lambda: self._describe(name))
            # given back in __del__: a weakref.finalize per tensor cost more than the
            # allocation itself (an eager operator makes one or more tensors)
            self._held = (memory, nbytes)
        self.buffer = buffer

    _held = None  # (the pool, bytes) of a tensor that allocated its buffer; views: None

    def __del__(self):
        held = self._held
        if held is not None:
            self._held = None
            held[0].release(held[1])

    def _describe(self, name):
        what = "%s %s" % (dtype_name(self.dtype), self.shape)
        return "%s, %s" % (name, what) if name else "a tensor " + what

    # ----- facts
    @property
    def size(self):
        """The number of elements."""
        return math.prod(self.shape)

    @property
    def ndim(self):
        """The number of dimensions."""
        return len(self.shape)

    @property
    def nbytes(self):
        """The size of the data in bytes."""
        return self.size * self.dtype.itemsize

    @property
    def itemsize(self):
        """Bytes per element."""
        return self.dtype.itemsize

    @property
    def byte_offset(self):
        """Where the data starts in the buffer, in bytes."""
        return self.offset * self.dtype.itemsize

    @property
    def cl_type(self):
        """The OpenCL C type of an element (``"float"``, ``"int"``, ``"half"`` ...)."""
        return cl_type(self.dtype)

    @property
    def kernel_args(self):
        """``(buffer, ulong offset)``: how every kernel takes a tensor."""
        return (self.buffer, np.uint64(self.offset))

    def __repr__(self):
        return "Tensor(shape=%s, dtype=%s, offset=%d)" % (self.shape, dtype_name(self.dtype),
                                                          self.offset)

    # ----- construction
    @classmethod
    def from_numpy(cls, ctx: "Context", array: np.ndarray, e: Any = None) -> "Tensor":
        """A new tensor with the shape, dtype and content of ``array``."""
        array = np.asarray(array)
        t = cls(ctx, array.shape, array.dtype)
        t.to_device(array, e)
        return t

    @classmethod
    def zeros(cls, ctx: "Context", shape: Sequence[int], dtype: Any = "float32",
              name: Optional[str] = None) -> "Tensor":
        """A new tensor filled with zeros (the fill is enqueued)."""
        t = cls(ctx, shape, dtype, name=name)
        t.zero_()
        return t

    # ----- views
    def reshape(self, *shape):
        """A view with another shape of the same element count; -1 deduces one dimension.

        Given a ``Shape``, DLPrimitives' in-place reshape instead: this tensor takes the
        shape (returns None), any size up to what it held when first reshaped so (a net
        input then picks it up at ``net.reshape()``)."""
        if len(shape) == 1 and isinstance(shape[0], Shape):
            return self._reshape_in_place(shape[0])
        if len(shape) == 1 and not isinstance(shape[0], (int, np.integer)):
            shape = tuple(shape[0])
        shape = list(int(s) for s in shape)
        if shape.count(-1) > 1:
            raise ValueError("reshape: at most one -1 in %s" % (tuple(shape),))
        if -1 in shape:
            rest = int(np.prod([s for s in shape if s != -1], dtype=np.int64))
            if rest == 0 or self.size % rest:
                raise ValueError("reshape: cannot reshape %s into %s" % (self.shape, tuple(shape)))
            shape[shape.index(-1)] = self.size // rest
        if int(np.prod(shape, dtype=np.int64)) != self.size:
            raise ValueError("reshape: cannot reshape %s (%d elements) into %s"
                             % (self.shape, self.size, tuple(shape)))
        return self.view(shape)

    def _reshape_in_place(self, shape):
        # the bytes the tensor had before its first in-place reshape are its capacity, so a
        # batch may shrink and grow back as in DLPrimitives, never past its memory
        capacity = self.__dict__.setdefault("_capacity_bytes", self.nbytes)
        nbytes = shape.total_size * self.itemsize
        if nbytes > capacity:
            raise ValueError("reshape: %r needs %d bytes, the tensor holds %d (an in-place "
                             "reshape may shrink a tensor and grow it back, not beyond)"
                             % (shape, nbytes, capacity))
        self.shape = tuple(shape)

    def view(self, shape: Sequence[int], offset: int = 0, dtype: Any = None) -> "Tensor":
        """A tensor over the same buffer, ``offset`` elements further in."""
        return self._view(_shape_tuple(shape), int(offset),
                          self.dtype if dtype is None else as_dtype(dtype))

    def _view(self, shape, offset, dtype):
        """``view`` without its checks: ``shape`` a tuple of ints, ``offset`` an int."""
        t = Tensor.__new__(Tensor)
        t.ctx, t.buffer, t.shape, t.dtype = self.ctx, self.buffer, shape, dtype
        t.offset = self.offset + offset
        t._owner = self  # keep the owning tensor (and its pool block) alive
        return t

    # ----- host transfers
    def _queue(self, e):
        return e.queue if e is not None else self.ctx.queue

    def _check_array(self, array, what):
        if tuple(array.shape) != self.shape:
            raise ValueError("%s: array shape %s does not match tensor shape %s"
                             % (what, tuple(array.shape), self.shape))
        if array.dtype != self.dtype:
            raise TypeError("%s: array dtype %s does not match tensor dtype %s"
                            % (what, array.dtype, self.dtype))

    def to_device(self, array: np.ndarray, e: Any = None, wait: bool = True) -> None:
        """Copy a numpy array of the same shape and dtype into the tensor. Large copies to
        discrete GPUs go through the context's page-locked staging memory
        (``dlprim/staging.py``) and leave ``array`` free to change on return; others
        without ``wait`` read it until the copy has run."""
        array = np.asarray(array)
        self._check_array(array, "to_device")
        if self.size == 0:
            return
        queue = self._queue(e)
        staging = getattr(self.ctx, "staging", None)
        if staging is not None and staging.takes(array.nbytes) and \
                staging.write(queue, self.buffer, self.byte_offset, array, wait):
            return
        cl.enqueue_copy(queue, self.buffer, np.ascontiguousarray(array),
                        dst_offset=self.byte_offset, is_blocking=wait)

    def to_host(self, array: Optional[np.ndarray] = None, e: Any = None) -> np.ndarray:
        """Copy the tensor into ``array`` (checked) or a new array; waits for the copy."""
        if array is None:
            array = np.empty(self.shape, self.dtype)
        else:
            self._check_array(array, "to_host")
            if not array.flags.c_contiguous:
                raise ValueError("to_host: the array must be C-contiguous")
        if self.size:
            cl.enqueue_copy(self._queue(e), array, self.buffer,
                            src_offset=self.byte_offset, is_blocking=True)
        return array

    def numpy(self) -> np.ndarray:
        """The content as a new numpy array (waits for the device); bfloat16 as its
        float32 values (numpy has no bfloat16 arithmetic; ``to_host`` gives the bits)."""
        if self.dtype == bfloat16:
            return bfloat16_values(self.to_host())
        return self.to_host()

    def __array__(self, dtype=None, copy=None):
        """``np.asarray(tensor)``: the content (copied from the device)."""
        if copy is False:
            raise ValueError("a device tensor's values can only be copied to the host")
        array = self.numpy()
        return array if dtype is None else array.astype(dtype, copy=False)

    def zero_(self, e=None):
        """Fill with zeros (enqueued)."""
        if self.size:
            wide = self.nbytes % 4 == 0 and self.byte_offset % 4 == 0
            fill_bytes(self.ctx, self._queue(e), self.buffer,
                       np.zeros(1, np.uint32 if wide else np.uint8),
                       self.byte_offset, self.nbytes)
        return self

    def copy_from(self, other, e=None):
        """Device-to-device copy of a tensor of the same shape and dtype (enqueued)."""
        if other.shape != self.shape or other.dtype != self.dtype:
            raise ValueError("copy_from: %s %s into %s %s"
                             % (other.shape, other.dtype, self.shape, self.dtype))
        if self.size:
            cl.enqueue_copy(self._queue(e), self.buffer, other.buffer, byte_count=self.nbytes,
                            src_offset=other.byte_offset, dst_offset=self.byte_offset)
        return self


def same_memory(a, b):
    """Whether tensors ``a`` and ``b`` start at the same place of the same buffer."""
    return a.buffer is b.buffer and a.offset == b.offset


def ws_view(ws, byte_offset, count, dtype="float32"):
    """A tensor of ``count`` elements (float32 unless ``dtype``) at ``byte_offset`` inside
    the uint8 workspace ``ws`` (a layer's scratch bytes, placed by the Net)."""
    start = ws.byte_offset + byte_offset
    size = as_dtype(dtype).itemsize
    if start % size:
        raise ValueError("workspace offset %d is not aligned to %s" % (start, as_dtype(dtype)))
    t = Tensor(ws.ctx, (count,), dtype, buffer=ws.buffer, offset=start // size)
    t._owner = ws
    return t
