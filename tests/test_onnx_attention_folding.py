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
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    assert "ScaledDotProductAttention" not in _types(path)
    rng = np.random.default_rng(0)
    feeds = {n: rng.standard_normal(shape).astype(np.float32) for n in "qkv"}
    want = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    net = dlprim.onnx.load(path, ctx, batch=1)
    got = next(iter(net(**feeds).values()))
    np.testing.assert_allclose(got, want, atol=1e-5)
