"""ONNX's pooling and spatial operators against onnx's ReferenceEvaluator, each through a
one-node model: pooling of 1 to 3 spatial dims (dilations, asymmetric pads, pads above
half the window, ceil_mode, count_include_pad, MaxPool's Indices with both storage
orders), LpPool, the global poolings, MaxUnpool, and the spatial rearrangements,
samplers and normalizations of ops_spatial."""
import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import dlprim.onnx as dox  # noqa: E402
from dlprim.onnx.errors import UnsupportedModelError  # noqa: E402
from test_onnx_more_ops import check as reference_check, rand  # noqa: E402


def one_node(op, inputs, outputs, consts=(), opset=22, **attrs):
    """A model of one node: ``inputs`` [(name, array)], ``outputs`` [name] (shapes left to
    the importer), ``consts`` initializers."""
    def info(name, a):
        return helper.make_tensor_value_info(
            name, helper.np_dtype_to_tensor_dtype(a.dtype), list(a.shape))
    node = helper.make_node(op, [n for n, _ in inputs] + [n for n, _ in consts], outputs,
                            **attrs)
    graph = helper.make_graph([node], "g", [info(n, a) for n, a in inputs],
                              [helper.make_empty_tensor_value_info(n) for n in outputs],
                              [numpy_helper.from_array(np.asarray(a), n) for n, a in consts])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def check(ctx, model, inputs, rtol=1e-4, atol=1e-5):
    """dlprim's outputs equal onnx's reference (values, shapes, dtypes)."""
    reference_check(ctx, model, inputs, rtol=rtol, atol=atol)


# ----- pooling
POOLS = [
    # (op, input shape, attributes)
    ("AveragePool", (1, 2, 9), dict(kernel_shape=[3], pads=[2, 1], count_include_pad=1)),
    ("AveragePool", (1, 2, 9), dict(kernel_shape=[3], pads=[0, 2], strides=[2],
                                    ceil_mode=1)),
    ("AveragePool", (1, 1, 7, 6), dict(kernel_shape=[3, 2], pads=[1, 0, 2, 1],
                                       count_include_pad=1, ceil_mode=1, strides=[2, 2])),
    ("AveragePool", (1, 1, 5, 5, 6), dict(kernel_shape=[2, 3, 2], dilations=[2, 1, 2],
                                          pads=[1, 1, 0, 0, 1, 1])),
    ("MaxPool", (2, 2, 8), dict(kernel_shape=[3], dilations=[2], pads=[2, 0])),
    ("MaxPool", (1, 2, 5, 6, 4), dict(kernel_shape=[2, 2, 3], strides=[2, 1, 2],
                                      auto_pad="SAME_UPPER")),
]


@pytest.mark.parametrize("op,shape,attrs", POOLS)
def test_pooling_nd(ctx, op, shape, attrs):
    x = rand(*shape)
    check(ctx, one_node(op, [("x", x)], ["y"], **attrs), {"x": x})


@pytest.mark.parametrize("order", [0, 1])
@pytest.mark.parametrize("shape,kernel", [((2, 3, 5, 6), [2, 3]), ((1, 2, 4, 3, 5), [2, 2, 3])])
def test_max_pool_indices(ctx, order, shape, kernel):
    x = rand(*shape, seed=1)
    model = one_node("MaxPool", [("x", x)], ["y", "i"], kernel_shape=kernel,
                     strides=[2] * len(kernel), pads=[1] * (2 * len(kernel)),
                     storage_order=order)
    check(ctx, model, {"x": x})


def test_max_pool_uint8(ctx):
    x = np.random.default_rng(2).integers(0, 255, (1, 2, 6, 5)).astype(np.uint8)
    check(ctx, one_node("MaxPool", [("x", x)], ["y"], kernel_shape=[2, 2], dilations=[2, 1]),
          {"x": x})


def test_window_of_padding_only_is_refused(ctx):
    x = rand(1, 1, 4)
    model = one_node("MaxPool", [("x", x)], ["y"], kernel_shape=[2], pads=[3, 0])
    with pytest.raises(UnsupportedModelError, match="reads only padding"):
        dox.load(model, ctx)


@pytest.mark.parametrize("p,attrs", [(1, dict(kernel_shape=[3])),
                                     (2, dict(kernel_shape=[2, 2], pads=[1, 0, 1, 1])),
                                     (3, dict(kernel_shape=[2, 3], strides=[2, 1],
                                              dilations=[1, 2]))])
def test_lp_pool(ctx, p, attrs):
    x = rand(1, 2, 5, 7, seed=3)
    if len(attrs["kernel_shape"]) == 1:
        x = x[0]
    check(ctx, one_node("LpPool", [("x", x)], ["y"], p=p, **attrs), {"x": x}, rtol=1e-4)


GLOBAL = {"GlobalMaxPool": lambda x, axes: x.max(axis=axes, keepdims=True),
          "GlobalAveragePool": lambda x, axes: x.mean(axis=axes, keepdims=True),
          "GlobalLpPool": lambda x, axes: np.sqrt((x * x).sum(axis=axes, keepdims=True))}


