"""Converters of operators that move data without arithmetic: Reshape, Flatten, Transpose,
Concat, Split, Slice, Squeeze, Unsqueeze, Expand, Tile, and the index operators (Gather,
GatherElements, GatherND, ScatterElements, ScatterND, CumSum, TopK, ArgMax, ArgMin,
Trilu, OneHot, Range, EyeLike) on tensors of any dtype, their indices computed at run time or
known at import (a node whose inputs are all known is folded by the importer first).

What the net cannot plan is refused naming the node: an output whose shape depends on
the values (NonZero, a Range or Expand whose bounds or shape are computed at run time).

Reshape-like outputs keep the batch as ``0`` ("the input's size") where the first axis
is unchanged, so an imported net can still be reshaped to another batch size."""
import math

import numpy as np

from .errors import OnnxImportError
from .model_reader import Node
from .registry import CONVERTERS, Unsupported, converts
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
                 name=name or node.name, options={"dims": dims}, dtype=b.dtype(x))


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
    b.add("Transpose", [b.value(x)], [shape[p] for p in perm], node, options={"dims": perm},
          dtype=b.dtype(x))


@converts("Expand")
def expand(b, node):
    """x broadcast with a constant shape (numpy's rules, either side may stretch); its
    gradient sums over the stretched axes."""
    x = node.inputs[0]
    xs = b.shape(x)
    want = [int(n) for n in _known(b, node, 1, "shape").reshape(-1)]
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
    _add(b, "Expand", [b.value(x)], out, node, _dtype(b, x), options={"shape": want})


@converts("Tile")
def tile(b, node):
    x = node.inputs[0]
    xs = b.shape(x)
    reps = [int(r) for r in _known(b, node, 1, "repeats").reshape(-1)]
    if len(reps) != len(xs) or min(reps, default=1) < 0:
        raise Unsupported("repeats %s for an input of shape %s" % (reps, list(xs)))
    _add(b, "Tile", [b.value(x)], [r * n for r, n in zip(reps, xs)], node, _dtype(b, x),
         options={"repeats": reps})


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
    b.add("Concat", [b.value(n) for n in ins], out, node, options={"dim": axis},
          dtype=b.dtype(ins[0]))


def _slice(b, node, x, axis, begin, end, output=None):
    """Slice [begin, end) of ``axis`` from dlprim tensor ``x`` into ``output`` (default: the
    node's output); returns the new tensor."""
    shape = list(b.shapes[x])
    shape[axis] = end - begin
    return b.add("Slice", [x], shape, node if output is None else None, name=node.name,
                 output=output, options={"dim": axis, "begin": int(begin), "end": int(end)},
                 dtype=_dtype_of(b, x))


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
    b.add("Squeeze", [b.value(x)], out or [1], node, options={"dims": axes}, dtype=b.dtype(x))


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
    """Constant indices that pick one index or an ascending range become a Slice (and a
    Reshape dropping the axis for a scalar); rows of a constant float table picked by
    run-time indices, an Embedding; anything else a Gather of run-time indices (a
    negative one counts from the end of the axis)."""
    x, idx = node.inputs[0], node.inputs[1]
    shape = b.shape(x)
    axis = int(node.attr("axis", 0)) % len(shape)
    if b.is_const(idx) and _gather_as_slice(b, node, x, shape, axis):
        return
    table = b.consts.get(x)
    if table is not None and not b.is_const(idx) and np.asarray(table).dtype.kind == "f" \
            and np.asarray(table).ndim == 2 and axis == 0:
        _embedding(b, node)
        return
    out = shape[:axis] + tuple(b.shape(idx)) + shape[axis + 1:]
    _add(b, "Gather", [b.value(x), b.value(idx)], out, node, _dtype(b, x),
         options={"axis": axis})


