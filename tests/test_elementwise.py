"""Elementwise (sum, sub, prod, div, max, min; coefficients, fused activation, numpy
broadcasting) against float64 numpy references."""
import json

import numpy as np
import pytest

from dlprim.layers import LayerError, TensorSpec, create
from layer_check import assert_close, check_reference_grads, run_layer

ACT = {"identity": (lambda y: y, lambda y: np.ones_like(y)),
       "relu": (lambda y: np.maximum(y, 0), lambda y: (y > 0) * 1.0),
       "tanh": (np.tanh, lambda y: 1 - y * y),
       "sigmoid": (lambda y: 1 / (1 + np.exp(-y)), lambda y: y * (1 - y))}


def unbroadcast(g, shape):
    """Sum ``g`` down to ``shape`` over the axes numpy broadcasting stretched."""
    while g.ndim > len(shape):
        g = g.sum(axis=0)
    return g.sum(axis=tuple(k for k, n in enumerate(shape) if n == 1 and g.shape[k] != 1),
                 keepdims=True)


def forward_ref(op, a, b, c1, c2, act):
    z = {"sum": lambda: c1 * a + c2 * b, "sub": lambda: c1 * a - c2 * b,
         "prod": lambda: c1 * c2 * a * b, "div": lambda: (c1 * a) / (c2 * b),
         "max": lambda: np.maximum(c1 * a, c2 * b), "min": lambda: np.minimum(c1 * a, c2 * b)}[op]()
    return ACT[act][0](z)


def backward_ref(op, a, b, c1, c2, act, dy):
    y = forward_ref(op, a, b, c1, c2, act)
    g = dy * ACT[act][1](y)
    A, B = np.broadcast_arrays(a, b)
    da, db = {
        "sum": lambda: (c1 * g, c2 * g), "sub": lambda: (c1 * g, -c2 * g),
        "prod": lambda: (c1 * c2 * B * g, c1 * c2 * A * g),
        "div": lambda: (g * c1 / (c2 * B), -g * c1 * A / (c2 * B * B)),
        "max": lambda: (np.where(c1 * A >= c2 * B, c1 * g, 0), np.where(c1 * A < c2 * B, c2 * g, 0)),
        "min": lambda: (np.where(c1 * A <= c2 * B, c1 * g, 0), np.where(c1 * A > c2 * B, c2 * g, 0)),
    }[op]()
    return unbroadcast(da, a.shape), unbroadcast(db, b.shape)


def inputs(rng, sa, sb, op):
    a = rng.uniform(0.5, 2.0, sa) * rng.choice([-1, 1], sa)
    b = rng.uniform(0.5, 2.0, sb) * rng.choice([-1, 1], sb)
    if op in ("max", "min"):   # keep c1 a and c2 b apart (no ties, no kinks)
        a = np.round(a * 8) / 8 + 1 / 32
        b = np.round(b * 8) / 8
    return a, b


OPS = ["sum", "sub", "prod", "div", "max", "min"]


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("shapes", [((3, 4), (3, 4)), ((2, 3, 4), (3, 1)), ((1, 4), (3, 1))])
def test_reference_backward_matches_finite_differences(op, shapes):
    a, b = inputs(np.random.default_rng(0), *shapes, op)
    check_reference_grads(
        lambda xs, ps: [forward_ref(op, xs[0], xs[1], 1.5, -0.5, "tanh")],
        lambda xs, ps, ys, dys: (list(backward_ref(op, xs[0], xs[1], 1.5, -0.5, "tanh", dys[0])), []),
        [a, b])


