"""Index reads and writes of tensors of any dtype by run-time integer indices (ONNX's
Gather family), on the ocl device's index kernels (core/indexing.py).

    Gather           y = take(x, idx, axis): out shape x[:axis] + idx + x[axis+1:]
    GatherElements   y[.., i, ..] = x[.., idx[.., i, ..], ..] along ``axis`` (out: idx's shape)
    GatherND         y[b, m] = x[b, idx[b, m, 0], ..., idx[b, m, k-1]] (``batch_dims`` b)
    ScatterElements  y = x; y[.., idx[.., i, ..], ..] op= u[.., i, ..] along ``axis``
    ScatterND        y = x; y[idx[m, 0], ..., idx[m, k-1]] op= u[m]

Indices are int32 or int64 (GatherND/ScatterND: int64 as ONNX types them); a negative one
counts from the end of its axis (ONNX's rule). ``reduction`` is "none" (a repeated index
keeps one of its writes: ONNX leaves that undefined), "add", "mul", "max" or "min". An
index still outside its axis reads 0 and writes nothing (the kernels never touch memory
outside a tensor).

Gradients (float32 and float64 data): the gathers' dx is the scatter-add of dy at the same
indices, dx = accumulate * dx + scatter_add(dy); the indices get none; the scatters stop
gradients.
"""
import math

import numpy as np

from ..core import indexing
from ..core.copy import Fill, StridedCopy, TransposeCopy, contiguous_strides
from ..dtypes import cl_type
from ..tensor import Tensor, ws_view
from ..utils import is_int, round_up
from .base import Layer, Setup, TensorSpec, register

__all__ = ["around", "INDEX_TYPES"]

INDEX_TYPES = (np.dtype(np.int32), np.dtype(np.int64))
GRAD_TYPES = (np.dtype(np.float32), np.dtype(np.float64))
REDUCTIONS = ("none",) + tuple(indexing.REDUCE_OPS)
_I64 = np.dtype(np.int64)


def around(shape, axis):
    """(outer, n, inner): a shape seen around ``axis``."""
    return math.prod(shape[:axis]), shape[axis], math.prod(shape[axis + 1:])


class _Indexed(Layer):
    """Shared checks: the axis option, the index dtype, float gradients."""
    HALF_STORAGE = "follows"
    NO_GRAD_INPUTS = (1,)

    def axis_of(self, shape):
        a = self.options["axis"]
        if not is_int(a) or not -max(len(shape), 1) <= a < max(len(shape), 1):
            self.fail("option 'axis' %r is out of range for input %s" % (a, shape))
        return a % max(len(shape), 1)

    def check_indices(self, spec, kinds=INDEX_TYPES):
        if spec.dtype not in kinds:
            self.fail("indices must be %s, got %s" % (" or ".join(k.name for k in kinds),
                                                      spec.dtype.name))

    def grad_flags(self, data):
        """Gradients flow to float32/float64 data; other dtypes have none to give."""
        return self.default_flags(has_backward=data.dtype in GRAD_TYPES)

    def scatter_add(self, dy, idx, dx, accumulate, shape, outer, n, m, inner, per_element):
        """dx (of ``shape``) = accumulate * dx + the sum of dy at idx (float adds)."""
        out = [] if accumulate else Fill(self.ctx, shape, dx.dtype).launches(dx, 0)
        return out + indexing.put_reduce(self.ctx, dy, idx, dx, outer, n, m, inner, "add",
                                         per_element=per_element, wrap=True)


@register("Gather")
class Gather(_Indexed):
    """Slices of ``x`` along ``axis`` picked by run-time indices (ONNX Gather)."""
    OPTIONS = {"axis": 0}

    def build(self, in_specs):
        if len(in_specs) != 2:
            self.fail("expects 2 inputs (data, indices), got %d" % len(in_specs))
        data, idx = in_specs
        self.check_indices(idx)
        axis = self.axis_of(data.shape)
        self.dims = around(data.shape, axis)
        self.m = math.prod(idx.shape)
        out = data.shape[:axis] + idx.shape + data.shape[axis + 1:]
        return Setup([TensorSpec(out, data.dtype)], flags=self.grad_flags(data))

    def forward(self, x, y, params, ws, saved):
        outer, n, inner = self.dims
        return indexing.take(self.ctx, x[0], x[1], y[0], outer, n, self.m, inner, wrap=True)

    def backward(self, x, dx, y, dy, params, dparams, ws, saved, accumulate):
        if dx[0] is None:
            return []
        outer, n, inner = self.dims
        return self.scatter_add(dy[0], x[1], dx[0], accumulate[0], self.in_specs[0].shape,
                                outer, n, self.m, inner, per_element=False)


