"""ONNX import of operators as older opsets define them, and of the elementwise, logic
and shape variants the node tests do not reach, against numpy references."""
import numpy as np
import pytest

pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import dlprim.onnx as dox  # noqa: E402

RNG = np.random.default_rng(7)
_TYPES = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.int64): TensorProto.INT64,
          np.dtype(np.int32): TensorProto.INT32, np.dtype(np.bool_): TensorProto.BOOL,
          np.dtype(np.uint32): TensorProto.UINT32, np.dtype(np.uint16): TensorProto.UINT16,
          np.dtype(np.uint64): TensorProto.UINT64}


def model(nodes, inputs, outputs, opset, inits=()):
    """A model of ``nodes`` with inputs {name: array} fed at run time and constant
    initializers {name: array}."""
    g = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info(n, _TYPES[a.dtype], a.shape)
                     for n, a in inputs.items()],
        [helper.make_tensor_value_info(o, 0, None) for o in outputs],
        [numpy_helper.from_array(np.asarray(a), n) for n, a in dict(inits).items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def run(ctx, m, inputs):
    net = dox.load(m, ctx)
    return net(**inputs)


def refused(ctx, m, *words):
    with pytest.raises(dox.UnsupportedModelError) as err:
        dox.load(m, ctx)
    for w in words:
        assert w in str(err.value), err.value


# ----- opsets before 9
@pytest.mark.parametrize("op, fn", [("Add", np.add), ("Mul", np.multiply), ("Sub", np.subtract),
                                    ("Div", np.divide)])
@pytest.mark.parametrize("bshape, axis, want", [
    ((3, 4), 1, (1, 3, 4, 1)), ((5,), None, (5,)), ((1, 1), None, ()), ((2,), 0, (2, 1, 1, 1))])
def test_opset6_broadcast_by_attribute(ctx, op, fn, bshape, axis, want):
    """broadcast=1: B's axes line up with A's from ``axis`` (default: A's last ones)."""
    a = RNG.standard_normal((2, 3, 4, 5)).astype(np.float32)
    bv = (RNG.random(bshape) + 0.5).astype(np.float32)
    attrs = {"broadcast": 1} if axis is None else {"broadcast": 1, "axis": axis}
    for const in (False, True):
        ins = {"a": a} if const else {"a": a, "b": bv}
        m = model([helper.make_node(op, ["a", "b"], ["y"], **attrs)], ins, ["y"], 6,
                  {"b": bv} if const else ())
        y = run(ctx, m, ins)["y"]
        np.testing.assert_allclose(y, fn(a, bv.reshape(want)), rtol=1e-6, atol=1e-6)


def test_opset6_broadcast_refusals(ctx):
    a, bv = np.ones((2, 3), np.float32), np.ones((3,), np.float32)
    refused(ctx, model([helper.make_node("Add", ["a", "b"], ["y"])], {"a": a, "b": bv}, ["y"], 6),
            "broadcast=0")
    refused(ctx, model([helper.make_node("Add", ["a", "b"], ["y"], broadcast=1, axis=0)],
                       {"a": a, "b": bv}, ["y"], 6), "does not line up")
    refused(ctx, model([helper.make_node("Max", ["a", "b"], ["y"])], {"a": a, "b": bv}, ["y"], 6),
            "does not broadcast")
    refused(ctx, model([helper.make_node("Dropout", ["a"], ["y"], ratio=0.3)], {"a": a}, ["y"], 6),
            "is_test=0")
    refused(ctx, model([helper.make_node("Tile", ["a", "t", "x"], ["y"])], {"a": a}, ["y"], 1,
                       {"t": np.array(2, np.int64), "x": np.array(0, np.int64)}), "Tile-1")


def test_opset6_constants_fold_with_the_old_broadcasting(ctx):
    """A legacy node of constants is evaluated in its opset 9 spelling."""
    a = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    c1, c2 = np.ones((2, 3, 4), np.float32), np.arange(3, dtype=np.float32)
    m = model([helper.make_node("Mul", ["c1", "c2"], ["k"], broadcast=1, axis=1),
               helper.make_node("Add", ["a", "k"], ["y"])], {"a": a}, ["y"], 6,
              {"c1": c1, "c2": c2})
    np.testing.assert_allclose(run(ctx, m, {"a": a})["y"], a + c2.reshape(1, 3, 1))


def test_opset6_dropout_test_mode_and_reshape_attribute(ctx):
    a = RNG.standard_normal((2, 6)).astype(np.float32)
    m = model([helper.make_node("Dropout", ["a"], ["d"], is_test=1, ratio=0.5),
               helper.make_node("Reshape", ["d"], ["y"], shape=[3, 4])], {"a": a}, ["y"], 4)
    np.testing.assert_array_equal(run(ctx, m, {"a": a})["y"], a.reshape(3, 4))


# ----- unsigned 16, 32 and 64-bit tensors
@pytest.mark.parametrize("dtype", [np.uint16, np.uint32, np.uint64])
def test_unsigned_arithmetic_comparison_and_shifts(ctx, dtype):
    """Wrapping sums and products, truncating division, Mod, shifts and comparisons of
    the full range, against numpy."""
    info = np.iinfo(dtype)
    x = np.array([0, 1, 7, info.max, info.max - 3, 1 << (info.bits - 1)], dtype)
    y = np.array([3, 1, 2, 2, info.max, 5], dtype)
    s = np.array([1, 0, 3, 1, 4, 2], dtype)
    nodes = [helper.make_node("Add", ["x", "y"], ["add"]), helper.make_node("Mul", ["x", "y"], ["mul"]),
             helper.make_node("Sub", ["x", "y"], ["sub"]), helper.make_node("Div", ["x", "y"], ["div"]),
             helper.make_node("Mod", ["x", "y"], ["mod"]), helper.make_node("Greater", ["x", "y"], ["gt"]),
             helper.make_node("BitShift", ["x", "s"], ["shl"], direction="LEFT"),
             helper.make_node("BitShift", ["x", "s"], ["shr"], direction="RIGHT"),
             helper.make_node("Max", ["x", "y"], ["max"]),
             helper.make_node("Cast", ["x"], ["f"], to=TensorProto.FLOAT)]
    outs = ["add", "mul", "sub", "div", "mod", "gt", "shl", "shr", "max", "f"]
    got = run(ctx, model(nodes, {"x": x, "y": y, "s": s}, outs, 18), {"x": x, "y": y, "s": s})
    with np.errstate(over="ignore"):
        want = {"add": x + y, "mul": x * y, "sub": x - y, "div": x // y, "mod": x % y,
                "gt": x > y, "shl": x << s, "shr": x >> s, "max": np.maximum(x, y),
                "f": x.astype(np.float32)}
    for k, v in want.items():
        assert got[k].dtype == v.dtype, k
        np.testing.assert_array_equal(got[k], v, err_msg=k)


def test_uint64_constant_above_int64(ctx):
    """A uint64 scalar of 2^63 and more enters the kernel with its bits."""
    x = np.array([1, 2, 3], np.uint64)
    c = np.array(np.uint64((1 << 63) + 5))
    m = model([helper.make_node("Add", ["x", "c"], ["y"])], {"x": x}, ["y"], 18, {"c": c})
    np.testing.assert_array_equal(run(ctx, m, {"x": x})["y"], x + c)


# ----- ONNX's activations declared in the operator library
def test_activations_with_attributes(ctx):
    x = np.array([-3, -1.5, -0.4, 0, 0.3, 0.7, 2.5, np.nan], np.float32)
    nodes = [helper.make_node("Selu", ["x"], ["selu"], alpha=2.0, gamma=3.0),
             helper.make_node("Celu", ["x"], ["celu"], alpha=2.0),
             helper.make_node("ThresholdedRelu", ["x"], ["trelu"], alpha=0.5),
             helper.make_node("Shrink", ["x"], ["shrink"], lambd=0.5, bias=0.25),
             helper.make_node("Softsign", ["x"], ["softsign"])]
    got = run(ctx, model(nodes, {"x": x}, [n.output[0] for n in nodes], 18), {"x": x})
    want = {"selu": np.where(x > 0, 3 * x, 3 * 2 * (np.exp(x) - 1)),
            "celu": np.where(x > 0, x, 2 * (np.exp(x / 2) - 1)),
            "trelu": np.where(x > 0.5, x, 0), "softsign": x / (1 + np.abs(x)),
            "shrink": np.where(x < -0.5, x + 0.25, np.where(x > 0.5, x - 0.25, 0))}
    for k, v in want.items():
        np.testing.assert_allclose(got[k], v, rtol=1e-6, atol=1e-6, err_msg=k)
    refused(ctx, model([helper.make_node("Shrink", ["x"], ["y"])], {"x": x.astype(np.int32)},
                       ["y"], 18), "floats only")


# ----- Mod, Clip and PRelu over every dtype
def test_mod_fmod0_floats_takes_the_divisor_sign(ctx):
    """Opset 28's fmod=0 over floats is numpy's mod, a zero result signed as y."""
    x = np.array([-4.3, 7.2, 0.0, -0.0, 6.0, -3.0, 1.0], np.float32)
    y = np.array([2.1, -3.4, -2.0, 2.0, -3.0, np.inf, 0.0], np.float32)
    m = model([helper.make_node("Mod", ["x", "y"], ["z"], fmod=0)], {"x": x, "y": y}, ["z"], 28)
    z = run(ctx, m, {"x": x, "y": y})["z"]
    with np.errstate(all="ignore"):
        want = np.mod(x, y)
    np.testing.assert_allclose(z, want, rtol=1e-6)
    np.testing.assert_array_equal(np.signbit(z[:5]), np.signbit(want[:5]))
    refused(ctx, model([helper.make_node("Mod", ["x", "y"], ["z"])], {"x": x, "y": y}, ["z"], 13),
            "fmod=0")


def test_clip_of_integers_reversed_and_runtime_bounds(ctx):
    x = np.array([-(1 << 40), -5, 0, 7, 1 << 40], np.int64)
    lo, hi = np.array(-(1 << 35) - 1, np.int64), np.array(6, np.int64)
    m = model([helper.make_node("Clip", ["x", "lo", "hi"], ["a"]),
               helper.make_node("Clip", ["x", "", "hi"], ["b"]),
               helper.make_node("Clip", ["x", "hi", "lo"], ["c"])], {"x": x}, ["a", "b", "c"], 13,
              {"lo": lo, "hi": hi})
    got = run(ctx, m, {"x": x})
    np.testing.assert_array_equal(got["a"], np.clip(x, lo, hi))
    np.testing.assert_array_equal(got["b"], np.minimum(x, hi))
    np.testing.assert_array_equal(got["c"], np.minimum(np.maximum(x, hi), lo))  # all lo
    f = np.array([-2, 0.5, np.nan, 3], np.float32)
    lo, hi = np.array(-1, np.float32), np.array(1, np.float32)
    m = model([helper.make_node("Clip", ["f", "lo", "hi"], ["y"])], {"f": f, "lo": lo, "hi": hi},
              ["y"], 13)
    np.testing.assert_array_equal(run(ctx, m, {"f": f, "lo": lo, "hi": hi})["y"], np.clip(f, lo, hi))


@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_prelu_slope_per_channel(ctx, dtype):
    x = (RNG.standard_normal((2, 3, 4)) * 4).astype(dtype)
    slope = np.array([[0.5], [2], [-1]], dtype)
    m = model([helper.make_node("PRelu", ["x", "s"], ["y"])], {"x": x}, ["y"], 16, {"s": slope})
    np.testing.assert_array_equal(run(ctx, m, {"x": x})["y"], np.where(x < 0, x * slope, x))


# ----- Dropout's mask and EyeLike: known at import
def test_dropout_mask_in_inference_and_eyelike(ctx):
    x = RNG.standard_normal((3, 4)).astype(np.float32)
    m = model([helper.make_node("Dropout", ["x", "r"], ["y", "mask"]),
               helper.make_node("EyeLike", ["x"], ["eye"], k=1, dtype=TensorProto.DOUBLE)],
              {"x": x}, ["y", "mask", "eye"], 13, {"r": np.array(0.4, np.float32)})
    got = run(ctx, m, {"x": x})
    np.testing.assert_array_equal(got["y"], x)
    assert got["mask"].dtype == np.bool_ and got["mask"].all() and got["mask"].shape == x.shape
    assert got["eye"].dtype == np.float64
    np.testing.assert_array_equal(got["eye"], np.eye(3, 4, 1))