def _gather_as_slice(b, node, x, shape, axis):
    idx = np.asarray(b.consts[node.inputs[1]]).astype(np.int64)
    flat = [int(i) % shape[axis] for i in idx.reshape(-1)]
    if not flat:
        return False
    out = list(shape[:axis]) + list(idx.shape) + list(shape[axis + 1:])
    if flat == list(range(flat[0], flat[0] + len(flat))):  # ascending: a Slice
        if idx.ndim == 1 and len(flat) == shape[axis]:
            b.out(node, b.value(x))
        elif idx.ndim == 1:
            _slice(b, node, b.value(x), axis, flat[0], flat[0] + len(flat))
        else:  # a scalar (the axis dropped) or position ids (1, S): reshaped
            t = _slice(b, node, b.value(x), axis, flat[0], flat[0] + len(flat),
                       output=b.fresh(node.outputs[0] + "/slice"))
            b.alias[t] = t
            reshape_to(b, node, t, out, name=node.name + "/shape")
        return True
    if len(set(flat)) == 1:  # one index everywhere (token type ids of 0)
        _one_row_everywhere(b, node, x, shape, axis, flat[0], out)
        return True
    if len(flat) > MAX_PICKED:
        return False
    _picked(b, node, x, shape, axis, flat, idx.shape)
    return True


def _one_row_everywhere(b, node, x, shape, axis, index, out):
    """Index ``index`` of ``axis`` repeated over the indices' shape: a Slice of it and an
    Expand (whose gradient is a sum over the repeats, where a Gather's adds each repeat
    into one row at once)."""
    t = _slice(b, node, b.value(x), axis, index, index + 1,
               output=b.fresh(node.outputs[0] + "/row"))
    b.alias[t] = t
    ones = list(shape[:axis]) + [1] * (len(out) - len(shape) + 1) + list(shape[axis + 1:])
    t = reshape_to(b, node, t, ones, output=b.fresh(node.outputs[0] + "/ones"),
                   name=node.name + "/ones")
    b.alias[t] = t
    _add(b, "Expand", [t], tuple(out), node, _dtype(b, x), options={"shape": list(out)})


# constant indices up to this many (a channel order, a few picked rows) become one Slice
# each and a Concat, exact and with their gradient; more go to Gather as a parameter
MAX_PICKED = 64


def _picked(b, node, x, shape, axis, flat, idx_shape):
    parts = [_slice(b, node, b.value(x), axis, i, i + 1,
                    output=b.fresh("%s/%d" % (node.outputs[0], k))) for k, i in enumerate(flat)]
    joined = list(shape)
    joined[axis] = len(flat)
    out = list(shape[:axis]) + list(idx_shape) + list(shape[axis + 1:])
    direct = out == joined
    t = b.add("Concat", parts, joined, node if direct else None, name=node.name + "/picked",
              output=None if direct else b.fresh(node.outputs[0] + "/picked"),
              options={"dim": axis}, dtype=b.dtype(x))
    if not direct:
        b.alias[t] = t
        reshape_to(b, node, t, out, name=node.name + "/shape")


def _embedding(b, node):
    """A float 2-D table: its rows by run-time indices, the table a parameter of the
    layer (no copy of it per pass). Embedding reads an index outside [0, rows) as a NaN
    row (torch.nn.Embedding refuses a negative one) while ONNX counts a negative one from
    the end: those are wrapped first, idx + rows where idx < 0."""
    table = np.asarray(b.const(node.inputs[0], "table"))
    idx = node.inputs[1]
    idx_shape = tuple(b.shape(idx))
    dt = b.dtype(idx)
    rows = int(table.shape[0])
    zero = b.constant(np.zeros((), dt), node.name + "/zero")
    count = b.constant(np.asarray(rows, dt), node.name + "/rows")
    negative, shifted, wrapped = (b.fresh("%s/%s" % (idx, t)) for t in ("negative", "shifted",
                                                                         "wrapped"))
    for op, ins, out in (("Less", [idx, zero], negative), ("Add", [idx, count], shifted),
                         ("Where", [negative, shifted, idx], wrapped)):
        CONVERTERS[op](b, Node(op, "%s/%s" % (node.name, out.rsplit("/", 1)[-1]), ins, [out]))
    wrapped = b.value(wrapped)
    b.add("Embedding", [wrapped], idx_shape + (table.shape[1],), node,
          params=[b.param(node.inputs[0], table)],
          options={"num_embeddings": rows, "embedding_dim": int(table.shape[1])})


# ----- helpers of the index converters

def _add(b, op_type, inputs, shape, node, dtype=None, output=None, **kw):
    """``b.add`` of an operator whose output has ``dtype`` (float32 when None)."""
    return b.add(op_type, inputs, shape, node, output=output,
                 dtype=np.float32 if dtype is None else dtype, **kw)


