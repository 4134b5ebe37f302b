"""The importer folds the attention that PyTorch's exporters write into one fused
ScaledDotProductAttention: BERT through the TorchScript exporter (k's head split and
transpose in one Transpose (0, 2, 3, 1), the scale split between q and k^T, the float
mask and the NaN guard after the softmax) and GPT-2 through the dynamo exporter (k^T as
Reshape, Transpose (0, 2, 1), Reshape; the mask Where(bool, 0, finfo.min) added). The
folded nets match onnxruntime; a softmax over another axis is not folded."""
import numpy as np
import pytest

import dlprim.onnx

pytest.importorskip("onnxruntime")
pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

from test_onnx_hf_exports import hf  # noqa: E402  (the exports' builders)


def _types(path):
    cfg = dlprim.onnx.to_netconfig(path, batch=2)[0]
    return [op["type"] for op in cfg.operators]


def _folded(ctx, path, feeds):
    types = _types(path)
    assert types.count("ScaledDotProductAttention") == 2  # one per layer
    assert "Softmax" not in types
    assert hf.compare(path, feeds, ctx) < 1e-4


def test_bert_torchscript_folds(ctx, tmp_path):
    path, feeds, _ = hf.export("bert", str(tmp_path))
    _folded(ctx, path, feeds)


def test_gpt2_dynamo_folds(ctx, tmp_path):
    pytest.importorskip("onnxscript")
    path, feeds, _ = hf.export("gpt2", str(tmp_path), dynamo=True)
    _folded(ctx, path, feeds)


def test_softmax_over_another_axis_is_not_folded(ctx, tmp_path):
    import onnx
    import onnxruntime
    from onnx import TensorProto, helper
    shape = [1, 2, 3, 3]
    x = [helper.make_tensor_value_info(n, TensorProto.FLOAT, shape) for n in "qkv"]
    nodes = [helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
             helper.make_node("MatMul", ["q", "kt"], ["s"]),
             helper.make_node("Softmax", ["s"], ["p"], axis=2),
             helper.make_node("MatMul", ["p", "v"], ["y"])]
    graph = helper.make_graph(nodes, "g", x, [helper.make_tensor_value_info(
        "y", TensorProto.FLOAT, shape)])
    path = str(tmp_path / "axis2.onnx")
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8  # (what an older onnxruntime reads too)
    onnx.save(model, path)
    assert "ScaledDotProductAttention" not in _types(path)
    rng = np.random.default_rng(0)
    feeds = {n: rng.standard_normal(shape).astype(np.float32) for n in "qkv"}
    want = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    net = dlprim.onnx.load(path, ctx, batch=1)
    got = next(iter(net(**feeds).values()))
    np.testing.assert_allclose(got, want, atol=1e-5)


def _between_model(tmp_path, between, ratio=None, training=None):
    """q, k, v (1, 2, 3, 4) -> MatMul(Softmax(q k^T), v) with the nodes ``between`` ("cast"
    to float32, "half" a Cast to float16 and back, "dropout") after the Softmax."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    shape = [1, 2, 3, 4]
    x = [helper.make_tensor_value_info(n, TensorProto.FLOAT, shape) for n in "qkv"]
    nodes = [helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
             helper.make_node("MatMul", ["q", "kt"], ["s"]),
             helper.make_node("Softmax", ["s"], ["p0"], axis=-1)]
    inits, t = [], "p0"
    for i, kind in enumerate(between):
        if kind == "cast":
            nodes.append(helper.make_node("Cast", [t], ["p%d" % (i + 1)], to=TensorProto.FLOAT))
        elif kind == "half":
            nodes += [helper.make_node("Cast", [t], ["h%d" % i], to=TensorProto.FLOAT16),
                      helper.make_node("Cast", ["h%d" % i], ["p%d" % (i + 1)],
                                       to=TensorProto.FLOAT)]
        else:
            inits.append(numpy_helper.from_array(np.array(ratio, np.float32), "ratio"))
            ins = ["ratio"]
            if training is not None:
                inits.append(numpy_helper.from_array(np.array(training), "training"))
                ins.append("training")
            nodes.append(helper.make_node("Dropout", [t] + ins, ["p%d" % (i + 1)]))
        t = "p%d" % (i + 1)
    nodes.append(helper.make_node("MatMul", [t, "v"], ["y"]))
    graph = helper.make_graph(nodes, "g", x, [helper.make_tensor_value_info(
        "y", TensorProto.FLOAT, shape)], initializer=inits)
    path = str(tmp_path / "between.onnx")
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


@pytest.mark.parametrize("between,ratio,training,dropout", [
    (["cast", "cast", "dropout"], 0.25, None, 0.25),  # HuggingFace's training export
    (["cast", "dropout"], 0.25, False, 0.25), (["dropout"], 0.0, None, None),
    (["dropout", "cast"], 0.0, True, None)])
def test_casts_and_dropout_after_the_softmax_are_folded(ctx, tmp_path, between, ratio,
                                                        training, dropout):
    """Casts that keep float32 and the attention weights' Dropout fold into the fused
    attention, the Dropout's ratio its ``dropout`` (dropping in train mode only, as the
    Dropout layer would; ratio 0 or training_mode with ratio 0: none); the net matches
    onnxruntime, which drops nothing in inference."""
    import onnxruntime
    path = _between_model(tmp_path, between, ratio, training)
    cfg = dlprim.onnx.to_netconfig(path, batch=1)[0]
    assert [op["type"] for op in cfg.operators] == ["ScaledDotProductAttention"]
    assert cfg.operators[0]["options"].get("dropout") == dropout
    rng = np.random.default_rng(0)
    feeds = {n: rng.standard_normal([1, 2, 3, 4]).astype(np.float32) for n in "qkv"}
    want = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    got = next(iter(dlprim.onnx.load(path, ctx, batch=1)(**feeds).values()))
    np.testing.assert_allclose(got, want, atol=1e-5)


def test_a_cast_that_rounds_or_dropout_in_the_model_is_not_folded(tmp_path):
    """A Cast through float16 rounds the weights (kept as it is); a Dropout of
    training_mode true and a ratio above 0 drops whatever the Net's mode: refused by name,
    not folded into a layer that drops in train mode only."""
    types = _types(_between_model(tmp_path, ["half"]))
    assert "ScaledDotProductAttention" not in types and "Softmax" in types, types
    with pytest.raises(dlprim.onnx.errors.OnnxImportError, match="Dropout"):
        _types(_between_model(tmp_path, ["dropout"], 0.25, True))
