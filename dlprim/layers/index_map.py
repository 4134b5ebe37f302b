"""Index reads and writes of tensors of any dtype by run-time integer indices (ONNX's
Gather family), on the ocl device's index kernels (core/index_map.py over core/indexing.py).

    Gather           y = take(x, idx, axis): out shape x[:axis] + idx + x[axis+1:]
    GatherElements   y[.., i, ..] = x[.., idx[.., i, ..], ..] along ``axis`` (out: idx's shape)
    GatherND         y[b, m] = x[b, idx[b, m, 0], ..., idx[b, m, k-1]] (``batch_dims`` b)
    ScatterElements  y = x; y[.., idx[.., i, ..], ..] op= u[.., i, ..] along ``axis``
    ScatterND        y = x; y[idx[m, 0], ..., idx[m, k-1]] op= u[m]
    Pad              x padded or cropped along every axis, each axis a gather by an index
                     map (numpy.pad's modes), or a fill and a copy (constant mode)

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

from ..core.index_map import (REDUCE_OPS, AxisMap, ElementsBlock, NDIndex, Reversal,  # noqa: F401
                               accumulate_type, around, pad_map, put, put_reduce, take)
from ..core.copy import Fill, StridedCopy, contiguous_strides
from ..dtypes import cl_type
from ..tensor import ws_view
from ..utils import is_int, round_up
from .base import Layer, Setup, TensorSpec, register

__all__ = ["INDEX_TYPES", "Reversal", "around"]

INDEX_TYPES = (np.dtype(np.int32), np.dtype(np.int64))
GRAD_TYPES = (np.dtype(np.float32), np.dtype(np.float64))
REDUCTIONS = ("none",) + tuple(REDUCE_OPS)
_I64 = np.dtype(np.int64)


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

    def operands(self, in_specs, names, kinds=INDEX_TYPES):
        """The input specs, checked: one per name of ``names`` (data, indices[, updates]),
        the indices (the second) of ``kinds``."""
        if len(in_specs) != len(names):
            self.fail("expects %d inputs (%s), got %d" % (len(names), ", ".join(names),
                                                          len(in_specs)))
        self.check_indices(in_specs[1], kinds)
        return in_specs

    def check_elements(self, idx, data, axis):
        """Indices of GatherElements/ScatterElements: data's rank, no larger outside axis."""
        if len(idx.shape) != len(data.shape) or any(
                i > d for k, (i, d) in enumerate(zip(idx.shape, data.shape)) if k != axis):
            self.fail("indices %s must have the rank of data %s and no larger size outside "
                      "axis %d" % (idx.shape, data.shape, axis))

    def grad_flags(self, data):
        """Gradients flow to float32/float64 data; other dtypes have none to give."""
        return self.default_flags(has_backward=data.dtype in GRAD_TYPES)

    def scatter_add(self, dy, idx, dx, accumulate, shape, outer, n, m, inner, per_element):
        """dx (of ``shape``) = accumulate * dx + the sum of dy at idx (float adds)."""
        out = [] if accumulate else Fill(self.ctx, shape, dx.dtype).launches(dx, 0)
        return out + put_reduce(self.ctx, dy, idx, dx, outer, n, m, inner, "add",
                                         per_element=per_element, wrap=True)


@register("Gather")
class Gather(_Indexed):
    """Slices of ``x`` along ``axis`` picked by run-time indices (ONNX Gather)."""
    OPTIONS = {"axis": 0}

    def build(self, in_specs):
        data, idx = self.operands(in_specs, ("data", "indices"))
        axis = self.axis_of(data.shape)
        self.dims = around(data.shape, axis)
        self.m = math.prod(idx.shape)
        out = data.shape[:axis] + idx.shape + data.shape[axis + 1:]
        return Setup([TensorSpec(out, data.dtype)], flags=self.grad_flags(data))

    def forward(self, x, y, params, ws, saved):
        outer, n, inner = self.dims
        return take(self.ctx, x[0], x[1], y[0], outer, n, self.m, inner, wrap=True)

    def backward(self, x, dx, y, dy, params, dparams, ws, saved, accumulate):
        if dx[0] is None:
            return []
        outer, n, inner = self.dims
        return self.scatter_add(dy[0], x[1], dx[0], accumulate[0], self.in_specs[0].shape,
                                outer, n, self.m, inner, per_element=False)


