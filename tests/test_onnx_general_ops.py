"""General ONNX operators on the layers that compute them, against numpy: the
reductions over any axes and dtype (Reduction's max, min and prod, empty axes, ONNX's
ReduceL2/LogSum/LogSumExp), and the other converters of ops_math, ops_pool, ops_shape
and ops_library, each through a one-node model as exporters write it."""
import numpy as np
import pytest

from dlprim.layers import LayerError, TensorSpec, create

from layer_check import run_layer

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import dlprim.onnx as dox  # noqa: E402

INTS = [np.int8, np.int16, np.int32, np.int64, np.uint8]
NP_REDUCE = {"max": np.max, "min": np.min, "prod": np.prod, "sum": np.sum}


def values(rng, shape, dtype):
    if dtype == np.bool_:
        return rng.random(shape) < 0.5
    if np.dtype(dtype).kind in "iu":
        return rng.integers(0, 4, shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def one_node(op, inputs, outputs, consts=(), opset=18, **attrs):
    """A model of one node: ``inputs``/``outputs`` [(name, numpy array)] (outputs' arrays
    give only dtype and shape), ``consts`` initializers."""
    def info(name, a):
        return helper.make_tensor_value_info(
            name, helper.np_dtype_to_tensor_dtype(a.dtype), list(a.shape))
    node = helper.make_node(op, [n for n, _ in inputs] + [n for n, _ in consts],
                            [n for n, _ in outputs], **attrs)
    graph = helper.make_graph([node], "g", [info(n, a) for n, a in inputs],
                              [info(n, a) for n, a in outputs],
                              [numpy_helper.from_array(np.asarray(a), n) for n, a in consts])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def run_model(ctx, model, **inputs):
    return dox.load(model, ctx)(**inputs)


# ----- Reduction: max, min, prod over any dtype; empty axes give the identity
@pytest.mark.parametrize("method", ["max", "min", "prod", "sum"])
@pytest.mark.parametrize("dtype", INTS + [np.float32, np.float64])
def test_reduction_every_dtype(ctx, method, dtype):
    if dtype == np.float64 and not ctx.facts.fp64:
        pytest.skip("the device has no fp64")
    x = values(np.random.default_rng(3), (3, 33, 5), dtype)
    layer = create(ctx, "Reduction", "r", {"method": method, "dims": [0, 2], "keep_dim": False})
    y = run_layer(ctx, layer, [x]).y[0]
    ref = NP_REDUCE[method](x, axis=(0, 2)).astype(dtype)  # wraps in the dtype, as ONNX
    assert y.dtype == np.dtype(dtype)
    np.testing.assert_allclose(y.astype(np.float64), ref.astype(np.float64), rtol=1e-5,
                               atol=1e-5)


def test_reduction_max_min_of_bool_and_nan(ctx):
    rng = np.random.default_rng(0)
    b = values(rng, (4, 7), np.bool_)
    for method, fn in (("max", np.max), ("min", np.min)):
        layer = create(ctx, "Reduction", "r", {"method": method, "dims": [1]})
        np.testing.assert_array_equal(run_layer(ctx, layer, [b]).y[0], fn(b, 1, keepdims=True))
    x = rng.standard_normal((2, 5)).astype(np.float32)
    x[1, 3] = np.nan
    y = run_layer(ctx, create(ctx, "Reduction", "r", {"method": "max", "dims": [1]}), [x]).y[0]
    np.testing.assert_array_equal(np.isnan(y[:, 0]), [False, True])


@pytest.mark.parametrize("method, dtype, want", [
    ("sum", np.float32, 0), ("prod", np.int32, 1), ("max", np.float32, -np.inf),
    ("min", np.int64, np.iinfo(np.int64).max), ("max", np.bool_, False)])
def test_reduction_over_an_empty_axis(ctx, method, dtype, want):
    layer = create(ctx, "Reduction", "r", {"method": method, "dims": [1]})
    y = run_layer(ctx, layer, [np.zeros((2, 0, 3), dtype)]).y[0]
    assert y.shape == (2, 1, 3) and y.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(y, np.full((2, 1, 3), want, dtype))


def test_reduction_refuses_a_mean_of_integers(ctx):
    with pytest.raises(LayerError, match="mean"):
        create(ctx, "Reduction", "r", {"method": "mean"}).setup([TensorSpec((2, 3), np.int32)])


# ----- ONNX's reductions
@pytest.mark.parametrize("op, ref", [
    ("ReduceMax", lambda x, a, k: np.max(x, a, keepdims=k)),
    ("ReduceMin", lambda x, a, k: np.min(x, a, keepdims=k)),
    ("ReduceProd", lambda x, a, k: np.prod(x, a, keepdims=k)),
    ("ReduceL2", lambda x, a, k: np.sqrt(np.sum(x * x, a, keepdims=k))),
    ("ReduceLogSum", lambda x, a, k: np.log(np.sum(x, a, keepdims=k))),
    ("ReduceLogSumExp", lambda x, a, k: np.log(np.sum(np.exp(x), a, keepdims=k)))])
@pytest.mark.parametrize("axes, keep", [([1], 1), ([-1, 0], 0), ([0, 1, 2], 0)])
def test_onnx_reductions(ctx, op, ref, axes, keep):
    x = np.random.default_rng(1).uniform(0.5, 2.0, (3, 4, 5)).astype(np.float32)
    want = np.asarray(ref(x.astype(np.float64), tuple(axes), bool(keep)), np.float32)
    model = one_node(op, [("x", x)], [("y", want)], [("axes", np.array(axes, np.int64))],
                     keepdims=keep)
    y = run_model(ctx, model, x=x)["y"]
    assert y.shape == want.shape
    np.testing.assert_allclose(y, want, rtol=1e-5)


def test_onnx_log_sum_exp_of_large_and_infinite_values(ctx):
    """Stable (x - max) and, as PyTorch's logsumexp, an infinite max shifts by 0."""
    x = np.array([[1000.0, 1000.0, -5.0], [-np.inf, -np.inf, -np.inf],
                  [np.inf, 1.0, 2.0]], np.float32)
    want = np.array([1000.0 + np.log(2.0), -np.inf, np.inf], np.float32)
    model = one_node("ReduceLogSumExp", [("x", x)], [("y", want)],
                     [("axes", np.array([1], np.int64))], keepdims=0)
    np.testing.assert_allclose(run_model(ctx, model, x=x)["y"], want, rtol=1e-6)


@pytest.mark.parametrize("op, ref", [("ReduceSumSquare", np.square), ("ReduceL1", np.abs),
                                     ("ReduceMax", lambda x: x)])
def test_onnx_reduction_over_no_axes(ctx, op, ref):
    """noop_with_empty_axes and no axes: each element's own term, as onnx's reference."""
    x = np.random.default_rng(2).standard_normal((2, 3)).astype(np.float32)
    model = one_node(op, [("x", x)], [("y", x)], noop_with_empty_axes=1)
    np.testing.assert_allclose(run_model(ctx, model, x=x)["y"], ref(x), rtol=1e-6)


# ----- BitShift, Pad, CumProd
@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.int64])
@pytest.mark.parametrize("direction", ["LEFT", "RIGHT"])
def test_onnx_bit_shift_of_signed_integers(ctx, dtype, direction):
    """Opset 28: shifts below 0 or of the width or more give 0 (-1 for a negative number
    shifted right); a left shift wraps in the type."""
    bits = np.iinfo(dtype).bits
    x = np.array([5, -7, 100, -1, 3, -128], dtype)
    s = np.array([1, 2, bits - 1, bits, -1, 3], dtype)
    u = x.view(np.dtype("u%d" % x.itemsize))
    valid = (s >= 0) & (s < bits)
    if direction == "LEFT":
        want = np.where(valid, (u << np.where(valid, s, 0).astype(u.dtype)).view(dtype), 0)
    else:
        want = np.where(valid, x >> np.where(valid, s, 0), np.where(x < 0, -1, 0))
    want = want.astype(dtype)
    model = one_node("BitShift", [("x", x), ("s", s)], [("y", want)], opset=18,
                     direction=direction)
    np.testing.assert_array_equal(run_model(ctx, model, x=x, s=s)["y"], want)