class _Block:
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
        return ws_view(ws, 0, math.prod(self.shape), self.dtype)


@register("GatherElements")
class GatherElements(_Indexed):
    """y[.., i, ..] = x[.., idx[.., i, ..], ..] along ``axis`` (ONNX GatherElements)."""
    OPTIONS = {"axis": 0}

    def build(self, in_specs):
        if len(in_specs) != 2:
            self.fail("expects 2 inputs (data, indices), got %d" % len(in_specs))
        data, idx = in_specs
        self.check_indices(idx)
        axis = self.axis_of(data.shape)
        if len(idx.shape) != len(data.shape) or any(
                i > d for k, (i, d) in enumerate(zip(idx.shape, data.shape)) if k != axis):
            self.fail("indices %s must have the rank of data %s and no larger size outside "
                      "axis %d" % (idx.shape, data.shape, axis))
        self.block = _Block(self.ctx, data, idx.shape, axis)
        self.m = idx.shape[axis] if idx.shape else 1
        return Setup([TensorSpec(idx.shape, data.dtype)], workspace=self.block.bytes,
                     flags=self.grad_flags(data))

    def forward(self, x, y, params, ws, saved):
        outer, n, inner = self.block.dims
        src, out = x[0], []
        if self.block.needed:
            src = self.block.tensor(ws)
            out = self.block.out.launches(x[0], src)
        return out + indexing.take(self.ctx, src, x[1], y[0], outer, n, self.m, inner,
                                   per_element=True, wrap=True)

    def backward(self, x, dx, y, dy, params, dparams, ws, saved, accumulate):
        if dx[0] is None:
            return []
        outer, n, inner = self.block.dims
        if not self.block.needed:
            return self.scatter_add(dy[0], x[1], dx[0], accumulate[0], self.in_specs[0].shape,
                                    outer, n, self.m, inner, per_element=True)
        block = self.block.tensor(ws)
        out = self.scatter_add(dy[0], x[1], block, False, (block.size,), outer, n, self.m,
                               inner, per_element=True)
        if not accumulate[0]:
            out += Fill(self.ctx, self.in_specs[0].shape, dx[0].dtype).launches(dx[0], 0)
        return out + self.block.back.launches(block, dx[0], beta=1.0)


class _Scatter(Layer):
    """Shared by the scatters: y = x, then the updates written or combined at indices."""
    HALF_STORAGE = "follows"
    HAS_BACKWARD = False
    BACKWARD_READS_INPUTS = False

    def check_reduction(self, dtype):
        r = self.options["reduction"]
        if r not in REDUCTIONS:
            self.fail("option 'reduction' %r is not one of %s" % (r, ", ".join(REDUCTIONS)))
        if r == "none":
            return
        ct = cl_type(dtype)
        if ct != indexing.accumulate_type(dtype):
            self.fail("reduction %r of %s values: combines float32, float64, int32 and int64 "
                      "only" % (r, dtype.name))
        if ct in ("long", "double") and not self.ctx.facts.int64_atomics:
            self.fail("reduction %r of %s values needs cl_khr_int64_base_atomics, which the "
                      "device lacks" % (r, dtype.name))

    def write(self, u, idx, dst, outer, n, m, inner, per_element, wrap):
        r = self.options["reduction"]
        if r == "none":
            return indexing.put(self.ctx, u, idx, dst, outer, n, m, inner,
                                per_element=per_element, wrap=wrap)
        return indexing.put_reduce(self.ctx, u, idx, dst, outer, n, m, inner, r,
                                   per_element=per_element, wrap=wrap)


@register("ScatterElements")
class ScatterElements(_Scatter, _Indexed):
    """y = x with y[.., idx[.., i, ..], ..] op= u[.., i, ..] along ``axis``."""
    OPTIONS = {"axis": 0, "reduction": "none"}

    def build(self, in_specs):
        if len(in_specs) != 3:
            self.fail("expects 3 inputs (data, indices, updates), got %d" % len(in_specs))
        data, idx, upd = in_specs
        self.check_indices(idx)
        self.check_reduction(data.dtype)
        axis = self.axis_of(data.shape)
        if upd.shape != idx.shape or upd.dtype != data.dtype:
            self.fail("updates %s %s must have the indices' shape %s and the data's dtype %s"
                      % (upd.shape, upd.dtype.name, idx.shape, data.dtype.name))
        if len(idx.shape) != len(data.shape) or any(
                i > d for k, (i, d) in enumerate(zip(idx.shape, data.shape)) if k != axis):
            self.fail("indices %s must have the rank of data %s and no larger size outside "
                      "axis %d" % (idx.shape, data.shape, axis))
        self.block = _Block(self.ctx, data, idx.shape, axis)
        self.copy = StridedCopy(self.ctx, (math.prod(data.shape),), (1,), (1,), data.dtype)
        self.m = idx.shape[axis] if idx.shape else 1
        return Setup([TensorSpec(data.shape, data.dtype)], workspace=self.block.bytes)

    def forward(self, x, y, params, ws, saved):
        outer, n, inner = self.block.dims
        out = self.copy.launches(x[0].view((x[0].size,)), y[0].view((y[0].size,)))
        if not self.block.needed:
            return out + self.write(x[2], x[1], y[0], outer, n, self.m, inner, True, True)
        block = self.block.tensor(ws)
        out += self.block.out.launches(y[0], block)
        out += self.write(x[2], x[1], block, outer, n, self.m, inner, True, True)
        return out + self.block.back.launches(block, y[0])


