"""Sorting along one axis (``kernels/sort.cl``): values and their original indices, stable,
ascending or descending, NaN as the largest value (PyTorch's order).

A bitonic network (Batcher, AFIPS 1968) over each row padded to a power of two P. Rows
that fit in local memory (P <= LOCAL_N, a few thousand elements) are sorted in one launch
by one work-group each; longer rows run the network's first stages in local memory
blocks, and then, for each later stage, its long-distance steps one launch each in global
memory and its last steps (distances below LOCAL_N) in local memory again. That is
O(log^2(P / LOCAL_N)) launches: 93 for a row of 2^24 (LOCAL_N = 4096).

The keys travel with their indices, which break ties: every key is then unique, so the
network's order is the stable one and no second pass is needed.

CPU drivers run a work-group's items as a loop and pay for every barrier: there each row
is one work-item's bottom-up merge sort instead (``serial``; a 64 x 4096 float sort took
570 ms through the network on Intel's CPU runtime, on a loaded 2-core machine), over keys
mapped to unsigned integers of the same order so that a comparison is one compare.

A 64 x 4096 float32 sort: 0.46 ms on an H200 (NVIDIA's OpenCL), 84 ms on Intel's CPU
runtime on a 2-core machine running 14 other processes (tests/test_torch_sort.py times it).
"""
import numpy as np

from ..dtypes import as_dtype, cl_type
from ..kernels import program
from ..tensor import Tensor
from .pointwise import memo

__all__ = ["Sort", "sort_launches", "sorter_for", "MAX_ROW"]

MAX_ROW = 2 ** 31 - 1  # indices travel as int32 in the network
_LOCAL_CAP = 4096      # elements per work-group: more leaves too few groups to fill a GPU
_WG_CAP = 256


def key_type(dtype):
    """The type keys compare in: float for 16-bit floats, the storage type otherwise."""
    ct = cl_type(dtype)
    return "float" if ct in ("half", "bfloat16") else ct


