"""ONNX's transformer operators (opset 23 on): Attention, RMSNormalization,
RotaryEmbedding, LayerNormalization's statistics outputs, against onnx's reference
evaluator; the plain Attention runs as the fused ScaledDotProductAttention."""
import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import dlprim.onnx as dox  # noqa: E402
from dlprim.onnx import UnsupportedModelError  # noqa: E402

OPSET = 23


def _model(op, inputs, outputs, consts=(), **attrs):
    """One ``op`` node over float32 inputs {name: shape} (a bool mask as its dtype says)."""
    vis = [helper.make_tensor_value_info(n, {np.float32: TensorProto.FLOAT,
                                             np.bool_: TensorProto.BOOL,
                                             np.int64: TensorProto.INT64}[a.dtype.type], a.shape)
           for n, a in inputs.items()]
    outs = [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs if o]
    inits = [onnx.numpy_helper.from_array(v, n) for n, v in consts]
    names = list(inputs) + [n for n, _ in consts]
    node = helper.make_node(op, names, outputs, **attrs)
    graph = helper.make_graph([node], "g", vis, outs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])


def _check(ctx, model, inputs, rtol=1e-4, atol=1e-5):
    ref = ReferenceEvaluator(model).run(None, inputs)
    net = dox.load(model, ctx)
    got = net(**inputs)
    names = [o.name for o in model.graph.output]
    for name, want in zip(names, ref):
        np.testing.assert_allclose(np.asarray(got[name]), want, rtol=rtol, atol=atol,
                                   err_msg=name)
    return net


def _qkv(rng, n=2, h=3, hk=3, lq=5, lk=7, d=8, dv=8):
    return {"Q": rng.standard_normal((n, h, lq, d)).astype(np.float32),
            "K": rng.standard_normal((n, hk, lk, d)).astype(np.float32),
            "V": rng.standard_normal((n, hk, lk, dv)).astype(np.float32)}


def test_plain_attention_is_the_fused_kernel(ctx):
    rng = np.random.default_rng(0)
    ins = _qkv(rng)
    model = _model("Attention", ins, ["Y"], is_causal=1)
    _check(ctx, model, ins)
    cfg, _ = dox.to_netconfig(model)
    assert [op["type"] for op in cfg.operators] == ["ScaledDotProductAttention"]


@pytest.mark.parametrize("attrs, extra", [
    ({"softcap": 2.0, "is_causal": 1}, {}),                       # composed: softcap
    ({"qk_matmul_output_mode": 3}, {"mask": "bool"}),             # the probabilities out
    ({"qk_matmul_output_mode": 2, "softcap": 1.5}, {"mask": "float"}),
    ({"scale": 0.1}, {"mask": "short"}),                          # a mask padded with -inf
])
def test_attention_variants(ctx, attrs, extra):
    rng = np.random.default_rng(1)
    ins = _qkv(rng, h=4, hk=2)                                   # grouped key/value heads
    if extra.get("mask") == "bool":
        m = rng.random((5, 7)) > 0.4
        m[2] = False                                              # a row masked whole: zeros
        ins["attn_mask"] = m
    elif extra.get("mask") == "float":
        ins["attn_mask"] = rng.standard_normal((2, 1, 5, 7)).astype(np.float32)
    elif extra.get("mask") == "short":
        ins["attn_mask"] = rng.standard_normal((5, 4)).astype(np.float32)
    outs = ["Y", "", "", "qk"] if "qk_matmul_output_mode" in attrs else ["Y"]
    _check(ctx, _model("Attention", ins, outs, **attrs), ins)


def test_attention_3d_with_past_and_present(ctx):
    rng = np.random.default_rng(2)
    ins = {"Q": rng.standard_normal((2, 3, 12)).astype(np.float32),
           "K": rng.standard_normal((2, 3, 6)).astype(np.float32),
           "V": rng.standard_normal((2, 3, 9)).astype(np.float32),
           "attn_mask": np.zeros((3, 7), np.float32),
           "past_key": rng.standard_normal((2, 3, 4, 2)).astype(np.float32),
           "past_value": rng.standard_normal((2, 3, 4, 3)).astype(np.float32)}
    model = _model("Attention", ins, ["Y", "present_key", "present_value"], is_causal=1,
                   q_num_heads=6, kv_num_heads=3)
    _check(ctx, model, ins)