@pytest.mark.parametrize("mode", ["reflect", "edge", "wrap", "constant"])
@pytest.mark.parametrize("dtype", [np.float32, np.int64])
def test_onnx_pad_modes_and_axes(ctx, mode, dtype):
    x = values(np.random.default_rng(4), (2, 5, 4), dtype)
    pads = np.array([2, -1, 1, 0], np.int64)  # axes (1, -1): 2 before, 1 after on axis 1
    consts = [("pads", pads), ("value", np.array(3, dtype)), ("axes", np.array([1, -1]))]
    width = [(0, 0), (2, 1), (0, 0)]
    if mode == "constant":
        want = np.pad(x[:, :, 1:], width, mode="constant", constant_values=3)
    else:
        want = np.pad(x, width, mode={"edge": "edge", "reflect": "reflect",
                                      "wrap": "wrap"}[mode])[:, :, 1:]
    model = one_node("Pad", [("x", x)], [("y", want)], consts, mode=mode)
    np.testing.assert_array_equal(run_model(ctx, model, x=x)["y"], want)


@pytest.mark.parametrize("exclusive, reverse", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_onnx_cumprod(ctx, exclusive, reverse):
    x = np.random.default_rng(5).integers(-3, 4, (3, 33)).astype(np.int64)
    a = x[:, ::-1] if reverse else x
    if exclusive:
        a = np.concatenate([np.ones((3, 1), a.dtype), a[:, :-1]], axis=1)
    want = np.cumprod(a, axis=1)
    want = want[:, ::-1] if reverse else want
    model = one_node("CumProd", [("x", x)], [("y", want)], [("axis", np.array(1))],
                     opset=26, exclusive=exclusive, reverse=reverse)
    np.testing.assert_array_equal(run_model(ctx, model, x=x)["y"], want)
