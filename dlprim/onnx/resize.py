"""ONNX's Resize as per-axis interpolation matrices.

ONNX defines Resize one axis at a time (onnx/reference/ops/op_resize.py): output position
y reads the source coordinate x(y) of its coordinate_transformation_mode; x's fraction
gives the weights of ``mode`` (nearest with its nearest_mode, linear, cubic with
cubic_coeff_a; antialias widens linear and cubic to the downscale's footprint) on the n
input positions nearest to x, clamped to the edges (exclude_outside drops and
renormalizes those outside); tf_crop_and_resize writes extrapolation_value where x falls
outside the input. So along each axis the result is y = M x + e, M an (out, in) matrix
and e the extrapolated rows' value: built here in float64 from those formulas, applied
with a MatMul layer per resized axis (the input viewed as (outer, in, inner), no
transposes), then e added where it is not 0.
"""
import math

import numpy as np

from .registry import Unsupported
from .steps import Steps, dtype_name

__all__ = ["source_positions", "axis_matrix", "apply_matrices"]


def source_positions(y, n_in, n_out, scale, ctm, roi):
    """ONNX's source coordinate of each output position ``y`` along one axis (float64);
    ``scale * n_in`` is the (fractional) output length the transformations use."""
    length = scale * n_in
    if ctm == "half_pixel":
        return (y + 0.5) / scale - 0.5
    if ctm == "half_pixel_symmetric":
        offset = n_in / 2 * (1 - n_out / length)
        return offset + (y + 0.5) / scale - 0.5
    if ctm == "pytorch_half_pixel":
        return np.full(n_out, -0.5) if length == 1 else (y + 0.5) / scale - 0.5
    if ctm == "align_corners":
        return np.zeros(n_out) if length == 1 else y * (n_in - 1) / (length - 1)
    if ctm == "asymmetric":
        return y / scale
    if ctm == "tf_crop_and_resize":
        lo, hi = roi
        x = (np.full(n_out, (hi - lo) * (n_in - 1) / 2) if length == 1
             else y * (hi - lo) * (n_in - 1) / (length - 1))
        return x + lo * (n_in - 1)
    raise Unsupported("coordinate_transformation_mode %r" % ctm)


def _nearest(ratio, nearest_mode):
    if ratio == 1:  # x on an input position: that one (the right neighbour of x - 1)
        return np.array([0.0, 1.0])
    upper = {"round_prefer_floor": ratio > 0.5, "round_prefer_ceil": ratio >= 0.5,
             "floor": False, "ceil": True}.get(nearest_mode)
    if upper is None:
        raise Unsupported("nearest_mode %r" % nearest_mode)
    return np.array([0.0, 1.0]) if upper else np.array([1.0, 0.0])


def _cubic(ratio, a):
    """Keys' cubic convolution weights of the 4 neighbours at fraction ``ratio``."""
    r, s = ratio, 1 - ratio
    return np.array([((a * (r + 1) - 5 * a) * (r + 1) + 8 * a) * (r + 1) - 4 * a,
                     ((a + 2) * r - (a + 3)) * r * r + 1,
                     ((a + 2) * s - (a + 3)) * s * s + 1,
                     ((a * (s + 1) - 5 * a) * (s + 1) + 8 * a) * (s + 1) - 4 * a])


def _cubic_kernel(t, a):
    t = np.abs(t)
    return np.where(t <= 1, (a + 2) * t ** 3 - (a + 3) * t ** 2 + 1,
                    np.where(t < 2, a * t ** 3 - 5 * a * t ** 2 + 8 * a * t - 4 * a, 0.0))


def _antialiased(ratio, scale, mode, a):
    """Linear or cubic weights stretched by 1/scale when downscaling, normalized."""
    scale = min(scale, 1.0)
    if mode == "linear":
        start = int(np.floor(-1 / scale) + 1)
        t = (np.arange(start, 2 - start) - ratio) * scale
        w = np.clip(1 - np.abs(t), 0, 1)
    else:
        start = int(np.floor(-2 / scale) + 1)
        w = _cubic_kernel(np.array([scale * (i - ratio) for i in range(start, 2 - start)]), a)
    return w / w.sum()


