"""ONNX operators against onnx's ReferenceEvaluator through one-node models: MatMul of
1-D operands and partly broadcast batches, Gemm with its data, weights and C given at run
time, Conv/ConvTranspose weights given as graph inputs, Resize of every mode, and the
pieces the function expansions of Attention, RotaryEmbedding and CenterCropPad need."""
import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import dlprim.onnx as dox  # noqa: E402


def one_node(op, inputs, outputs, consts=(), opset=22, **attrs):
    """A model of one node: ``inputs`` [(name, array)] given at run time, ``outputs``
    [name], ``consts`` [(name, array)] initializers ('' leaves an input out)."""
    def info(name, a):
        return helper.make_tensor_value_info(
            name, helper.np_dtype_to_tensor_dtype(a.dtype), list(a.shape))
    names = {n: i for i, (n, _) in enumerate(list(inputs) + list(consts))}
    order = attrs.pop("order", None) or list(names)
    node = helper.make_node(op, order, outputs, **attrs)
    graph = helper.make_graph([node], "g", [info(n, a) for n, a in inputs],
                              [helper.make_empty_tensor_value_info(n) for n in outputs],
                              [numpy_helper.from_array(np.asarray(a), n) for n, a in consts
                               if n])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10  # one onnxruntime reads
    return model


def check(ctx, model, inputs, rtol=1e-5, atol=1e-6, ort=False):
    """dlprim's outputs equal onnx's reference (values, shapes, dtypes); ``ort``:
    onnxruntime's, where onnx's reference is wrong (ConvTranspose's groups and
    output_padding)."""
    if ort:
        rt = pytest.importorskip("onnxruntime")
        want = rt.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"]).run(None, dict(inputs))
    else:
        want = ReferenceEvaluator(model).run(None, dict(inputs))
    got = dox.load(model, ctx)(**dict(inputs))
    got = list(got.values()) if isinstance(got, dict) else (
        list(got) if isinstance(got, (list, tuple)) else [got])
    assert len(got) == len(want)
    for g, w in zip(got, want):
        g = np.asarray(g)
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, g.dtype, w.shape, w.dtype)
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)


def rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


# ----- MatMul, Gemm
@pytest.mark.parametrize("sa,sb", [((5,), (5,)), ((5,), (2, 5, 3)), ((2, 1, 4, 5), (5,)),
                                   ((3, 1, 2, 4), (1, 2, 4, 3)), ((2, 3, 4), (4, 3))])
def test_matmul_numpy_rule(ctx, sa, sb):
    a, w = rand(*sa), rand(*sb, seed=1)
    check(ctx, one_node("MatMul", [("a", a), ("b", w)], ["y"]), {"a": a, "b": w})


def test_matmul_constant_operands(ctx):
    a, w = rand(3, 4), rand(2, 4, 5, seed=1)
    # a constant first operand, a batched constant second operand
    check(ctx, one_node("MatMul", [("b", w)], ["y"], consts=[("a", a)], order=["a", "b"]),
          {"b": w})
    check(ctx, one_node("MatMul", [("a", a)], ["y"], consts=[("b", w)]), {"a": a})


@pytest.mark.parametrize("ta,tb,c_shape,alpha,beta", [
    (1, 0, (3, 4), 0.5, 2.0), (1, 1, (1,), 1.0, 1.0), (0, 1, (3, 1), 1.5, -0.5),
    (0, 0, None, 2.0, 1.0), (0, 0, (4,), 1.0, 0.0)])
@pytest.mark.parametrize("runtime_b", [False, True])
def test_gemm(ctx, ta, tb, c_shape, alpha, beta, runtime_b):
    a = rand(*((5, 3) if ta else (3, 5)))
    w = rand(*((4, 5) if tb else (5, 4)), seed=1)
    ins, consts = [("a", a)], []
    (ins if runtime_b else consts).append(("b", w))
    if c_shape is not None:
        consts.append(("c", rand(*c_shape, seed=2)))
    model = one_node("Gemm", ins, ["y"], consts=consts, transA=ta, transB=tb, alpha=alpha,
                     beta=beta, order=["a", "b"] + (["c"] if c_shape else []))
    check(ctx, model, dict(ins))


def test_gemm_runtime_c(ctx):
    a, w, c = rand(3, 5), rand(5, 4, seed=1), rand(3, 4, seed=2)
    check(ctx, one_node("Gemm", [("a", a), ("b", w), ("c", c)], ["y"], beta=0.25),
          {"a": a, "b": w, "c": c})


# ----- Conv, ConvTranspose with the weight (and bias) given at run time
CONVS = [
    # (x shape, w shape, attributes)
    ((2, 4, 7), (6, 2, 3), dict(group=2, strides=[2], pads=[1, 2], dilations=[2])),
    ((1, 3, 6, 5), (4, 3, 3, 2), dict(auto_pad="SAME_LOWER", strides=[2, 1])),
    ((1, 2, 4, 5, 3), (3, 2, 2, 3, 2), dict(pads=[1, 0, 1, 0, 2, 0], dilations=[1, 2, 1])),
]


@pytest.mark.parametrize("xs,ws,attrs", CONVS)
def test_conv_runtime_weight(ctx, xs, ws, attrs):
    x, w, bias = rand(*xs), rand(*ws, seed=1), rand(ws[0], seed=2)
    check(ctx, one_node("Conv", [("x", x), ("w", w), ("b", bias)], ["y"], **attrs),
          {"x": x, "w": w, "b": bias})