def _second_output(b, node, shape, dtype):
    """Give the operator just added (TopK) its second output, ONNX output 1 of ``node``."""
    op = b.cfg.operators[-1]
    name = node.outputs[1] if len(node.outputs) > 1 and node.outputs[1] and \
        node.outputs[1] not in b.alias else b.fresh(node.outputs[0] + "/indices")
    op["outputs"].append(name)
    b.shapes[name] = tuple(int(n) for n in shape)
    b.producer[name] = op
    b.dtypes[name] = np.dtype(dtype)
    if len(node.outputs) > 1 and node.outputs[1]:
        b.alias[node.outputs[1]] = name


def _dtype(b, name):
    """The dtype of ONNX tensor ``name`` (a constant's, or the run-time value's)."""
    return b.dtype(name)


def _dtype_of(b, t):
    """The dtype of dlprim tensor ``t``."""
    return b.dtypes.get(t, np.dtype(np.float32))


def _known(b, node, i, what):
    """Input ``i`` of ``node``, which must be known at import: it fixes the output's shape,
    and the net plans every shape before any value exists."""
    name = node.input(i)
    if name is None:
        raise Unsupported("input %d (%s) is missing" % (i, what))
    if not b.is_const(name):
        raise Unsupported("%s '%s' must be a constant (known at import): computed at run "
                          "time, it would make the kernels or the output's shape depend on the "
                          "data, and a net plans both before it runs" % (what, name))
    return np.asarray(b.consts[name])


def _scalar(b, node, i, what, default=None):
    if node.input(i) is None:
        return default
    return _known(b, node, i, what).reshape(-1)[0].item()


def _axis(node, shape, key="axis", default=0):
    a = int(node.attr(key, default))
    if not -max(len(shape), 1) <= a < max(len(shape), 1):
        raise Unsupported("%s %d is out of range for an input of shape %s" % (key, a, list(shape)))
    return a % max(len(shape), 1)


# ----- the index operators on run-time tensors

@converts("GatherElements")
def gather_elements(b, node):
    x, idx = node.inputs[0], node.inputs[1]
    axis = _axis(node, b.shape(x))
    _add(b, "GatherElements", [b.value(x), b.value(idx)], b.shape(idx), node, _dtype(b, x),
         options={"axis": axis})


@converts("GatherND")
def gather_nd(b, node):
    x, idx = node.inputs[0], node.inputs[1]
    xs, ixs = b.shape(x), b.shape(idx)
    batch = int(node.attr("batch_dims", 0))
    if not ixs or batch + ixs[-1] > len(xs):
        raise Unsupported("indices of shape %s into data of shape %s (batch_dims %d)"
                          % (list(ixs), list(xs), batch))
    out = tuple(ixs[:-1]) + tuple(xs[batch + ixs[-1]:])
    _add(b, "GatherND", [b.value(x), b.value(idx)], out, node, _dtype(b, x),
         options={"batch_dims": batch})


@converts("ScatterElements", "Scatter")
def scatter_elements(b, node):
    x = node.inputs[0]
    axis = _axis(node, b.shape(x))
    _add(b, "ScatterElements", [b.value(n) for n in node.inputs[:3]], b.shape(x), node,
         _dtype(b, x), options={"axis": axis, "reduction": node.attr("reduction", "none")})


@converts("ScatterND")
def scatter_nd(b, node):
    x = node.inputs[0]
    _add(b, "ScatterND", [b.value(n) for n in node.inputs[:3]], b.shape(x), node, _dtype(b, x),
         options={"reduction": node.attr("reduction", "none")})


@converts("CumSum", "CumProd")
def cumsum(b, node):
    x = node.inputs[0]
    axis = int(_scalar(b, node, 1, "axis"))
    if not -len(b.shape(x)) <= axis < len(b.shape(x)):
        raise Unsupported("axis %d is out of range for an input of shape %s"
                          % (axis, list(b.shape(x))))
    _add(b, node.op_type, [b.value(x)], b.shape(x), node, _dtype(b, x),
         options={"axis": axis, "exclusive": bool(node.attr("exclusive", 0)),
                  "reverse": bool(node.attr("reverse", 0))})


@converts("Trilu")
def trilu(b, node):
    x = node.inputs[0]
    k = int(_scalar(b, node, 1, "k", 0))
    _add(b, "Trilu", [b.value(x)], b.shape(x), node, _dtype(b, x),
         options={"upper": bool(node.attr("upper", 1)), "k": k})