@register("GatherElements")
class GatherElements(_Indexed):
    """y[.., i, ..] = x[.., idx[.., i, ..], ..] along ``axis`` (ONNX GatherElements)."""
    OPTIONS = {"axis": 0}

    def build(self, in_specs):
        data, idx = self.operands(in_specs, ("data", "indices"))
        axis = self.axis_of(data.shape)
        self.check_elements(idx, data, axis)
        self.block = ElementsBlock(self.ctx, data, idx.shape, axis)
        self.m = idx.shape[axis] if idx.shape else 1
        return Setup([TensorSpec(idx.shape, data.dtype)], workspace=self.block.bytes,
                     flags=self.grad_flags(data))

    def forward(self, x, y, params, ws, saved):
        outer, n, inner = self.block.dims
        src, out = x[0], []
        if self.block.needed:
            src = self.block.tensor(ws)
            out = self.block.out.launches(x[0], src)
        return out + take(self.ctx, src, x[1], y[0], outer, n, self.m, inner,
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
        if ct != accumulate_type(dtype):
            self.fail("reduction %r of %s values: combines float32, float64, int32 and int64 "
                      "only" % (r, dtype.name))
        if ct in ("long", "double") and not self.ctx.facts.int64_atomics:
            self.fail("reduction %r of %s values needs cl_khr_int64_base_atomics, which the "
                      "device lacks" % (r, dtype.name))

    def write(self, u, idx, dst, outer, n, m, inner, per_element, wrap):
        r = self.options["reduction"]
        if r == "none":
            return put(self.ctx, u, idx, dst, outer, n, m, inner,
                                per_element=per_element, wrap=wrap)
        return put_reduce(self.ctx, u, idx, dst, outer, n, m, inner, r,
                                   per_element=per_element, wrap=wrap)


@register("ScatterElements")
class ScatterElements(_Scatter, _Indexed):
    """y = x with y[.., idx[.., i, ..], ..] op= u[.., i, ..] along ``axis``."""
    OPTIONS = {"axis": 0, "reduction": "none"}

    def build(self, in_specs):
        data, idx, upd = self.operands(in_specs, ("data", "indices", "updates"))
        self.check_reduction(data.dtype)
        axis = self.axis_of(data.shape)
        if upd.shape != idx.shape or upd.dtype != data.dtype:
            self.fail("updates %s %s must have the indices' shape %s and the data's dtype %s"
                      % (upd.shape, upd.dtype.name, idx.shape, data.dtype.name))
        self.check_elements(idx, data, axis)
        self.block = ElementsBlock(self.ctx, data, idx.shape, axis)
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
        data, idx = self.operands(in_specs, ("data", "indices"), (_I64,))
        b = self.options["batch_dims"]
        if not is_int(b):
            self.fail("option 'batch_dims' must be an integer, got %r" % (b,))
        k = _nd_shapes(self, data, idx, b)
        batch = math.prod(data.shape[:b])
        self.nd = NDIndex(self.ctx, idx.shape, data.shape[b:b + k], batch)
        self.n = batch * math.prod(data.shape[b:b + k])
        self.inner = math.prod(data.shape[b + k:])
        out = idx.shape[:-1] + data.shape[b + k:]
        return Setup([TensorSpec(out, data.dtype)], workspace=self.nd.bytes,
                     flags=self.grad_flags(data))

    def forward(self, x, y, params, ws, saved):
        out, lin = self.nd.launches(x[1], ws)
        return out + take(self.ctx, x[0], lin, y[0], 1, self.n, self.nd.rows,
                                   self.inner)

    def backward(self, x, dx, y, dy, params, dparams, ws, saved, accumulate):
        if dx[0] is None:
            return []
        out, lin = self.nd.launches(x[1], ws)
        return out + self.scatter_add(dy[0], lin, dx[0], accumulate[0], self.in_specs[0].shape,
                                      1, self.n, self.nd.rows, self.inner, per_element=False)


@register("ScatterND")
class ScatterND(_Scatter, _Indexed):
    """y = x with y[idx[m, :]] op= u[m] (ONNX ScatterND)."""
    OPTIONS = {"reduction": "none"}

    def build(self, in_specs):
        data, idx, upd = self.operands(in_specs, ("data", "indices", "updates"), (_I64,))
        self.check_reduction(data.dtype)
        k = _nd_shapes(self, data, idx, 0)
        want = idx.shape[:-1] + data.shape[k:]
        if upd.shape != want or upd.dtype != data.dtype:
            self.fail("updates %s %s must be %s %s" % (upd.shape, upd.dtype.name, want,
                                                       data.dtype.name))
        self.nd = NDIndex(self.ctx, idx.shape, data.shape[:k], 1)
        self.n, self.inner = math.prod(data.shape[:k]), math.prod(data.shape[k:])
        self.copy = StridedCopy(self.ctx, (math.prod(data.shape),), (1,), (1,), data.dtype)
        return Setup([TensorSpec(data.shape, data.dtype)], workspace=self.nd.bytes)

    def forward(self, x, y, params, ws, saved):
        out = self.copy.launches(x[0].view((x[0].size,)), y[0].view((y[0].size,)))
        more, lin = self.nd.launches(x[1], ws)
        return out + more + self.write(x[2], lin, y[0], 1, self.n, self.nd.rows, self.inner,
                                       False, False)


PAD_MODES = ("constant", "reflect", "edge", "wrap")


def _int_list(layer, key):
    v = layer.options[key]
    if not isinstance(v, (list, tuple)) or not all(map(is_int, v)):
        layer.fail("option %r must be a list of integers, got %r" % (key, v))
    return [int(n) for n in v]


def _at(t, element):
    """``t`` seen from ``element`` elements further in (for strided copies)."""
    return t.view((max(t.size - element, 0),), offset=element)


@register("Pad")
class Pad(Layer):
    """x padded (or cropped, by negative pads) along every axis, as ONNX Pad: constant
    mode is a fill and a copy of the kept block; reflect, edge and wrap gather each padded
    axis by numpy.pad's index map of that axis."""
    OPTIONS = {"pads": None, "mode": "constant", "value": 0.0}
    HALF_STORAGE = "follows"
    BACKWARD_READS_INPUTS = False

    def build(self, in_specs):
        spec = self.single_input(in_specs, float32=False)
        r = len(spec.shape)
        pads, mode = _int_list(self, "pads"), self.options["mode"]
        if mode not in PAD_MODES:
            self.fail("option 'mode' %r is not one of %s" % (mode, ", ".join(PAD_MODES)))
        if len(pads) != 2 * r:
            self.fail("option 'pads' %s needs 2 x %d entries for input %s" % (pads, r, spec.shape))
        self.lo, self.hi = pads[:r], pads[r:]
        self.out = tuple(n + a + b for n, a, b in zip(spec.shape, self.lo, self.hi))
        if any(n < 0 for n in self.out):
            self.fail("pads %s crop more than input %s holds" % (pads, spec.shape))
        self.constant = mode == "constant"
        flags = self.default_flags(has_backward=spec.dtype in GRAD_TYPES and self.constant)
        if self.constant:
            keep, xs, ys, _, _ = self._block()
            self.fill = Fill(self.ctx, self.out, spec.dtype)
            self.copy_in = StridedCopy(self.ctx, keep, xs, ys, spec.dtype)
            self.copy_back = StridedCopy(self.ctx, keep, ys, xs, spec.dtype)
            self.zero = Fill(self.ctx, spec.shape, spec.dtype)
            return Setup([TensorSpec(self.out, spec.dtype)], flags=flags)
        self.steps, shape = [], list(spec.shape)
        for axis, (n, a, b) in enumerate(zip(spec.shape, self.lo, self.hi)):
            if not (a or b):
                continue
            if n == 0:
                self.fail("mode %r cannot pad the empty axis %d of input %s" % (mode, axis, spec.shape))
            if mode == "reflect" and max(a, b) > n - 1:
                self.fail("mode 'reflect': pads %s must be below the axes' sizes %s"
                          % (pads, spec.shape))
            src = pad_map(n, a, b, mode)
            outer, _, inner = around(shape, axis)
            shape[axis] = len(src)
            self.steps.append(AxisMap(self.ctx, outer, n, inner, src))
        biggest = max([math.prod(spec.shape)] + [s.dims[0] * s.m * s.dims[2] for s in self.steps])
        self.step_bytes = round_up(biggest * spec.dtype.itemsize, 256)
        self.copy = StridedCopy(self.ctx, (math.prod(spec.shape),), (1,), (1,), spec.dtype)
        return Setup([TensorSpec(self.out, spec.dtype)], workspace=2 * self.step_bytes, flags=flags)

    def _block(self):
        """(shape, x's strides, y's strides, element offset in x, element offset in y) of
        the block of x that y keeps."""
        shape = self.in_specs[0].shape
        keep = [n - max(-a, 0) - max(-b, 0) for n, a, b in zip(shape, self.lo, self.hi)]
        xs, ys = contiguous_strides(shape), contiguous_strides(self.out)
        x0 = sum(max(-a, 0) * s for a, s in zip(self.lo, xs))
        y0 = sum(max(a, 0) * s for a, s in zip(self.lo, ys))
        return keep, xs, ys, x0, y0

    def forward(self, x, y, params, ws, saved):
        dtype = x[0].dtype
        if self.constant:
            _, _, _, x0, y0 = self._block()
            return self.fill.launches(y[0], self.options["value"]) + \
                self.copy_in.launches(_at(x[0], x0), _at(y[0], y0))
        if not self.steps:
            return self.copy.launches(x[0].view((x[0].size,)), y[0].view((y[0].size,)))
        bufs = [ws_view(ws, i * self.step_bytes, self.step_bytes // dtype.itemsize, dtype)
                for i in range(2)]
        out, src = [], x[0]
        for i, step in enumerate(self.steps):
            dst = y[0] if i == len(self.steps) - 1 else bufs[i % 2]
            out += step.launches(src, dst)
            src = dst
        return out

    def backward(self, x, dx, y, dy, params, dparams, ws, saved, accumulate):
        if dx[0] is None:
            return []
        keep, _, _, x0, y0 = self._block()
        cropped = keep != list(self.in_specs[0].shape)
        out = self.zero.launches(dx[0], 0) if cropped and not accumulate[0] else []
        beta = 1.0 if cropped else float(accumulate[0])
        return out + self.copy_back.launches(_at(dy[0], y0), _at(dx[0], x0), beta=beta)
