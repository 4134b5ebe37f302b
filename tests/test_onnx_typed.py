"""ONNX operators over integer, bool, float16 and float64 tensors (dlprim/onnx/ops_library.py
over the LibraryOp layer) against onnxruntime: comparisons, logic, bitwise, arithmetic with
ONNX's integer rules (Div truncates, Mod by fmod), Pow's types, Where, Cast and CastLike,
IsNaN/IsInf, variadic Max/Min/Sum/Mean. Shapes of 65 elements per row cross a work-group
edge; broadcasting in every binary case."""
import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper  # noqa: E402

import dlprim.onnx as dox  # noqa: E402
from dlprim.onnx.errors import UnsupportedModelError  # noqa: E402

T = {np.dtype(k): v for k, v in ((np.float32, TensorProto.FLOAT), (np.float16, TensorProto.FLOAT16),
                                 (np.float64, TensorProto.DOUBLE), (np.int8, TensorProto.INT8),
                                 (np.int16, TensorProto.INT16), (np.int32, TensorProto.INT32),
                                 (np.int64, TensorProto.INT64), (np.uint8, TensorProto.UINT8),
                                 (np.bool_, TensorProto.BOOL))}


def model(nodes, feeds, outputs, inits=(), opset=18):
    """The model's output types come from onnx's shape inference."""
    g = helper.make_graph(
        nodes, "typed", [helper.make_tensor_value_info(n, T[a.dtype], a.shape)
                         for n, a in feeds.items()], [],
        [onnx.numpy_helper.from_array(np.asarray(a), n) for n, a in dict(inits).items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    inferred = {v.name: v for v in onnx.shape_inference.infer_shapes(m).graph.value_info}
    m.graph.output.extend([inferred[n] for n in outputs])
    return m.SerializeToString()


def check(ctx, nodes, feeds, outputs, rtol=1e-6):
    data = model(nodes, feeds, outputs)
    sess = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    ref = dict(zip(outputs, sess.run(outputs, feeds)))
    ours = dox.load(data, ctx)(**feeds)
    for k, r in ref.items():
        y = ours[k]
        assert y.dtype == r.dtype, (k, y.dtype, r.dtype)
        assert y.shape == r.shape, (k, y.shape, r.shape)
        if r.dtype.kind == "f":
            np.testing.assert_allclose(y.astype(np.float64), r.astype(np.float64), rtol=rtol,
                                       atol=rtol, err_msg=k)
        else:
            np.testing.assert_array_equal(y, r, err_msg=k)


def ints(dtype, shape, lo=-9, hi=10, seed=0):
    return np.random.default_rng(seed).integers(lo, hi, shape).astype(dtype)


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.int8, np.uint8, np.float16,
                                   np.float64])
def test_compare_and_arithmetic(ctx, dtype):
    lo = 0 if dtype == np.uint8 else -9
    a = ints(dtype, (3, 65), lo)
    b = ints(dtype, (1, 65), lo, seed=1)
    b[b == 0] = 3
    nodes = [helper.make_node(t, ["a", "b"], [t]) for t in
             ("Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual", "Add", "Sub", "Mul",
              "Div", "Max", "Min")]
    outs = [n.output[0] for n in nodes]
    if dtype not in (np.float16, np.float64):
        nodes.append(helper.make_node("Mod", ["a", "b"], ["mod"]))
        outs.append("mod")
    nodes.append(helper.make_node("Mod", ["a", "b"], ["fmod"], fmod=1))
    if dtype in (np.float16, np.float64):  # (ONNX's Sum takes floats)
        nodes.append(helper.make_node("Sum", ["a", "b", "a"], ["sum3"]))
        outs.append("sum3")
    nodes.append(helper.make_node("Abs", ["a"], ["abs"]))
    nodes.append(helper.make_node("Neg" if dtype != np.uint8 else "Abs", ["a"], ["neg"]))
    nodes.append(helper.make_node("Sign", ["a"], ["sign"]))
    check(ctx, nodes, {"a": a, "b": b}, outs + ["fmod", "abs", "neg", "sign"],
          rtol=1e-3 if dtype == np.float16 else 1e-6)


def test_logic_bitwise_and_where(ctx):
    rng = np.random.default_rng(2)
    p, q = rng.random((2, 65)) < 0.5, rng.random((1, 65)) < 0.5
    i, j = ints(np.int32, (2, 65)), ints(np.int32, (2, 1), seed=3)
    u, s = ints(np.uint8, (2, 65), 0, 255), ints(np.uint8, (2, 65), 0, 9, seed=4)
    x = rng.standard_normal((2, 65)).astype(np.float32)
    nodes = [helper.make_node(t, ["p", "q"], [t]) for t in ("And", "Or", "Xor")]
    nodes += [helper.make_node("Not", ["p"], ["Not"]),
              helper.make_node("BitwiseAnd", ["i", "j"], ["band"]),
              helper.make_node("BitwiseOr", ["i", "j"], ["bor"]),
              helper.make_node("BitwiseXor", ["i", "j"], ["bxor"]),
              helper.make_node("BitwiseNot", ["i"], ["bnot"]),
              helper.make_node("BitShift", ["u", "s"], ["shl"], direction="LEFT"),
              helper.make_node("BitShift", ["u", "s"], ["shr"], direction="RIGHT"),
              helper.make_node("Where", ["p", "i", "j"], ["wi"]),
              helper.make_node("Where", ["p", "x", "x"], ["wf"])]
    check(ctx, nodes, {"p": p, "q": q, "i": i, "j": j, "u": u, "s": s, "x": x},
          ["And", "Or", "Xor", "Not", "band", "bor", "bxor", "bnot", "shl", "shr", "wi", "wf"])


