"""The launchers behind the ocl device's indexing operators (dlprim/torch/ops_index*.py):
index reads and writes over tensors seen as (outer, n, inner) around the indexed axis
(``kernels/indexing.cl``, ``kernels/index_accumulate.cl``), stream compaction for the
outputs whose size depends on the data (``kernels/compaction.cl``) and set membership
(``kernels/membership.cl``).

Every tensor here is a contiguous dlprim Tensor. Moves of values are built per element
width, not per dtype (a float32 and an int32 tensor share a program). An index outside
its axis is reported through a small per-context buffer, ``IndexFault``: the caller reads
it once after its launches and raises PyTorch's error (one 16-byte read-back per
operator; it waits for the queue, which is what a bounds check costs without device-side
asserts). The kernels leave memory alone at a bad index, so nothing is read or written
out of bounds before the error is raised.
"""
import numpy as np

from ..dtypes import as_dtype, cl_type
from ..kernels import program
from ..tensor import Tensor
from ..utils import round_up
from .pointwise import memo

__all__ = ["IndexFault", "fault", "take", "put", "combine", "put_reduce", "REDUCE_OPS",
           "Compaction", "compact", "isin", "accumulate_type"]

_BITS = {1: "uchar", 2: "ushort", 4: "uint", 8: "ulong"}
_INDEX = {np.dtype(np.int64): "long", np.dtype(np.int32): "int"}
REDUCE_OPS = {"add": 0, "mul": 1, "max": 2, "min": 3}
# the type repeated indices combine in, per storage type: narrower ones combine in a wider
# type and are converted back by the caller (OpenCL has no 8- or 16-bit atomics)
_ACCUMULATE = {"float": "float", "double": "double", "int": "int", "long": "long",
               "half": "float", "bfloat16": "float", "uchar": "int", "char": "int",
               "short": "int", "ushort": "int"}
_U64 = np.uint64
_U32 = np.uint32


def _wg(ctx):
    return min(256, ctx.facts.max_work_group)


def _index_type(idx):
    try:
        return _INDEX[as_dtype(idx.dtype)]
    except KeyError:
        raise TypeError("index kernels: indices must be int64 or int32, got %s"
                        % as_dtype(idx.dtype).name) from None


def _bits(t):
    return _BITS[as_dtype(t.dtype).itemsize]


class IndexFault:
    """The bad-index report of one context: err[0] = 1 once a kernel met an index outside
    its axis, err[1] = that index."""

    def __init__(self, ctx):
        self.ctx = ctx
        self.err = Tensor(ctx, (2,), np.int64)
        self.err.zero_()

    def take(self):
        """The bad index met since the last call (None if none), clearing the report."""
        seen = self.err.to_host()
        if not seen[0]:
            return None
        self.err.zero_()
        return int(seen[1])


def fault(ctx):
    """The context's ``IndexFault`` (made once)."""
    return memo(ctx, "index_fault", lambda: IndexFault(ctx))


def _launch(ctx, prog, name, total, args):
    wg = _wg(ctx)
    return program.Launch(prog, name, (round_up(total, wg),), (wg,), [_U64(total)] + args)


def take(ctx, src, idx, dst, outer, n, m, inner, per_element=False, wrap=False):
    """dst[o, i, k] = src[o, idx[.], k]: dst of (outer, m, inner), src of (outer, n, inner);
    idx has one entry per (o, i, k) (per_element) or per i."""
    total = outer * m * inner
    if total == 0:
        return []
    prog = program.get(ctx, "indexing", S=_bits(src), I=_index_type(idx))
    return [_launch(ctx, prog, "take", total,
                    [_U64(n), _U64(m), _U64(inner), _U32(per_element), _U32(wrap), src, idx,
                     dst, fault(ctx).err])]


def put(ctx, src, idx, dst, outer, n, m, inner, per_element=False, wrap=False, fill=False):
    """dst[o, idx[.], k] = src[o, i, k] (or src[0] everywhere when ``fill``)."""
    total = outer * m * inner
    if total == 0:
        return []
    prog = program.get(ctx, "indexing", S=_bits(dst), I=_index_type(idx))
    return [_launch(ctx, prog, "put", total,
                    [_U64(n), _U64(m), _U64(inner), _U32(per_element), _U32(wrap),
                     _U64(0 if fill else 1), src, idx, dst, fault(ctx).err])]


