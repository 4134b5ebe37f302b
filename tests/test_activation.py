"""Activation (every kind), Threshold, Hardtanh, Abs against float64 numpy references."""
import json
import math

import numpy as np
import pytest

from dlprim.layers import LayerError, TensorSpec, create, run
from layer_check import assert_close, check_reference_grads, place, run_layer

_erf = np.vectorize(math.erf)


def _sig(x):
    return 1 / (1 + np.exp(-x))


def _softplus(x, beta=1.0, threshold=20.0):
    return np.where(beta * x > threshold, x, np.log1p(np.exp(np.minimum(beta * x, threshold))) / beta)


def _gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))


# name -> (forward, derivative dy/dx) in float64; opts are the layer options
REFS = {
    "identity": (lambda x, o: x, lambda x, o: np.ones_like(x)),
    "relu": (lambda x, o: np.maximum(x, 0), lambda x, o: (x > 0) * 1.0),
    "relu6": (lambda x, o: np.clip(x, 0, 6), lambda x, o: ((x > 0) & (x < 6)) * 1.0),
    "sigmoid": (lambda x, o: _sig(x), lambda x, o: _sig(x) * (1 - _sig(x))),
    "tanh": (lambda x, o: np.tanh(x), lambda x, o: 1 - np.tanh(x) ** 2),
    "leaky_relu": (lambda x, o: np.where(x > 0, x, o["negative_slope"] * x),
                   lambda x, o: np.where(x > 0, 1.0, o["negative_slope"])),
    "elu": (lambda x, o: np.where(x > 0, x, o["alpha"] * (np.exp(x) - 1)),
            lambda x, o: np.where(x > 0, 1.0, o["alpha"] * np.exp(x))),
    "gelu": (lambda x, o: 0.5 * x * (1 + _erf(x / np.sqrt(2))),
             lambda x, o: 0.5 * (1 + _erf(x / np.sqrt(2))) + x * np.exp(-x * x / 2) / np.sqrt(2 * np.pi)),
    "gelu_tanh": (lambda x, o: _gelu_tanh(x), None),
    "silu": (lambda x, o: x * _sig(x), lambda x, o: _sig(x) * (1 + x * (1 - _sig(x)))),
    "hardswish": (lambda x, o: x * np.clip(x + 3, 0, 6) / 6,
                  lambda x, o: np.where(x <= -3, 0.0, np.where(x >= 3, 1.0, (2 * x + 3) / 6))),
    "hardsigmoid": (lambda x, o: np.clip(x + 3, 0, 6) / 6,
                    lambda x, o: ((x > -3) & (x < 3)) / 6.0),
    "mish": (lambda x, o: x * np.tanh(_softplus(x)), None),
    "softplus": (lambda x, o: _softplus(x, o["beta"], o["threshold"]),
                 lambda x, o: np.where(o["beta"] * x > o["threshold"], 1.0, _sig(o["beta"] * x))),
}
REFS["swish"] = REFS["silu"]
DEFAULTS = {"negative_slope": 0.01, "alpha": 1.0, "beta": 1.0, "threshold": 20.0}


def _numeric_derivative(f, x, o, eps=1e-6):
    return (f(x + eps, o) - f(x - eps, o)) / (2 * eps)


def ref_grad(name, x, o):
    fwd, der = REFS[name]
    return der(x, o) if der is not None else _numeric_derivative(fwd, x, o)


def away_from_kinks(rng, n, scale=4.0):
    """Values in [-scale, scale] at least 0.05 from the kinks at 0, +-3 and 6."""
    x = rng.uniform(-scale, scale, n)
    for k in (0.0, 3.0, -3.0, 6.0):
        d = x - k
        near = np.abs(d) < 0.05
        x[near] = k + np.where(d[near] >= 0, 0.07, -0.07)
    return x


@pytest.mark.parametrize("name", sorted(REFS))
def test_reference_derivatives_match_finite_differences(name):
    rng = np.random.default_rng(3)
    x = away_from_kinks(rng, 40)
    o = dict(DEFAULTS, negative_slope=0.2, alpha=0.7)
    fwd = REFS[name][0]
    check_reference_grads(lambda xs, ps: [fwd(xs[0], o)],
                          lambda xs, ps, ys, dys: ([dys[0] * ref_grad(name, xs[0], o)], []), [x])


