"""Converters of spatial operators: GridSample and AffineGrid, the rearrangements
DepthToSpace and SpaceToDepth (Reshape + Transpose), CenterCropPad (Slice + Pad), RoiAlign,
and the normalizations InstanceNormalization (GroupNorm of one channel per group),
LpNormalization and MeanVarianceNormalization (reductions and pointwise operators)."""
import numpy as np

from .ops_pool import library
from .registry import Unsupported, converts

_F32 = np.dtype(np.float32)


def _float32(b, name, what="input"):
    if b.dtype(name) != _F32:
        raise Unsupported("%s of dtype %s (float32 only)" % (what, b.dtype(name).name))


def _text(node, key, default):
    v = node.attr(key, default)
    return v.decode() if isinstance(v, bytes) else v


# ----- GridSample and AffineGrid
_MODES = {"linear": "bilinear", "bilinear": "bilinear", "nearest": "nearest",
          "cubic": "bicubic", "bicubic": "bicubic"}


@converts("GridSample")
def grid_sample(b, node):
    """On the GridSample layer (F.grid_sample's kernels). ONNX's cubic brings a point
    outside the input inside before taking its 4 x 4 taps, PyTorch's bicubic brings each
    tap inside: they differ with border or reflection padding, which stays refused."""
    x, grid = node.inputs[0], node.inputs[1]
    shape = b.shape(x)
    mode = _MODES.get(_text(node, "mode", "linear" if b.opset >= 20 else "bilinear"))
    padding = _text(node, "padding_mode", "zeros")
    if mode is None:
        raise Unsupported("mode %r" % _text(node, "mode", ""))
    if padding not in ("zeros", "border", "reflection"):
        raise Unsupported("padding_mode %r" % padding)
    if mode == "bicubic" and padding != "zeros":
        raise Unsupported("cubic with padding_mode %r (ONNX pads the point, not each tap)"
                          % padding)
    if len(shape) not in (4, 5) or (mode == "bicubic" and len(shape) != 4):
        raise Unsupported("input of shape %s (2-D; 3-D but cubic)" % (shape,))
    _float32(b, x)
    _float32(b, grid, "grid")
    out = tuple(shape[:2]) + tuple(b.shape(grid)[1:-1])
    b.add("GridSample", [b.value(x), b.value(grid)], out, node, options={
        "mode": mode, "padding_mode": padding,
        "align_corners": bool(node.attr("align_corners", 0))})


def _affine_positions(n, align_corners):
    """ONNX's normalised positions along a dim of n (float64)."""
    if align_corners:
        if n == 1:
            return np.array([-1.0])
        return -1 + np.arange(n) * (2.0 / (n - 1))
    return -1 + (2 * np.arange(n) + 1) / n


@converts("AffineGrid")
def affine_grid(b, node):
    """grid = base · thetaᵀ: base the (positions, dims + 1) constant [x, y, (z,) 1] of the
    output's positions, one MatMul with theta (N, dims, dims + 1)."""
    theta = node.inputs[0]
    size = [int(v) for v in np.asarray(b.const(node.inputs[1], "size")).reshape(-1)]
    if len(size) not in (4, 5):
        raise Unsupported("size %s (2-D or 3-D)" % size)
    _float32(b, theta, "theta")
    spatial, dims = size[2:], len(size) - 2
    if tuple(b.shape(theta)) != (size[0], dims, dims + 1):
        raise Unsupported("theta of shape %s for size %s" % (b.shape(theta), size))
    corners = bool(node.attr("align_corners", 0))
    axes = np.meshgrid(*[_affine_positions(n, corners) for n in spatial], indexing="ij")[::-1]
    base = np.stack(list(axes) + [np.ones(spatial)], axis=-1).reshape(-1, dims + 1)
    base = b.value(b.constant(base.astype(np.float32), node.name + "/base"))
    positions = int(np.prod(spatial))
    flat = b.add("MatMul", [base, b.value(theta)], (size[0], positions, dims),
                 output=b.fresh(node.outputs[0] + "/flat"), name=node.name + "/matmul",
                 options={"transpose_b": True})
    b.add("Reshape", [flat], [size[0]] + spatial + [dims], node,
          options={"dims": [size[0]] + spatial + [dims]})