class _ND:
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
            out += indexing.combine(self.ctx, cols.view((self.rows,), j * self.rows), lin, n,
                                    first=first and j == 0)
        return out, lin


def _nd_shapes(layer, data, idx, batch):
    if not idx.shape or idx.shape[-1] < 1:
        layer.fail("indices %s need a last axis of at least 1 (the index of each row)"
                   % (idx.shape,))
    k = idx.shape[-1]
    if not 0 <= batch < len(idx.shape) or batch + k > len(data.shape) or \
            data.shape[:batch] != idx.shape[:batch]:
        layer.fail("indices %s do not index data %s with batch_dims %d"
                   % (idx.shape, data.shape, batch))
    return k


@register("GatherND")
class GatherND(_Indexed):
    """y[b.., m..] = x[b.., idx[b.., m.., :]] (ONNX GatherND, ``batch_dims``)."""
    OPTIONS = {"batch_dims": 0}

    def build(self, in_specs):
        if len(in_specs) != 2:
            self.fail("expects 2 inputs (data, indices), got %d" % len(in_specs))
        data, idx = in_specs
        self.check_indices(idx, (_I64,))
        b = self.options["batch_dims"]
        if not is_int(b):
            self.fail("option 'batch_dims' must be an integer, got %r" % (b,))
        k = _nd_shapes(self, data, idx, b)
        batch = math.prod(data.shape[:b])
        self.nd = _ND(self.ctx, idx.shape, data.shape[b:b + k], batch)
        self.n = batch * math.prod(data.shape[b:b + k])
        self.inner = math.prod(data.shape[b + k:])
        out = idx.shape[:-1] + data.shape[b + k:]
        return Setup([TensorSpec(out, data.dtype)], workspace=self.nd.bytes,
                     flags=self.grad_flags(data))

    def forward(self, x, y, params, ws, saved):
        out, lin = self.nd.launches(x[1], ws)
        return out + indexing.take(self.ctx, x[0], lin, y[0], 1, self.n, self.nd.rows,
                                   self.inner)

    def backward(self, x, dx, y, dy, params, dparams, ws, saved, accumulate):
        if dx[0] is None:
            return []
        out, lin = self.nd.launches(x[1], ws)
        return out + self.scatter_add(dy[0], lin, dx[0], accumulate[0], self.in_specs[0].shape,
                                      1, self.n, self.nd.rows, self.inner, per_element=False)


@register("ScatterND")
class ScatterND(_Scatter):
    """y = x with y[idx[m, :]] op= u[m] (ONNX ScatterND)."""
    OPTIONS = {"reduction": "none"}

    def build(self, in_specs):
        if len(in_specs) != 3:
            self.fail("expects 3 inputs (data, indices, updates), got %d" % len(in_specs))
        data, idx, upd = in_specs
        if idx.dtype != _I64:
            self.fail("indices must be int64, got %s" % idx.dtype.name)
        self.check_reduction(data.dtype)
        k = _nd_shapes(self, data, idx, 0)
        want = idx.shape[:-1] + data.shape[k:]
        if upd.shape != want or upd.dtype != data.dtype:
            self.fail("updates %s %s must be %s %s" % (upd.shape, upd.dtype.name, want,
                                                       data.dtype.name))
        self.nd = _ND(self.ctx, idx.shape, data.shape[:k], 1)
        self.n, self.inner = math.prod(data.shape[:k]), math.prod(data.shape[k:])
        self.copy = StridedCopy(self.ctx, (math.prod(data.shape),), (1,), (1,), data.dtype)
        return Setup([TensorSpec(data.shape, data.dtype)], workspace=self.nd.bytes)

    def forward(self, x, y, params, ws, saved):
        out = self.copy.launches(x[0].view((x[0].size,)), y[0].view((y[0].size,)))
        more, lin = self.nd.launches(x[1], ws)
        return out + more + self.write(x[2], lin, y[0], 1, self.n, self.nd.rows, self.inner,
                                       False, False)
