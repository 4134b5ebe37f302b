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
    types = [op["type"] for op in cfg.operators]
    assert {"LayerNorm", "InnerProduct"} <= set(types)
    assert types.count("ScaledDotProductAttention") == 2  # the attention pattern, fused
    assert "Softmax" not in types
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


class _Attend(torch.nn.Module):
    """The attention spellings PyTorch's exporter meets: F.scaled_dot_product_attention
    (plain, causal, with a float or boolean mask), and a hand-written softmax(q k^T / c) v
    on 4-d heads or on 3-d (batch * heads) rows."""

    def __init__(self, kind):
        super().__init__()
        self.kind = kind

    def forward(self, q, k, v):
        F = torch.nn.functional
        if self.kind == "plain":
            return F.scaled_dot_product_attention(q, k, v)
        if self.kind == "causal":
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
        if self.kind == "float_mask":
            mask = torch.linspace(-2, 0, k.shape[2]).reshape(1, 1, 1, -1)
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=0.3)
        if self.kind in ("min_float_causal", "near_causal"):
            # HuggingFace's eager mask: finfo.min above the diagonal, one per sequence; a
            # mask of -1e4 there is not the causal one (a large score outweighs it)
            low = torch.finfo(q.dtype).min if self.kind == "min_float_causal" else -1e4
            above = torch.ones(q.shape[2], k.shape[2], dtype=torch.bool).triu(1)
            mask = torch.zeros(q.shape[2], k.shape[2]).masked_fill(above, low)
            mask = mask.expand(q.shape[0], 1, -1, -1)
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        if self.kind == "zero_mask":  # HuggingFace's BERT mask without padding: all 0
            mask = torch.zeros(q.shape[0], 1, q.shape[2], k.shape[2])
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        if self.kind == "bool_mask":
            keep = torch.arange(k.shape[2]).reshape(1, 1, 1, -1) < 5
            return F.scaled_dot_product_attention(q, k, v, attn_mask=keep)
        if self.kind == "weights_out":  # the probabilities are an output too: not fused
            p = torch.softmax(q @ k.transpose(-2, -1) * 0.25, dim=-1)
            return p @ v, p
        rows = (-1,) + tuple(q.shape[2:])  # "rows": 3-d, falls back to MatMul + Softmax
        q, k, v = (t.reshape(rows) for t in (q, k, v))
        return torch.softmax(q @ k.transpose(-2, -1) / 8, dim=-1) @ v


@pytest.mark.parametrize("opset", [17, 18])
@pytest.mark.parametrize("kind,fused", [("plain", True), ("causal", True), ("float_mask", True),
                                        ("bool_mask", True), ("min_float_causal", True),
                                        ("near_causal", True), ("zero_mask", True),
                                        ("weights_out", False), ("rows", False)])
def test_attention_patterns_fold_into_fused_attention(ctx, opset, kind, fused):
    rng = np.random.default_rng(11)
    args = tuple(torch.from_numpy(rng.standard_normal((2, 3, 9, 8), dtype=np.float32))
                 for _ in range(3))
    f = io.BytesIO()
    names = ["q", "k", "v"]
    torch.onnx.export(_Attend(kind), args, f, opset_version=opset, dynamo=False,
                      input_names=names)
    data = f.getvalue()
    cfg, _ = dox.to_netconfig(data)
    fused_ops = [op for op in cfg.operators if op["type"] == "ScaledDotProductAttention"]
    assert len(fused_ops) == (1 if fused else 0)
    if kind in ("causal", "min_float_causal"):
        assert fused_ops[0]["options"]["causal"] and len(fused_ops[0]["inputs"]) == 3
    if kind == "near_causal":
        assert not fused_ops[0]["options"]["causal"] and len(fused_ops[0]["inputs"]) == 4
    if kind == "zero_mask":  # adding 0 changes no score: no mask is read
        assert not fused_ops[0]["options"]["causal"] and len(fused_ops[0]["inputs"]) == 3
    feeds = {n: a.numpy() for n, a in zip(names, args)}
    refs = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)
    got = dox.load(data, ctx)(**feeds)
    assert len(got) == len(refs)
    for y, ref in zip(got.values(), refs):
        check_close(y, ref)