@pytest.mark.parametrize("op", sorted(GLOBAL))
@pytest.mark.parametrize("shape", [(2, 3, 5), (1, 2, 3, 4, 5)])
def test_global_pooling_1d_3d(ctx, op, shape):
    # numpy, not onnx's reference: that one reduces other axes outside 2-D inputs
    x = rand(*shape, seed=4)
    y = dox.load(one_node(op, [("x", x)], ["y"]), ctx)(x=x)["y"]
    want = GLOBAL[op](x.astype(np.float64), tuple(range(2, x.ndim)))
    assert y.shape == want.shape
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("grow", [False, True])
def test_max_unpool(ctx, grow):
    x = rand(1, 2, 4, 4, seed=5)
    pooled, idx = ReferenceEvaluator(one_node("MaxPool", [("x", x)], ["y", "i"],
                                              kernel_shape=[2, 2], strides=[2, 2])).run(
        None, {"x": x})
    consts = [("shape", np.array([1, 2, 5, 6], np.int64))] if grow else []
    model = one_node("MaxUnpool", [("y", pooled), ("i", idx)], ["z"], consts,
                     kernel_shape=[2, 2], strides=[2, 2])
    check(ctx, model, {"y": pooled, "i": idx})


# ----- GridSample, AffineGrid
@pytest.mark.parametrize("mode,padding", [("linear", "zeros"), ("linear", "border"),
                                          ("linear", "reflection"), ("nearest", "zeros"),
                                          ("nearest", "reflection"), ("cubic", "zeros")])
@pytest.mark.parametrize("corners", [0, 1])
def test_grid_sample_2d(ctx, mode, padding, corners):
    x = rand(2, 3, 5, 6, seed=6)
    grid = (rand(2, 4, 3, 2, seed=7) * 0.8).astype(np.float32)  # some points outside
    model = one_node("GridSample", [("x", x), ("grid", grid)], ["y"], mode=mode,
                     padding_mode=padding, align_corners=corners)
    check(ctx, model, {"x": x, "grid": grid})


@pytest.mark.parametrize("mode", ["linear", "nearest"])
def test_grid_sample_3d(ctx, mode):
    x = rand(1, 2, 3, 4, 5, seed=8)
    grid = (rand(1, 2, 3, 2, 3, seed=9) * 0.7).astype(np.float32)
    model = one_node("GridSample", [("x", x), ("grid", grid)], ["y"], mode=mode,
                     padding_mode="border")
    check(ctx, model, {"x": x, "grid": grid})


def test_grid_sample_cubic_with_border_is_refused(ctx):
    x, grid = rand(1, 1, 4, 4), rand(1, 2, 2, 2)
    model = one_node("GridSample", [("x", x), ("grid", grid)], ["y"], mode="cubic",
                     padding_mode="border")
    with pytest.raises(UnsupportedModelError, match="padding_mode 'border'"):
        dox.load(model, ctx)


@pytest.mark.parametrize("size", [(2, 1, 3, 4), (1, 1, 2, 3, 4)])
@pytest.mark.parametrize("corners", [0, 1])
def test_affine_grid(ctx, size, corners):
    dims = len(size) - 2
    theta = rand(size[0], dims, dims + 1, seed=10)
    model = one_node("AffineGrid", [("theta", theta)], ["grid"],
                     [("size", np.array(size, np.int64))], align_corners=corners)
    check(ctx, model, {"theta": theta})


# ----- rearrangements, crops and pads
@pytest.mark.parametrize("op", ["DepthToSpace", "SpaceToDepth"])
@pytest.mark.parametrize("mode", ["DCR", "CRD"])
def test_depth_space(ctx, op, mode):
    x = rand(2, 8, 4, 6, seed=11)
    check(ctx, one_node(op, [("x", x)], ["y"], opset=25, blocksize=2, mode=mode), {"x": x})


@pytest.mark.parametrize("target,axes", [([5, 3], [1, 2]), ([2, 7, 4], None), ([6], [-1])])
def test_center_crop_pad(ctx, target, axes):
    x = rand(4, 6, 5, seed=12)
    attrs = {} if axes is None else {"axes": axes}
    model = one_node("CenterCropPad", [("x", x)], ["y"],
                     [("shape", np.array(target, np.int64))], **attrs)
    check(ctx, model, {"x": x})


# ----- normalizations
def test_instance_norm(ctx):
    x = rand(2, 3, 4, 5, seed=13)
    consts = [("s", rand(3, seed=14)), ("bias", rand(3, seed=15))]
    check(ctx, one_node("InstanceNormalization", [("x", x)], ["y"], consts, epsilon=1e-3),
          {"x": x})


@pytest.mark.parametrize("p,axis", [(1, 1), (2, -1), (2, 0)])
def test_lp_normalization(ctx, p, axis):
    # numpy: onnx's reference sums x, not |x|, for p = 1
    x = rand(3, 4, 5, seed=16)
    x[1] = 0  # a zero norm gives 0 (onnx's reference), not NaN
    y = dox.load(one_node("LpNormalization", [("x", x)], ["y"], p=p, axis=axis), ctx)(x=x)["y"]
    norm = (np.abs(x.astype(np.float64)) ** p).sum(axis=axis, keepdims=True) ** (1.0 / p)
    want = np.where(norm == 0, 0, x / np.where(norm == 0, 1, norm))
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-6)
    if p == 2:
        check(ctx, one_node("LpNormalization", [("x", x)], ["y"], p=p, axis=axis), {"x": x})


@pytest.mark.parametrize("axes", [None, [1], [0, 2]])
def test_mean_variance_normalization(ctx, axes):
    x = rand(2, 3, 4, 5, seed=17)
    attrs = {} if axes is None else {"axes": axes}
    check(ctx, one_node("MeanVarianceNormalization", [("x", x)], ["y"], **attrs), {"x": x},
          rtol=1e-3, atol=1e-4)