def test_casts_between_every_type(ctx):
    rng = np.random.default_rng(5)
    x = (rng.standard_normal((2, 65)) * 40).astype(np.float32)
    x[0, :4] = [0.0, -0.0, np.nan, 2.5]
    nodes, outs = [], []
    targets = [("f16", TensorProto.FLOAT16), ("f64", TensorProto.DOUBLE),
               ("i8", TensorProto.INT8), ("i16", TensorProto.INT16), ("i32", TensorProto.INT32),
               ("i64", TensorProto.INT64), ("b", TensorProto.BOOL)]
    for name, to in targets:
        nodes.append(helper.make_node("Cast", ["xs"], [name], to=to))
        back = helper.make_node("Cast", [name], [name + "_f"], to=TensorProto.FLOAT)
        nodes.append(back)
        outs += [name, name + "_f"]
    nodes.insert(0, helper.make_node("Where", ["finite", "x", "zero"], ["xs"]))
    nodes.insert(0, helper.make_node("Not", ["nan"], ["finite"]))
    nodes.insert(0, helper.make_node("IsNaN", ["x"], ["nan"]))
    nodes.append(helper.make_node("CastLike", ["x", "i"], ["like"]))
    nodes.append(helper.make_node("Cast", ["x"], ["xb"], to=TensorProto.BOOL))  # NaN: true
    x8 = np.clip(x, -100, 100)
    data = model(nodes, {"x": x8, "i": np.zeros(1, np.int16)}, outs + ["like", "xb"],
                 {"zero": np.zeros((), np.float32)})
    sess = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    feeds = {"x": x8, "i": np.zeros(1, np.int16)}
    names = outs + ["like", "xb"]
    ref = dict(zip(names, sess.run(names, feeds)))
    ours = dox.load(data, ctx)(**feeds)
    for k in names:
        assert ours[k].dtype == ref[k].dtype, k
        np.testing.assert_array_equal(ours[k], ref[k], err_msg=k)


def test_pow_isnan_isinf_mean(ctx):
    rng = np.random.default_rng(6)
    x = rng.uniform(0.5, 2, (2, 65)).astype(np.float32)
    x[0, :3] = [np.inf, -np.inf, np.nan]
    i = ints(np.int64, (2, 65), 0, 5)
    e = ints(np.int64, (1, 65), 0, 4, seed=7)
    nodes = [helper.make_node("Pow", ["x", "e"], ["pf"]),   # float base, int exponent
             helper.make_node("Pow", ["i", "e"], ["pi"]),
             helper.make_node("Pow", ["i", "h"], ["pif"]),  # int base, float exponent
             helper.make_node("IsNaN", ["x"], ["nan"]),
             helper.make_node("IsInf", ["x"], ["inf"]),
             helper.make_node("IsInf", ["x"], ["pinf"], detect_negative=0),
             helper.make_node("IsInf", ["x"], ["ninf"], detect_positive=0),
             helper.make_node("Mean", ["x", "h", "x"], ["mean"]),
             helper.make_node("Sqrt", ["d"], ["sqrt"]),
             helper.make_node("Reciprocal", ["d"], ["rec"])]
    h = rng.uniform(0.5, 2, (2, 65)).astype(np.float32)
    d = rng.uniform(0.5, 2, (2, 65)).astype(np.float64)
    check(ctx, nodes, {"x": x, "i": i, "e": e, "h": h, "d": d},
          ["pf", "pi", "pif", "nan", "inf", "pinf", "ninf", "mean", "sqrt", "rec"], rtol=2e-6)


def test_typed_constants_and_refusals(ctx):
    """Integer constants enter as numbers or exact float32 tensors; casts to types the Net
    does not hold are refused with the documented error."""
    i = ints(np.int64, (2, 65))
    nodes = [helper.make_node("Less", ["i", "three"], ["lt"]),
             helper.make_node("Add", ["i", "c"], ["add"]),
             helper.make_node("Div", ["i", "three"], ["div"])]
    data = model(nodes, {"i": i}, ["lt", "add", "div"],
                 {"c": np.arange(65, dtype=np.int64) - 30, "three": np.array(3, np.int64)})
    ref = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"i": i})
    ours = dox.load(data, ctx)(i=i)
    for k, r in zip(["lt", "add", "div"], ref):
        np.testing.assert_array_equal(ours[k], r, err_msg=k)
    for to in (TensorProto.STRING, TensorProto.COMPLEX64, TensorProto.FLOAT6E2M3):
        bad = model([helper.make_node("Cast", ["i"], ["y"], to=to)], {"i": i}, ["y"])
        with pytest.raises(UnsupportedModelError, match="Cast"):
            dox.to_netconfig(bad)