# ----- DepthToSpace, SpaceToDepth: a 6-D Reshape, a Transpose, a 4-D Reshape
def _rearrange(b, node, middle, perm, out):
    x = node.inputs[0]
    dtype = b.dtype(x)
    t = b.add("Reshape", [b.value(x)], middle, output=b.fresh(node.outputs[0] + "/split"),
              name=node.name + "/split", options={"dims": list(middle)}, dtype=dtype)
    moved = [middle[p] for p in perm]
    t = b.add("Transpose", [t], moved, output=b.fresh(node.outputs[0] + "/moved"),
              name=node.name + "/moved", options={"dims": list(perm)}, dtype=dtype)
    b.add("Reshape", [t], out, node, options={"dims": list(out)}, dtype=dtype)


def _blocks(b, node):
    shape = b.shape(node.inputs[0])
    bs = int(node.attr("blocksize"))
    if len(shape) != 4 or bs < 1:
        raise Unsupported("input of shape %s, blocksize %d" % (shape, bs))
    mode = _text(node, "mode", "DCR")
    if mode not in ("DCR", "CRD"):
        raise Unsupported("mode %r" % mode)
    return shape, bs, mode


@converts("DepthToSpace")
def depth_to_space(b, node):
    (n, c, h, w), bs, mode = _blocks(b, node)
    if c % (bs * bs):
        raise Unsupported("%d channels for blocksize %d" % (c, bs))
    d = c // (bs * bs)
    if mode == "DCR":
        middle, perm = (n, bs, bs, d, h, w), (0, 3, 4, 1, 5, 2)
    else:
        middle, perm = (n, d, bs, bs, h, w), (0, 1, 4, 2, 5, 3)
    _rearrange(b, node, middle, perm, (n, d, h * bs, w * bs))