def combine(ctx, idx, lin, n, first, wrap=True):
    """lin = lin * n + idx (lin = idx when ``first``): index tensors of one shape, one per
    indexed axis, folded into an int64 index over those axes taken together."""
    total = lin.size
    if total == 0:
        return []
    prog = program.get(ctx, "indexing", S="uchar", I=_index_type(idx))
    return [_launch(ctx, prog, "combine", total,
                    [_U64(n), _U32(wrap), _U32(first), idx, lin, fault(ctx).err])]


def accumulate_type(dtype):
    """The C type repeated indices of ``dtype`` values combine in (see _ACCUMULATE)."""
    return _ACCUMULATE[cl_type(dtype)]


def put_reduce(ctx, src, idx, dst, outer, n, m, inner, op, per_element=False, wrap=False,
               fill=False, skip=-1):
    """dst[o, idx[.], k] op= src[o, i, k] (or src[0] when ``fill``), op one of REDUCE_OPS;
    src and dst in dst's accumulate type already; the index ``skip`` combines nothing."""
    total = outer * m * inner
    if total == 0:
        return []
    T = cl_type(dst.dtype)
    if T != accumulate_type(dst.dtype):
        raise TypeError("index kernels: %s values combine in %s; convert them first"
                        % (T, accumulate_type(dst.dtype)))
    if T in ("long", "double") and not ctx.facts.int64_atomics:
        raise NotImplementedError("dlprim: combining %s values at repeated indices needs "
                                  "cl_khr_int64_base_atomics, which %s lacks" % (T, ctx.name))
    prog = program.get(ctx, "index_accumulate", T=T, I=_index_type(idx))
    return [_launch(ctx, prog, "put_reduce", total,
                    [_U64(n), _U64(m), _U64(inner), _U32(per_element), _U32(wrap),
                     _U64(0 if fill else 1), _U32(REDUCE_OPS[op]), np.int64(skip), src, idx,
                     dst, fault(ctx).err])]


# a block of the compaction is walked by one work-item; at most this many blocks keep the
# one-work-group scan of their counts short
_MAX_BLOCKS = 16384
_MIN_CHUNK = 32


class Compaction:
    """The kept positions of a uchar mask (nonzero = keep) of ``total`` elements, counted on
    the device: ``count()`` reads the number back (the output size), then ``positions``,
    ``select`` or ``scatter`` write in the mask's order."""

    def __init__(self, ctx, mask):
        self.ctx, self.mask, self.total = ctx, mask, mask.size
        self.chunk = max(_MIN_CHUNK, -(-self.total // _MAX_BLOCKS))
        self.blocks = max(1, -(-self.total // self.chunk))
        self.counts = Tensor(ctx, (self.blocks + 1,), np.int64)
        if self.total == 0:  # (no block to count: the scan's one block must read 0)
            self.counts.zero_()
        else:
            self._walk("count_blocks", "uchar", [mask, self.counts])
        program.Launch(self._program("uchar"), "scan_counts", (64,), (64,),
                       [_U64(self.blocks), self.counts])(ctx.queue)

    def _program(self, S):
        return program.get(self.ctx, "compaction", S=S)

    def count(self):
        """The number of kept elements (waits for the device)."""
        return int(self.counts.view((1,), self.blocks).to_host()[0])

    def _walk(self, name, S, args):
        prog = self._program(S)
        launch = program.Launch(prog, name, (round_up(self.blocks, _wg(self.ctx)),),
                                (_wg(self.ctx),),
                                [_U64(self.total), _U64(self.chunk)] + args)
        launch(self.ctx.queue)

    def positions(self, shape, out):
        """out[r, :] = the coordinates (in ``shape``) of the r-th kept element; out int64."""
        sizes = Tensor(self.ctx, (max(len(shape), 1),), np.int64)
        sizes.to_device(np.asarray(list(shape) or [1], np.int64))
        self._walk("positions", "uchar",
                   [_U64(len(shape)), self.mask, self.counts, sizes, out])

    def select(self, src, dst):
        """dst[r] = src[p] for the r-th kept position p."""
        self._walk("select_values", _bits(src), [self.mask, self.counts, src, dst])

    def scatter(self, src, dst):
        """dst[p] = src[r] for the r-th kept position p."""
        self._walk("scatter_values", _bits(dst), [self.mask, self.counts, src, dst])


def compact(ctx, mask):
    """A ``Compaction`` of the uchar mask (its counts enqueued)."""
    return Compaction(ctx, mask)


def isin(ctx, x, t, out, invert):
    """out[g] = (x[g] in t) != invert: x and t of one type, out uchar."""
    if x.size == 0:
        return []
    prog = program.get(ctx, "membership", T=cl_type(x.dtype))
    return [_launch(ctx, prog, "isin", x.size, [_U64(t.size), np.uint8(invert), x, t, out])]