@converts("OneHot")
def one_hot(b, node):
    idx = node.inputs[0]
    depth = _scalar(b, node, 1, "depth")
    if float(depth) != int(depth) or int(depth) < 1:
        raise Unsupported("depth %r (a positive integer)" % (depth,))
    values = _known(b, node, 2, "values").reshape(-1)
    shape = list(b.shape(idx))
    axis = int(node.attr("axis", -1))
    if not -len(shape) - 1 <= axis <= len(shape):
        raise Unsupported("axis %d for indices of shape %s" % (axis, shape))
    axis %= len(shape) + 1
    dtype = values.dtype
    out = shape[:axis] + [int(depth)] + shape[axis:]
    _add(b, "OneHot", [b.value(idx)], out, node, dtype,
         options={"depth": int(depth), "axis": axis, "values": values.tolist()[:2],
                  "dtype": np.dtype(dtype).name})


@converts("TopK")
def topk(b, node):
    x = node.inputs[0]
    shape = b.shape(x)
    axis = _axis(node, shape, default=-1)
    k = int(node.attr("k")) if b.opset < 10 else int(_scalar(b, node, 1, "K"))
    if not 0 <= k <= shape[axis]:
        raise Unsupported("K %d for an axis of size %d" % (k, shape[axis]))
    out = list(shape)
    out[axis] = k
    _add(b, "TopK", [b.value(x)], out, node, _dtype(b, x),
         options={"k": k, "axis": axis, "largest": bool(node.attr("largest", 1)),
                  "sorted": bool(node.attr("sorted", 1))})
    _second_output(b, node, out, np.int64)


@converts("ArgMax", "ArgMin")
def arg_extreme(b, node):
    x = node.inputs[0]
    shape = b.shape(x)
    axis = _axis(node, shape)
    keep = bool(node.attr("keepdims", 1))
    out = [1 if k == axis else n for k, n in enumerate(shape)] if keep else \
        [n for k, n in enumerate(shape) if k != axis]
    _add(b, node.op_type, [b.value(x)], out, node, np.int64,
         options={"axis": axis, "keepdims": keep,
                  "select_last_index": bool(node.attr("select_last_index", 0))})


@converts("Range")
def range_(b, node):
    """All inputs known: folded at import (never reaches here). A run-time start whose
    limit is start + a constant (a window of positions after an offset) has a known
    length: a Range layer; any other run-time bound makes the length depend on the data."""
    start, limit = node.inputs[0], node.inputs[1]
    delta = _scalar(b, node, 2, "delta")
    span = _span(b, start, limit)
    if span is None or b.is_const(start):
        raise Unsupported("start '%s' or limit '%s' is computed at run time: the output's "
                          "length would depend on the data, and a net plans its shapes before "
                          "it runs" % (start, limit))
    if delta == 0:
        raise Unsupported("delta 0")
    size = max(int(math.ceil(span / delta)), 0)
    _add(b, "Range", [b.value(start)], [size], node, _dtype(b, start),
         options={"size": size, "delta": delta})


def _span(b, start, limit):
    """limit - start where limit is Add(start, c) of a constant c (else None)."""
    for n in b.nodes:
        if limit in n.outputs and n.op_type == "Add" and start in n.inputs:
            other = [i for i in n.inputs if i != start]
            if len(other) == 1 and b.is_const(other[0]) and np.asarray(b.consts[other[0]]).size == 1:
                return np.asarray(b.consts[other[0]]).reshape(-1)[0].item()
    return None


@converts("NonZero")
def nonzero(b, node):
    raise Unsupported("the output's shape (the number of nonzero elements) depends on the "
                      "data, and a net plans its shapes before it runs")


@converts("EyeLike")
def eye_like(b, node):
    """Ones on diagonal k of a matrix of the input's shape: known at import (only the
    input's shape is read), a constant of ``dtype`` (default: the input's)."""
    from onnx import helper
    shape = b.shape(node.inputs[0])
    if len(shape) != 2:
        raise Unsupported("input of shape %s (EyeLike takes a matrix)" % (list(shape),))
    to = node.attr("dtype")
    dtype = helper.tensor_dtype_to_np_dtype(to) if to is not None else _dtype(b, node.inputs[0])
    b.consts[node.outputs[0]] = np.eye(shape[0], shape[1], int(node.attr("k", 0)), dtype=dtype)