@converts("SpaceToDepth")
def space_to_depth(b, node):
    (n, c, h, w), bs, mode = _blocks(b, node)
    if h % bs or w % bs:
        raise Unsupported("spatial size %s for blocksize %d" % ((h, w), bs))
    perm = (0, 3, 5, 1, 2, 4) if mode == "DCR" else (0, 1, 3, 5, 2, 4)
    _rearrange(b, node, (n, c, h // bs, bs, w // bs, bs), perm,
               (n, c * bs * bs, h // bs, w // bs))


# ----- CenterCropPad
@converts("CenterCropPad")
def center_crop_pad(b, node):
    """Per axis: a crop keeps [(n - s) // 2, that + s), a pad puts (s - n) // 2 zeros
    before and the rest after."""
    x = node.inputs[0]
    shape = list(b.shape(x))
    dtype = b.dtype(x)
    target = [int(v) for v in np.asarray(b.const(node.inputs[1], "shape")).reshape(-1)]
    axes = node.attr("axes")
    rank = len(shape)
    axes = list(range(rank)) if axes is None else [int(a) % rank for a in axes]
    if len(axes) != len(target) or len(set(axes)) != len(axes) or min(target, default=1) < 0:
        raise Unsupported("shape %s for axes %s" % (target, axes))
    t, cur = b.value(x), list(shape)
    pads = [0] * (2 * rank)
    for a, s in zip(axes, target):
        if s < cur[a]:
            begin = (cur[a] - s) // 2
            cur[a] = s
            t = b.add("Slice", [t], cur, output=b.fresh(node.outputs[0] + "/crop%d" % a),
                      name=node.name + "/crop%d" % a, dtype=dtype,
                      options={"dim": a, "begin": begin, "end": begin + s})
        elif s > cur[a]:
            pads[a] = (s - cur[a]) // 2
            pads[rank + a] = s - cur[a] - pads[a]
    if any(pads):
        out = [n + lo + hi for n, lo, hi in zip(cur, pads[:rank], pads[rank:])]
        b.add("Pad", [t], out, node, dtype=dtype,
              options={"pads": pads, "mode": "constant",
                       "value": False if dtype.kind == "b" else 0})
    else:
        b.out(node, t)


# ----- normalizations
@converts("InstanceNormalization")
def instance_norm(b, node):
    """(x - mean) / sqrt(var + epsilon) * scale + B per sample and channel: GroupNorm with
    one channel per group."""
    x = node.inputs[0]
    shape = b.shape(x)
    if len(shape) < 3:
        raise Unsupported("input of shape %s (N, C and spatial dims)" % (shape,))
    _float32(b, x)
    c = shape[1]
    params = []
    for i, what in ((1, "scale"), (2, "B")):
        v = np.asarray(b.const(node.inputs[i], what), np.float32).reshape(-1)
        if v.size != c:
            raise Unsupported("%s of %d values for %d channels" % (what, v.size, c))
        params.append(b.param(node.inputs[i], v))
    b.add("GroupNorm", [b.value(x)], shape, node, params=params, options={
        "groups": c, "eps": float(node.attr("epsilon", 1e-5)), "affine": True})


def _reduce(b, node, x, method, axes, tag, scale=1.0):
    shape = b.shapes[x]
    out = [1 if i in axes else n for i, n in enumerate(shape)]
    t = b.add("Reduction", [x], out, output=b.fresh(node.outputs[0] + "/" + tag),
              name=node.name + "/" + tag, options={"method": method, "dims": list(axes),
                                                   "keep_dim": True, "output_scale": scale})
    b.alias[t] = t
    return t


@converts("LpNormalization")
def lp_normalization(b, node):
    """x / ||x||_p along axis (p 1 or 2); 0 where the norm is 0 (x is 0 there), as onnx's
    reference, by dividing by norm + (norm == 0)."""
    x = node.inputs[0]
    shape = b.shape(x)
    _float32(b, x)
    p = int(node.attr("p", 2))
    if p not in (1, 2):
        raise Unsupported("p %d (1 or 2)" % p)
    axis = int(node.attr("axis", -1)) % len(shape)
    xv = b.value(x)
    norm = _reduce(b, node, xv, "abssum" if p == 1 else "sumsq", [axis], "norm")
    if p == 2:
        norm = library(b, node, "sqrt", [norm], _F32, "sqrt")
    zero = library(b, node, "eq", [norm], np.dtype(np.bool_), "zero", {"b": 0.0})
    norm = library(b, node, "add", [norm, zero], _F32, "safe")
    library(b, node, "div", [xv, norm], _F32)


@converts("MeanVarianceNormalization")
def mean_variance_normalization(b, node):
    """ONNX's function body: (x - E[x]) / (sqrt(E[x^2] - E[x]^2) + 1e-9) over axes."""
    x = node.inputs[0]
    shape = b.shape(x)
    _float32(b, x)
    axes = sorted({int(a) % len(shape) for a in node.attr("axes", [0, 2, 3])})
    count = float(np.prod([shape[a] for a in axes]))
    xv = b.value(x)
    mean = _reduce(b, node, xv, "mean", axes, "mean")
    squares = _reduce(b, node, xv, "sumsq", axes, "mean_sq", 1.0 / count)
    var = library(b, node, "sub", [squares, library(b, node, "mul", [mean, mean], _F32,
                                                    "mean2")], _F32, "var")
    std = library(b, node, "add", [library(b, node, "sqrt", [var], _F32, "std")], _F32,
                  "std_eps", {"b": 1e-9})
    centred = library(b, node, "sub", [xv, mean], _F32, "centred")
    library(b, node, "div", [centred, std], _F32)