ALL = sorted(REFS)


@pytest.mark.parametrize("name", ALL)
def test_activation_forward_backward_accumulate(ctx, name):
    rng = np.random.default_rng(ALL.index(name))
    o = dict(DEFAULTS)
    options = {"activation": name}
    if name == "leaky_relu":
        options["negative_slope"] = o["negative_slope"] = 0.1
    if name == "elu":
        options["alpha"] = o["alpha"] = 0.5
    if name == "softplus":
        options.update(beta=2.0, threshold=3.0)
        o.update(beta=2.0, threshold=3.0)
    x = away_from_kinks(rng, 65)
    if name == "softplus":
        x[:5] = [1.6, 2.0, -1.0, 0.5, 3.0]   # both sides of beta*x = threshold
    dy = rng.standard_normal(65)
    layer = create(ctx, "Activation", "act", options)
    r = run_layer(ctx, layer, [x.astype(np.float32)], dy=[dy.astype(np.float32)], accumulate=True)
    assert_close(r.y[0], REFS[name][0](x, o), rtol=2e-5, atol=2e-6, what=name + " y")
    assert_close(r.dx[0], dy * ref_grad(name, x, o), rtol=1e-4, atol=2e-5, what=name + " dx")


@pytest.mark.parametrize("n", [1, 31, 32, 33, 63, 64, 65, 127, 129, 1000])
@pytest.mark.parametrize("name", ["relu", "gelu"])
def test_activation_sizes_overwrite(ctx, name, n):
    rng = np.random.default_rng(n)
    x = away_from_kinks(rng, n)
    dy = rng.standard_normal(n)
    layer = create(ctx, "Activation", "act", {"activation": name})
    r = run_layer(ctx, layer, [x.astype(np.float32)], dy=[dy.astype(np.float32)])
    assert_close(r.y[0], REFS[name][0](x, DEFAULTS), rtol=2e-5, atol=2e-6)
    assert_close(r.dx[0], dy * ref_grad(name, x, DEFAULTS), rtol=1e-4, atol=2e-5)


def test_activation_4d_input(ctx, rng):
    x = away_from_kinks(rng, 2 * 3 * 5 * 7).reshape(2, 3, 5, 7)
    dy = rng.standard_normal(x.shape)
    layer = create(ctx, "Activation", "act", {"activation": "sigmoid"})
    r = run_layer(ctx, layer, [x.astype(np.float32)], dy=[dy.astype(np.float32)])
    assert_close(r.y[0], _sig(x), rtol=1e-5, atol=1e-6)
    assert_close(r.dx[0], dy * _sig(x) * (1 - _sig(x)), rtol=1e-4, atol=1e-6)


def _flags(ctx, type_name, options=None):
    return create(ctx, type_name, "a", options).setup([TensorSpec((4,))]).flags


def test_inplace_flags(ctx):
    for name in ("relu", "relu6", "sigmoid", "tanh", "identity"):
        f = _flags(ctx, "Activation", {"activation": name})
        assert f.inplace and f.backward_reads_outputs and not f.backward_reads_inputs
    for name in ("gelu", "elu", "leaky_relu", "mish", "silu"):
        f = _flags(ctx, "Activation", {"activation": name})
        assert not f.inplace and f.backward_reads_inputs and not f.backward_reads_outputs
    assert _flags(ctx, "Hardtanh").inplace
    assert not _flags(ctx, "Abs").inplace
    f = _flags(ctx, "Threshold")
    assert f.inplace and not f.backward_reads_inputs and not f.backward_reads_outputs
    # the facts travel with the setup, never as attributes of one instance
    layer = create(ctx, "Activation", "a", {"activation": "gelu"})
    layer.setup([TensorSpec((4,))])
    assert not {"INPLACE", "BACKWARD_READS_INPUTS", "BACKWARD_READS_OUTPUTS"} & set(vars(layer))


