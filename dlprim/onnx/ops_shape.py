"""Converters of operators that move data without arithmetic: Reshape, Flatten, Transpose,
Concat, Split, Slice, Squeeze, Unsqueeze, Gather (constant indices, or an embedding
lookup: data indices into a constant table), Expand.

Reshape-like outputs keep the batch as ``0`` ("the input's size") where the first axis
is unchanged, so an imported net can still be reshaped to another batch size."""
import numpy as np

from .errors import OnnxImportError
from .registry import Unsupported, converts
from ..utils import ceil_div


def reshape_to(b, node, x, out, output=None, name=None):
    """A Reshape of runtime ``x`` to ``out`` (alias when the shape is unchanged)."""
    shape = b.shape(x)
    out = tuple(int(d) for d in out)
    if out == shape and output is None:
        b.out(node, b.value(x))
        return b.value(x)
    dims = list(out)
    if out and shape and out[0] == shape[0]:
        dims[0] = 0
    return b.add("Reshape", [b.value(x)], out, node if output is None else None, output=output,
                 name=name or node.name, options={"dims": dims})


@converts("Reshape")
def reshape(b, node):
    x = node.inputs[0]
    shape = b.shape(x)
    target = [int(d) for d in b.const(node.inputs[1], "shape")] if node.input(1) \
        else list(node.attr("shape"))
    if node.attr("allowzero", 0) and 0 in target:
        raise Unsupported("allowzero with a 0 in the shape (an empty tensor)")
    out = [shape[i] if d == 0 else d for i, d in enumerate(target)]
    if -1 in out:
        known = int(np.prod([d for d in out if d != -1]))
        out[out.index(-1)] = int(np.prod(shape)) // known if known else 0
    if int(np.prod(out)) != int(np.prod(shape)):
        raise Unsupported("shape %s does not hold the input %s" % (target, shape))
    reshape_to(b, node, x, out)


@converts("Flatten")
def flatten(b, node):
    x = node.inputs[0]
    shape = b.shape(x)
    rank, axis = len(shape), int(node.attr("axis", 1))
    if not -rank <= axis <= rank:
        raise OnnxImportError("Flatten '%s': attribute axis=%d is outside [-%d, %d] for an "
                              "input of rank %d" % (node.name, axis, rank, rank, rank))
    axis = axis + rank if axis < 0 else axis  # ONNX: a negative axis counts from the back
    out = (int(np.prod(shape[:axis])), int(np.prod(shape[axis:])))
    if axis == 1 and len(shape) > 2:
        b.add("Flatten", [b.value(x)], out, node)
    else:
        reshape_to(b, node, x, out)


@converts("Transpose")
def transpose(b, node):
    x = node.inputs[0]
    shape = b.shape(x)
    perm = [int(p) for p in node.attr("perm", list(range(len(shape)))[::-1])]
    if perm == list(range(len(shape))):
        b.out(node, b.value(x))
        return
    b.add("Transpose", [b.value(x)], [shape[p] for p in perm], node, options={"dims": perm})


@converts("Expand")
def expand(b, node):
    """x broadcast to a constant shape (numpy's rules, either side may stretch): an
    Elementwise sum with zeros of the result's shape, whose broadcasting backward sums
    x's gradient over the stretched axes. What a model expands at run time is a
    parameter (a class token over the batch); the rest is folded at import."""
    x = node.inputs[0]
    xs = b.shape(x)
    want = [int(n) for n in b.const(node.inputs[1], "shape").reshape(-1)]
    n = max(len(xs), len(want))
    xs_, want_ = [1] * (n - len(xs)) + list(xs), [1] * (n - len(want)) + want
    out = []
    for a, w in zip(xs_, want_):
        if a != w and 1 not in (a, w):
            raise Unsupported("shape %s does not expand to %s" % (list(xs), want))
        out.append(max(a, w))
    if out == list(xs):
        b.out(node, b.value(x))
        return
    zeros = b.constant(np.zeros(out, np.float32), node.name + ".zeros")
    b.add("Elementwise", [b.value(x), b.value(zeros)], out, node,
          options={"operation": "sum", "coef1": 1.0, "coef2": 0.0})


@converts("Concat")
def concat(b, node):
    ins = [n for n in node.inputs if n]
    shapes = [b.shape(n) for n in ins]
    axis = int(node.attr("axis")) % len(shapes[0])
    if len(ins) == 1:
        b.out(node, b.value(ins[0]))
        return
    out = list(shapes[0])
    out[axis] = sum(s[axis] for s in shapes)
    b.add("Concat", [b.value(n) for n in ins], out, node, options={"dim": axis})


def _slice(b, node, x, axis, begin, end, output=None):
    """Slice [begin, end) of ``axis`` from dlprim tensor ``x`` into ``output`` (default: the
    node's output); returns the new tensor."""
    shape = list(b.shapes[x])
    shape[axis] = end - begin
    return b.add("Slice", [x], shape, node if output is None else None, name=node.name,
                 output=output, options={"dim": axis, "begin": int(begin), "end": int(end)})


