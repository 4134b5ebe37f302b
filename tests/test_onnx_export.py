"""ONNX export: dlprim nets -> ONNX (onnx.checker inside save) -> onnxruntime gives the
same outputs; the dlprim.models nets also come back through the importer unchanged."""
import numpy as np
import pytest

ort = pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")

import dlprim as dp  # noqa: E402
import dlprim.onnx as dox  # noqa: E402
from dlprim import models  # noqa: E402

MODELS = [("lenet", {}), ("mlp", {}), ("alexnet", {"image_size": 64}),
          ("vgg16", {"image_size": 32}), ("resnet18", {"image_size": 32}),
          ("resnet50", {"image_size": 32}), ("mobilenet_v2", {"image_size": 32})]


def run_ort(path, feeds):
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(None, feeds)))


def check_close(y, ref, rtol=1e-4):
    assert y.shape == ref.shape, (y.shape, ref.shape)
    scale = float(np.abs(ref).max())
    err = float(np.abs(y - ref).max())
    assert err <= rtol * max(scale, 1e-3), "max error %g, largest output %g" % (err, scale)


def with_logits(cfg):
    """The net's outputs plus the logits feeding its final Softmax (a near-uniform
    probability would hide errors)."""
    logits = cfg.operators[-1]["inputs"][0]
    cfg.set_outputs([logits] + cfg.outputs)
    return cfg


@pytest.mark.parametrize("name,kw", MODELS, ids=[m[0] for m in MODELS])
def test_models_round_trip(ctx, tmp_path, name, kw):
    cfg = with_logits(models.BUILDERS[name](batch=2, classes=10, train=False, **kw))
    net = dp.Net(ctx, cfg, mode="predict", seed=3)
    x = np.random.default_rng(0).standard_normal(net.tensor("data").shape).astype(np.float32)
    ours = net(data=x)
    path = tmp_path / (name + ".onnx")
    net.to_onnx(path)
    onnx.checker.check_model(str(path))
    ref = run_ort(path, {"data": x})
    assert set(ref) == set(ours)
    for k in ours:
        check_close(ours[k], ref[k])
    again = dox.load(path, ctx)(data=x)
    for k in ours:
        check_close(again[k], ref[k])


def test_training_net_exports_its_loss(ctx, tmp_path):
    net = dp.Net(ctx, models.lenet(batch=4), mode="predict", seed=1)
    x = np.random.default_rng(1).standard_normal((4, 1, 28, 28)).astype(np.float32)
    label = np.array([3, 0, 9, 3], np.int32)
    loss = net(data=x, label=label)["loss"]
    dox.save(net, tmp_path / "lenet.onnx")
    ref = run_ort(tmp_path / "lenet.onnx", {"data": x, "label": label})["loss"]
    check_close(loss, ref)