def test_backward_of_inplace_activation_reads_only_y(ctx, rng):
    """Running in place, x is overwritten by y; the gradient must still be right."""
    x = away_from_kinks(rng, 64)
    dy = rng.standard_normal(64)
    layer = create(ctx, "Activation", "a", {"activation": "tanh"})
    layer.setup([TensorSpec((64,))])
    t = place(ctx, x.astype(np.float32))
    run(layer.forward([t], [t], [], None, []), ctx.queue)
    dx = place(ctx, np.zeros(64, np.float32))
    run(layer.backward([t], [dx], [t], [place(ctx, dy.astype(np.float32))], [], [], None, [],
                       [False]), ctx.queue)
    assert_close(dx.numpy(), dy * (1 - np.tanh(x) ** 2), rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("accumulate", [False, True])
def test_threshold(ctx, rng, accumulate):
    x = away_from_kinks(rng, 65)
    layer = create(ctx, "Threshold", "t", {"threshold": 0.5})
    r = run_layer(ctx, layer, [x.astype(np.float32)], dy=[np.ones(65, np.float32)],
                  accumulate=accumulate)
    assert_close(r.y[0], (x > 0.5) * 1.0)
    assert_close(r.dx[0], np.zeros(65))


@pytest.mark.parametrize("n", [33, 64])
def test_hardtanh(ctx, rng, n):
    x = away_from_kinks(rng, n) * 0.8
    x[np.abs(np.abs(x + 0.5) - 2.5) < 0.05] += 0.1  # away from -3 and 2
    dy = rng.standard_normal(n)
    layer = create(ctx, "Hardtanh", "h", {"min_val": -3.0, "max_val": 2.0})
    for acc in (False, True):
        r = run_layer(ctx, layer, [x.astype(np.float32)], dy=[dy.astype(np.float32)], accumulate=acc)
        assert_close(r.y[0], np.clip(x, -3, 2))
        assert_close(r.dx[0], dy * ((x > -3) & (x < 2)), atol=1e-6)


def test_abs(ctx, rng):
    x = away_from_kinks(rng, 63)
    dy = rng.standard_normal(63)
    for acc in (False, True):
        r = run_layer(ctx, create(ctx, "Abs", "a"), [x.astype(np.float32)],
                      dy=[dy.astype(np.float32)], accumulate=acc)
        assert_close(r.y[0], np.abs(x))
        assert_close(r.dx[0], dy * np.sign(x), atol=1e-6)


@pytest.mark.parametrize("type_name, options", [
    ("Activation", {"activation": "relu"}),
    ("Activation", {"activation": "leaky_relu", "negative_slope": 0.2}),
    ("Activation", {"activation": "softplus", "beta": 2, "threshold": 10}),
    ("Threshold", {"threshold": 0.25}),
    ("Hardtanh", {"min_val": 0, "max_val": 6}),
    ("Abs", {}),
])
def test_config_round_trips(type_name, options):
    layer = create(None, type_name, "x", options)
    cfg = json.loads(json.dumps(layer.config()))
    for k, v in options.items():
        assert cfg[k] == v
    assert create(None, type_name, "x", cfg).config() == cfg


@pytest.mark.parametrize("type_name, options, words", [
    ("Activation", {"activation": "relu7"}, ["Activation 'bad'", "activation", "relu7"]),
    ("Activation", {"activation": "relu", "slope": 1}, ["Activation 'bad'", "slope"]),
    ("Activation", {"activation": "softplus", "beta": 0}, ["Activation 'bad'", "beta"]),
    ("Activation", {"activation": "elu", "alpha": "x"}, ["Activation 'bad'", "alpha"]),
    ("Hardtanh", {"min_val": 1, "max_val": -1}, ["Hardtanh 'bad'", "min_val"]),
    ("Threshold", {"value": 1}, ["Threshold 'bad'", "value"]),
])
def test_bad_options_name_layer_and_option(type_name, options, words):
    with pytest.raises(LayerError) as err:
        create(None, type_name, "bad", options)
    for w in words:
        assert w in str(err.value)