@converts("Split")
def split(b, node):
    x = node.inputs[0]
    shape = b.shape(x)
    axis = int(node.attr("axis", 0)) % len(shape)
    parts = node.attr("split")
    if node.input(1):
        parts = b.const(node.inputs[1], "split")
    n = len(node.outputs)
    if parts is None:
        size = shape[axis]
        chunk = ceil_div(size, node.attr("num_outputs", n))
        parts = [min(chunk, size - k * chunk) for k in range(n)]
    parts = [int(p) for p in np.asarray(parts).reshape(-1)]
    if sum(parts) != shape[axis] or min(parts) < 1:
        raise Unsupported("split %s of an axis of size %d" % (parts, shape[axis]))
    begin = 0
    for out, size in zip(node.outputs, parts):
        if out:
            if size == shape[axis]:
                b.alias[out] = b.value(x)
            else:
                t = _slice(b, node, b.value(x), axis, begin, begin + size, output=out)
                b.alias[out] = t
        begin += size


@converts("Slice")
def slice_(b, node):
    x = node.inputs[0]
    shape = b.shape(x)
    if b.opset < 10:
        starts, ends = node.attr("starts"), node.attr("ends")
        axes, steps = node.attr("axes"), None
    else:
        starts, ends = b.const(node.inputs[1], "starts"), b.const(node.inputs[2], "ends")
        axes = b.const(node.inputs[3], "axes") if node.input(3) else None
        steps = b.const(node.inputs[4], "steps") if node.input(4) else None
    starts = [int(s) for s in np.asarray(starts).reshape(-1)]
    ends = [int(e) for e in np.asarray(ends).reshape(-1)]
    axes = list(range(len(starts))) if axes is None else [int(a) for a in np.asarray(axes).reshape(-1)]
    steps = [1] * len(starts) if steps is None else [int(s) for s in np.asarray(steps).reshape(-1)]
    cuts = []
    for a, s, e, st in zip(axes, starts, ends, steps):
        a %= len(shape)
        if st != 1:
            raise Unsupported("step %d on axis %d (only step 1)" % (st, a))
        dim = shape[a]
        s = min(max(s + dim if s < 0 else s, 0), dim)
        e = min(max(e + dim if e < 0 else e, 0), dim)
        if e <= s:
            raise Unsupported("empty range [%d:%d] on axis %d" % (s, e, a))
        if (s, e) != (0, dim):
            cuts.append((a, s, e))
    t = b.value(x)
    for k, (a, s, e) in enumerate(cuts):
        last = k == len(cuts) - 1
        t = _slice(b, node, t, a, s, e, output=None if last else b.fresh(node.outputs[0] + "/%d" % k))
    b.out(node, t)


def _axes_of(b, node):
    if b.opset >= 13:
        return b.const(node.inputs[1], "axes") if node.input(1) else None
    return node.attr("axes")


@converts("Squeeze")
def squeeze(b, node):
    x = node.inputs[0]
    shape = b.shape(x)
    axes = _axes_of(b, node)
    axes = [i for i, d in enumerate(shape) if d == 1] if axes is None else \
        sorted(int(a) % len(shape) for a in np.asarray(axes).reshape(-1))
    if any(shape[a] != 1 for a in axes):
        raise Unsupported("axes %s of shape %s are not all of size 1" % (axes, shape))
    out = [d for i, d in enumerate(shape) if i not in axes]
    if not axes:
        b.out(node, b.value(x))
        return
    b.add("Squeeze", [b.value(x)], out or [1], node, options={"dims": axes})


@converts("Unsqueeze")
def unsqueeze(b, node):
    x = node.inputs[0]
    shape = list(b.shape(x))
    axes = _axes_of(b, node)
    rank = len(shape) + len(np.asarray(axes).reshape(-1))
    for a in sorted(int(a) % rank for a in np.asarray(axes).reshape(-1)):
        shape.insert(a, 1)
    reshape_to(b, node, x, shape)


@converts("Gather")
def gather(b, node):
    """Constant indices along one axis: a scalar (then the axis goes) or a range; or rows
    of a constant table picked by data indices (an embedding lookup)."""
    x = node.inputs[0]
    if b.is_const(x) and not b.is_const(node.inputs[1]):
        _embedding(b, node)
        return
    shape = b.shape(x)
    axis = int(node.attr("axis", 0)) % len(shape)
    idx = np.asarray(b.const(node.inputs[1], "indices")).astype(np.int64)
    flat = [int(i) % shape[axis] for i in idx.reshape(-1)]
    if idx.ndim > 1 or not flat or flat != list(range(flat[0], flat[0] + len(flat))):
        raise Unsupported("indices %s: only one index or an ascending range" % idx.tolist())
    if idx.ndim == 1 and len(flat) == shape[axis]:
        b.out(node, b.value(x))
        return
    if idx.ndim == 1:
        _slice(b, node, b.value(x), axis, flat[0], flat[0] + len(flat))
        return
    t = _slice(b, node, b.value(x), axis, flat[0], flat[0] + 1,
               output=b.fresh(node.outputs[0] + "/slice"))
    b.alias[t] = t
    reshape_to(b, node, t, [d for i, d in enumerate(shape) if i != axis],
               name=node.name + "/drop")


def _embedding(b, node):
    table = np.asarray(b.const(node.inputs[0], "table"))
    if table.ndim != 2 or int(node.attr("axis", 0)) % 2 != 0:
        raise Unsupported("data indices into a constant of shape %s along axis %d: only rows "
                          "of a 2-D table (an embedding)" % (table.shape, node.attr("axis", 0)))
    idx_shape = tuple(b.shape(node.inputs[1]))
    b.add("Embedding", [b.value(node.inputs[1])], idx_shape + (table.shape[1],), node,
          params=[b.param(node.inputs[0], table)],
          options={"num_embeddings": int(table.shape[0]), "embedding_dim": int(table.shape[1])})