def check(ctx, op, sa, sb, c1=1.0, c2=1.0, act="identity", accumulate=False, want=(True, True),
          seed=0):
    rng = np.random.default_rng(seed)
    a, b = inputs(rng, sa, sb, op)
    y_ref = forward_ref(op, a, b, c1, c2, act)
    dy = rng.standard_normal(y_ref.shape)
    layer = create(ctx, "Elementwise", "e", {"operation": op, "coef1": c1, "coef2": c2,
                                             "activation": act})
    r = run_layer(ctx, layer, [a.astype(np.float32), b.astype(np.float32)],
                  dy=[dy.astype(np.float32)], accumulate=accumulate, want_dx=list(want))
    assert_close(r.y[0], y_ref, what="y")
    da, db = backward_ref(op, a, b, c1, c2, act, dy)
    for got, exp, w, what in ((r.dx[0], da, want[0], "da"), (r.dx[1], db, want[1], "db")):
        if w:
            assert_close(got, exp, rtol=1e-4, atol=1e-4, what=what)
        else:
            assert got is None


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("accumulate", [False, True])
def test_same_shapes(ctx, op, accumulate):
    check(ctx, op, (2, 33), (2, 33), c1=1.5, c2=-0.75, accumulate=accumulate)


@pytest.mark.parametrize("n", [1, 31, 32, 33, 63, 64, 65, 129])
def test_sizes(ctx, n):
    check(ctx, "sum", (n,), (n,), c1=2.0, c2=0.5, seed=n)


@pytest.mark.parametrize("act", ["relu", "tanh", "sigmoid"])
@pytest.mark.parametrize("op", ["sum", "prod", "max"])
def test_fused_activation(ctx, op, act):
    check(ctx, op, (3, 65), (3, 65), c1=1.0, c2=0.5, act=act, accumulate=True)


@pytest.mark.parametrize("shapes", [
    ((2, 3, 5, 5), (3, 1, 1)),        # per-channel
    ((2, 3, 5, 5), (1, 3, 1, 1)),
    ((4, 65), (65,)),                 # bias-like
    ((1, 5), (33, 1)),                # both stretched
    ((2, 1, 4), (3, 1)),
    ((64,), (1,)),
])
@pytest.mark.parametrize("op", ["sum", "prod", "div", "max"])
def test_broadcasting(ctx, shapes, op):
    for acc in (False, True):
        check(ctx, op, *shapes, c1=1.25, c2=0.5, act="relu" if op == "sum" else "identity",
              accumulate=acc, seed=len(shapes[1]))


def test_only_one_gradient_wanted(ctx):
    check(ctx, "prod", (2, 3, 4), (3, 1), want=(False, True))
    check(ctx, "sub", (2, 3, 4), (3, 1), want=(True, False), accumulate=True)
    check(ctx, "sum", (5, 7), (5, 7), want=(False, True))



def test_same_input_twice_sums_both_gradients(ctx):
    # x * x: both gradients land in dx, the first pass assigns and the second adds in the
    # same kernel, so the second must read what the first just stored
    import dlprim as dp
    net = dp.Net(ctx, {"inputs": [{"name": "x", "shape": [65], "requires_grad": True},
                                  {"name": "t", "shape": [65]}],
                       "outputs": ["loss"],
                       "operators": [{"name": "e", "type": "Elementwise", "inputs": ["x", "x"],
                                      "outputs": ["y"], "options": {"operation": "prod"}},
                                     {"name": "loss", "type": "MSELoss", "inputs": ["y", "t"],
                                      "outputs": ["loss"], "options": {"reduce": "sum"}}]},
                 mode=dp.TRAIN)
    x = np.linspace(-2, 2, 65).astype(np.float32)
    net(x=x, t=np.zeros(65, np.float32))
    net.backward()
    assert_close(net.tensor_diff("x").numpy(), 4 * x.astype(np.float64) ** 3, what="dx")


def test_assigning_and_adding_share_one_program(ctx):
    # beta is a kernel argument: accumulating builds nothing new (min + tanh: code that no
    # other test builds first)
    from dlprim.kernels import program
    check(ctx, "min", (3, 33), (3, 33), act="tanh", accumulate=False)
    builds = program.stats["builds"]
    check(ctx, "min", (3, 33), (3, 33), act="tanh", accumulate=True)
    assert program.stats["builds"] == builds


def test_backward_reads_flags(ctx):
    specs = [TensorSpec((2, 3)), TensorSpec((2, 3))]
    flags = lambda options: create(ctx, "Elementwise", "e", options).setup(specs).flags
    s = flags({"operation": "sum"})
    assert not s.backward_reads_inputs and not s.backward_reads_outputs
    p = flags({"operation": "prod", "activation": "relu"})
    assert p.backward_reads_inputs and p.backward_reads_outputs


