"""Reduction layer (sum, sumsq, abssum, mean; dims / start_axis; keep_dim; output_scale)."""
import json

import numpy as np
import pytest

from dlprim.layers import LayerError, TensorSpec, create
from layer_check import assert_close, check_reference_grads, run_layer

FORWARD = {"sum": lambda x, a: x.sum(axis=a, keepdims=True),
           "sumsq": lambda x, a: (x * x).sum(axis=a, keepdims=True),
           "abssum": lambda x, a: np.abs(x).sum(axis=a, keepdims=True),
           "mean": lambda x, a: x.mean(axis=a, keepdims=True)}
DERIVATIVE = {"sum": lambda x, n: np.ones_like(x), "sumsq": lambda x, n: 2 * x,
              "abssum": lambda x, n: np.sign(x), "mean": lambda x, n: np.ones_like(x) / n}


def reduction_ref(x, method, axes, keep, scale):
    y = scale * FORWARD[method](x, axes)
    if not keep:
        y = y.reshape([n for k, n in enumerate(x.shape) if k not in axes] or [1])
    return y


def reduction_grad_ref(x, dy, method, axes, scale):
    keep = tuple(1 if k in axes else n for k, n in enumerate(x.shape))
    count = int(np.prod([x.shape[a] for a in axes]))
    return scale * DERIVATIVE[method](x, count) * dy.reshape(keep)


@pytest.mark.parametrize("method", ["sum", "sumsq", "abssum", "mean"])
def test_reference_gradients(method):
    x = np.random.default_rng(1).standard_normal((3, 4, 2)) + 0.1  # away from |x| kink at 0
    axes = (0, 2)
    check_reference_grads(lambda xs, ps: [reduction_ref(xs[0], method, axes, False, 1.5)],
                          lambda xs, ps, ys, dys: ([reduction_grad_ref(xs[0], dys[0], method, axes, 1.5)], []),
                          [x])


CASES = [  # shape, options, reduced axes, methods (all four on a few, one on the rest)
    ((3, 65), {}, (0, 1), ["sum"]),
    ((2, 31, 5), {"start_axis": 1}, (1, 2), ["sum", "sumsq", "abssum", "mean"]),
    ((2, 31, 5), {"start_axis": -1, "keep_dim": False}, (2,), ["mean"]),
    ((4, 33), {"dims": [0]}, (0,), ["sumsq"]),
    ((4, 33), {"dims": [1], "keep_dim": False}, (1,), ["sum", "sumsq", "abssum", "mean"]),
    ((2, 3, 4, 5), {"dims": [0, 2, 3], "keep_dim": False}, (0, 2, 3), ["abssum"]),
    ((2, 3, 4, 5), {"dims": [-1, 1]}, (1, 3), ["sum", "sumsq", "abssum", "mean"]),
    ((64, 1), {"keep_dim": False}, (0, 1), ["mean"]),
    ((129,), {"dims": [0], "keep_dim": False}, (0,), ["sum"]),
]
CASE_PARAMS = [(shape, opts, axes, m) for shape, opts, axes, methods in CASES for m in methods]


@pytest.mark.parametrize("shape,opts,axes,method", CASE_PARAMS)
def test_forward_backward(ctx, rng, shape, opts, axes, method):
    x = rng.standard_normal(shape).astype(np.float32)
    x[np.abs(x) < 1e-3] = 0.5  # keep abssum away from its kink
    opts = dict(opts, method=method, output_scale=0.75)
    layer = create(ctx, "Reduction", "r", opts)
    keep = opts.get("keep_dim", True)
    x64 = x.astype(np.float64)
    y_ref = reduction_ref(x64, method, axes, keep, 0.75)
    dy = rng.standard_normal(y_ref.shape).astype(np.float32)
    for acc in (False, True):
        r = run_layer(ctx, layer, [x], dy=[dy], accumulate=acc)
        assert_close(r.y[0], y_ref, rtol=1e-5, atol=1e-5, what="y")
        assert_close(r.dx[0], reduction_grad_ref(x64, dy.astype(np.float64), method, axes, 0.75),
                     rtol=1e-5, atol=1e-6, what="dx")


def test_config_round_trip(ctx):
    for opts in ({}, {"method": "mean", "dims": [1, -1], "keep_dim": False},
                 {"method": "sumsq", "start_axis": 2, "output_scale": 0.5}):
        layer = create(ctx, "Reduction", "r", opts)
        again = create(ctx, "Reduction", "r", json.loads(json.dumps(layer.config())))
        assert again.config() == layer.config()
        assert all(layer.config()[k] == v for k, v in opts.items())
    assert "dims" not in create(ctx, "Reduction", "r", {}).config()


@pytest.mark.parametrize("opts,match", [
    ({"method": "median"}, "'method' must be one of"),
    ({"dims": [0], "start_axis": 1}, "'dims' and 'start_axis'"),
    ({"dims": []}, "'dims' must be a non-empty list"),
    ({"dims": "0"}, "'dims' must be a non-empty list"),
    ({"keep_dim": 1}, "'keep_dim'"),
    ({"output_scale": "2"}, "'output_scale'"),
])
def test_bad_options(ctx, opts, match):
    with pytest.raises(LayerError, match="Reduction 'r': .*" + match):
        create(ctx, "Reduction", "r", opts)


def test_axis_out_of_range(ctx):
    with pytest.raises(LayerError, match="Reduction 'r'.*'dims'.*out of range"):
        create(ctx, "Reduction", "r", {"dims": [3]}).setup([TensorSpec((2, 3))])
    with pytest.raises(LayerError, match="Reduction 'r'.*'start_axis'.*out of range"):
        create(ctx, "Reduction", "r", {"start_axis": 2}).setup([TensorSpec((2, 3))])
    with pytest.raises(LayerError, match="Reduction 'r'.*repeats"):
        create(ctx, "Reduction", "r", {"dims": [1, -1]}).setup([TensorSpec((2, 3))])
