"""ONNX import of tiny CNN families exported by PyTorch at two opsets, checked against
onnxruntime on the same file (logits, within 1e-4 of their largest magnitude)."""
import io

import numpy as np
import pytest

torch = pytest.importorskip("torch")
ort = pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")

import dlprim.onnx as dox  # noqa: E402

from onnx_models import FAMILIES, IMAGE, build  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

OPSETS = (11, 17)
BATCH = 2


def export(model, opset, x):
    f = io.BytesIO()
    torch.onnx.export(model, x, f, opset_version=opset, dynamo=False, input_names=["data"],
                      output_names=["logits"])
    return f.getvalue()


def check_close(y, ref, rtol=1e-4):
    scale = float(np.abs(ref).max())
    err = float(np.abs(y - ref).max())
    assert err <= rtol * max(scale, 1e-3), "max error %g, largest output %g" % (err, scale)


@pytest.mark.parametrize("opset", OPSETS)
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_family_matches_onnxruntime(ctx, family, opset):
    model = build(family)
    x = torch.from_numpy(np.random.default_rng(7).standard_normal((BATCH,) + IMAGE,
                                                                  dtype=np.float32))
    data = export(model, opset, x)
    ref = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(
        None, {"data": x.numpy()})[0]
    net = dox.load(data, ctx)
    y = net(data=x.numpy())["logits"]
    assert y.shape == ref.shape
    check_close(y, ref)


def test_symbolic_batch_is_set_and_changed(ctx):
    """A model exported with a symbolic batch (its shape arithmetic folded at import) runs
    at the batch it was loaded with and at another one after a re-plan."""
    model = build("shufflenet")
    x = torch.from_numpy(np.random.default_rng(8).standard_normal((3,) + IMAGE, dtype=np.float32))
    f = io.BytesIO()
    torch.onnx.export(model, x, f, opset_version=13, dynamo=False, input_names=["data"],
                      output_names=["logits"], dynamic_axes={"data": {0: "n"}, "logits": {0: "n"}})
    sess = ort.InferenceSession(f.getvalue(), providers=["CPUExecutionProvider"])
    net = dox.load(f.getvalue(), ctx, batch=3)
    check_close(net(data=x.numpy())["logits"], sess.run(None, {"data": x.numpy()})[0])
    x5 = np.concatenate([x.numpy(), x.numpy()[:2] * 0.5])
    check_close(net(data=x5)["logits"], sess.run(None, {"data": x5})[0])


@pytest.mark.parametrize("opset", [17, 18])
@pytest.mark.parametrize("norm_first", [False, True])
def test_transformer_encoder_matches_onnxruntime(ctx, opset, norm_first):
    """torch.nn.TransformerEncoder (batch_first) as PyTorch exports it: the attention's
    data x data MatMuls, LayerNormalization and its ReLU MLP."""
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True,
                                             norm_first=norm_first)
    model = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False).eval()
    x = torch.from_numpy(np.random.default_rng(9).standard_normal((BATCH, 7, 16),
                                                                  dtype=np.float32))
    data = export(model, opset, x)
    cfg, _ = dox.to_netconfig(data)
    types = {op["type"] for op in cfg.operators}
    assert {"LayerNorm", "MatMul"} <= types
    ref = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(
        None, {"data": x.numpy()})[0]
    y = dox.load(data, ctx)(data=x.numpy())["logits"]
    assert y.shape == ref.shape
    check_close(y, ref)


@pytest.mark.parametrize("opset", [17, 18])
@pytest.mark.parametrize("family", ["vit", "convnext"])
def test_vision_transformer_and_convnext_match_onnxruntime(ctx, opset, family):
    """Small networks laid out as torchvision's VisionTransformer (nn.MultiheadAttention,
    the class token's Concat) and ConvNeXt (LayerNorm2d's permutes, the layer scale), as
    PyTorch exports them."""
    from test_convnext import ConvNeXt
    from test_vit import ViT
    torch.manual_seed(1)
    model, shape = (ViT(), (BATCH, 3, 16, 16)) if family == "vit" else \
        (ConvNeXt(), (BATCH, 3, 32, 32))
    x = torch.from_numpy(np.random.default_rng(10).standard_normal(shape, dtype=np.float32))
    data = export(model.eval(), opset, x)
    ref = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(
        None, {"data": x.numpy()})[0]
    y = dox.load(data, ctx)(data=x.numpy())["logits"]
    assert y.shape == ref.shape
    check_close(y, ref)
