"""Converters of windowed and resampling operators: MaxPool, AveragePool, LpPool,
GlobalAveragePool, GlobalMaxPool, GlobalLpPool, MaxUnpool, Pad, Resize and Upsample."""
import math

import numpy as np

from ..core.interpolation import axis_table
from .ops_nn import image_shape
from . import resize as resize_matrices
from .model_reader import Node
from .registry import CONVERTERS, Unsupported, converts
from ..utils import ceil_div


# ----- pooling
#
# ONNX's windows (MaxPool, AveragePool, LpPool): along each spatial dim, output o reads the
# taps t = o * stride - pad_begin + j * dilation, j < kernel, of the input; the output
# size is floor (ceil with ceil_mode, a window starting past input + pad_begin dropped) of
# (I + pad_begin + pad_end - ((kernel - 1) * dilation + 1)) / stride + 1. A max reads the
# taps inside the input; an average divides their sum by the taps inside the input, or
# with count_include_pad by those inside [-pad_begin, I + pad_end).
#
# Windows of 2-D float inputs that Pooling2D computes exactly (symmetric pads at most half
# the window, no dilation) run there (it has a backward); every other one on PoolingND
# (core/pooling_nd.py): the leading pads and ONNX's output size, the divisor checked
# against ONNX's count per window (a constant override, else the sum divided by the
# counts), refused where a window reads no input element.