def zoo():
    """A net with every exported layer type and the variants of their options."""
    cfg = dp.NetConfig()
    cfg.add_input("data", (2, 4, 8, 8))
    cfg.add_input("label", (2,), dtype="int")
    cfg.add_input("target", (2, 6))
    c = cfg.add("Convolution2D", name="conv", inputs="data", options={
        "channels_out": 6, "kernel": [3, 2], "pad": [1, 0, 1, 1], "activation": "sigmoid"})
    t = cfg.add("TransposedConvolution2D", name="deconv", inputs=c, options={
        "channels_out": 4, "kernel": 3, "stride": 2, "pad": 1, "output_pad": 1, "groups": 2,
        "activation": "relu6"})
    bn = cfg.add("BatchNorm", name="bn", inputs=t, options={"affine": False})
    outs = []
    for act in ("relu", "tanh", "leaky_relu", "elu", "gelu", "gelu_tanh", "silu", "hardswish",
                "hardsigmoid", "mish", "softplus", "erf"):
        opts = {"activation": act}
        if act == "softplus":
            opts["beta"] = 2.0
        if act == "leaky_relu":
            opts["negative_slope"] = 0.2
        outs.append(cfg.add("Activation", name="act_" + act, inputs=bn, options=opts))
    thr = cfg.add("Threshold", name="thr", inputs=bn, options={"threshold": 0.1})
    outs.append(thr)
    outs.append(cfg.add("Hardtanh", name="htanh", inputs=bn, options={"min_val": -0.5, "max_val": 0.7}))
    outs.append(cfg.add("Abs", name="abs", inputs=bn))
    outs.append(cfg.add("LRN", name="lrn", inputs=bn, options={"size": 3, "alpha": 0.5, "k": 2.0}))
    p = cfg.add("Parameter", name="scale", inputs=[], options={"shape": [1, 4, 1, 1]})
    for op in ("sum", "sub", "prod", "div", "max", "min"):
        outs.append(cfg.add("Elementwise", name="ew_" + op, inputs=[bn, p], options={
            "operation": op, "coef1": 1.5, "coef2": -0.5 if op != "div" else 2.0,
            "activation": "tanh" if op == "sum" else "identity"}))
    outs.append(cfg.add("Where", name="where", inputs=[thr, bn, p]))
    outs.append(cfg.add("Pooling2D", name="avg", inputs=bn, options={
        "mode": "avg", "kernel": 3, "stride": 2, "pad": 1, "count_include_pad": True, "ceil_mode": True}))
    pooled = cfg.add("Pooling2D", name="max", inputs=bn, options={"kernel": 2, "stride": 2})
    outs.append(pooled)
    outs.append(cfg.add("GlobalPooling", name="gmax", inputs=bn, options={"mode": "max"}))
    cat = cfg.add("Concat", name="cat", inputs=[pooled, c], options={"dim": 1})
    outs.append(cfg.add("Slice", name="slice", inputs=cat, options={"dim": 1, "start": 2, "stop": -3}))
    outs.append(cfg.add("Slice", name="slice_to_end", inputs=cat, options={"dim": 1, "begin": 1, "end": -1}))
    outs.append(cfg.add("Transpose", name="tr", inputs=cat, options={"dims": [0, 2, 3, 1]}))
    outs.append(cfg.add("Interpolation", name="up_near", inputs=c, options={"method": "nearest", "scale_y": 2.0, "scale_x": 2.0}))
    outs.append(cfg.add("Interpolation", name="up_exact", inputs=c, options={"method": "nearest-exact", "out_h": 5, "out_w": 11}))
    outs.append(cfg.add("Interpolation", name="up_lin", inputs=c, options={"method": "bilinear", "out_h": 13, "out_w": 7}))
    outs.append(cfg.add("Interpolation", name="up_corner", inputs=c, options={"method": "bilinear", "scale_y": 1.5, "scale_x": 2.0, "align_corners": True}))
    for m in ("sum", "mean", "sumsq", "abssum"):
        outs.append(cfg.add("Reduction", name="red_" + m, inputs=bn, options={
            "method": m, "dims": [1, 3], "keep_dim": m == "mean", "output_scale": 0.5}))
    outs.append(cfg.add("Reduction", name="red_all", inputs=bn, options={"keep_dim": False}))
    g = cfg.add("GlobalPooling", name="gavg", inputs=c, options={"mode": "avg"})
    sq = cfg.add("Squeeze", name="squeeze", inputs=g, options={"dims": [2, 3]})
    r = cfg.add("Reshape", name="reshape", inputs=bn, options={"dims": [0, -1, 4]})
    outs.append(cfg.add("Flatten", name="flatten", inputs=r))
    d = cfg.add("Dropout", name="drop", inputs=sq, options={"ratio": 0.3})
    fc = cfg.add("InnerProduct", name="fc", inputs=c, options={"outputs": 6, "activation": "relu"})
    outs.append(cfg.add("Softmax", name="logsm", inputs=fc, options={"log": True}))
    outs.append(cfg.add("NLLLoss", name="nll", inputs=["logsm", "label"], options={"reduce": "sum"}))
    outs.append(cfg.add("SoftmaxWithLoss", name="ce", inputs=[d, "label"]))
    outs.append(cfg.add("MSELoss", name="mse", inputs=[d, "target"]))
    outs.append(cfg.add("Softmax", name="sm", inputs=bn))
    cfg.set_outputs(outs)
    return cfg


