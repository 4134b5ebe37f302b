"""Converters of windowed and resampling operators: MaxPool, AveragePool,
GlobalAveragePool, GlobalMaxPool, Pad, Resize and Upsample."""
import numpy as np

from .ops_nn import image_shape, pairs, window
from .registry import Unsupported, converts
from ..utils import ceil_div


@converts("MaxPool", "AveragePool")
def pool(b, node):
    n, c, h, w = image_shape(b, node)
    if len(node.outputs) > 1 and node.outputs[1]:
        raise Unsupported("the Indices output is read")
    kernel = pairs(node, "kernel_shape", [1, 1])
    strides, dil, pads = window(node, (h, w), kernel)
    if dil != [1, 1]:
        raise Unsupported("dilations %s" % dil)
    if pads[:2] != pads[2:]:
        raise Unsupported("asymmetric padding %s" % pads)
    if any(2 * p > k for p, k in zip(pads, kernel)):
        raise Unsupported("padding %s above half the window %s" % (pads[:2], kernel))
    ceil = bool(node.attr("ceil_mode", 0))
    out = []
    for i, size in enumerate((h, w)):
        span = size + 2 * pads[i] - kernel[i]
        o = (ceil_div(span, strides[i]) if ceil else span // strides[i]) + 1
        if ceil and (o - 1) * strides[i] >= size + pads[i]:
            o -= 1  # a window may not start in the right padding (PyTorch's rule)
        out.append(o)
    mode = "max" if node.op_type == "MaxPool" else "avg"
    b.add("Pooling2D", [b.value(node.inputs[0])], (n, c, out[0], out[1]), node, options={
        "mode": mode, "kernel": kernel, "stride": strides, "pad": pads[:2], "ceil_mode": ceil,
        "count_include_pad": bool(node.attr("count_include_pad", 0))})


@converts("GlobalAveragePool", "GlobalMaxPool")
def global_pool(b, node):
    shape = b.shape(node.inputs[0])
    mode = "avg" if node.op_type == "GlobalAveragePool" else "max"
    if len(shape) == 4:
        b.add("GlobalPooling", [b.value(node.inputs[0])], shape[:2] + (1, 1), node,
              options={"mode": mode})
    elif mode == "avg" and len(shape) > 2:
        b.add("Reduction", [b.value(node.inputs[0])], shape[:2] + (1,) * (len(shape) - 2), node,
              options={"method": "mean", "dims": list(range(2, len(shape))), "keep_dim": True})
    else:
        raise Unsupported("input of shape %s" % (shape,))


@converts("Pad")
def pad(b, node):
    """Zero padding of H and W as a 1x1 depthwise convolution of ones with that padding
    (exact: every output is 1 * x or 0); negative pads crop with Slice."""
    shape = b.shape(node.inputs[0])
    if node.attr("mode", "constant") != "constant":
        raise Unsupported("mode %r (only constant zero padding)" % node.attr("mode"))
    pads = node.attr("pads") if node.input(1) is None else b.const(node.inputs[1], "pads")
    value = node.attr("value", 0.0)
    if node.input(2):
        value = float(b.const(node.inputs[2], "constant_value").reshape(-1)[0])
    if node.input(3):
        axes = [int(a) % len(shape) for a in b.const(node.inputs[3], "axes")]
        full = [0] * (2 * len(shape))
        for i, a in enumerate(axes):
            full[a], full[a + len(shape)] = int(pads[i]), int(pads[i + len(axes)])
        pads = full
    pads = [int(p) for p in np.asarray(pads).reshape(-1)]
    if value != 0.0:
        raise Unsupported("padding value %g (only 0)" % value)
    if len(shape) != 4 or any(pads[i] for i in (0, 1, 4, 5)):
        raise Unsupported("pads %s: only H and W of (N, C, H, W) may be padded" % pads)
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


def _resize_method(b, node):
    mode = node.attr("mode", "nearest")
    ctm = node.attr("coordinate_transformation_mode",
                    "half_pixel" if b.opset >= 11 and node.op_type == "Resize" else "asymmetric")
    if node.attr("antialias", 0):
        raise Unsupported("antialias")
    if mode == "nearest":
        nearest = node.attr("nearest_mode", "round_prefer_floor")
        if ctm == "asymmetric" and (nearest == "floor" or node.op_type == "Upsample"):
            return "nearest", False
        if ctm in ("half_pixel", "pytorch_half_pixel") and nearest == "round_prefer_ceil":
            return "nearest-exact", False
        if ctm in ("half_pixel", "pytorch_half_pixel") and nearest == "round_prefer_floor":
            return "nearest-integer", False  # exact only for integer factors, checked later
    if mode in ("linear", "bilinear") and node.op_type == "Resize":
        if ctm in ("half_pixel", "pytorch_half_pixel"):
            return "bilinear", False
        if ctm == "align_corners":
            return "bilinear", True
    raise Unsupported("mode %r with coordinate_transformation_mode %r" % (mode, ctm))


@converts("Resize", "Upsample")
def resize(b, node):
    n, c, h, w = image_shape(b, node)
    method, corners = _resize_method(b, node)
    if node.op_type == "Upsample" and node.input(1) is None:
        scales, sizes = node.attr("scales"), None
    elif node.op_type == "Upsample" or b.opset < 11:
        scales, sizes = b.const(node.inputs[1], "scales"), None
    else:
        scales = b.const(node.inputs[2], "scales") if node.input(2) else None
        sizes = b.const(node.inputs[3], "sizes") if node.input(3) else None
    if node.attr("axes") is not None:
        raise Unsupported("attribute axes")
    opts = {"method": method}
    if sizes is not None and np.asarray(sizes).size:
        sizes = [int(s) for s in sizes]
        if sizes[:2] != [n, c]:
            raise Unsupported("sizes %s change N or C" % sizes)
        oh, ow = sizes[2:]
        factors = (oh / h, ow / w)
        opts.update(out_h=oh, out_w=ow)
    else:
        scales = [float(s) for s in np.asarray(scales).reshape(-1)]
        if len(scales) != 4 or scales[:2] != [1.0, 1.0]:
            raise Unsupported("scales %s: only H and W may be resized" % scales)
        oh, ow = int(h * scales[2]), int(w * scales[3])
        factors = scales[2:]
        opts.update(scale_y=scales[2], scale_x=scales[3])
    if method == "nearest-integer":
        if not all(f >= 1 and float(f).is_integer() for f in factors):
            raise Unsupported("nearest mode %r with the non-integer factors %s"
                              % (node.attr("nearest_mode", "round_prefer_floor"), list(factors)))
        opts["method"] = "nearest"  # integer upsampling: every rounding rule picks floor(o/s)
    if corners:
        opts["align_corners"] = True
    b.add("Interpolation", [b.value(node.inputs[0])], (n, c, oh, ow), node, options=opts)