def test_config_round_trips():
    options = {"operation": "sum", "activation": "relu", "coef1": 1, "coef2": -1}
    cfg = json.loads(json.dumps(create(None, "Elementwise", "e", options).config()))
    assert {k: cfg[k] for k in options} == options
    assert create(None, "Elementwise", "e", cfg).config() == cfg


@pytest.mark.parametrize("options, option", [
    ({"operation": "pow"}, "operation"),
    ({"activation": "gelu"}, "activation"),
    ({"activation": "swishy"}, "activation"),
    ({"coef1": "one"}, "coef1"),
    ({"coeff": 1}, "coeff"),
])
def test_bad_options_name_layer_and_option(options, option):
    with pytest.raises(LayerError) as err:
        create(None, "Elementwise", "bad", options)
    assert "Elementwise 'bad'" in str(err.value) and option in str(err.value)


def test_shapes_that_do_not_broadcast(ctx):
    layer = create(ctx, "Elementwise", "e", {})
    with pytest.raises(LayerError, match="Elementwise 'e'.*broadcast"):
        layer.setup([TensorSpec((2, 3)), TensorSpec((4,))])


# ----- Where
@pytest.mark.parametrize("shapes,cond_dtype", [
    (((257,), (257,), (257,)), np.uint8),                  # one work group and a bit
    (((3, 1, 33), (3, 5, 33), (1,)), np.int64),           # b a scalar (masked_fill)
    (((5, 1), (1, 70), (5, 70)), np.float32),             # a stretched along rows
    (((2, 3, 1, 9), (1,), (2, 3, 4, 9)), np.int32)])
@pytest.mark.parametrize("accumulate", [False, True])
def test_where_matches_numpy(ctx, rng, shapes, cond_dtype, accumulate):
    cs, as_, bs = shapes
    cond = (rng.random(cs) < 0.4).astype(cond_dtype)
    a = rng.standard_normal(as_).astype(np.float32)
    b = rng.standard_normal(bs).astype(np.float32)
    out = np.broadcast_shapes(cs, as_, bs)
    dy = rng.standard_normal(out).astype(np.float32)
    r = run_layer(ctx, create(ctx, "Where", "w", {}), [cond, a, b], dy=[dy],
                  accumulate=accumulate, want_dx=[False, True, True])
    pick = np.broadcast_to(cond != 0, out)
    assert_close(r.y[0], np.where(pick, a, b), rtol=0, atol=0, what="y")
    assert_close(r.dx[1], unbroadcast(np.where(pick, dy.astype(np.float64), 0), as_),
                 rtol=1e-5, atol=1e-5, what="da")
    assert_close(r.dx[2], unbroadcast(np.where(pick, 0, dy.astype(np.float64)), bs),
                 rtol=1e-5, atol=1e-5, what="db")


def test_where_reads_only_the_chosen_side(ctx):
    cond = np.array([1, 0, 1, 0], np.uint8)
    a = np.array([np.nan, np.nan, 2.0, -np.inf], np.float32)
    b = np.array([5.0, 6.0, np.nan, 7.0], np.float32)
    r = run_layer(ctx, create(ctx, "Where", "w", {}), [cond, a, b], mode="predict")
    np.testing.assert_array_equal(r.y[0], [np.nan, 6.0, 2.0, 7.0])


def test_where_errors(ctx):
    layer = create(ctx, "Where", "w", {})
    with pytest.raises(LayerError, match="expects 3 inputs"):
        layer.setup([TensorSpec((2,)), TensorSpec((2,))])
    with pytest.raises(LayerError, match="a and b must be float32"):
        layer.setup([TensorSpec((2,)), TensorSpec((2,), "int32"), TensorSpec((2,))])
    with pytest.raises(LayerError, match="broadcast"):
        layer.setup([TensorSpec((3,)), TensorSpec((2,)), TensorSpec((2,))])