def _weights(ratio, scale, mode, nearest_mode, antialias, a):
    if mode == "nearest":
        return _nearest(ratio, nearest_mode)
    if antialias:
        return _antialiased(ratio, scale, mode, a)
    if mode == "linear":
        return np.array([1 - ratio, ratio])
    return _cubic(ratio, a)


def axis_matrix(n_in, n_out, scale, ctm, mode, nearest_mode="round_prefer_floor",
                exclude_outside=False, roi=(0.0, 1.0), antialias=False, cubic_a=-0.75):
    """(M (n_out, n_in), extrapolated rows (bool, n_out)) of ONNX's Resize along one axis."""
    x = source_positions(np.arange(n_out, dtype=np.float64), n_in, n_out, float(scale), ctm,
                         roi)
    outside = (x < 0) | (x > n_in - 1) if ctm == "tf_crop_and_resize" \
        else np.zeros(n_out, bool)
    base = np.floor(x)
    ratio = np.where(x == base, 1.0, x - base)
    coeffs = np.stack([_weights(float(r), float(scale), mode, nearest_mode, antialias, cubic_a)
                       for r in ratio])
    n = coeffs.shape[1]
    # the n positions nearest x (ties to the smaller), as in an edge-padded input
    pad = int(math.ceil(n / 2))
    p = np.floor(x + pad)
    frac = x + pad - p
    if n % 2 == 0:
        offset = np.where(frac == 0, -(n // 2), -(n // 2) + 1)
    else:
        offset = np.where(frac <= 0.5, -((n - 1) // 2), -((n - 1) // 2) + 1)
    index = (p.astype(np.int64) + offset)[:, None] + np.arange(n)[None, :] - pad
    if exclude_outside:
        coeffs = np.where((index < 0) | (index >= n_in), 0.0, coeffs)
        total = coeffs.sum(axis=1, keepdims=True)
        coeffs = coeffs / np.where(total == 0, 1.0, total)
    m = np.zeros((n_out, n_in))
    np.add.at(m, (np.repeat(np.arange(n_out), n), np.clip(index, 0, n_in - 1).ravel()),
              coeffs.ravel())
    m[outside] = 0.0
    return m, outside


def apply_matrices(b, node, shape, matrices, value):
    """y = the input resized along each axis a of ``matrices`` {a: (M, extrapolated
    rows)}: a MatMul with M per axis over the input viewed as (outer, n_in, inner) (or
    (outer, n_in) times M^T for the last axis), ``value`` on the extrapolated rows.
    float16 and bfloat16 inputs are resized in float32 and rounded once at the end, as
    onnx's reference rounds its float64 result."""
    s = Steps(b, node)
    x = node.inputs[0]
    dt = b.dtype(x)
    if dtype_name(dt) not in ("float32", "float16", "bfloat16"):
        raise Unsupported("input of dtype %s (float32, float16 and bfloat16 only)"
                          % dtype_name(dt))
    x = s.cast(x, np.float32, "float32")
    shape = list(shape)
    axes = sorted(matrices)
    for i, a in enumerate(axes):
        m, outside = matrices[a]
        n_out, n_in = m.shape
        outer, inner = int(np.prod(shape[:a])), int(np.prod(shape[a + 1:]))
        if inner == 1:
            view = s.reshape(x, (outer, n_in), "rows%d" % a)
            y = s.add("MatMul", [view, s.const(m.T.astype(np.float32), "matrix%d" % a)],
                      (outer, n_out), "axis%d" % a)
        else:
            view = s.reshape(x, (outer, n_in, inner), "view%d" % a)
            y = s.add("MatMul", [s.const(m.astype(np.float32), "matrix%d" % a), view],
                      (outer, n_out, inner), "axis%d" % a)
        shape[a] = n_out
        if outside.any() and value != 0.0:
            e = np.where(outside, np.float32(value), np.float32(0))
            per = (1, n_out) if inner == 1 else (1, n_out, 1)
            y = s.lib("add", [y, s.const(e.reshape(per), "extrapolated%d" % a)],
                      "filled%d" % a, attrs={"alpha": 1})
        last = i == len(axes) - 1 and dtype_name(dt) == "float32"
        x = s.reshape(y, tuple(shape), "resized%d" % a, output=node.outputs[0] if last else None)
    if dtype_name(dt) != "float32":
        x = s.lib("copy", [x], "rounded", dtype=dt, output=node.outputs[0])
    s.finish(0, x)
