"""Launch logic of the Net's index layers (layers/index_map.py) over the ocl device's index
kernels (core/indexing.py): index maps fixed at setup, the fold of an (..., k) index
tensor into one index over k axes, and the contiguous block an elements op runs on.

Every tensor is contiguous and seen as (outer, n, inner) around the indexed axis.
"""
import math

import numpy as np

from ..core.copy import StridedCopy, TransposeCopy, contiguous_strides
from ..tensor import Tensor, ws_view
from ..utils import round_up
from .indexing import REDUCE_OPS, accumulate_type, combine, put, put_reduce, take

__all__ = ["around", "Reversal", "AxisMap", "NDIndex", "ElementsBlock", "pad_map", "take",
           "put", "put_reduce", "accumulate_type", "REDUCE_OPS"]

_I64 = np.dtype(np.int64)


def around(shape, axis):
    """(outer, n, inner): a shape seen around ``axis``."""
    return math.prod(shape[:axis]), shape[axis], math.prod(shape[axis + 1:])


class AxisMap:
    """y[o, j, k] = x[o, map[j], k]: a gather along the middle axis by an index map fixed
    at setup (a reversal, a padding mode's map)."""

    def __init__(self, ctx, outer, n, inner, index_map):
        self.ctx, self.dims = ctx, (outer, n, inner)
        self.idx = Tensor.from_numpy(ctx, np.asarray(index_map, np.int64))
        self.m = self.idx.size

    def launches(self, x, y):
        """The launches writing ``y`` = ``x`` taken along the axis at the map's indices."""
        outer, n, inner = self.dims
        return take(self.ctx, x, self.idx, y, outer, n, self.m, inner)


class Reversal(AxisMap):
    """y = x reversed along the middle axis of (outer, n, inner)."""

    def __init__(self, ctx, outer, n, inner):
        super().__init__(ctx, outer, n, inner, np.arange(n - 1, -1, -1))


def pad_map(n, lo, hi, mode):
    """The source index of each output position of an axis of ``n`` padded by ``lo`` and
    ``hi`` (negative crops) in numpy.pad's ``mode`` (edge, reflect, wrap)."""
    src = np.pad(np.arange(n), (max(lo, 0), max(hi, 0)), mode=mode)
    return src[max(-lo, 0):len(src) - max(-hi, 0)]


class ElementsBlock:
    """Where the index tensor of an elements op is smaller than the data outside the axis
    (ONNX allows it), the op runs on a contiguous copy of the data's block of the index's
    extent (the index kernels read both sides in one (outer, n, inner) layout)."""

    def __init__(self, ctx, data, idx_shape, axis):
        self.shape = tuple(data.shape[axis] if k == axis else s for k, s in enumerate(idx_shape))
        self.needed = self.shape != tuple(data.shape)
        self.bytes = round_up(math.prod(self.shape) * data.dtype.itemsize, 256) if self.needed else 0
        self.dims = around(self.shape, axis)
        strides = contiguous_strides(data.shape)
        own = contiguous_strides(self.shape)
        self.out = StridedCopy(ctx, self.shape, strides, own, data.dtype)
        self.back = StridedCopy(ctx, self.shape, own, strides, data.dtype)
        self.dtype = data.dtype

    def tensor(self, ws):
        """The block's tensor: its place at the start of workspace ``ws``."""
        return ws_view(ws, 0, math.prod(self.shape), self.dtype)


class NDIndex:
    """The rows of an (..., k) index tensor folded into one int64 index over the k indexed
    axes (row-major; each column wrapped by its own axis), with a batch index in front
    for GatherND's ``batch_dims``: lin = (b * n0 + i0) * n1 + i1 ... ."""

    def __init__(self, ctx, idx_shape, sizes, batch):
        self.ctx, self.sizes, self.batch = ctx, list(sizes), batch
        self.k = idx_shape[-1]
        self.rows = math.prod(idx_shape[:-1])
        self.cols = TransposeCopy(ctx, (self.rows, self.k), (1, 0), _I64) if self.k > 1 else None
        self.batch_ids = None
        if batch > 1:
            per = self.rows // batch
            self.batch_ids = Tensor.from_numpy(ctx, np.repeat(np.arange(batch, dtype=np.int64), per))
            self.start = StridedCopy(ctx, (self.rows,), (1,), (1,), _I64)
        self.bytes = round_up(self.rows * 8, 256) + (round_up(self.rows * self.k * 8, 256)
                                                     if self.cols else 0)

    def launches(self, idx, ws):
        """-> (launches, lin): lin the folded index, in the workspace."""
        lin = ws_view(ws, 0, self.rows, _I64)
        cols = idx.view((self.rows * self.k,))
        out = []
        if self.cols is not None:
            t = ws_view(ws, round_up(self.rows * 8, 256), self.rows * self.k, _I64)
            out += self.cols.launches(idx.view((self.rows, self.k)), t.view((self.k, self.rows)))
            cols = t
        first = self.batch_ids is None
        if not first:
            out += self.start.launches(self.batch_ids, lin)
        for j, n in enumerate(self.sizes):
            out += combine(self.ctx, cols.view((self.rows,), j * self.rows), lin, n,
                                    first=first and j == 0)
        return out, lin


