"""Converters of operators that select elements, composed of index layers: Hardmax (ArgMax
compared with the axis's indices) and ReverseSequence (GatherElements with the reversed
time indices, the lengths known at import)."""
import numpy as np

from .registry import Unsupported, converts
from .steps import Steps, dtype_name


@converts("Hardmax")
def hardmax(b, node):
    """1 at the first largest value along ``axis`` (a NaN counts as largest, as numpy's
    argmax), 0 elsewhere; before opset 13 over the input flattened to 2-D at ``axis``."""
    x = node.inputs[0]
    shape, dtype = tuple(b.shape(x)), b.dtype(x)
    rank = len(shape)
    axis = int(node.attr("axis", -1 if b.opset >= 13 else 1))
    if not -rank <= axis < max(rank, 1):
        raise Unsupported("axis %d for an input of rank %d" % (axis, rank))
    axis %= max(rank, 1)
    if dtype_name(dtype) not in ("float32", "float16", "float64", "bfloat16"):
        raise Unsupported("input of dtype %s (floats only)" % dtype_name(dtype))
    s = Steps(b, node)
    t, work = x, shape
    if b.opset < 13:  # ONNX's 2-D coercion: the axes from ``axis`` on are one
        work = (int(np.prod(shape[:axis], dtype=np.int64)),
                int(np.prod(shape[axis:], dtype=np.int64)))
        t, axis = s.reshape(x, work, "rows"), 1
    keep = tuple(1 if k == axis else d for k, d in enumerate(work))
    index = s.add("ArgMax", [t], keep, "argmax", dtype=np.int64, axis=axis, keepdims=True)
    n = work[axis]
    iota = s.const(np.arange(n, dtype=np.float32).reshape(
        tuple(n if k == axis else 1 for k in range(len(work)))), "iota")
    # float32 holds every index of an axis below 2**24 exactly
    if n > 2 ** 24:
        raise Unsupported("axis of %d elements (at most 2**24)" % n)
    f = s.lib("copy", [index], "index", dtype=np.float32)
    hit = s.lib("eq", [f, iota], "hit", dtype=np.bool_)
    y = s.lib("copy", [hit], "y", dtype=dtype,
              output=node.outputs[0] if work == shape else None)
    if work != shape:
        y = s.reshape(y, shape, "y_shape", output=node.outputs[0])
    s.finish(0, y)


@converts("ReverseSequence")
def reverse_sequence(b, node):
    """y[b, t] = x[b, len_b - 1 - t] for t < len_b, else x[b, t] (batch and time axes as
    the attributes say): one GatherElements along the time axis."""
    x = node.inputs[0]
    shape = tuple(b.shape(x))
    batch_axis, time_axis = int(node.attr("batch_axis", 1)), int(node.attr("time_axis", 0))
    if len(shape) < 2 or {batch_axis, time_axis} != {0, 1}:
        raise Unsupported("batch_axis %d and time_axis %d of an input of shape %s (axes 0 "
                          "and 1)" % (batch_axis, time_axis, shape))
    lens = np.asarray(b.const(node.inputs[1], "sequence_lens")).astype(np.int64).reshape(-1)
    steps, batch = shape[time_axis], shape[batch_axis]
    if lens.shape != (batch,) or np.any(lens < 0) or np.any(lens > steps):
        raise Unsupported("sequence_lens %s for a batch of %d and %d steps"
                          % (lens.tolist(), batch, steps))
    t = np.arange(steps)[None, :]
    src = np.where(t < lens[:, None], lens[:, None] - 1 - t, t)  # (batch, time)
    if time_axis == 0:
        src = src.T
    index = np.broadcast_to(src.reshape(src.shape + (1,) * (len(shape) - 2)), shape)
    s = Steps(b, node)
    idx = s.const(np.ascontiguousarray(index), "index")
    y = s.add("GatherElements", [x, idx], shape, "gather", dtype=b.dtype(x), axis=time_axis,
              output=node.outputs[0])
    s.finish(0, y)