@pytest.mark.parametrize("opset", [13, 17, 20])
def test_every_layer_type_matches_onnxruntime(ctx, tmp_path, opset):
    net = dp.Net(ctx, zoo(), mode="predict", seed=5)
    rng = np.random.default_rng(2)
    params = {k: rng.uniform(0.5, 1.5, v.shape).astype(np.float32) if k.startswith("bn.")
              else v for k, v in net.get_parameters().items()}
    params["scale.0"] = rng.uniform(0.5, 1.5, (1, 4, 1, 1)).astype(np.float32)
    net.set_parameters(params)
    feeds = {"data": rng.standard_normal((2, 4, 8, 8)).astype(np.float32),
             "label": np.array([1, 4], np.int32),
             "target": rng.standard_normal((2, 6)).astype(np.float32)}
    ours = net(**feeds)
    model = dox.save(net, tmp_path / "zoo.onnx", opset=opset)
    assert model.opset_import[0].version == opset
    ref = run_ort(tmp_path / "zoo.onnx", feeds)
    for k in ours:
        check_close(ours[k], ref[k])


@pytest.mark.parametrize("precision, atol", [("fp16", 2e-3), ("bf16", 1.5e-2)])
def test_fp16_net_exports_its_float32_model(ctx, tmp_path, precision, atol):
    # the Casts become Identity and 16-bit outputs float32: the model is the float32 one
    graph = models.resnet18(batch=2, image_size=32, classes=5, train=False)
    half = dp.Net(ctx, graph, mode="predict", precision=precision, seed=3)
    full = dp.Net(ctx, graph, mode="predict", seed=3)
    x = np.random.default_rng(0).standard_normal((2, 3, 32, 32)).astype(np.float32)
    dox.save(half, tmp_path / "half.onnx")
    ref = run_ort(tmp_path / "half.onnx", {"data": x})
    check_close(full(data=x)["prob"], ref["prob"])
    np.testing.assert_allclose(half(data=x)["prob"], ref["prob"], atol=atol)


def test_export_needs_a_set_up_net_and_a_known_opset(ctx, tmp_path):
    with pytest.raises(RuntimeError, match="set up"):
        dox.save(dp.Net(ctx), tmp_path / "x.onnx")
    net = dp.Net(ctx, models.mlp(batch=2, inputs=4, hidden=(3,), train=False))
    with pytest.raises(ValueError, match="opset 13"):
        net.to_onnx(tmp_path / "x.onnx", opset=11)
    assert not (tmp_path / "x.onnx").exists()


def test_transformer_layers_export(ctx, tmp_path):
    """The GPT decoder (LayerNorm, Embedding, MatMul-free linears, causal attention) and the
    other new layers against onnxruntime, and back through the importer."""
    net = dp.Net(ctx, models.gpt(vocab=11, context=8, layers=2, heads=2, dim=16, batch=2,
                                 train=False), mode="predict", seed=4)
    rng = np.random.default_rng(5)
    params = net.get_parameters()
    params["transformer.wpe.weight"] = (0.1 * rng.standard_normal((8, 16))).astype(np.float32)
    net.set_parameters(params)
    tokens = rng.integers(0, 11, (2, 8))
    ours = net(tokens=tokens)
    dox.save(net, tmp_path / "gpt.onnx")
    ref = run_ort(tmp_path / "gpt.onnx", {"tokens": tokens})
    check_close(ours["logits"], ref["logits"])

    cfg = dp.NetConfig()
    cfg.add_input("a", (2, 3, 5, 4))
    cfg.add_input("b", (2, 3, 6, 4))
    cfg.add_input("mask", (2, 1, 1, 6))
    img = cfg.add_input("img", (2, 6, 3, 3))
    outs = [cfg.add("MatMul", name="mm", inputs=["a", "b"],
                    options={"transpose_b": True, "alpha": 0.5}),
            cfg.add("ScaledDotProductAttention", name="att", inputs=["a", "b", "b", "mask"]),
            cfg.add("LayerNorm", name="ln", inputs=["a"], options={"normalized_dims": 2,
                                                                  "affine": False}),
            cfg.add("GroupNorm", name="gn", inputs=[img], options={"groups": 3}),
            cfg.add("RMSNorm", name="rms", inputs=["a"], options={"eps": 1e-3}),
            cfg.add("RMSNorm", name="rms2", inputs=[img], options={"normalized_dims": 2,
                                                                  "affine": False})]
    cfg.set_outputs(outs)
    net = dp.Net(ctx, cfg, mode="predict", seed=6)
    feeds = {"a": rng.standard_normal((2, 3, 5, 4)).astype(np.float32),
             "b": rng.standard_normal((2, 3, 6, 4)).astype(np.float32),
             "mask": np.where(rng.random((2, 1, 1, 6)) < 0.3, -np.inf, 0).astype(np.float32),
             "img": rng.standard_normal((2, 6, 3, 3)).astype(np.float32)}
    feeds["mask"][:, :, :, 0] = 0  # every row keeps a key: ONNX's softmax has no safe form
    ours = net(**feeds)
    with pytest.raises(ValueError, match="opset 21"):
        dox.save(net, tmp_path / "old.onnx", opset=17)
    dox.save(net, tmp_path / "new.onnx", opset=21)
    ref = run_ort(tmp_path / "new.onnx", feeds)
    for k in ours:
        check_close(ours[k], ref[k])