class _HeadSplit(torch.nn.Module):
    """Self-attention over the heads of Linears, written as HuggingFace's modules write it:
    view (N, L, H, D), transpose(1, 2), q k^T (k transposed once more, ``two_transposes``)
    plus a padding mask, softmax, times v, then transpose(1, 2) back and merge the heads
    (``back`` False: the (N, H, L, D) result is returned as it is)."""

    def __init__(self, two_transposes, back=True):
        super().__init__()
        torch.manual_seed(3)
        self.qkv = torch.nn.ModuleList(torch.nn.Linear(12, 12) for _ in range(3))
        self.two_transposes, self.back = two_transposes, back

    def forward(self, x):
        n, length, _ = x.shape
        q, k, v = (f(x).view(n, length, 3, 4).transpose(1, 2) for f in self.qkv)
        kt = k.transpose(-1, -2) if self.two_transposes else \
            self.qkv[1](x).view(n, length, 3, 4).permute(0, 2, 3, 1)
        mask = torch.zeros(n, 1, 1, length)
        mask[1, ..., -2:] = torch.finfo(torch.float32).min  # the second sequence is padded
        y = torch.softmax(q @ kt / 2 + mask, dim=-1) @ v
        return y.transpose(1, 2).reshape(n, length, 12) if self.back else y


@pytest.mark.parametrize("two_transposes,back", [(False, True), (True, True), (False, False)])
def test_head_split_attention_reads_the_heads_in_place(ctx, two_transposes, back):
    """The head transposes around the folded attention become its "nlhd" layout (no
    Transpose layers) where the result is transposed back; otherwise they stay."""
    x = torch.from_numpy(np.random.default_rng(13).standard_normal((2, 7, 12), dtype=np.float32))
    data = export(_HeadSplit(two_transposes, back).eval(), 17, x)
    cfg, _ = dox.to_netconfig(data)
    fused = [op for op in cfg.operators if op["type"] == "ScaledDotProductAttention"]
    transposes = [op for op in cfg.operators if op["type"] == "Transpose"]
    assert len(fused) == 1 and len(fused[0]["inputs"]) == 4
    assert fused[0]["options"].get("layout", "nhld") == ("nlhd" if back else "nhld")
    assert (len(transposes) == 0) == back, [op["type"] for op in cfg.operators]
    ref = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(
        None, {"data": x.numpy()})[0]
    check_close(list(dox.load(data, ctx)(data=x.numpy()).values())[0], ref)


class _MaskedFill(torch.nn.Module):
    """masked_fill with a constant mask and torch.where between two data tensors: ONNX
    Where with a constant boolean condition, as PyTorch exports them."""

    def forward(self, x, y):
        keep = torch.arange(x.shape[-1]) % 3 != 0
        return torch.where(keep, x, y).masked_fill(~keep, -2.5) * 2


@pytest.mark.parametrize("opset", [17, 18])
def test_where_imports(ctx, opset):
    rng = np.random.default_rng(12)
    args = tuple(torch.from_numpy(rng.standard_normal((2, 3, 10), dtype=np.float32))
                 for _ in range(2))
    f = io.BytesIO()
    torch.onnx.export(_MaskedFill(), args, f, opset_version=opset, dynamo=False,
                      input_names=["x", "y"])
    data = f.getvalue()
    cfg, _ = dox.to_netconfig(data)
    assert [op["type"] for op in cfg.operators].count("Where") == 2
    feeds = {"x": args[0].numpy(), "y": args[1].numpy()}
    ref = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    y = list(dox.load(data, ctx)(**feeds).values())[0]
    check_close(y, ref)