def _pool_geometry(b, node):
    """(spatial size, kernel, strides, dilations, pads_begin, pads_end, out size)."""
    shape = b.shape(node.inputs[0])
    size = list(shape[2:])
    dims = len(size)
    if not 1 <= dims <= 3 or len(shape) < 3:
        raise Unsupported("input of shape %s (1 to 3 spatial dims)" % (shape,))
    kernel = [int(k) for k in node.attr("kernel_shape", [])]
    if len(kernel) != dims:
        raise Unsupported("kernel_shape %s for %d spatial dims" % (kernel, dims))
    strides = [int(v) for v in node.attr("strides", [1] * dims)]
    dilations = [int(v) for v in node.attr("dilations", [1] * dims)]
    pads = [int(v) for v in node.attr("pads", [0] * (2 * dims))]
    if len(strides) != dims or len(dilations) != dims or len(pads) != 2 * dims:
        raise Unsupported("strides %s, dilations %s, pads %s for %d spatial dims"
                          % (strides, dilations, pads, dims))
    if min(kernel + strides + dilations) < 1 or min(pads) < 0:
        raise Unsupported("kernel_shape %s, strides %s, dilations %s, pads %s"
                          % (kernel, strides, dilations, pads))
    ceil = bool(node.attr("ceil_mode", 0))
    auto = node.attr("auto_pad", "NOTSET")
    auto = auto.decode() if isinstance(auto, bytes) else auto
    spans = [(k - 1) * d + 1 for k, d in zip(kernel, dilations)]
    if auto in ("SAME_UPPER", "SAME_LOWER", "VALID"):
        if ceil:
            raise Unsupported("ceil_mode with auto_pad %s" % auto)
        pads = [0] * (2 * dims)
        if auto != "VALID":
            for i in range(dims):
                out = ceil_div(size[i], strides[i])
                total = max((out - 1) * strides[i] + spans[i] - size[i], 0)
                small = total // 2
                pads[i], pads[dims + i] = (small, total - small) if auto == "SAME_UPPER" \
                    else (total - small, small)
    elif auto != "NOTSET":
        raise Unsupported("auto_pad %r" % auto)
    begin, end = pads[:dims], pads[dims:]
    out = []
    for i in range(dims):
        reach = size[i] + begin[i] + end[i] - spans[i]
        if reach < 0:
            raise Unsupported("a window of %d wider than the padded input %d"
                              % (spans[i], size[i] + begin[i] + end[i]))
        o = (ceil_div(reach, strides[i]) if ceil else reach // strides[i]) + 1
        if ceil and (o - 1) * strides[i] >= size[i] + begin[i]:
            o -= 1
        out.append(o)
    return size, kernel, strides, dilations, begin, end, out


def _taps(o, k, s, p, d):
    """(outputs, kernel) positions of the taps of each window along one dim."""
    return np.arange(o)[:, None] * s - p + np.arange(k)[None, :] * d


def _outer(factors):
    """The product over dims of per-dim counts, as an array of the output's spatial shape."""
    total = np.ones((), np.int64)
    for f in factors:
        total = np.multiply.outer(total, f)
    return total


def _window_counts(geometry, include_pad):
    size, kernel, strides, dilations, begin, end, out = geometry
    per_dim = []
    for i, k, s, d, pb, pe, o in zip(size, kernel, strides, dilations, begin, end, out):
        t = _taps(o, k, s, pb, d)
        lo, hi = (-pb, i + pe) if include_pad else (0, i)
        per_dim.append(((t >= lo) & (t < hi)).sum(axis=1))
    return _outer(per_dim)


def _kernel_counts(geometry, include_pad):
    """The divisor core/pooling_nd's average uses per window (pads_begin on both sides)."""
    size, kernel, strides, dilations, begin, _, out = geometry
    per_dim = []
    for i, k, s, d, p, o in zip(size, kernel, strides, dilations, begin, out):
        lo = np.arange(o) * s - p
        hi = lo + (k - 1) * d + 1
        end = np.minimum(hi, i + p)
        per_dim.append(end - lo if include_pad else np.minimum(end, i) - np.maximum(lo, 0))
    return _outer(per_dim)


def _second_output(b, node, shape, dtype):
    """The operator just added gets a second output (a fresh tensor, returned)."""
    op = b.cfg.operators[-1]
    name = b.fresh(node.outputs[0] + "/picks")
    op["outputs"].append(name)
    b.shapes[name] = tuple(int(n) for n in shape)
    b.producer[name] = op
    b.dtypes[name] = np.dtype(dtype)
    b.alias[name] = name
    return name


def library(b, node, op, tensors, dtype, tag=None, scalars=None, attrs=None):
    """A LibraryOp of ``op`` over dlprim ``tensors`` (broadcast; ``scalars``: the operands
    that are numbers, by place a/b/c), stored as ``dtype``; writes the node's output unless
    ``tag`` names a new tensor."""
    shape = tuple(np.broadcast_shapes(*(b.shapes[t] for t in tensors)))
    options = {"op": op}
    if op in ("add", "sub"):
        attrs = dict(attrs or {}, alpha=1)
    if op == "div" and np.dtype(dtype).kind in "iu":
        attrs = dict(attrs or {}, rounding_mode="trunc")  # positions: whole quotients
    if attrs:
        options["attrs"] = attrs
    if scalars:
        options["scalars"] = scalars
    t = b.add("LibraryOp", tensors, shape, None if tag else node,
              name=node.name + ("/" + tag if tag else ""),
              output=b.fresh(node.outputs[0] + "/" + tag) if tag else None,
              options=options, dtype=dtype)
    if tag:
        b.alias[t] = t
    return t


def _fits_pooling2d(b, node, geometry):
    size, kernel, strides, dilations, begin, end, out = geometry
    if len(size) != 2 or b.dtype(node.inputs[0]) != np.float32 or dilations != [1, 1] \
            or begin != end or any(2 * p > k for p, k in zip(begin, kernel)):
        return False
    ceil = bool(node.attr("ceil_mode", 0))
    for i in range(2):  # Pooling2D's own output size must be ONNX's
        span = size[i] + 2 * begin[i] - kernel[i]
        o = (ceil_div(span, strides[i]) if ceil else span // strides[i]) + 1
        if ceil and (o - 1) * strides[i] >= size[i] + begin[i]:
            o -= 1
        if o != out[i]:
            return False
    return True


def _check_windows(geometry):
    size, kernel, strides, dilations, begin, end, out = geometry
    for axis, (i, k, s, d, p, o) in enumerate(zip(size, kernel, strides, dilations, begin, out)):
        t = _taps(o, k, s, p, d)
        empty = np.flatnonzero(((t >= 0) & (t < i)).sum(axis=1) == 0)
        if empty.size:
            raise Unsupported("window %d of spatial dim %d reads only padding" % (empty[0], axis))


def _pooling_nd(b, node, x, geometry, mode, output=None, divisor=0, include_pad=False,
                indices=False):
    size, kernel, strides, dilations, begin, end, out = geometry
    shape = b.shape(node.inputs[0])[:2] + tuple(out)
    options = {"mode": mode, "kernel": kernel, "stride": strides, "pad": begin,
               "dilation": dilations, "out_size": out, "count_include_pad": include_pad,
               "divisor": int(divisor), "indices": indices}
    kw = {"output": output, "name": node.name + "/" + (output or "").rpartition("/")[2]} \
        if output else {}
    return b.add("PoolingND", [x], shape, None if output else node,
                 options=options, dtype=b.dtype(node.inputs[0]), **kw)


def _average(b, node, x, geometry, include_pad, output=None):
    """ONNX's average of the windows: the launcher's own divisor where it equals ONNX's
    count, a constant divisor, else the window sums divided by ONNX's counts."""
    want = _window_counts(geometry, include_pad)
    for flag in (include_pad, not include_pad):
        if np.array_equal(_kernel_counts(geometry, flag), want):
            return _pooling_nd(b, node, x, geometry, "avg", output, include_pad=flag)
    if want.min() == want.max():
        return _pooling_nd(b, node, x, geometry, "avg", output, divisor=int(want.min()))
    sums = _pooling_nd(b, node, x, geometry, "avg", b.fresh(node.outputs[0] + "/sum"),
                       divisor=1)
    b.alias[sums] = sums
    dtype = b.dtype(node.inputs[0])
    counts = b.value(b.constant(want.astype(dtype)[None, None], node.name + "/count"))
    return library(b, node, "div", [sums, counts], dtype, tag=output and "divide")


def _onnx_indices(b, node, picks, shape, size):
    """ONNX's Indices from the in-plane picks: + the plane's offset, and with storage_order
    1 the spatial position counted column-major."""
    i64 = np.dtype(np.int64)
    plane = int(np.prod(size))
    if node.attr("storage_order", 0):
        rest, col, row_stride, col_stride = picks, None, plane, 1
        for i, n in enumerate(size):  # coordinate i = rest // row stride; rest -= ...
            row_stride //= n
            coord = library(b, node, "div", [rest], i64, "coord%d" % i, {"b": row_stride})
            back = library(b, node, "mul", [coord], i64, "back%d" % i, {"b": row_stride})
            rest = library(b, node, "sub", [rest, back], i64, "rest%d" % i)
            term = library(b, node, "mul", [coord], i64, "term%d" % i, {"b": col_stride})
            col = term if col is None else library(b, node, "add", [col, term], i64,
                                                   "col%d" % i)
            col_stride *= n
        picks = col
    offsets = (np.arange(int(np.prod(shape[:2])), dtype=np.int64) * plane).reshape(
        tuple(shape[:2]) + (1,) * len(size))
    out = library(b, node, "add", [picks, b.value(b.constant(offsets, node.name + "/plane"))],
                  i64, "indices")
    b.out(node, out, 1)


@converts("MaxPool", "AveragePool")
def pool(b, node):
    geometry = _pool_geometry(b, node)
    size, kernel, strides, dilations, begin, end, out = geometry
    mode = "max" if node.op_type == "MaxPool" else "avg"
    include_pad = bool(node.attr("count_include_pad", 0))
    indices = mode == "max" and len(node.outputs) > 1 and bool(node.outputs[1])
    x = b.value(node.inputs[0])
    shape = b.shape(node.inputs[0])
    if not indices and _fits_pooling2d(b, node, geometry) and \
            (mode == "max" or np.array_equal(_kernel_counts(geometry, include_pad),
                                             _window_counts(geometry, include_pad))):
        b.add("Pooling2D", [x], tuple(shape[:2]) + tuple(out), node, options={
            "mode": mode, "kernel": kernel, "stride": strides, "pad": begin,
            "ceil_mode": bool(node.attr("ceil_mode", 0)), "count_include_pad": include_pad})
        return
    _check_windows(geometry)
    if mode == "avg":
        _average(b, node, x, geometry, include_pad)
        return
    _pooling_nd(b, node, x, geometry, "max", indices=indices)
    if indices:
        picks = _second_output(b, node, tuple(shape[:2]) + tuple(out), np.int64)
        _onnx_indices(b, node, picks, tuple(shape[:2]) + tuple(out), size)


@converts("LpPool")
def lp_pool(b, node):
    """(sum of |x|^p over the window's input taps)^(1/p): ONNX's reference scales the
    padded window's average by the kernel's size, the same where every window holds
    kernel-many taps of the padded input; other windows (ceil_mode's) are refused."""
    geometry = _pool_geometry(b, node)
    p = int(node.attr("p", 2))
    if p < 1:
        raise Unsupported("p %d" % p)
    if b.dtype(node.inputs[0]).kind != "f":
        raise Unsupported("input of dtype %s" % b.dtype(node.inputs[0]).name)
    if (_window_counts(geometry, True) != int(np.prod(geometry[1]))).any():
        raise Unsupported("windows reaching past the padded input (ceil_mode)")
    _check_windows(geometry)
    x = b.value(node.inputs[0])
    dtype = b.dtype(node.inputs[0])
    if p == 2:
        powered = library(b, node, "mul", [x, x], dtype, "square")
    else:
        powered = library(b, node, "abs", [x], dtype, "abs")
        if p > 2:
            powered = library(b, node, "pow", [powered], dtype, "pow", {"b": float(p)})
    sums = _pooling_nd(b, node, powered, geometry, "avg", b.fresh(node.outputs[0] + "/sum"),
                       divisor=1)
    b.alias[sums] = sums
    if p == 1:
        b.out(node, sums)
    elif p == 2:
        library(b, node, "sqrt", [sums], dtype)
    else:
        library(b, node, "pow", [sums], dtype, scalars={"b": 1.0 / p})


@converts("GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool")
def global_pool(b, node):
    shape = b.shape(node.inputs[0])
    if len(shape) < 3:
        raise Unsupported("input of shape %s (N, C and spatial dims)" % (shape,))
    out = tuple(shape[:2]) + (1,) * (len(shape) - 2)
    x = b.value(node.inputs[0])
    if node.op_type == "GlobalLpPool":
        node.attrs = dict(node.attrs, kernel_shape=list(shape[2:]))
        lp_pool(b, node)
    elif len(shape) == 4 and b.dtype(node.inputs[0]) == np.float32:
        mode = "avg" if node.op_type == "GlobalAveragePool" else "max"
        b.add("GlobalPooling", [x], out, node, options={"mode": mode})
    else:
        method = "mean" if node.op_type == "GlobalAveragePool" else "max"
        if method == "mean" and b.dtype(node.inputs[0]).kind != "f":
            raise Unsupported("input of dtype %s" % b.dtype(node.inputs[0]).name)
        b.add("Reduction", [x], out, node, dtype=b.dtype(node.inputs[0]), options={
            "method": method, "dims": list(range(2, len(shape))), "keep_dim": True})


@converts("MaxUnpool")
def max_unpool(b, node):
    """y.flat[I.flat[j]] = X.flat[j] into zeros of the inferred shape ((in - 1) * stride +
    kernel - pad_begin - pad_end per spatial dim); a larger output_shape holds that tensor
    in its leading corner, zeros after it (onnx's reference)."""
    shape = b.shape(node.inputs[0])
    size = shape[2:]
    dims = len(size)
    kernel = [int(k) for k in node.attr("kernel_shape", [])]
    strides = [int(v) for v in node.attr("strides", [1] * dims)]
    pads = [int(v) for v in node.attr("pads", [0] * (2 * dims))]
    if len(kernel) != dims or len(strides) != dims or len(pads) != 2 * dims:
        raise Unsupported("kernel_shape %s, strides %s, pads %s for %d spatial dims"
                          % (kernel, strides, pads, dims))
    inferred = list(shape[:2]) + [(n - 1) * s + k - pads[i] - pads[dims + i]
                                  for i, (n, s, k) in enumerate(zip(size, strides, kernel))]
    out = inferred
    if node.input(2):
        out = [int(v) for v in np.asarray(b.const(node.inputs[2], "output_shape")).reshape(-1)]
    if len(out) != len(shape) or any(o < i for o, i in zip(out, inferred)) or min(inferred) < 1:
        raise Unsupported("output_shape %s for an unpooled shape %s" % (out, inferred))
    if b.dtype(node.inputs[1]) != np.int64:
        raise Unsupported("indices of dtype %s" % b.dtype(node.inputs[1]).name)
    dtype = b.dtype(node.inputs[0])
    inputs = [b.value(node.inputs[0]), b.value(node.inputs[1])]
    if out == inferred:
        b.add("MaxUnpool", inputs, out, node, options={"shape": out}, dtype=dtype)
        return
    y = b.add("MaxUnpool", inputs, inferred, output=b.fresh(node.outputs[0] + "/unpooled"),
              name=node.name + "/unpool", options={"shape": inferred}, dtype=dtype)
    grow = [0] * len(out) + [o - i for o, i in zip(out, inferred)]
    b.add("Pad", [y], out, node, dtype=dtype,
          options={"pads": grow, "mode": "constant", "value": 0.0})


@converts("Pad")
def pad(b, node):
    """Zero padding of H and W of a float32 (N, C, H, W) tensor as a 1x1 depthwise
    convolution of ones with that padding (exact: every output is 1 * x or 0), negative
    pads cropping with Slice; every other padding (any axes, any dtype, a constant value,
    modes reflect, edge and wrap) the Pad layer."""
    shape = b.shape(node.inputs[0])
    mode = node.attr("mode", "constant")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    pads = node.attr("pads") if node.input(1) is None else b.const(node.inputs[1], "pads")
    value, runtime_value = node.attr("value", 0.0), None
    if node.input(2) and mode == "constant":  # the other modes ignore it
        if b.is_const(node.inputs[2]):
            value = np.asarray(b.consts[node.inputs[2]]).reshape(-1)[0].item()
        else:
            runtime_value, value = node.inputs[2], 0
    pads = [int(p) for p in np.asarray(pads).reshape(-1)]
    if node.input(3):
        axes = [int(a) for a in np.asarray(b.const(node.inputs[3], "axes")).reshape(-1)]
        if len(pads) != 2 * len(axes) or any(not -len(shape) <= a < len(shape) for a in axes):
            raise Unsupported("pads %s for axes %s of an input of shape %s"
                              % (pads, axes, list(shape)))
        full = [0] * (2 * len(shape))
        for i, a in enumerate(axes):
            full[a % len(shape)] = pads[i]
            full[a % len(shape) + len(shape)] = pads[i + len(axes)]
        pads = full
    if len(pads) != 2 * len(shape):
        raise Unsupported("pads %s for an input of shape %s" % (pads, list(shape)))
    dtype = b.dtype(node.inputs[0])
    if runtime_value is not None:
        _pad_runtime_value(b, node, shape, pads, runtime_value, dtype)
        return
    if mode != "constant" or value != 0 or len(shape) != 4 or np.dtype(dtype) != np.float32 \
            or any(pads[i] for i in (0, 1, 4, 5)):
        _pad_layer(b, node, shape, pads, mode, value, dtype)
        return
    x = b.value(node.inputs[0])
    cur = list(shape)
    for axis, lo, hi in ((2, pads[2], pads[6]), (3, pads[3], pads[7])):
        if lo < 0 or hi < 0:
            begin, end = max(-lo, 0), cur[axis] - max(-hi, 0)
            cur[axis] = end - begin
            x = b.add("Slice", [x], cur, output=b.fresh(node.outputs[0] + "/crop"),
                      name=node.name + "/crop", options={"dim": axis, "begin": begin, "end": end})
    grow = [max(pads[2], 0), max(pads[3], 0), max(pads[6], 0), max(pads[7], 0)]
    if not any(grow):
        b.out(node, x)
        return
    ones = b.param(node.name + ".ones", np.ones((cur[1], 1, 1, 1), np.float32))
    out = (cur[0], cur[1], cur[2] + grow[0] + grow[2], cur[3] + grow[1] + grow[3])
    b.add("Convolution2D", [x], out, node, params=[ones], frozen=True, options={
        "channels_out": cur[1], "channels_in": cur[1], "kernel": [1, 1], "pad": grow,
        "groups": cur[1], "bias": False})


def _pad_runtime_value(b, node, shape, pads, value, dtype):
    """Constant padding by a value computed at run time: the input padded with 0, then
    where(padded position, value, that) by a constant mask of the padded positions."""
    if b.shape(value) not in ((), (1,)):
        raise Unsupported("constant_value of shape %s (one value)" % (b.shape(value),))
    if np.dtype(b.dtype(value)) != np.dtype(dtype):
        raise Unsupported("constant_value of dtype %s for an input of %s"
                          % (np.dtype(b.dtype(value)).name, np.dtype(dtype).name))
    r = len(shape)
    zero = _pad_layer(b, node, shape, pads, "constant", 0, dtype,
                      output=b.fresh(node.outputs[0] + "/zero_padded"))
    b.alias[zero] = zero
    mask = np.pad(np.zeros(shape, bool), [(max(lo, 0), max(hi, 0)) for lo, hi in zip(pads[:r], pads[r:])],
                  constant_values=True)
    crop = tuple(slice(max(-lo, 0), mask.shape[i] - max(-hi, 0))
                 for i, (lo, hi) in enumerate(zip(pads[:r], pads[r:])))
    mask = b.constant(np.ascontiguousarray(mask[crop]), node.name + "/padded")
    CONVERTERS["Where"](b, Node("Where", node.name + "/fill", [mask, value, zero], node.outputs))


def _pad_layer(b, node, shape, pads, mode, value, dtype, output=None):
    if mode not in ("constant", "reflect", "edge", "wrap"):
        raise Unsupported("mode %r" % mode)
    kind = np.dtype(dtype).kind
    if mode == "constant" and kind in "iub" and float(value) != int(value):
        raise Unsupported("padding value %r for %s" % (value, np.dtype(dtype).name))
    r = len(shape)
    out = [n + lo + hi for n, lo, hi in zip(shape, pads[:r], pads[r:])]
    value = bool(value) if kind == "b" else (int(value) if kind in "iu" else float(value))
    return b.add("Pad", [b.value(node.inputs[0])], out, node, dtype=dtype, output=output,
                 options={"pads": pads, "mode": mode, "value": value})


# ----- Resize and Upsample
#
# ONNX defines resizing per axis (see resize.py): y = M x along each axis, M an (out, in)
# matrix built from ONNX's formulas. dlprim's Interpolation layer is also one such matrix
# per axis (core.interpolation.axis_table): for H and W of (N, C, H, W) the converter uses
# the first Interpolation configuration whose matrices equal ONNX's; every other case
# (cubic, antialias, other axes, extrapolation, no matching configuration) is a MatMul per
# resized axis with ONNX's matrix.

MATRIX_TOLERANCE = 1e-6  # float32 tables against float64 weights in [0, 1]


def dlprim_axis_matrix(n_in, n_out, method, scale, align_corners):
    """The (n_out, n_in) matrix dlprim's Interpolation applies along one axis."""
    index, weight = axis_table(n_in, n_out, method, scale, align_corners)
    m = np.zeros((n_out, n_in))
    rows = np.arange(n_out)
    np.add.at(m, (rows, index[:n_out]), weight[:n_out])
    np.add.at(m, (rows, index[n_out:2 * n_out]), weight[n_out:])
    return m


def _resize_attributes(b, node):
    """(mode, coordinate_transformation_mode, nearest_mode) by operator and opset."""
    mode = node.attr("mode", "nearest")
    if mode == "bilinear":  # Upsample-7's spelling
        mode = "linear"
    if node.op_type == "Upsample" or b.opset < 11:
        # Upsample and Resize-10: x = y / scale; nearest repeats (floor) when upsampling
        return mode, "asymmetric", "floor"
    return (mode, node.attr("coordinate_transformation_mode", "half_pixel"),
            node.attr("nearest_mode", "round_prefer_floor"))


def _resize_targets(b, node, shape):
    """(output sizes, scales, roi) over all axes, as ONNX's Resize works them out."""
    rank = len(shape)
    roi = None
    if node.op_type == "Upsample" and node.input(1) is None:
        scales, sizes = node.attr("scales"), None
    elif node.op_type == "Upsample" or b.opset < 11:
        scales, sizes = b.const(node.inputs[1], "scales"), None
    else:
        scales = b.const(node.inputs[2], "scales") if node.input(2) else None
        sizes = b.const(node.inputs[3], "sizes") if node.input(3) else None
        roi = b.const(node.inputs[1], "roi") if node.input(1) else None
    scales = None if scales is None or np.asarray(scales).size == 0 else \
        [float(s) for s in np.asarray(scales).reshape(-1)]
    sizes = None if sizes is None or np.asarray(sizes).size == 0 else \
        [int(s) for s in np.asarray(sizes).reshape(-1)]
    roi = None if roi is None or np.asarray(roi).size == 0 else \
        [float(r) for r in np.asarray(roi).reshape(-1)]
    if (scales is None) == (sizes is None):
        raise Unsupported("exactly one of scales and sizes must be given")
    axes = node.attr("axes")
    axes = list(range(rank)) if axes is None else [int(a) % rank for a in axes]
    given = scales if scales is not None else sizes
    if len(given) != len(axes) or (roi is not None and len(roi) != 2 * len(axes)):
        raise Unsupported("%s of %d values for %d axes" % (
            "scales" if scales is not None else "sizes", len(given), len(axes)))
    full_roi = [0.0] * rank + [1.0] * rank
    for i, a in enumerate(axes):
        if roi is not None:
            full_roi[a], full_roi[rank + a] = roi[i], roi[len(axes) + i]
    if scales is not None:
        full = [1.0] * rank
        for a, s in zip(axes, scales):
            full[a] = s
        out = [int(s * d) for s, d in zip(full, shape)]
        return out, full, full_roi
    out = list(shape)
    for a, s in zip(axes, sizes):
        out[a] = s
    full = [o / d for o, d in zip(out, shape)]
    policy = node.attr("keep_aspect_ratio_policy", "stretch")
    if policy != "stretch":
        if policy not in ("not_larger", "not_smaller"):
            raise Unsupported("keep_aspect_ratio_policy %r" % policy)
        pick = min if policy == "not_larger" else max
        scale = pick(full[a] for a in axes)
        full = [scale if i in axes else 1.0 for i in range(rank)]
        out = [int(scale * d + 0.5) if i in axes else d for i, d in enumerate(shape)]
    return out, full, full_roi


def _resize_options(node, hw, out_hw, scales, matrices, sizes_given):
    """The Interpolation options whose matrices are ``matrices``, or None."""
    candidates = [(m, False) for m in ("nearest", "nearest-exact", "bilinear")]
    candidates.append(("bilinear", True))
    for method, corners in candidates:
        spellings = [True, False] if sizes_given else [False, True]
        for by_size in spellings:
            if not by_size and any(int(n * s) != o for n, s, o in zip(hw, scales, out_hw)):
                continue  # the layer's int(H * scale) would not give ONNX's size
            scale = (-1.0, -1.0) if by_size else scales
            if all(np.abs(dlprim_axis_matrix(n, o, method, s, corners) - m).max()
                   <= MATRIX_TOLERANCE for n, o, s, m in zip(hw, out_hw, scale, matrices)):
                opts = {"method": method}
                if by_size:
                    opts.update(out_h=out_hw[0], out_w=out_hw[1])
                else:
                    opts.update(scale_y=scales[0], scale_x=scales[1])
                if corners:
                    opts["align_corners"] = True
                return opts
    return None


@converts("Resize", "Upsample")
def resize(b, node):
    """ONNX's Resize (and Upsample) exactly as the specification defines it: the
    Interpolation layer where its weights are ONNX's, else a MatMul per resized axis."""
    shape = tuple(b.shape(node.inputs[0]))
    mode, ctm, nearest_mode = _resize_attributes(b, node)
    if mode not in ("nearest", "linear", "cubic"):
        raise Unsupported("mode %r" % mode)
    antialias = bool(node.attr("antialias", 0))
    if antialias and mode == "nearest":
        raise Unsupported("antialias with mode 'nearest' (ONNX defines it for linear and "
                          "cubic)")
    out, scales, roi = _resize_targets(b, node, shape)
    if out and min(out) < 1:
        raise Unsupported("empty output %s" % out)
    rank = len(shape)
    matrices = {}
    for a in range(rank):
        lo_hi = (roi[a], roi[rank + a])
        if math.isclose(scales[a], 1.0) and out[a] == shape[a] and \
                math.isclose(lo_hi[0], 0.0) and math.isclose(lo_hi[1], 1.0):
            continue  # the identity (onnx's reference skips the axis too)
        matrices[a] = resize_matrices.axis_matrix(
            shape[a], out[a], scales[a], ctm, mode, nearest_mode,
            bool(node.attr("exclude_outside", 0)), lo_hi, antialias,
            float(node.attr("cubic_coeff_a", -0.75)))
    opts = _interpolation_options(b, node, shape, out, scales, matrices, mode)
    if opts is not None:
        b.add("Interpolation", [b.value(node.inputs[0])], tuple(out), node, options=opts)
        return
    if not matrices:
        b.out(node, b.value(node.inputs[0]))
        return
    resize_matrices.apply_matrices(b, node, shape, matrices,
                                   float(node.attr("extrapolation_value", 0.0)))


def _interpolation_options(b, node, shape, out, scales, matrices, mode):
    """The Interpolation layer's options where it computes ONNX's matrices: a float32
    (N, C, H, W) resized along H and W by nearest or linear weights, nothing
    extrapolated; else None."""
    if len(shape) != 4 or b.dtype(node.inputs[0]) != np.float32 or mode == "cubic" or \
            not matrices or set(matrices) - {2, 3} or \
            any(outside.any() for _, outside in matrices.values()):
        return None
    hw, out_hw = shape[2:], out[2:]
    wanted = [matrices[a][0] if a in matrices else np.eye(shape[a]) for a in (2, 3)]
    sizes_given = node.op_type == "Resize" and b.opset >= 11 and node.input(3) is not None
    return _resize_options(node, hw, out_hw, scales[2:], wanted, sizes_given)
