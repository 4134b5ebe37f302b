"""LRN (local response normalisation across channels) against float64 numpy references."""
import json

import numpy as np
import pytest

from dlprim.layers import LayerError, TensorSpec, create
from layer_check import assert_close, check_reference_grads, run_layer


def window_sums(x, size):
    """sum of x^2 over each channel's window [c - (size-1)//2, c + size//2]."""
    sq = x * x
    out = np.zeros_like(sq)
    c = x.shape[1]
    for i in range(c):
        lo, hi = max(i - (size - 1) // 2, 0), min(i + size // 2, c - 1)
        out[:, i] = sq[:, lo:hi + 1].sum(axis=1)
    return out


def lrn_ref(x, size, alpha, beta, k):
    return x * (k + alpha / size * window_sums(x, size)) ** -beta


def lrn_grad_ref(x, dy, size, alpha, beta, k):
    s = k + alpha / size * window_sums(x, size)
    t = dy * x * s ** (-beta - 1)
    c = x.shape[1]
    back = np.zeros_like(x)
    for i in range(c):  # channel i is in the window of channels [i - size//2, i + (size-1)//2]
        lo, hi = max(i - size // 2, 0), min(i + (size - 1) // 2, c - 1)
        back[:, i] = t[:, lo:hi + 1].sum(axis=1)
    return dy * s ** -beta - 2 * alpha / size * beta * x * back


@pytest.mark.parametrize("size", [1, 2, 5])
def test_reference_gradients(size):
    x = np.random.default_rng(size).standard_normal((2, 6, 3))
    args = (size, 0.5, 0.75, 1.5)
    check_reference_grads(lambda xs, ps: [lrn_ref(xs[0], *args)],
                          lambda xs, ps, ys, dys: ([lrn_grad_ref(xs[0], dys[0], *args)], []), [x])


def test_reference_matches_pytorch():
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(0).standard_normal((2, 7, 4, 3))
    expected = torch.nn.LocalResponseNorm(5, alpha=0.3, beta=0.6, k=2.0)(torch.tensor(x)).numpy()
    assert_close(lrn_ref(x, 5, 0.3, 0.6, 2.0), expected, rtol=1e-10, atol=1e-12, what="vs PyTorch")


CASES = [  # (shape, options)
    ((2, 5, 4, 6), {"size": 5, "alpha": 0.2, "beta": 0.75, "k": 1.0}),
    ((1, 33, 1, 31), {"size": 3, "alpha": 1.0, "beta": 0.5, "k": 2.0}),
    ((3, 4, 65), {"size": 2, "alpha": 0.5}),
    ((2, 1, 8, 8), {"size": 5, "alpha": 2.0, "beta": 1.0, "k": 0.5}),
    ((4, 64), {"size": 7, "alpha": 0.1, "beta": 0.75, "k": 1.0}),
]


@pytest.mark.parametrize("shape,opts", CASES)
def test_forward_backward(ctx, rng, shape, opts):
    x = (2 * rng.standard_normal(shape)).astype(np.float32)
    dy = rng.standard_normal(shape).astype(np.float32)
    layer = create(ctx, "LRN", "norm", opts)
    o = dict(layer.options)
    args = (o["size"], o["alpha"], o["beta"], o["k"])
    x64 = x.astype(np.float64)
    for acc in (False, True):
        r = run_layer(ctx, layer, [x], dy=[dy], accumulate=acc)
        assert_close(r.y[0], lrn_ref(x64, *args), rtol=1e-5, atol=1e-6, what="y")
        assert_close(r.dx[0], lrn_grad_ref(x64, dy.astype(np.float64), *args), rtol=1e-4,
                     atol=1e-5, what="dx")


def test_config_round_trip_and_errors(ctx):
    layer = create(ctx, "LRN", "norm", {"size": 5, "alpha": 2e-4})
    again = create(ctx, "LRN", "norm", json.loads(json.dumps(layer.config())))
    assert again.config() == layer.config()
    for opts, match in [({}, "'size' is required"), ({"size": 0}, "positive integer"),
                        ({"size": 3, "beta": "x"}, "'beta' must be a number"),
                        ({"size": 3, "k": 0.0}, "'k' must be positive")]:
        with pytest.raises(LayerError, match="LRN 'norm': .*" + match):
            create(ctx, "LRN", "norm", opts)
    with pytest.raises(LayerError, match="LRN 'norm'.*\\(N, C, ...\\)"):
        create(ctx, "LRN", "norm", {"size": 3}).setup([TensorSpec((5,))])