TRANSPOSED = [
    ((2, 4, 5), (4, 3, 3), dict(group=2, strides=[3], pads=[1, 0], output_padding=[2])),
    ((1, 2, 3, 4), (2, 3, 3, 2), dict(strides=[2, 2], dilations=[2, 1],
                                      output_shape=[8, 9])),
    ((1, 2, 3, 2, 3), (2, 2, 2, 3, 2), dict(strides=[1, 2, 2], auto_pad="SAME_UPPER")),
]


@pytest.mark.parametrize("xs,ws,attrs", TRANSPOSED)
def test_conv_transpose_runtime_weight(ctx, xs, ws, attrs):
    x, w = rand(*xs), rand(*ws, seed=1)
    bias = rand(ws[1] * attrs.get("group", 1), seed=2)
    check(ctx, one_node("ConvTranspose", [("x", x), ("w", w)], ["y"], consts=[("b", bias)],
                        **attrs), {"x": x, "w": w}, ort=True)


# ----- Resize: every mode, by ONNX's per-axis matrices (or the Interpolation layer)
def _resize(x, target, kind="scales", roi=None, opset=19, **attrs):
    consts = [("roi", np.asarray(roi, np.float32)) if roi is not None else ("", None)]
    consts += [("", None)] * (kind == "sizes") + [(kind, target)]
    order = ["x"] + [n for n, _ in consts]
    return one_node("Resize", [("x", x)], ["y"], consts=consts, order=order, opset=opset,
                    **attrs)


RESIZES = [
    # (input shape, kind, target, attributes)
    ((1, 2, 5, 4), "scales", [1, 1, 0.6, 1.5], dict(mode="cubic")),
    ((1, 2, 5, 4), "sizes", [1, 2, 3, 9], dict(mode="cubic", cubic_coeff_a=-0.5,
                                               exclude_outside=1)),
    ((1, 1, 8, 7), "scales", [1, 1, 0.4, 0.6], dict(mode="cubic", antialias=1)),
    ((1, 1, 8, 7), "sizes", [1, 1, 3, 5], dict(mode="linear", antialias=1)),
    ((2, 3, 5), "scales", [1, 1, 1.7], dict(mode="linear",
                                            coordinate_transformation_mode="align_corners")),
    ((1, 2, 3, 4, 5), "sizes", [1, 2, 5, 3, 7],
     dict(mode="nearest", nearest_mode="ceil", coordinate_transformation_mode="half_pixel")),
    ((3, 4, 5), "sizes", [5, 4, 2], dict(mode="linear",
                                         coordinate_transformation_mode="half_pixel_symmetric")),
    ((1, 2, 5, 4), "sizes", [1, 2, 3, 3], dict(mode="linear",
                                               coordinate_transformation_mode="pytorch_half_pixel")),
    ((2, 6, 4), "sizes", [3, 4], dict(mode="nearest", axes=[1, 0],
                                      nearest_mode="round_prefer_ceil")),
]


@pytest.mark.parametrize("shape,kind,target,attrs", RESIZES)
def test_resize_modes(ctx, shape, kind, target, attrs):
    x = rand(*shape)
    target = np.asarray(target, np.float32 if kind == "scales" else np.int64)
    check(ctx, _resize(x, target, kind, **attrs), {"x": x})


def test_resize_tf_crop_and_resize_extrapolates(ctx):
    x = rand(1, 1, 4, 5)
    model = _resize(x, np.array([1, 1, 3, 6], np.int64), "sizes",
                    roi=[0, 0, 0.4, -0.3, 1, 1, 1.3, 0.8], mode="linear",
                    coordinate_transformation_mode="tf_crop_and_resize",
                    extrapolation_value=2.5)
    check(ctx, model, {"x": x})


def test_resize_float16(ctx):
    x = rand(1, 1, 4, 5).astype(np.float16)
    check(ctx, _resize(x, np.array([1, 1, 1.5, 0.8], np.float32), mode="cubic"), {"x": x},
          rtol=1e-3, atol=1e-3)


def test_resize_keeps_the_interpolation_layer_where_it_is_exact(ctx):
    x = rand(1, 2, 4, 5)
    model = _resize(x, np.array([1, 1, 2, 2], np.float32), mode="linear")
    cfg, _ = dox.to_netconfig(model)
    assert [op["type"] for op in cfg.operators] == ["Interpolation"]
    check(ctx, model, {"x": x})


# ----- Gather
@pytest.mark.parametrize("dtype", [np.int64, np.int32])
def test_gather_of_a_constant_table_counts_negative_indices_from_the_end(ctx, dtype):
    table = rand(5, 3)
    idx = np.array([[0, -1, 4], [-5, 2, -2]], dtype)
    model = one_node("Gather", [("i", idx)], ["y"], consts=[("t", table)], order=["t", "i"])
    assert "Embedding" in [op["type"] for op in dox.to_netconfig(model)[0].operators]
    check(ctx, model, {"i": idx})


# ----- the pieces of the function expansions
@pytest.mark.parametrize("pads,axes", [([1, 0, 2, 0, 1, 3], None), ([2, 0, 1, 3], [-1, 0])])
def test_pad_by_a_value_given_at_run_time(ctx, pads, axes):
    x, v = rand(2, 3, 4), np.array(-np.inf, np.float32)
    consts = [("p", np.array(pads, np.int64))]
    if axes:
        consts.append(("a", np.array(axes, np.int64)))
    model = one_node("Pad", [("x", x), ("v", v)], ["y"], consts=consts,
                     order=["x", "p", "v"] + (["a"] if axes else []))
    check(ctx, model, {"x": x, "v": v})
