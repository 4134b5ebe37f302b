"""Softmax layer (axis 1, optional log) against float64 numpy references."""
import json

import numpy as np
import pytest

from dlprim.layers import LayerError, create
from layer_check import assert_close, check_reference_grads, run_layer


def softmax_ref(x, log):
    m = x.max(axis=1, keepdims=True)
    e = np.exp(x - m)
    s = e.sum(axis=1, keepdims=True)
    return x - m - np.log(s) if log else e / s


def softmax_grad_ref(y, dy, log):
    if log:
        return dy - np.exp(y) * dy.sum(axis=1, keepdims=True)
    return y * (dy - (dy * y).sum(axis=1, keepdims=True))


@pytest.mark.parametrize("log", [False, True])
def test_reference_gradients(log):
    x = np.random.default_rng(3).standard_normal((3, 5, 2))
    check_reference_grads(lambda xs, ps: [softmax_ref(xs[0], log)],
                          lambda xs, ps, ys, dys: ([softmax_grad_ref(ys[0], dys[0], log)], []),
                          [x])


SHAPES = [(3, 1), (2, 31), (4, 32), (3, 33), (2, 63), (1, 64), (3, 65), (2, 129), (2, 300),
          (2, 8193), (65, 10), (2, 33, 7), (2, 5, 3, 4), (1, 64, 1, 1)]


@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize("shape", SHAPES)
def test_forward_backward(ctx, rng, shape, log):
    x = (rng.standard_normal(shape) * 3).astype(np.float32)
    dy = rng.standard_normal(shape).astype(np.float32)
    layer = create(ctx, "Softmax", "sm", {"log": log})
    for acc in (False, True):
        r = run_layer(ctx, layer, [x], dy=[dy], accumulate=acc)
        y_ref = softmax_ref(x.astype(np.float64), log)
        assert_close(r.y[0], y_ref, rtol=1e-5, atol=1e-6, what="y")
        assert_close(r.dx[0], softmax_grad_ref(y_ref, dy.astype(np.float64), log),
                     rtol=1e-4, atol=1e-5, what="dx")


def test_large_logits_are_stable(ctx):
    x = np.array([[1000.0, 0.0, -1000.0], [88.0, 89.0, 90.0]], np.float32)
    r = run_layer(ctx, create(ctx, "Softmax", "sm", {"log": True}), [x])
    assert np.all(np.isfinite(r.y[0]))
    assert_close(r.y[0], softmax_ref(x.astype(np.float64), True), what="log-softmax")


def test_config_round_trip_and_errors(ctx):
    for opts in ({}, {"log": True}):
        layer = create(ctx, "Softmax", "sm", opts)
        again = create(ctx, "Softmax", "sm", json.loads(json.dumps(layer.config())))
        assert again.config() == layer.config()
    assert create(ctx, "Softmax", "sm", {}).config() == {"log": False}
    with pytest.raises(LayerError, match="Softmax 'sm'.*'axis'"):
        create(ctx, "Softmax", "sm", {"axis": 2})
    with pytest.raises(LayerError, match="Softmax 'sm'.*'log'"):
        create(ctx, "Softmax", "sm", {"log": "yes"})
    with pytest.raises(LayerError, match="Softmax 'sm'.*2 dimensions"):
        from dlprim.layers import TensorSpec
        create(ctx, "Softmax", "sm", {}).setup([TensorSpec((5,))])


@pytest.mark.parametrize("shape", [(3, 65), (2, 5, 3, 4)])
def test_in_place(ctx, rng, shape):
    from dlprim.layers import TensorSpec, run
    from layer_check import place
    x = rng.standard_normal(shape).astype(np.float32)
    dy = rng.standard_normal(shape).astype(np.float32)
    layer = create(ctx, "Softmax", "sm", {})
    assert layer.INPLACE
    layer.setup([TensorSpec(shape)])
    t = place(ctx, x)
    run(layer.forward([t], [t], [], None, []), ctx.queue)
    y_ref = softmax_ref(x.astype(np.float64), False)
    assert_close(t.numpy(), y_ref, rtol=1e-5, atol=1e-6, what="y in place")
    g = place(ctx, dy)
    run(layer.backward([t], [g], [t], [g], [], [], None, [], [False]), ctx.queue)
    assert_close(g.numpy(), softmax_grad_ref(y_ref, dy.astype(np.float64), False), rtol=1e-4,
                 atol=1e-5, what="dx in place")
