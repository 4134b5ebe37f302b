"""MatMul against float64 numpy: batches, broadcasting, transposes, alpha, accumulated
gradients, and its errors."""
import json

import numpy as np
import pytest

from dlprim.layers import LayerError, TensorSpec, create
from layer_check import assert_close, run_layer


def op(x, t):
    return np.swapaxes(x, -1, -2) if t else x


def reduce_to(g, shape):
    """Sum a broadcast gradient back to an operand's shape."""
    while g.ndim > len(shape):
        g = g.sum(0)
    for i, n in enumerate(shape):
        if n == 1 and g.shape[i] != 1:
            g = g.sum(i, keepdims=True)
    return g


@pytest.mark.parametrize("a,b,opts", [
    ((2, 3, 5, 4), (2, 3, 4, 6), {}),
    ((33, 17), (17, 65), {"alpha": 0.5}),
    ((5, 4), (3, 4, 6), {}),                       # A broadcast over B's batch
    ((2, 3, 5, 4), (4, 6), {"transpose_b": False}),  # B broadcast
    ((3, 4, 5), (3, 6, 4), {"transpose_a": True, "transpose_b": True}),
    ((2, 4, 5), (6, 4), {"transpose_a": True, "transpose_b": True, "alpha": -2.0})])
def test_forward_backward(ctx, rng, a, b, opts):
    layer = create(ctx, "MatMul", "mm", opts)
    ta, tb = opts.get("transpose_a", False), opts.get("transpose_b", False)
    alpha = opts.get("alpha", 1.0)
    xa = rng.standard_normal(a).astype(np.float32)
    xb = rng.standard_normal(b).astype(np.float32)
    A, B = xa.astype(np.float64), xb.astype(np.float64)
    want = alpha * op(A, ta) @ op(B, tb)
    dy = rng.standard_normal(want.shape).astype(np.float32)
    dc = dy.astype(np.float64)
    da = reduce_to(op(alpha * dc @ np.swapaxes(op(B, tb), -1, -2), ta), a)
    db = reduce_to(op(alpha * np.swapaxes(op(A, ta), -1, -2) @ dc, tb), b)
    for acc in (False, True):
        r = run_layer(ctx, layer, [xa, xb], dy=[dy], accumulate=acc)
        assert_close(r.y[0], want, rtol=1e-4, atol=1e-4, what="y")
        assert_close(r.dx[0], da, rtol=1e-4, atol=1e-4, what="dA")
        assert_close(r.dx[1], db, rtol=1e-4, atol=1e-4, what="dB")


def test_split_gemms_use_the_layer_workspace(ctx, rng, monkeypatch):
    # split-K partial sums (the wave plan on GPUs; forced here) sit in the planned
    # workspace after the broadcast operand's per-batch products
    from dlprim.core import tuning
    tile = dict(TILE_M=16, TILE_N=48, TILE_K=8, BLOCK_M=4, BLOCK_N=12, VEC=4, GROUP=8)
    monkeypatch.setattr(tuning, "wave_plan", lambda facts, M, N, K, batch, trans_b: (dict(tile), 2))
    layer = create(ctx, "MatMul", "mm", {})
    a, b = (5, 33, 40), (40, 17)                   # B broadcast over A's batch
    xa = rng.standard_normal(a).astype(np.float32)
    xb = rng.standard_normal(b).astype(np.float32)
    dy = rng.standard_normal((5, 33, 17)).astype(np.float32)
    r = run_layer(ctx, layer, [xa, xb], dy=[dy], accumulate=True)
    gemms = (layer.forward_gemm, layer.gemm_da, layer.gemm_db)
    assert all(g.splits == 2 and g._workspace is None for g in gemms)
    A, B, dc = xa.astype(np.float64), xb.astype(np.float64), dy.astype(np.float64)
    assert_close(r.y[0], A @ B, rtol=1e-4, atol=1e-4, what="y")
    assert_close(r.dx[0], dc @ B.T, rtol=1e-4, atol=1e-4, what="dA")
    assert_close(r.dx[1], (np.swapaxes(A, -1, -2) @ dc).sum(0), rtol=1e-4, atol=1e-4, what="dB")


def test_errors_and_round_trip(ctx):
    layer = create(ctx, "MatMul", "mm", {"transpose_b": True, "alpha": 0.125})
    again = create(ctx, "MatMul", "mm", json.loads(json.dumps(layer.config())))
    assert again.config() == layer.config()
    with pytest.raises(LayerError, match="MatMul 'mm': .*inner sizes differ"):
        create(ctx, "MatMul", "mm", {}).setup([TensorSpec((2, 3)), TensorSpec((4, 5))])
    with pytest.raises(LayerError, match="partial broadcasting"):
        create(ctx, "MatMul", "mm", {}).setup([TensorSpec((2, 1, 3, 4)), TensorSpec((1, 5, 4, 2))])
    with pytest.raises(LayerError, match="do not broadcast"):
        create(ctx, "MatMul", "mm", {}).setup([TensorSpec((2, 3, 4)), TensorSpec((3, 4, 2))])
    with pytest.raises(LayerError, match="at least 2 dimensions"):
        create(ctx, "MatMul", "mm", {}).setup([TensorSpec((4,)), TensorSpec((4, 2))])
