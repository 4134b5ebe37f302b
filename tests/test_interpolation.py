"""Interpolation (nearest, nearest-exact, bilinear) against float64 numpy references.

The reference writes the resampling along each axis as a dense matrix A (out x in), so
y = Ay x Ax^T and its adjoint dx = Ay^T dy Ax; this is independent of the gather tables
the kernels use. Where PyTorch is installed it is checked against F.interpolate too.
"""
import json

import numpy as np
import pytest

from dlprim.layers import LayerError, TensorSpec, create
from layer_check import assert_close, check_reference_grads, run_layer


def axis_matrix(n_in, n_out, method, scale, align):
    f = np.float32
    a = np.zeros((n_out, n_in))
    s = f(1.0 / scale) if scale > 0 else f(n_in) / f(n_out)
    for o in range(n_out):
        if method == "bilinear":
            if align:
                src = f(o) * (f(n_in - 1) / f(n_out - 1) if n_out > 1 else f(0))
            else:
                src = max((f(o) + f(0.5)) * s - f(0.5), f(0))
            i = min(int(np.floor(src)), n_in - 1)
            frac = float(src) - i
            a[o, i] += 1 - frac
            a[o, min(i + 1, n_in - 1)] += frac
        else:
            off = f(0.5) if method == "nearest-exact" else f(0)
            a[o, min(int(np.floor((f(o) + off) * s)), n_in - 1)] = 1
    return a


def mats(shape, out_hw, method, scales, align):
    return (axis_matrix(shape[2], out_hw[0], method, scales[0], align),
            axis_matrix(shape[3], out_hw[1], method, scales[1], align))


def interp_ref(x, ay, ax):
    return np.einsum("oh,nchw,pw->ncop", ay, x, ax)


def interp_grad_ref(dy, ay, ax):
    return np.einsum("oh,ncop,pw->nchw", ay, dy, ax)


def test_reference_gradients():
    x = np.random.default_rng(2).standard_normal((1, 2, 3, 4))
    ay, ax = mats(x.shape, (5, 7), "bilinear", (-1, -1), False)
    check_reference_grads(lambda xs, ps: [interp_ref(xs[0], ay, ax)],
                          lambda xs, ps, ys, dys: ([interp_grad_ref(dys[0], ay, ax)], []), [x])


CASES = [  # (input shape, options)
    ((2, 3, 4, 5), {"method": "nearest", "scale_y": 2.0, "scale_x": 2.0}),
    ((1, 2, 7, 9), {"method": "nearest", "out_h": 4, "out_w": 13}),
    ((1, 65, 3, 3), {"method": "nearest-exact", "out_h": 5, "out_w": 2}),
    ((2, 3, 4, 5), {"method": "bilinear", "scale_y": 2.0, "scale_x": 2.0}),
    ((1, 2, 5, 7), {"method": "bilinear", "scale_y": 1.5, "scale_x": 0.5}),
    ((1, 2, 9, 6), {"method": "bilinear", "out_h": 4, "out_w": 11}),
    ((2, 1, 4, 5), {"method": "bilinear", "out_h": 7, "out_w": 3, "align_corners": True}),
    ((1, 1, 3, 33), {"method": "bilinear", "out_h": 1, "out_w": 65, "align_corners": True}),
    ((1, 3, 1, 1), {"method": "bilinear", "out_h": 31, "out_w": 32}),
    ((1, 1, 32, 32), {"method": "bilinear", "out_h": 63, "out_w": 64}),
]


@pytest.mark.parametrize("shape,opts", CASES)
def test_forward_backward(ctx, rng, shape, opts):
    x = rng.standard_normal(shape).astype(np.float32)
    layer = create(ctx, "Interpolation", "up", opts)
    out_hw = layer.setup([TensorSpec(shape)])[0][0].shape[2:]
    scales = (opts.get("scale_y", -1), opts.get("scale_x", -1))
    ay, ax = mats(shape, out_hw, opts["method"], scales, opts.get("align_corners", False))
    dy = rng.standard_normal(shape[:2] + tuple(out_hw)).astype(np.float32)
    for acc in (False, True):
        r = run_layer(ctx, layer, [x], dy=[dy], accumulate=acc)
        assert_close(r.y[0], interp_ref(x.astype(np.float64), ay, ax), rtol=1e-5, atol=1e-6, what="y")
        assert_close(r.dx[0], interp_grad_ref(dy.astype(np.float64), ay, ax), rtol=1e-4,
                     atol=1e-5, what="dx")


@pytest.mark.parametrize("shape,opts", CASES[:8])
def test_reference_matches_pytorch(shape, opts):
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    x = np.random.default_rng(0).standard_normal(shape)
    method = opts["method"]
    kw = {"mode": method}
    if "out_h" in opts:
        kw["size"] = (opts["out_h"], opts["out_w"])
        scales = (-1, -1)
    else:
        kw["scale_factor"] = (opts["scale_y"], opts["scale_x"])
        scales = (opts["scale_y"], opts["scale_x"])
    if method == "bilinear":
        kw["align_corners"] = opts.get("align_corners", False)
    expected = F.interpolate(torch.tensor(x, dtype=torch.float32), **kw).double().numpy()
    ay, ax = mats(shape, expected.shape[2:], method, scales, opts.get("align_corners", False))
    assert_close(interp_ref(x, ay, ax), expected, rtol=1e-5, atol=1e-5, what="vs PyTorch")


def test_config_round_trip(ctx):
    for opts in ({"method": "nearest", "scale_y": 2.0, "scale_x": 2.0},
                 {"method": "bilinear", "out_h": 5, "out_w": 6, "align_corners": True}):
        layer = create(ctx, "Interpolation", "up", opts)
        again = create(ctx, "Interpolation", "up", json.loads(json.dumps(layer.config())))
        assert again.config() == layer.config()


@pytest.mark.parametrize("opts,match", [
    ({}, "'method' is required"),
    ({"method": "cubic", "out_h": 2, "out_w": 2}, "'method' must be one of"),
    ({"method": "nearest"}, "exactly one pair"),
    ({"method": "nearest", "out_h": 2, "out_w": 2, "scale_y": 2.0, "scale_x": 2.0}, "exactly one pair"),
    ({"method": "nearest", "out_h": 2}, "'out_h' and 'out_w'"),
    ({"method": "nearest", "scale_x": 2.0}, "'scale_y' and 'scale_x'"),
    ({"method": "nearest", "out_h": 2, "out_w": 2, "align_corners": True}, "'align_corners'"),
    ({"method": "nearest", "out_h": 2, "out_w": 2, "size": 3}, "unknown option 'size'"),
])
def test_bad_options(ctx, opts, match):
    with pytest.raises(LayerError, match="Interpolation 'up': .*" + match):
        create(ctx, "Interpolation", "up", opts)


def test_bad_inputs(ctx):
    layer = create(ctx, "Interpolation", "up", {"method": "nearest", "scale_y": 0.2, "scale_x": 1.0})
    with pytest.raises(LayerError, match="Interpolation 'up'.*empty"):
        layer.setup([TensorSpec((1, 1, 4, 4))])
    with pytest.raises(LayerError, match="Interpolation 'up'.*\\(N, C, H, W\\)"):
        layer.setup([TensorSpec((1, 4, 4))])