def test_attention_nonpad_kv_seqlen(ctx):
    rng = np.random.default_rng(3)
    ins = _qkv(rng, lq=3, lk=6)
    ins["nonpad_kv_seqlen"] = np.array([4, 2], np.int64)          # batch 1: a row masked whole
    node_ins = {"Q": ins["Q"], "K": ins["K"], "V": ins["V"]}
    vis = [helper.make_tensor_value_info(n, TensorProto.FLOAT, a.shape) for n, a in node_ins.items()]
    vis.append(helper.make_tensor_value_info("nonpad_kv_seqlen", TensorProto.INT64, (2,)))
    node = helper.make_node("Attention", ["Q", "K", "V", "", "", "", "nonpad_kv_seqlen"], ["Y"],
                            is_causal=1)
    graph = helper.make_graph([node], "g", vis,
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 24)])
    _check(ctx, model, ins)


def test_attention_refuses_mode_0_with_softcap(ctx):
    """The specification's mode 0 is the raw product, onnx's reference the softcapped one."""
    ins = _qkv(np.random.default_rng(4))
    model = _model("Attention", ins, ["Y", "", "", "qk"], softcap=2.0)
    with pytest.raises(UnsupportedModelError, match="qk_matmul_output_mode 0 with softcap"):
        dox.to_netconfig(model)


@pytest.mark.parametrize("axis", [-1, 1])
def test_rms_normalization(ctx, axis):
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 3, 5)).astype(np.float32)
    scale = rng.standard_normal((3, 5)[axis if axis > 0 else 1:]).astype(np.float32)
    model = _model("RMSNormalization", {"X": x}, ["Y"], consts=[("scale", scale)], axis=axis,
                   epsilon=1e-3)
    _check(ctx, model, {"X": x})


def test_layer_normalization_statistics(ctx):
    rng = np.random.default_rng(6)
    x = rng.standard_normal((2, 3, 5)).astype(np.float32)
    w, bias = (rng.standard_normal((3, 5)).astype(np.float32) for _ in range(2))
    model = _model("LayerNormalization", {"X": x}, ["Y", "Mean", "InvStdDev"],
                   consts=[("W", w), ("B", bias)], axis=1)
    _check(ctx, model, {"X": x})


@pytest.mark.parametrize("interleaved, rot, with_ids", [(0, 0, True), (1, 4, True),
                                                         (1, 0, False), (0, 4, False)])
def test_rotary_embedding(ctx, interleaved, rot, with_ids):
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, 3, 4, 8)).astype(np.float32)      # (N, H, L, D)
    half = (rot or 8) // 2
    consts = []
    if with_ids:
        cache = rng.standard_normal((2, 10, half)).astype(np.float32)
        ins = {"X": x, "position_ids": rng.integers(0, 10, (2, 4)).astype(np.int64)}
        consts = [("cos", cache[0]), ("sin", cache[1])]
    else:
        cache = rng.standard_normal((2, 2, 4, half)).astype(np.float32)
        ins = {"X": x}
        consts = [("cos", cache[0]), ("sin", cache[1])]
    vis = [helper.make_tensor_value_info("X", TensorProto.FLOAT, x.shape)]
    names = ["X", "cos", "sin"]
    if with_ids:
        vis.append(helper.make_tensor_value_info("position_ids", TensorProto.INT64, (2, 4)))
        names.append("position_ids")
    node = helper.make_node("RotaryEmbedding", names, ["Y"], interleaved=interleaved,
                            rotary_embedding_dim=rot)
    graph = helper.make_graph([node], "g", vis,
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)],
                              [onnx.numpy_helper.from_array(v, n) for n, v in consts])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    _check(ctx, model, ins)
