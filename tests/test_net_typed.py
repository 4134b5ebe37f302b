"""Integer and bool values in a Net: the LibraryOp layer (dlprim/layers/pointwise_op.py)
over every dtype against numpy (type promotion against PyTorch's), float gradients against
float64, and a JSON net with integer and bool values in the middle that trains through
its float path."""
import json

import numpy as np
import pytest

import dlprim as dp
from dlprim.errors import InputError
from dlprim.layers import create
from dlprim.layers.pointwise_op import promote_types
from layer_check import assert_close, run_layer

SIZES = [(1,), (2, 65)]
INTS = [np.int8, np.int16, np.int32, np.int64, np.uint8]


def _op(ctx, op, **options):
    return create(ctx, "LibraryOp", options=dict(op=op, **options))


def _ints(dtype, shape, seed=0, lo=-20, hi=20):
    lo = max(lo, 0) if dtype == np.uint8 else lo
    return np.random.default_rng(seed).integers(lo, hi, shape).astype(dtype)


@pytest.mark.parametrize("shape", SIZES)
@pytest.mark.parametrize("dtype", INTS)
def test_integer_operators_match_numpy(ctx, dtype, shape):
    a, b = _ints(dtype, shape), _ints(dtype, shape[-1:], seed=1)
    b[b == 0] = 7
    cases = {"lt": a < b, "eq": a == b, "add": a + b, "mul": a * b, "bitwise_xor": a ^ b,
             "remainder": np.mod(a, b), "fmod": np.fmod(a, b), "maximum": np.maximum(a, b)}
    for op, want in cases.items():
        attrs = {"alpha": 1} if op == "add" else {}
        y = run_layer(ctx, _op(ctx, op, attrs=attrs), [a, b]).y[0]
        assert y.dtype == want.dtype and np.array_equal(y, want), (op, dtype)
    trunc = run_layer(ctx, _op(ctx, "div", attrs={"rounding_mode": "trunc"}), [a, b]).y[0]
    assert np.array_equal(trunc, (np.trunc(a / b)).astype(dtype))
    floor = run_layer(ctx, _op(ctx, "div", attrs={"rounding_mode": "floor"}), [a, b]).y[0]
    assert np.array_equal(floor, a // b)
    true = run_layer(ctx, _op(ctx, "div"), [a, b]).y[0]
    assert true.dtype == np.float32 and np.allclose(true, a / b, rtol=1e-6)


def test_bool_and_mixed_dtypes(ctx):
    rng = np.random.default_rng(2)
    p, q = rng.random(65) < 0.5, rng.random(65) < 0.5
    x = rng.standard_normal(65).astype(np.float32)
    i = _ints(np.int64, (65,))
    y = run_layer(ctx, _op(ctx, "logical_and"), [p, q]).y[0]
    assert y.dtype == np.bool_ and np.array_equal(y, p & q)
    assert np.array_equal(run_layer(ctx, _op(ctx, "logical_not"), [x]).y[0], x == 0)
    y = run_layer(ctx, _op(ctx, "mul"), [p, x]).y[0]          # bool * float: float
    assert y.dtype == np.float32 and np.array_equal(y, p * x)
    y = run_layer(ctx, _op(ctx, "where"), [p, i, np.int64(-1) * i]).y[0]
    assert y.dtype == np.int64 and np.array_equal(y, np.where(p, i, -i))
    y = run_layer(ctx, _op(ctx, "add", attrs={"alpha": 1}, scalars={"b": 2}),
                  [i.astype(np.int8)]).y[0]                  # a number keeps int8
    assert y.dtype == np.int8 and np.array_equal(y, i.astype(np.int8) + 2)
    y = run_layer(ctx, _op(ctx, "mul", scalars={"b": 0.5}), [i]).y[0]
    assert y.dtype == np.float32 and np.array_equal(y, i * np.float32(0.5))
    f = np.array([0.0, -0.0, np.nan, 2.7, -2.7, 300.5], np.float32)
    y = run_layer(ctx, _op(ctx, "copy", dtype="bool"), [f]).y[0]
    assert np.array_equal(y, [False, False, True, True, True, True])
    y = run_layer(ctx, _op(ctx, "copy", dtype="int32"), [f[3:]]).y[0]
    assert np.array_equal(y, [2, -2, 300])
    if ctx.facts.fp64:
        d = rng.standard_normal(33)
        y = run_layer(ctx, _op(ctx, "sin"), [d]).y[0]
        assert y.dtype == np.float64 and np.allclose(y, np.sin(d), rtol=1e-14)


def test_refusals_name_the_operator(ctx):
    with pytest.raises(Exception, match="bitwise_and does not take float32"):
        run_layer(ctx, _op(ctx, "bitwise_and"), [np.ones(3, np.float32)] * 2)
    with pytest.raises(Exception, match="'copy'"):
        _op(ctx, "copy")
    with pytest.raises(Exception, match="needs attribute alpha"):
        run_layer(ctx, _op(ctx, "add"), [np.ones(3, np.int32)] * 2)
    with pytest.raises(Exception, match="not a pointwise operator"):
        _op(ctx, "conv2d")


def test_promotion_is_pytorchs():
    torch = pytest.importorskip("torch")
    names = ["bool", "uint8", "int8", "int16", "int32", "int64", "float16", "float32",
             "float64"]
    for a in names:
        for b in names:
            want = torch.promote_types(getattr(torch, a), getattr(torch, b))
            assert promote_types([a, b]).name == str(want).replace("torch.", ""), (a, b)
        for s in (True, 3, 2.5):
            want = torch.result_type(torch.zeros(1, dtype=getattr(torch, a)), s)
            assert promote_types([a], [s]).name == str(want).replace("torch.", ""), (a, s)


@pytest.mark.parametrize("op", ["mul", "pow", "div", "where", "maximum", "atan2"])
def test_float_gradients_against_float64(ctx, op):
    """Broadcast inputs (a gradient summed over stretched axes) with accumulation."""
    rng = np.random.default_rng(3)
    a = rng.uniform(0.5, 2, (3, 33))
    b = rng.uniform(0.5, 2, (1, 33))
    dy = rng.standard_normal((3, 33))
    cond = rng.random((3, 1)) < 0.5
    if op == "where":
        xs = [cond, a.astype(np.float32), b.astype(np.float32)]
        ga, gb = np.where(cond, dy, 0), np.where(cond, 0, dy).sum(0, keepdims=True)
    else:
        xs = [a.astype(np.float32), b.astype(np.float32)]
        grads = {"mul": (dy * b, dy * a), "pow": (dy * b * a ** (b - 1), dy * a ** b * np.log(a)),
                 "div": (dy / b, -dy * a / b ** 2),
                 "maximum": (dy * (a >= b), dy * (b > a)),
                 "atan2": (dy * b / (a * a + b * b), -dy * a / (a * a + b * b))}[op]
        ga, gb = grads[0], grads[1].sum(0, keepdims=True)
    r = run_layer(ctx, _op(ctx, op), xs, dy=[dy.astype(np.float32)], accumulate=True)
    assert_close(r.dx[-2], ga, rtol=1e-5, atol=1e-5, what=op + " da")
    assert_close(r.dx[-1], gb, rtol=1e-5, atol=1e-5, what=op + " db")
    if op == "where":
        assert r.dx[0] is None


NET = {
    "inputs": [{"name": "ids", "shape": [2, 33], "dtype": "int64"},
               {"name": "x", "shape": [2, 33], "dtype": "float", "requires_grad": True}],
    "outputs": ["mask", "count", "loss"],
    "operators": [
        {"name": "ge", "type": "LibraryOp", "inputs": ["ids"], "outputs": ["mask"],
         "options": {"op": "ge", "scalars": {"b": 0}}},
        {"name": "cnt", "type": "LibraryOp", "inputs": ["mask", "ids"], "outputs": ["count"],
         "options": {"op": "mul"}},
        {"name": "sel", "type": "LibraryOp", "inputs": ["mask", "x"], "outputs": ["xm"],
         "options": {"op": "where", "scalars": {"c": 0.0}}},
        {"name": "scale", "type": "LibraryOp", "inputs": ["xm", "count"], "outputs": ["z"],
         "options": {"op": "mul"}},
        {"name": "sq", "type": "Pointwise", "inputs": ["z"], "outputs": ["loss"],
         "options": {"op": "exp"}}]}


def test_a_json_net_with_integer_and_bool_values_trains(ctx):
    net = dp.Net(ctx, json.dumps(NET))
    rng = np.random.default_rng(4)
    ids = rng.integers(-5, 5, (2, 33))
    x = rng.uniform(-1, 1, (2, 33)).astype(np.float32)
    out = net(ids=ids, x=x)
    mask = ids >= 0
    assert out["mask"].dtype == np.bool_ and np.array_equal(out["mask"], mask)
    assert out["count"].dtype == np.int64 and np.array_equal(out["count"], mask * ids)
    z = np.where(mask, x.astype(np.float64), 0) * (mask * ids)
    assert_close(out["loss"], np.exp(z), rtol=1e-5, atol=1e-6, what="loss")
    net.backward()
    assert_close(net.tensor_diff("x").numpy(), np.exp(z) * mask * ids, rtol=1e-5, atol=1e-5,
                 what="dx")
    with pytest.raises(KeyError):
        net.tensor_diff("ids")  # integer values take no gradient
    with pytest.raises(InputError, match="bool"):
        net(ids=ids > 0, x=x)