def test_gpt_comes_back_through_the_importer(ctx, tmp_path):
    """Export, then import: Gather of the table becomes an Embedding again, MatMul-free
    linears and the decomposed attention run as dlprim layers, same logits."""
    net = dp.Net(ctx, models.gpt(vocab=11, context=8, layers=1, heads=2, dim=16, batch=2,
                                 train=False), mode="predict", seed=7)
    tokens = np.random.default_rng(8).integers(0, 11, (2, 8))
    ours = net(tokens=tokens)["logits"]
    dox.save(net, tmp_path / "gpt.onnx")
    cfg, _ = dox.to_netconfig(str(tmp_path / "gpt.onnx"))
    assert "Embedding" in [op["type"] for op in cfg.operators]
    again = dox.load(tmp_path / "gpt.onnx", ctx)(tokens=tokens)["logits"]
    check_close(again, ours)


@pytest.mark.parametrize("opset", [13, 17, 18])
def test_rms_norm_exports_at_every_opset(ctx, tmp_path, opset):
    cfg = dp.NetConfig()
    cfg.add_input("x", (3, 4, 5))
    cfg.set_outputs([cfg.add("RMSNorm", name="rms", inputs=["x"], options={"eps": 1e-4})])
    net = dp.Net(ctx, cfg, mode="predict", seed=2)
    x = np.random.default_rng(3).standard_normal((3, 4, 5)).astype(np.float32)
    ours = net(x=x)
    dox.save(net, tmp_path / "rms.onnx", opset=opset)
    check_close(ours["rms"], run_ort(tmp_path / "rms.onnx", {"x": x})["rms"])


def test_an_imported_constant_exports_as_its_initializer(ctx, tmp_path):
    """A constant input of an imported model is a Parameter whose output has the
    parameter's own name: it goes back out as that initializer alone (an Identity node
    writing the same name would break the graph's single assignment)."""
    from onnx import TensorProto, helper, numpy_helper
    g = helper.make_graph(
        [helper.make_node("Sigmoid", ["x"], ["s"]), helper.make_node("Add", ["s", "c"], ["y"])],
        "constant", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.full((3,), 1.25, np.float32), "c")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    net = dox.load(m.SerializeToString(), ctx)
    x = np.linspace(-2, 2, 6, dtype=np.float32).reshape(2, 3)
    path = str(tmp_path / "constant.onnx")
    dox.save(net, path)   # checked by onnx's checker on the way
    again = dox.load(path, ctx)
    np.testing.assert_allclose(again(x=x)["y"], 1 / (1 + np.exp(-x)) + 1.25, rtol=1e-6)


@pytest.mark.parametrize("options,inputs,match", [
    ({"input_rms": 1e-5}, 1, "a norm of its input"),
    ({"input_ln": 1e-5}, 1, "a norm of its input"),
    ({"gated": True, "activation": "silu"}, 1, "gated"),
    ({}, 2, "a residual input"),
    ({"weights": "int8"}, 1, "int8 weights")])
def test_decoder_forms_of_inner_product_are_refused_by_name(ctx, tmp_path, options, inputs,
                                                          match):
    """The InnerProduct forms a decoder's step takes (a norm of the input, a gated pair, a
    residual input, int8 weights) have no exact one-Gemm spelling: refused, never written
    without them."""
    cfg = dp.NetConfig()
    cfg.add_input("x", [2, 6])
    cfg.add_input("r", [2, 4])
    cfg.add("InnerProduct", name="fc", inputs=["x", "r"][:inputs], outputs=["y"],
            options=dict({"outputs": 4}, **options))
    cfg.set_outputs(["y"])
    net = dp.Net(ctx, cfg, mode="predict")
    with pytest.raises(ValueError, match="fc: an InnerProduct with " + match):
        dp.onnx.save(net, str(tmp_path / "m.onnx"))
