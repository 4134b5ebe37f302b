"""LayerNorm, GroupNorm and RMSNorm against float64 numpy references (checked by finite
differences and against PyTorch), forward and backward, at sizes that cross work-group
edges, with accumulated input gradients."""
import json

import numpy as np
import pytest

from dlprim.core import normalization
from dlprim.core.normalization import GroupNormOps
from dlprim.layers import LayerError, TensorSpec, create
from layer_check import assert_close, check_reference_grads, run_layer


def norm_ref(x, view, eps, weight=None, bias=None, rms=False):
    """(y, xhat, rstd) over the (N, G, K, S) view; weight and bias of shape (G, K)."""
    v = x.reshape(view)
    mean = 0 if rms else v.mean(axis=(2, 3), keepdims=True)
    rstd = 1 / np.sqrt(((v - mean) ** 2).mean(axis=(2, 3), keepdims=True) + eps)
    xhat = (v - mean) * rstd
    y = xhat
    if weight is not None:
        y = y * weight.reshape(1, view[1], view[2], 1)
    if bias is not None:
        y = y + bias.reshape(1, view[1], view[2], 1)
    return y.reshape(x.shape), xhat, rstd


def norm_grad_ref(x, dy, view, eps, weight=None, has_bias=False, rms=False):
    _, xhat, rstd = norm_ref(x, view, eps, rms=rms)
    d = dy.reshape(view)
    w = 1 if weight is None else weight.reshape(1, view[1], view[2], 1)
    g = d * w
    mean_g = 0 if rms else g.mean(axis=(2, 3), keepdims=True)
    dx = rstd * (g - mean_g - xhat * (g * xhat).mean(axis=(2, 3), keepdims=True))
    dw = (d * xhat).sum(axis=(0, 3)).reshape(weight.shape) if weight is not None else None
    db = d.sum(axis=(0, 3)).reshape(weight.shape) if has_bias else None
    return dx.reshape(x.shape), [p for p in (dw, db) if p is not None]


def _views():
    return [((3, 70), (3, 1, 70, 1), False), ((2, 8, 6, 5), (2, 4, 2, 30), False),
            ((2, 4, 9), (8, 1, 9, 1), True)]


@pytest.mark.parametrize("shape,view,rms", _views())
def test_reference_gradients(shape, view, rms):
    rng = np.random.default_rng(1)
    x = rng.standard_normal(shape)
    k = view[1] * view[2]
    w, b = rng.standard_normal(k), rng.standard_normal(k)
    params = [w] if rms else [w, b]
    check_reference_grads(
        lambda xs, ps: [norm_ref(xs[0], view, 1e-3, ps[0], None if rms else ps[1], rms)[0]],
        lambda xs, ps, ys, dys: ([norm_grad_ref(xs[0], dys[0], view, 1e-3, ps[0], not rms, rms)[0]],
                                 norm_grad_ref(xs[0], dys[0], view, 1e-3, ps[0], not rms, rms)[1]),
        [x], params)


def test_references_match_pytorch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 6, 4, 3))
    w, b = rng.standard_normal(6), rng.standard_normal(6)
    t = torch.tensor(x)
    F = torch.nn.functional
    assert_close(norm_ref(x, (2, 3, 2, 12), 1e-5, w, b)[0],
                 F.group_norm(t, 3, torch.tensor(w), torch.tensor(b)).numpy(), 1e-10, 1e-12)
    w3 = rng.standard_normal(3)
    assert_close(norm_ref(x, (48, 1, 3, 1), 1e-5, w3, -w3)[0],
                 F.layer_norm(t, (3,), torch.tensor(w3), torch.tensor(-w3)).numpy(), 1e-10, 1e-12)
    assert_close(norm_ref(x, (48, 1, 3, 1), 1e-6, w3, rms=True)[0],
                 F.rms_norm(t, (3,), torch.tensor(w3), 1e-6).numpy(), 1e-10, 1e-12)


CASES = [  # (type, options, input shape, (N, G, K, S) view)
    ("LayerNorm", {}, (3, 5, 70), (15, 1, 70, 1)),
    ("LayerNorm", {"normalized_dims": 2, "eps": 1e-3}, (2, 33, 9), (2, 1, 297, 1)),
    ("LayerNorm", {"affine": False}, (4, 300), (4, 1, 300, 1)),
    ("GroupNorm", {"groups": 4}, (2, 8, 7, 9), (2, 4, 2, 63)),
    ("GroupNorm", {"groups": 1, "affine": False}, (3, 6, 5), (3, 1, 6, 5)),
    ("RMSNorm", {}, (6, 129), (6, 1, 129, 1)),
    ("RMSNorm", {"eps": 1e-2, "normalized_dims": 2}, (2, 3, 4), (2, 1, 12, 1))]


