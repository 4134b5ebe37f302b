"""Conv and ConvTranspose of any number of spatial axes with the weight given at run time
(a graph input, or computed), composed of a Gather by index tables built here and a
MatMul: the convolution layers hold their weights as parameters.

    Conv           cols[n, c, o, kk] = x[n, c, o * s + kk * d - pad] (0 outside: the index
                   past the end, which Gather reads as 0), then per group
                   y[n, g, kg, o] = sum_{c, kk} W[g, kg, c, kk] cols[n, g, c, o, kk]
    ConvTranspose  cols[n, g, kg, kk, i] = sum_c W[g, c, kg, kk] x[n, g, c, i], then
                   y[n, k, o] = sum of cols[n, k, kk, i] over the (kk, i) with
                   o = i * s + kk * d - pad: a Gather of those (padded with the index past
                   the end) and a sum

The same sums as the layers, in another order. ONNX's window rules (auto_pad,
output_shape, output_padding) as ops_nn's converters apply them, on every axis.
"""
import itertools

import numpy as np

from .registry import Unsupported
from .steps import Steps, dtype_name

__all__ = ["conv", "conv_transpose"]


def _geometry(node, spatial, kernel):
    """(strides, dilations, pads begin, pads end) of Conv with auto_pad resolved."""
    d = len(spatial)
    strides = [int(v) for v in node.attr("strides", [1] * d)]
    dil = [int(v) for v in node.attr("dilations", [1] * d)]
    pads = [int(v) for v in node.attr("pads", [0] * 2 * d)]
    auto = node.attr("auto_pad", "NOTSET")
    auto = auto.decode() if isinstance(auto, bytes) else auto
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        pads = [0] * 2 * d
        for i in range(d):
            out = -(-spatial[i] // strides[i])
            total = max((out - 1) * strides[i] + (kernel[i] - 1) * dil[i] + 1 - spatial[i], 0)
            small = total // 2
            pads[i], pads[i + d] = (small, total - small) if auto == "SAME_UPPER" \
                else (total - small, small)
    elif auto == "VALID":
        pads = [0] * 2 * d
    elif auto != "NOTSET":
        raise Unsupported("auto_pad %r" % auto)
    if len(strides) != d or len(dil) != d or len(pads) != 2 * d:
        raise Unsupported("window attributes of another rank than the %d spatial axes" % d)
    return strides, dil, pads[:d], pads[d:]


def _operands(b, node):
    x, w = node.inputs[0], node.inputs[1]
    sx, sw = b.shape(x), b.shape(w)
    dt = b.dtype(x)
    if dtype_name(dt) not in ("float32", "float16", "bfloat16") or \
            dtype_name(b.dtype(w)) != dtype_name(dt):
        raise Unsupported("input and weight of dtypes %s and %s (float32, float16 or "
                          "bfloat16 only)" % (dtype_name(dt), dtype_name(b.dtype(w))))
    if len(sx) < 3 or len(sw) != len(sx):
        raise Unsupported("input of shape %s and weight of shape %s" % (sx, sw))
    return x, w, sx, sw, dt


def _finish(s, node, y, k, out, dt):
    """y (N, K, O) -> (N, K, *out), plus the bias."""
    b = s.b
    n = b.shape(y)[0]
    bias = node.input(2)
    y = s.reshape(y, (n, k) + tuple(out), "spatial",
                  output=None if bias else node.outputs[0])
    if bias:
        per = (k,) + (1,) * len(out)
        c = s.const(np.asarray(b.consts[bias]).reshape(per), "bias") if b.is_const(bias) \
            else s.reshape(bias, per, "bias")
        y = s.lib("add", [y, c], "biased", dtype=dt, attrs={"alpha": 1}, output=node.outputs[0])
    s.finish(0, y)


def conv(b, node):
    """Conv composed of an im2col Gather and a grouped MatMul."""
    x, w, sx, sw, dt = _operands(b, node)
    s = Steps(b, node)
    n, c, spatial = sx[0], sx[1], tuple(sx[2:])
    k, cg, kernel = sw[0], sw[1], tuple(sw[2:])
    g = int(node.attr("group", 1))
    if c != cg * g or k % g:
        raise Unsupported("input of %d channels, weight %s in %d groups" % (c, sw, g))
    strides, dil, begin, end = _geometry(node, spatial, kernel)
    out = [(i + pb + pe - dd * (kk - 1) - 1) // st + 1
           for i, pb, pe, dd, kk, st in zip(spatial, begin, end, dil, kernel, strides)]
    if min(out) < 1:
        raise Unsupported("an empty output %s" % (out,))
    size = int(np.prod(spatial))
    # index[o, kk] of the input position each window reads; size (past the end) is a 0
    pos = [np.arange(o)[:, None] * st + np.arange(kk)[None, :] * dd - pb
           for o, kk, st, dd, pb in zip(out, kernel, strides, dil, begin)]
    index = np.zeros((int(np.prod(out)), int(np.prod(kernel))), np.int64)
    for o in itertools.product(*[range(v) for v in out]):
        rows = np.stack(np.meshgrid(*[p[i] for p, i in zip(pos, o)], indexing="ij"), 0)
        rows = rows.reshape(len(out), -1)
        inside = np.all((rows >= 0) & (rows < np.array(spatial)[:, None]), 0)
        flat = np.ravel_multi_index(np.where(inside, rows, 0), spatial)
        index[np.ravel_multi_index(o, out)] = np.where(inside, flat, size)
    no, nk, kg = index.shape[0], index.shape[1], k // g
    flat_x = s.reshape(x, (n, c, size), "flat")
    cols = s.add("Gather", [flat_x, s.const(index, "im2col")], (n, c, no, nk), "cols", dtype=dt,
                 axis=2)
    cols = s.reshape(cols, (n, g, cg, no, nk), "groups")
    cols = s.transpose(cols, (1, 0, 3, 2, 4), "rows")
    cols = s.reshape(cols, (g, n * no, cg * nk), "matrix")
    wm = s.reshape(w, (g, kg, cg * nk), "weight")
    y = s.add("MatMul", [cols, wm], (g, n * no, kg), "product", dtype=dt, transpose_b=True)
    y = s.reshape(y, (g, n, no, kg), "split")
    y = s.transpose(y, (1, 0, 3, 2), "channels")
    _finish(s, node, s.reshape(y, (n, k, no), "flat_out"), k, out, dt)


def _transpose_geometry(node, spatial, kernel):
    """(strides, dilations, pads begin, output sizes) of ConvTranspose, with output_shape,
    auto_pad and output_padding as ops_nn's 2-D converter applies them."""
    d = len(spatial)
    strides = [int(v) for v in node.attr("strides", [1] * d)]
    dil = [int(v) for v in node.attr("dilations", [1] * d)]
    out_pad = [int(v) for v in node.attr("output_padding", [0] * d)]
    pads = [int(v) for v in node.attr("pads", [0] * 2 * d)]
    auto, target = node.attr("auto_pad", "NOTSET"), node.attr("output_shape")
    auto = auto.decode() if isinstance(auto, bytes) else auto
    full = [(i - 1) * st + dd * (kk - 1) + 1 for i, st, dd, kk in zip(spatial, strides, dil, kernel)]
    if target is not None or auto in ("SAME_UPPER", "SAME_LOWER"):
        target = [int(v) for v in target][-d:] if target is not None \
            else [i * st for i, st in zip(spatial, strides)]
        pads = [0] * 2 * d
        for i in range(d):
            total = full[i] + out_pad[i] - target[i]
            if total < 0:
                out_pad[i] -= total
                total = 0
            small = total // 2
            pads[i], pads[i + d] = (small, total - small) if auto == "SAME_UPPER" \
                else (total - small, small)
    elif auto == "VALID":
        pads = [0] * 2 * d
    if len(strides) != d or len(dil) != d or len(pads) != 2 * d or len(out_pad) != d:
        raise Unsupported("window attributes of another rank than the %d spatial axes" % d)
    out = [f - pb - pe + op for f, pb, pe, op in zip(full, pads[:d], pads[d:], out_pad)]
    return strides, dil, pads[:d], out


def conv_transpose(b, node):
    """ConvTranspose composed of a grouped MatMul (every kernel tap of every input
    position) and a Gather-and-sum of the taps that land on each output position."""
    x, w, sx, sw, dt = _operands(b, node)
    s = Steps(b, node)
    n, c, spatial = sx[0], sx[1], tuple(sx[2:])
    kernel = tuple(sw[2:])
    g = int(node.attr("group", 1))
    if sw[0] != c or c % g:
        raise Unsupported("input of %d channels, weight %s in %d groups" % (c, sw, g))
    cg, kg = c // g, sw[1]
    k = kg * g
    strides, dil, begin, out = _transpose_geometry(node, spatial, kernel)
    if min(out) < 1:
        raise Unsupported("an empty output %s" % (out,))
    size, nk = int(np.prod(spatial)), int(np.prod(kernel))
    # per axis and output position: the (tap, input position) pairs landing there
    taps = []
    for o, i, kk, st, dd, pb in zip(out, spatial, kernel, strides, dil, begin):
        hit = [[(t, (p + pb - t * dd) // st) for t in range(kk)
                if (p + pb - t * dd) % st == 0 and 0 <= (p + pb - t * dd) // st < i]
               for p in range(o)]
        taps.append(hit)
    width = [max(1, max(len(h) for h in hits)) for hits in taps]
    index = np.full((int(np.prod(out)), int(np.prod(width))), nk * size, np.int64)
    for o in itertools.product(*[range(v) for v in out]):
        lists = [t[p] for t, p in zip(taps, o)]
        row = [np.ravel_multi_index(tuple(t for t, _ in combo), kernel) * size +
               np.ravel_multi_index(tuple(p for _, p in combo), spatial)
               for combo in itertools.product(*lists)]
        index[np.ravel_multi_index(o, out), :len(row)] = row
    xs = s.reshape(x, (n, g, cg, size), "groups")
    xs = s.transpose(xs, (1, 2, 0, 3), "channels")
    xs = s.reshape(xs, (g, cg, n * size), "matrix")
    wm = s.reshape(w, (g, cg, kg * nk), "weight")
    cols = s.add("MatMul", [wm, xs], (g, kg * nk, n * size), "taps", dtype=dt, transpose_a=True)
    cols = s.reshape(cols, (g, kg, nk, n, size), "split")
    cols = s.transpose(cols, (3, 0, 1, 2, 4), "batch")
    cols = s.reshape(cols, (n, k, nk * size), "flat")
    picked = s.add("Gather", [cols, s.const(index, "col2im")], (n, k) + index.shape, "picked",
                   dtype=dt, axis=2)
    y = s.add("Reduction", [picked], (n, k, index.shape[0]), "sum", dtype=dt, method="sum",
              dims=[3], keep_dim=False)
    _finish(s, node, y, k, out, dt)
