"""Copies: strided copy (slices, concat, transposes and their gradients), fill, copy.

``StridedCopy`` walks an index space ``shape`` and moves ``src[sum(i*src_strides)]`` to
``dst[sum(i*dst_strides)]`` (element strides from each tensor's start element), as
``dst = alpha * src + beta * dst``; beta=0 never reads dst, beta=1 accumulates.
"""
import numpy as np
import pyopencl as cl

from ..kernels import program
from ..dtypes import HALF_TYPES, as_dtype, bfloat16, cl_cast, cl_type, compute_type, dtype_name, \
    to_bfloat16
from .. import tensor as _tensor_module
from ..tensor import Tensor
from .pointwise import memo, divisor_args, index_type
from . import tuning, tuning_launch
from ..utils import ceil_div, round_up

__all__ = ["BufferCopy", "StridedCopy", "StridedCast", "TransposeCopy", "Fill", "fill", "copy", "concat", "slice_copy",
           "contiguous_strides"]


class BufferCopy:
    """A prepared ``clEnqueueCopyBuffer`` of one contiguous tensor into another of the same
    bytes, a plan's entry like a Launch (called with the queue): a driver's own copy,
    several times a kernel's speed on CPU runtimes."""
    __slots__ = ("src", "dst", "src_offset", "dst_offset", "nbytes", "name")

    def __init__(self, src, dst):
        if src.nbytes != dst.nbytes:
            raise ValueError("BufferCopy: %d bytes into %d" % (src.nbytes, dst.nbytes))
        self.src, self.dst, self.nbytes = src.buffer, dst.buffer, src.nbytes
        self.src_offset, self.dst_offset = src.byte_offset, dst.byte_offset
        self.name = "copy_buffer"

    def __call__(self, queue):
        if self.nbytes:
            return cl.enqueue_copy(queue, self.dst, self.src, byte_count=self.nbytes,
                                   src_offset=self.src_offset, dst_offset=self.dst_offset)


def contiguous_strides(shape):
    """Element strides of a C-contiguous array of ``shape``."""
    out, step = [], 1
    for n in reversed(tuple(shape)):
        out.append(step)
        step *= int(n)
    return tuple(out[::-1])


def _collapse(shape, a, b):
    """Drop size-1 dims, merge neighbours contiguous in both stride sets."""
    dims, sa, sb = [], [], []
    for n, x, y in zip(shape, a, b):
        if n == 1:
            continue
        if dims and sa[-1] == x * n and sb[-1] == y * n:
            dims[-1] *= n
            sa[-1], sb[-1] = x, y
            continue
        dims.append(n)
        sa.append(x)
        sb.append(y)
    return dims or [1], sa or [0], sb or [0]


def _buffer_elements(t):
    size = getattr(t.buffer, "size", None)
    return None if size is None else int(size) // t.itemsize