@pytest.mark.parametrize("kernels", ["default", "rows", "cpu_rows", "pointwise"])
@pytest.mark.parametrize("kind,opts,shape,view", CASES)
def test_forward_backward(ctx, rng, monkeypatch, kind, opts, shape, view, kernels):
    rows = view[1] == 1 and view[3] == 1
    expected = normalization.default_kernels(ctx.facts, rows)
    if kernels != "default":  # the GPUs' row kernels, the CPUs' and the generator's
        if not rows and kernels != "pointwise":  # paths, on any device
            pytest.skip("GroupNorm's statistics are not per row")
        monkeypatch.setattr(normalization, "default_kernels",
                            lambda facts, rows, dtype=None: kernels)
        expected = kernels
    layer = create(ctx, kind, "norm", opts)
    x = (rng.standard_normal(shape) * 3 + 1).astype(np.float32)
    dy = rng.standard_normal(shape).astype(np.float32)
    rms = kind == "RMSNorm"
    k = view[1] * view[2]
    affine = layer.affine
    w = rng.standard_normal(k).astype(np.float32).reshape(
        (shape[1],) if kind == "GroupNorm" else shape[len(shape) - layer.options.get(
            "normalized_dims", 1):]) if affine else None
    b = (rng.standard_normal(w.shape).astype(np.float32) if affine and not rms else None)
    params = [p for p in (w, b) if p is not None]
    x64 = x.astype(np.float64)
    w64 = None if w is None else w.astype(np.float64).ravel()
    for acc in (False, True):
        r = run_layer(ctx, layer, [x], params=params, dy=[dy], accumulate=acc)
        want = norm_ref(x64, view, layer.eps, w64, None if b is None else b.astype(np.float64).ravel(),
                        rms)[0]
        assert_close(r.y[0], want, rtol=1e-4, atol=1e-5, what="y")
        dx, dps = norm_grad_ref(x64, dy.astype(np.float64), view, layer.eps, w64, b is not None, rms)
        assert_close(r.dx[0], dx, rtol=1e-3, atol=1e-4, what="dx")
        for got, want_p in zip(r.dparams, dps):
            assert_close(got.ravel(), want_p.ravel(), rtol=1e-4, atol=1e-4, what="dparam")
    assert layer.ops.kernels == expected
    # predict mode: the same output, statistics in the workspace
    r = run_layer(ctx, create(ctx, kind, "norm", opts), [x], params=params, mode="predict")
    assert_close(r.y[0], want, rtol=1e-4, atol=1e-5, what="predict y")


def test_options_round_trip_and_errors(ctx):
    layer = create(ctx, "GroupNorm", "gn", {"groups": 2, "eps": 1e-4})
    again = create(ctx, "GroupNorm", "gn", json.loads(json.dumps(layer.config())))
    assert again.config() == layer.config()
    with pytest.raises(LayerError, match="GroupNorm 'gn': .*'groups' must be a positive int "
                                         "that divides the 6 channels"):
        create(ctx, "GroupNorm", "gn", {"groups": 4}).setup([TensorSpec((2, 6, 3))])
    with pytest.raises(LayerError, match="LayerNorm 'ln': .*'normalized_dims'"):
        create(ctx, "LayerNorm", "ln", {"normalized_dims": 3}).setup([TensorSpec((2, 6))])
    with pytest.raises(LayerError, match="'eps' must be a positive number"):
        create(ctx, "RMSNorm", "rms", {"eps": 0})
    with pytest.raises(LayerError, match="unknown option"):
        create(ctx, "LayerNorm", "ln", {"bias": False})