def _local_n(facts, key_bytes):
    """The largest power of two of (key, int32 index) pairs that fit in local memory."""
    fit = max(2, facts.local_mem // (key_bytes + 4))
    return min(_LOCAL_CAP, 1 << (fit.bit_length() - 1))


class Sort:
    """A stable sort of one dtype along an axis: ``launches(x, y, yi, outer, n, inner,
    descending)`` over contiguous (outer, n, inner) tensors; yi gets int64 indices."""

    def __init__(self, ctx, dtype):
        self.ctx, self.dtype = ctx, as_dtype(dtype)
        self.key = key_type(self.dtype)
        self.key_dtype = np.dtype(np.float32) if self.key == "float" else self.dtype
        self.local_n = _local_n(ctx.facts, self.key_dtype.itemsize)
        self.program = program.get(ctx, "sort", T=cl_type(self.dtype), K=self.key,
                                   LOCAL_N=self.local_n)
        self._wg = min(_WG_CAP, ctx.facts.max_work_group)
        self.serial = ctx.facts.is_cpu  # the merge sort per row (tests turn it off)

    def launches(self, x, y, yi, outer, n, inner, descending=False):
        """Launches sorting x's rows of n (outer x n x inner) into values y and indices yi."""
        rows = outer * inner
        if rows == 0 or n == 0:
            return []
        if n > MAX_ROW:
            raise ValueError("sort: a row of %d elements is longer than %d" % (n, MAX_ROW))
        u, i32 = np.uint64, np.int32
        if self.serial:
            wide = self.key in ("long", "double")
            okey = np.int64 if wide else np.int32  # (bytes for the kernel's unsigned keys)
            ws = [Tensor(self.ctx, (rows * n,), t) for t in (okey, np.int32, okey, np.int32)]
            return [program.Launch(self.program, "sort_rows", (rows,), (1,),
                                   [u(rows), u(n), u(inner), i32(bool(descending)), x, y, yi]
                                   + ws)]
        P = program.pow2_at_least(n)
        keys = Tensor(self.ctx, (rows * P,), self.key_dtype)
        idx = Tensor(self.ctx, (rows * P,), np.int32)
        wg = min(self._wg, P)
        out = [program.Launch(self.program, "sort_fill", (_up(P, wg), rows), (wg, 1),
                              [u(n), u(inner), u(P), x, keys, idx])]
        out += self._network(keys, idx, rows, n, P, descending)
        out.append(program.Launch(self.program, "sort_unfill", (_up(n, wg), rows), (wg, 1),
                                  [u(n), u(inner), u(P), keys, idx, y, yi]))
        return out

    def _network(self, keys, idx, rows, n, P, descending):
        """The bitonic network's launches over the work rows (GPUs)."""
        u, i32, u32 = np.uint64, np.int32, np.uint32
        out = []
        B = min(P, self.local_n)
        items = max(1, min(self._wg, B // 2))
        blocks = rows * (P // B)
        common = [u(P), i32(n), i32(bool(descending))]

        def block(k_lo, k_hi):
            return program.Launch(self.program, "sort_block", (blocks * items,), (items,),
                                  common + [u32(B), u32(k_lo), u32(k_hi), keys, idx])
        out.append(block(2, B))
        pairs = rows * P // 2
        k = 2 * B
        while k <= P:
            j = k // 2
            while j >= B:
                out.append(program.Launch(self.program, "sort_step", (_up(pairs, self._wg),),
                                          (self._wg,), common + [u32(k), u32(j), u(pairs),
                                                                 keys, idx]))
                j //= 2
            out.append(block(k, k))
            k *= 2
        return out


    def unique_launches(self, v, perm, cum, out, inverse, starts, N):
        """Unique's scatter over N ordered values ``v`` (from positions ``perm``, group
        starts counted inclusively in ``cum``): the groups' values into ``out``, each
        element's group into ``inverse``, each group's first position into ``starts``."""
        if N == 0:
            return []
        return [program.Launch(self.program, "unique_scatter", (_up(N, self._wg),),
                               (self._wg,), [np.uint64(N), v, perm, cum, out, inverse, starts])]

    def counts_launches(self, starts, counts, U, N):
        """counts[g]: the size of group g of U, from the groups' starts in N elements."""
        if U == 0:
            return []
        return [program.Launch(self.program, "unique_counts", (_up(U, self._wg),), (self._wg,),
                               [np.uint64(U), np.uint64(N), starts, counts])]

    def search_launches(self, seq, sorter, values, out, L, m, shared, right):
        """searchsorted: out (int64, values' shape) = for each value, how many elements of
        its row of ``seq`` (rows of L; one row for every value when ``shared``, else a row
        per m values) go before it; ``sorter``: each row's order, or None."""
        total = values.size
        if total == 0:
            return []
        use = sorter is not None
        sorter = sorter if use else out  # not read
        u, i32 = np.uint64, np.int32
        return [program.Launch(self.program, "search_sorted", (_up(total, self._wg),),
                               (self._wg,), [u(total), u(m), u(L), i32(shared), i32(right),
                                             i32(use), seq, sorter, values, out])]


def sorter_for(ctx, dtype):
    """The Sort of ``dtype`` on ctx (made once): its program also has unique's and
    searchsorted's kernels."""
    return memo(ctx, ("sort", as_dtype(dtype)), lambda: Sort(ctx, dtype))


def _up(n, m):
    return -(-n // m) * m


def sort_launches(ctx, x, y, yi, outer, n, inner, descending=False):
    """The launches sorting contiguous (outer, n, inner) ``x`` into ``y`` (values) and
    ``yi`` (int64 indices) along the middle axis (the Sort memoized per dtype)."""
    return sorter_for(ctx, x.dtype).launches(x, y, yi, outer, n, inner, descending)