class StridedCopy:
    """``dst[idx] = alpha * src[idx] + beta * dst[idx]`` for idx over ``shape``; ``dst_dtype``
    (default ``dtype``): another float storage for dst, converted on the way (float32 to or
    from float16 / bfloat16); ``StridedCast`` converts between any two dtypes."""

    ANY_DTYPES = False  # whether dst_dtype may be any dtype (StridedCast) or a float only

    def __init__(self, ctx, shape, src_strides, dst_strides, dtype="float", dst_dtype=None):
        self.ctx = ctx
        self.shape = tuple(int(n) for n in shape)
        self.src_strides = tuple(int(s) for s in src_strides)
        self.dst_strides = tuple(int(s) for s in dst_strides)
        for what, st in (("src_strides", self.src_strides), ("dst_strides", self.dst_strides)):
            if len(st) != len(self.shape):
                raise ValueError("StridedCopy: %s %s do not match shape %s" % (what, st, self.shape))
            if any(s < 0 for s in st):
                raise ValueError("StridedCopy: negative stride in %s %s" % (what, st))
        self.dtype = as_dtype(dtype)
        self.dst_dtype = self.dtype if dst_dtype is None else as_dtype(dst_dtype)
        floats = (np.float32,) + HALF_TYPES
        if self.dst_dtype != self.dtype and not self.ANY_DTYPES and \
                not (self.dtype in floats and self.dst_dtype in floats):
            raise ValueError("StridedCopy: converts between float32, float16 and bfloat16 only, "
                             "got %s -> %s (StridedCast converts any pair)"
                             % (dtype_name(self.dtype), dtype_name(self.dst_dtype)))
        self.size = int(np.prod(self.shape, dtype=np.int64))
        self.src_extent = self._extent(self.src_strides)
        self.dst_extent = self._extent(self.dst_strides)
        self._dims, self._ss, self._ds = _collapse(self.shape, self.src_strides, self.dst_strides)
        big = index_type(max(self.size, self.src_extent, self.dst_extent)) is np.uint64
        self._it = np.uint64 if big else np.uint32
        # CPUs: rows of the innermost dimension per work-item (strided_copy.cl ROWS)
        self._rows = ctx.facts.is_cpu and len(self._dims) >= 2
        inner = self._rows and self._ss[-1] == 1 and self._ds[-1] == 1
        self.program = program.get(ctx, "strided_copy", DIMS=len(self._dims),
                                   ROWS=self._rows, INNER=inner,
                                   STORE=cl_type(self.dtype), DST_STORE=cl_type(self.dst_dtype),
                                   COMPUTE=compute_type(self.dtype),
                                   DST_COMPUTE=compute_type(self.dst_dtype),
                                   CAST=cl_cast(self.dtype, self.dst_dtype, "v"),
                                   IT="ulong" if big else "uint",
                                   ELEMS=tuning_launch.POINTWISE_ELEMS)

    def _extent(self, strides):
        """Elements from the start element to one past the last one touched."""
        if self.size == 0:
            return 0
        return sum((n - 1) * s for n, s in zip(self.shape, strides)) + 1

    def _check(self, t, what, extent, dtype):
        if not isinstance(t, Tensor):
            raise ValueError("StridedCopy: %s is not a Tensor" % what)
        if t.dtype != dtype:
            raise ValueError("StridedCopy: %s has dtype %s, expected %s"
                             % (what, dtype_name(t.dtype), dtype_name(dtype)))
        room = _buffer_elements(t)
        if room is not None and t.offset + extent > room:
            raise ValueError("StridedCopy: %s at offset %d needs %d elements, its buffer holds %d"
                             % (what, t.offset, extent, room))

    def launches(self, src, dst, alpha=1.0, beta=0.0):
        """dst = alpha * src + beta * dst over the configured strides (beta 0 never reads dst)."""
        self._check(src, "src", self.src_extent, self.dtype)
        self._check(dst, "dst", self.dst_extent, self.dst_dtype)
        if self.size == 0:
            return []
        it = self._it
        args = []
        for n, s, d in zip(self._dims, self._ss, self._ds):
            args += divisor_args(it, n) + [it(s), it(d)]
        args += [src, dst, np.float32(alpha), np.float32(beta)]
        if self._rows:
            inner = self._dims[-1]
            rows = self.size // inner
            per = max(1, tuning_launch.pointwise_cpu_chunk(self.ctx.facts, self.size) // inner)
            # (work-groups of one: a CPU driver runs a group on one core)
            return [program.Launch(self.program, "strided_copy_rows", (ceil_div(rows, per),),
                                   (1,), [it(rows), it(per)] + args)]
        args = [it(self.size)] + args
        wg = min(256, self.ctx.facts.max_work_group)
        items = ceil_div(self.size, tuning_launch.POINTWISE_ELEMS)
        return [program.Launch(self.program, "strided_copy", (round_up(items, wg),),
                               (wg,), args)]

    def __call__(self, src, dst, alpha=1.0, beta=0.0, queue=None):
        for launch in self.launches(src, dst, alpha, beta):
            launch(queue if queue is not None else self.ctx.queue)


class StridedCast(StridedCopy):
    """``dst[idx] = src[idx]`` converted to dst's dtype as PyTorch converts
    (``dtypes.cl_cast``: to bool is ``!= 0``, floats truncate toward zero into integers),
    between any two dtypes; no scaling (alpha 1, beta 0)."""

    ANY_DTYPES = True

    def launches(self, src, dst, alpha=1.0, beta=0.0):
        """dst = src as dst's dtype over the configured strides."""
        if alpha != 1.0 or beta != 0.0:
            raise ValueError("StridedCast: copies values (alpha 1, beta 0), got alpha=%r beta=%r"
                             % (alpha, beta))
        return super().launches(src, dst)


def _merge_axes(shape, perm):
    """Drop size-1 axes and merge input axes that stay neighbours in the output:
    -> (shape, perm) of the same transpose with the fewest axes."""
    keep = [a for a in perm if shape[a] != 1]
    groups = []  # runs of consecutive input axes, in output order
    for a in keep:
        if groups and groups[-1][-1] + 1 == a:
            groups[-1].append(a)
        else:
            groups.append([a])
    order = sorted(range(len(groups)), key=lambda g: groups[g][0])
    merged = [int(np.prod([shape[a] for a in groups[g]])) for g in order]
    rank = {g: i for i, g in enumerate(order)}
    return merged, [rank[g] for g in range(len(groups))]


# the unsigned type transpose_blocks moves elements of a size as
_WORDS = {1: "uchar", 2: "ushort", 4: "uint", 8: "ulong"}


class TransposeCopy(StridedCopy):
    """``y = x.transpose(perm)`` (numpy's meaning) for contiguous x and y.

    After merging axes, a swap of the last two ((M, N) -> (N, M), batched or not; NCHW <->
    NHWC is one) goes through a local-memory tile on GPUs, and on CPUs (where alpha is 1
    and beta 0) through blocks of the CPU's vector width that each work-item moves in
    registers (``transpose_blocks``); other permutations walk the output in order
    (coalesced writes, strided reads)."""

    TILE, ROWS = 32, 8

    def __init__(self, ctx, in_shape, perm, dtype="float"):
        in_shape = tuple(int(n) for n in in_shape)
        perm = tuple(int(p) % max(len(in_shape), 1) for p in perm)
        if sorted(perm) != list(range(len(in_shape))):
            raise ValueError("TransposeCopy: %s is not a permutation of the %d axes of %s"
                             % (tuple(perm), len(in_shape), in_shape))
        self.in_shape, self.perm = in_shape, perm
        self.out_shape = tuple(in_shape[p] for p in perm)
        src = contiguous_strides(in_shape)
        super().__init__(ctx, self.out_shape, [src[p] for p in perm],
                         contiguous_strides(self.out_shape), dtype)
        shape, order = _merge_axes(in_shape, perm)
        self._tiled = self._blocks = None
        if order in ([1, 0], [0, 2, 1]) and min(shape[-2:]) >= 8 and (len(shape) == 2 or shape[0] < 65536):
            self._bmn = ([1] + shape)[-3:]
            self._tiled = program.get(ctx, "transpose", TILE=self.TILE, ROWS=self.ROWS,
                                      STORE=cl_type(self.dtype), COMPUTE=compute_type(self.dtype))
            if ctx.facts.is_cpu and self.dtype.itemsize in _WORDS:
                # blocks of the CPU's vector width in floats; 8-byte elements half as many
                # (PoCL 3 builds no kernel from ulong8 loads under CL1.2). PoCL also
                # drops a kernel hinted with 16-wide vectors, and gains nothing from it.
                wide = self.dtype.itemsize == 8
                self._block = tuning.cpu_vector_width(ctx.facts) // (2 if wide else 1)
                self._blocks = program.get(ctx, "transpose_blocks", BLOCK=self._block,
                                           WORD=_WORDS[self.dtype.itemsize],
                                           HINT=ctx.facts.vendor_id != "pocl")

    def launches(self, x, y, alpha=1.0, beta=0.0):
        """y = alpha * x.transpose(perm) + beta * y."""
        for what, t, shape in (("x", x, self.in_shape), ("y", y, self.out_shape)):
            if not isinstance(t, Tensor) or t.shape != shape:
                raise ValueError("TransposeCopy: %s is %r, expected shape %s" % (what, t, shape))
        if self._tiled is None or self.size == 0:
            return super().launches(x, y, alpha, beta)
        self._check(x, "x", self.size, self.dtype)
        self._check(y, "y", self.size, self.dst_dtype)
        b, m, n = self._bmn
        if self._blocks is not None and alpha == 1.0 and beta == 0.0:
            k = self._block
            return [program.Launch(self._blocks, "transpose_blocks", (-(-n // k), -(-m // k), b),
                                   None, [np.uint64(m), np.uint64(n), x, y])]
        t = self.TILE
        gsize = (round_up(n, t), round_up(m, t) // t * self.ROWS, b)
        return [program.Launch(self._tiled, "transpose_tiled", gsize, (t, self.ROWS, 1),
                               [np.uint64(m), np.uint64(n), x, y, np.float32(alpha), np.float32(beta)])]


class Fill:
    """Set every element of a tensor of ``shape`` to a value (given per launch)."""

    def __init__(self, ctx, shape, dtype="float"):
        self.ctx, self.shape, self.dtype = ctx, tuple(int(n) for n in shape), as_dtype(dtype)
        self.size = int(np.prod(self.shape, dtype=np.int64))
        # half and bfloat16 (no cl_khr_fp16 needed): store the 16-bit pattern
        self._store = "ushort" if self.dtype in HALF_TYPES else cl_type(self.dtype)
        self.program = program.get(ctx, "fill", dtype=self._store)

    def launches(self, t, value):
        """Set every element of ``t`` to ``value``."""
        if not isinstance(t, Tensor) or t.shape != self.shape or t.dtype != self.dtype:
            raise ValueError("Fill: tensor %r, expected shape %s dtype %s" % (t, self.shape, dtype_name(self.dtype)))
        if self.size == 0:
            return []
        if self.dtype == bfloat16:
            v = to_bfloat16(np.float32(value)).view(np.uint16)
        elif self._store == "ushort":
            v = np.float16(value).view(np.uint16)
        elif self.dtype == np.bool_:
            v = np.uint8(bool(value))   # stored as uchar (a numpy bool is no kernel argument)
        else:
            v = self.dtype.type(value)
        wg = min(256, self.ctx.facts.max_work_group)
        return [program.Launch(self.program, "fill", (round_up(self.size, wg),), (wg,),
                               [np.uint64(self.size), t.buffer, np.uint64(t.offset), v])]

    def __call__(self, t, value, queue=None):
        for launch in self.launches(t, value):
            launch(queue if queue is not None else self.ctx.queue)


def _fill_bytes_kernel(ctx, queue, buffer, pattern, offset, nbytes):
    """kernels/fill.cl over ``nbytes`` bytes of 4-byte ``pattern`` at ``offset`` of
    ``buffer``, enqueued; its event (``tensor.fill_bytes`` on Intel's CPU runtime)."""
    count, wg = nbytes // 4, min(256, ctx.facts.max_work_group)
    return program.enqueue_now(queue, program.get(ctx, "fill", dtype="uint"), "fill",
                               (round_up(count, wg),), (wg,),
                               [np.uint64(count), buffer, np.uint64(offset // 4),
                                np.asarray(pattern).view(np.uint32).reshape(-1)[0]])


_tensor_module.KERNEL_FILL[0] = _fill_bytes_kernel


def _fill_op(ctx, t):
    return memo(ctx, ("fill", t.shape, t.dtype.name), lambda: Fill(ctx, t.shape, t.dtype))


def fill(ctx, t, value, queue=None):
    """Set every element of ``t`` to ``value`` (enqueued); returns t."""
    _fill_op(ctx, t)(t, value, queue)
    return t


def fill_launches(ctx, t, value):
    """``fill``'s launches, prepared and not enqueued (to be part of a plan)."""
    return _fill_op(ctx, t).launches(t, value)


def copy(ctx, src, dst, queue=None):
    """``dst[...] = src`` for tensors of the same shape and dtype (enqueued)."""
    if src.shape != dst.shape or src.dtype != dst.dtype:
        raise ValueError("copy: %s %s into %s %s" % (src.shape, src.dtype.name, dst.shape, dst.dtype.name))
    strides = contiguous_strides(src.shape)
    op = memo(ctx, ("copy", src.shape, src.dtype.name),
               lambda: StridedCopy(ctx, src.shape, strides, strides, src.dtype))
    op(src, dst, queue=queue)
    return dst


def _axis(shape, axis, what):
    if not -len(shape) <= axis < len(shape):
        raise ValueError("%s: axis %d is out of range for shape %s" % (what, axis, shape))
    return axis % len(shape)


def concat(ctx, tensors, axis, out=None, queue=None):
    """Join tensors along ``axis`` (numpy.concatenate) into ``out`` or a new tensor."""
    if not tensors:
        raise ValueError("concat: no tensors")
    first = tensors[0]
    axis = _axis(first.shape, axis, "concat")
    for i, t in enumerate(tensors):
        if (t.ndim != first.ndim or t.dtype != first.dtype or
                any(n != m for k, (n, m) in enumerate(zip(t.shape, first.shape)) if k != axis)):
            raise ValueError("concat: tensor %d is %s %s, tensor 0 is %s %s (axis %d)"
                             % (i, t.shape, t.dtype.name, first.shape, first.dtype.name, axis))
    shape = list(first.shape)
    shape[axis] = sum(t.shape[axis] for t in tensors)
    if out is None:
        out = Tensor(ctx, shape, first.dtype)
    elif out.shape != tuple(shape) or out.dtype != first.dtype:
        raise ValueError("concat: out is %s %s, expected %s %s" % (out.shape, out.dtype.name, tuple(shape), first.dtype.name))
    dst_strides = contiguous_strides(shape)
    start = 0
    for t in tensors:
        op = memo(ctx, ("concat", t.shape, tuple(shape), axis, t.dtype.name),
                   lambda: StridedCopy(ctx, t.shape, contiguous_strides(t.shape), dst_strides, t.dtype))
        op(t, out.view((out.size,), offset=start * dst_strides[axis]), queue=queue)
        start += t.shape[axis]
    return out


def slice_copy(ctx, src, axis, start, stop, out=None, queue=None):
    """``src[..., start:stop, ...]`` along ``axis`` into ``out`` or a new tensor."""
    axis = _axis(src.shape, axis, "slice_copy")
    if not 0 <= start <= stop <= src.shape[axis]:
        raise ValueError("slice_copy: [%d:%d] outside axis %d of size %d" % (start, stop, axis, src.shape[axis]))
    shape = list(src.shape)
    shape[axis] = stop - start
    if out is None:
        out = Tensor(ctx, shape, src.dtype)
    elif out.shape != tuple(shape) or out.dtype != src.dtype:
        raise ValueError("slice_copy: out is %s %s, expected %s %s"
                         % (out.shape, out.dtype.name, tuple(shape), src.dtype.name))
    src_strides = contiguous_strides(src.shape)
    op = memo(ctx, ("slice", src.shape, axis, stop - start, src.dtype.name),
               lambda: StridedCopy(ctx, shape, src_strides, contiguous_strides(shape), src.dtype))
    op(src.view((src.size - start * src_strides[axis],), offset=start * src_strides[axis]), out,
       queue=queue)
    return out