def test_row_kernels_choice_and_nan(ctx):
    # the row kernels take only per-row statistics; a NaN in a row makes that row NaN
    with pytest.raises(ValueError, match="one group of contiguous values per row"):
        GroupNormOps(ctx, (2, 4, 2, 63), 1e-5, kernels="rows")
    with pytest.raises(ValueError, match="kernels must be None, 'rows', 'cpu_rows' or 'pointwise'"):
        GroupNormOps(ctx, (2, 1, 8, 1), 1e-5, kernels="fused")
    with pytest.raises(ValueError, match="CPU row kernels take float32 rows"):
        GroupNormOps(ctx, (2, 4, 2, 63), 1e-5, kernels="cpu_rows")
    with pytest.raises(ValueError, match="CPU row kernels take float32 rows"):
        GroupNormOps(ctx, (2, 1, 8, 1), 1e-5, kernels="cpu_rows", dtype=np.float16)
    import dlprim as dp
    for kernels in ("rows", "cpu_rows"):
        ops = GroupNormOps(ctx, (3, 1, 40, 1), 1e-5, affine=False, kernels=kernels)
        x = np.ones((3, 40), np.float32)
        x[1, 7] = np.nan
        x[2] = np.arange(40)
        X, Y = dp.Tensor.from_numpy(ctx, x), dp.Tensor(ctx, (3, 40))
        mean, rstd = dp.Tensor(ctx, (3,)), dp.Tensor(ctx, (3,))
        for launch in ops.forward_launches(X, Y, mean, rstd):
            launch(ctx.queue)
        y = Y.numpy()
        assert np.isnan(y[1]).all() and not np.isnan(y[[0, 2]]).any()
        want = (x[2] - x[2].mean()) / np.sqrt(x[2].var() + 1e-5)
        np.testing.assert_allclose(y[2], want, rtol=1e-5, atol=1e-5)
        assert np.isnan(mean.numpy()[1]) and mean.numpy()[2] == pytest.approx(19.5)


@pytest.mark.parametrize("n,k", [(1, 1), (3, 15), (70, 17), (131, 64), (2, 300)])
@pytest.mark.parametrize("rms", [False, True])
def test_cpu_row_kernels_at_vector_edges(ctx, rng, n, k, rms):
    """kernels/normalization_cpu_rows.cl against float64 at rows shorter and longer than
    the vector width, with a tail, the parameter gradients beside them (accumulated:
    param_beta 1) and dx accumulated (beta 1)."""
    import dlprim as dp
    ops = GroupNormOps(ctx, (n, 1, k, 1), 1e-3, rms=rms, bias=not rms, kernels="cpu_rows")
    x = (rng.standard_normal((n, k)) * 2 + 1).astype(np.float32)
    dy = rng.standard_normal((n, k)).astype(np.float32)
    w = rng.standard_normal(k).astype(np.float32)
    b = rng.standard_normal(k).astype(np.float32)
    T = lambda a: dp.Tensor.from_numpy(ctx, np.ascontiguousarray(a, np.float32))  # noqa: E731
    X, DY, W, B = T(x), T(dy), T(w), T(b)
    Y, mean, rstd = dp.Tensor(ctx, (n, k)), dp.Tensor(ctx, (n,)), dp.Tensor(ctx, (n,))
    dx0, dw0, db0 = (rng.standard_normal(s).astype(np.float32) for s in ((n, k), k, k))
    DX, DW, DB = T(dx0), T(dw0), T(db0)
    launches = ops.forward_launches(X, Y, mean, rstd, W, None if rms else B)
    launches += ops.backward_launches(X, DY, mean, rstd, DX, W, DW, None if rms else DB,
                                      beta=1.0, param_beta=1.0)
    for launch in launches:
        launch(ctx.queue)
    view = (n, 1, k, 1)
    x64 = x.astype(np.float64)
    want = norm_ref(x64, view, 1e-3, w.astype(np.float64), None if rms else b.astype(np.float64),
                    rms)[0]
    assert_close(Y.numpy(), want, rtol=1e-4, atol=1e-5, what="y")
    dx, dps = norm_grad_ref(x64, dy.astype(np.float64), view, 1e-3, w.astype(np.float64),
                            not rms, rms)
    assert_close(DX.numpy(), dx + dx0, rtol=1e-3, atol=1e-4, what="dx")
    assert_close(DW.numpy(), dps[0].ravel() + dw0, rtol=1e-4, atol=1e-4, what="dweight")
    if not rms:
        assert_close(DB.numpy(), dps[1].ravel() + db0, rtol=1e-4, atol=1e-4, what="dbias")
    else:
        np.testing.assert_array_equal(DB.numpy(), db0)  # not asked for: left alone
