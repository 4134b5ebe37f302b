"""The ONNX training operators (SoftmaxCrossEntropyLoss, NegativeLogLikelihoodLoss): every
loss layer dlprim exports imports back with the same loss and logits; each variant ONNX
defines matches onnxruntime or is refused by name; dlprim-predict and dlprim-convert take
an exported training net."""
import json

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

import dlprim as dp  # noqa: E402
import dlprim.onnx as dox  # noqa: E402
from dlprim.onnx.ops_loss import without_losses  # noqa: E402
from onnx import TensorProto as T, helper, numpy_helper  # noqa: E402

N, C, D1, D2 = 3, 4, 2, 3


def loss_zoo():
    """Every dlprim loss layer and its options, over logits of a small fc net."""
    cfg = dp.NetConfig()
    cfg.add_input("data", (N, 5))
    cfg.add_input("label", (N,), dtype="int")
    cfg.add_input("label64", (N, 1), dtype="int64")
    cfg.add_input("target", (N, C))
    fc = cfg.add("InnerProduct", name="fc", inputs="data", options={"outputs": C})
    logp = cfg.add("Softmax", name="logp", inputs=fc, options={"log": True})
    outs = [fc, cfg.add("SoftmaxWithLoss", name="loss", inputs=[fc, "label"], outputs=["loss"]),
            cfg.add("SoftmaxWithLoss", name="xent_ignore2", inputs=[fc, "label64"],
                    options={"ignore_index": 2})]
    for reduce in ("none", "sum", "mean"):
        outs.append(cfg.add("NLLLoss", name="nll_" + reduce, inputs=[logp, "label"],
                            options={"reduce": reduce, "ignore_index": 1}))
        outs.append(cfg.add("MSELoss", name="mse_" + reduce, inputs=[fc, "target"],
                            options={"reduce": reduce}))
    cfg.set_outputs(outs)
    return cfg


def feeds(rng):
    return {"data": rng.standard_normal((N, 5)).astype(np.float32),
            "label": np.array([1, 3, 2], np.int32), "label64": np.array([[2], [0], [3]]),
            "target": rng.standard_normal((N, C)).astype(np.float32)}


def run_ort(model, inputs):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, inputs)))


def close(y, ref, tol=1e-5):
    assert y.size == ref.size, (y.shape, ref.shape)
    np.testing.assert_allclose(y.reshape(ref.shape), ref, rtol=tol, atol=tol)


def test_every_loss_layer_of_a_trained_net_imports_back(ctx, tmp_path):
    net = dp.Net(ctx, loss_zoo(), mode="train", seed=2)
    opt = dp.SGD(net, lr=0.1)
    rng = np.random.default_rng(0)
    for _ in range(2):
        opt.zero_grad()
        net(**feeds(rng))
        net.backward()
        opt.step()
    x = feeds(rng)
    ours = net.predict(**x)
    ours.update({k: v for k, v in net(**x).items() if k not in ours})
    model = dox.save(net, tmp_path / "zoo.onnx")
    kinds = {n.op_type for n in model.graph.node}
    assert {"SoftmaxCrossEntropyLoss", "NegativeLogLikelihoodLoss"} <= kinds
    again = dox.load(tmp_path / "zoo.onnx", ctx)
    types = [op.type for op in again.graph.ops]
    assert types.count("SoftmaxWithLoss") == 2 and types.count("NLLLoss") == 3
    back, ref = again(**x), run_ort(model, x)
    assert set(back) == set(ours) == set(ref)
    assert float(ours["loss"][0]) > 0 and ours["nll_none"][0] == 0  # label 1 is ignored
    for k in ours:
        close(back[k], ours[k], 1e-6)
        close(back[k], ref[k])


def test_float_labels_come_back_through_their_cast(ctx, tmp_path):
    """Float class indices (DLPrimitives' label inputs) export with a Cast to int64."""
    cfg = dp.NetConfig()
    cfg.add_input("data", (N, 5))
    cfg.add_input("label", (N,))
    fc = cfg.add("InnerProduct", name="fc", inputs="data", options={"outputs": C})
    cfg.add("SoftmaxWithLoss", name="loss", inputs=[fc, "label"], outputs=["loss"])
    cfg.set_outputs([fc, "loss"])
    net = dp.Net(ctx, cfg, mode="predict", seed=3)
    x = {"data": np.random.default_rng(8).standard_normal((N, 5)).astype(np.float32),
         "label": np.array([3, 0, 1], np.float32)}
    model = dox.save(net, tmp_path / "float_labels.onnx")
    assert "Cast" in {n.op_type for n in model.graph.node}
    ours, back = net(**x), dox.load(tmp_path / "float_labels.onnx", ctx)(**x)
    for k in ours:
        close(back[k], ours[k], 1e-6)


def scores_and_labels(rng, nd):
    shape = (N, C) if nd == 2 else (N, C, D1, D2)
    labels = rng.integers(0, C, (shape[0],) + shape[2:])
    labels.flat[0] = 1   # one position ignored where ignore_index is 1
    return rng.standard_normal(shape).astype(np.float32), labels


def every_variant(weights_input=False):
    """One model with a node per (operator, rank, reduction, weights, ignore_index); the
    SoftmaxCrossEntropyLoss nodes without ignore_index also write log_prob (the others
    with a plain mean are the fused SoftmaxWithLoss)."""
    nodes, outputs = [], []
    for op in ("SoftmaxCrossEntropyLoss", "NegativeLogLikelihoodLoss"):
        for nd in (2, 4):
            for reduction in ("none", "sum", "mean"):
                for weighted in (False, True):
                    for ignore in (None, 1):
                        name = "%s_%dd_%s%s%s" % (op[:3], nd, reduction, "_w" * weighted,
                                                  "" if ignore is None else "_ignore")
                        ins = ["x%d" % nd, "t%d" % nd] + (["w"] if weighted else [])
                        log_prob = op[0] == "S" and ignore is None
                        outs = [name] + ([name + "_log_prob"] if log_prob else [])
                        attrs = {"reduction": reduction}
                        if ignore is not None:
                            attrs["ignore_index"] = ignore
                        nodes.append(helper.make_node(op, ins, outs, name=name, **attrs))
                        outputs += outs
    inputs = [helper.make_tensor_value_info("x2", T.FLOAT, [N, C]),
              helper.make_tensor_value_info("t2", T.INT64, [N]),
              helper.make_tensor_value_info("x4", T.FLOAT, [N, C, D1, D2]),
              helper.make_tensor_value_info("t4", T.INT64, [N, D1, D2])]
    w = np.array([0.5, 2.0, 1.5, 0.75], np.float32)
    inits = [] if weights_input else [numpy_helper.from_array(w, "w")]
    if weights_input:
        inputs.append(helper.make_tensor_value_info("w", T.FLOAT, [C]))
    graph = helper.make_graph(nodes, "losses", inputs,
                              [helper.make_empty_tensor_value_info(o) for o in outputs], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), w


@pytest.mark.parametrize("weights_input", [False, True], ids=["initializer", "input"])
def test_every_variant_matches_onnxruntime(ctx, weights_input):
    model, w = every_variant(weights_input)
    rng = np.random.default_rng(1)
    (x2, t2), (x4, t4) = scores_and_labels(rng, 2), scores_and_labels(rng, 4)
    inputs = {"x2": x2, "t2": t2, "x4": x4, "t4": t4}
    if weights_input:
        inputs["w"] = w
    ref = run_ort(model, inputs)
    ours = dox.load(model, ctx)(**inputs)
    assert set(ours) == set(ref)
    for k in ref:
        close(ours[k], ref[k])
    # the weights count: a weighted mean differs from the plain one
    assert abs(float(ref["Neg_4d_mean_w"]) - float(ref["Neg_4d_mean"])) > 1e-3


def test_constant_labels_and_an_ignore_index_in_range(ctx):
    rng = np.random.default_rng(2)
    x, t = scores_and_labels(rng, 4)
    node = helper.make_node("SoftmaxCrossEntropyLoss", ["x", "t"], ["y"], name="xent",
                            ignore_index=1)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", T.FLOAT, list(x.shape))],
                              [helper.make_tensor_value_info("y", T.FLOAT, [])],
                              [numpy_helper.from_array(t, "t")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    close(dox.load(model, ctx)(x=x)["y"], run_ort(model, {"x": x})["y"])


def test_pytorch_training_export_matches_pytorch(ctx):
    """torch.onnx.export of losses: cross entropy over (N, C, L) with an ignore_index, and a
    weighted NLL (which PyTorch writes as SoftmaxCrossEntropyLoss of a Constant weight)."""
    torch = pytest.importorskip("torch")
    import io

    class Losses(torch.nn.Module):
        def forward(self, x, t, x2, t2):
            logp = torch.log_softmax(x2, 1)
            w = torch.tensor([1.0, 2.0, 0.5, 3.0])
            return (torch.nn.functional.cross_entropy(x, t, ignore_index=2),
                    torch.nn.functional.nll_loss(logp, t2, weight=w),
                    torch.nn.functional.cross_entropy(x, t, reduction="none"))

    rng = np.random.default_rng(7)
    args = (torch.from_numpy(rng.standard_normal((N, C, 5)).astype(np.float32)),
            torch.from_numpy(rng.integers(0, C, (N, 5))),
            torch.from_numpy(rng.standard_normal((N, C)).astype(np.float32)),
            torch.tensor([3, 0, 1]))
    f = io.BytesIO()
    torch.onnx.export(Losses(), args, f, opset_version=17, dynamo=False,
                      input_names=["x", "t", "x2", "t2"], output_names=["ce", "nll", "ce_rows"])
    ours = dox.load(f.getvalue(), ctx)(**{k: a.numpy() for k, a in zip(("x", "t", "x2", "t2"), args)})
    for name, ref in zip(("ce", "nll", "ce_rows"), Losses()(*args)):
        close(ours[name], ref.numpy())


def refused(node, x_shape=(N, C), t_shape=(N,)):
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", T.FLOAT, list(x_shape)),
                                            helper.make_tensor_value_info("t", T.INT64, list(t_shape))],
                              [helper.make_empty_tensor_value_info("y")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(dox.UnsupportedModelError) as err:
        dox.to_netconfig(model)
    return err.value


def test_variants_without_a_meaning_are_refused_by_name():
    err = refused(helper.make_node("NegativeLogLikelihoodLoss", ["x", "t"], ["y"], name="nll",
                                   reduction="max"))
    assert err.problems == [("NegativeLogLikelihoodLoss", "nll",
                             "attribute reduction 'max' (ONNX defines none, sum, mean)")]
    err = refused(helper.make_node("SoftmaxCrossEntropyLoss", ["x", "t"], ["y"], name="ce"),
                  t_shape=(N, 2))
    assert err.problems[0][:2] == ("SoftmaxCrossEntropyLoss", "ce")
    assert "input labels of shape (3, 2)" in err.problems[0][2]


def training_model(ctx, tmp_path, with_logits=False):
    """A small conv net trained two steps with a SoftmaxWithLoss, exported."""
    cfg = dp.NetConfig()
    cfg.add_input("data", (2, 1, 8, 8))
    cfg.add_input("label", (2,), dtype="int")
    cfg.add("Convolution2D", name="conv", inputs="data",
            options={"channels_out": 2, "kernel": 3, "pad": 1, "activation": "relu"})
    fc = cfg.add("InnerProduct", name="fc", options={"outputs": 3})
    cfg.add("SoftmaxWithLoss", name="loss", inputs=[fc, "label"], outputs=["loss"])
    cfg.set_outputs([fc, "loss"] if with_logits else ["loss"])
    net = dp.Net(ctx, cfg, mode="train", seed=4)
    opt = dp.SGD(net, lr=0.1)
    rng = np.random.default_rng(3)
    for _ in range(2):
        opt.zero_grad()
        net(data=rng.standard_normal((2, 1, 8, 8)).astype(np.float32),
            label=np.array([0, 2], np.int32))
        net.backward()
        opt.step()
    path = tmp_path / "trained.onnx"
    return net, dox.save(net, path), path


@pytest.mark.parametrize("with_logits", [False, True], ids=["loss_only", "logits_too"])
def test_without_losses_keeps_the_prediction(ctx, tmp_path, caplog, with_logits):
    net, model, _ = training_model(ctx, tmp_path, with_logits)
    with caplog.at_level("INFO", logger="dlprim"):
        part = without_losses(model)
    assert [o.name for o in part.graph.output] == ["fc"]
    assert [i.name for i in part.graph.input] == ["data"]
    assert not any(n.op_type == "SoftmaxCrossEntropyLoss" for n in part.graph.node)
    assert "without the loss node (loss) and the label input label; outputs: fc" in caplog.text
    assert [o.name for o in model.graph.output][-1] == "loss"   # the model itself unchanged
    x = np.random.default_rng(4).standard_normal((2, 1, 8, 8)).astype(np.float32)
    close(dox.load(part, ctx)(data=x)["fc"], net.predict(data=x)["fc"], 1e-6)
    assert without_losses(part) is part


def test_predict_cli_runs_an_exported_training_net(ctx, tmp_path, capsys):
    pil = pytest.importorskip("PIL.Image")
    from dlprim.cli.predict import main
    net, _, path = training_model(ctx, tmp_path)
    pixels = np.random.default_rng(5).integers(0, 256, (2, 8, 8)).astype(np.uint8)
    files = []
    for i, p in enumerate(pixels):
        files.append(str(tmp_path / ("%d.png" % i)))
        pil.fromarray(p).save(files[-1])
    status = main(["--onnx", str(path), "--batch", "2", "--format", "json", "--top", "3"] + files)
    out, err = capsys.readouterr()
    assert status == 0, err
    assert "without the loss node (loss) and the label input label" in err
    logits = net.predict(data=(pixels[:, None] / np.float32(255)))["fc"].astype(np.float64)
    probs = np.exp(logits - logits.max(1, keepdims=True))
    probs /= probs.sum(1, keepdims=True)
    for item, p in zip(json.loads(out), probs):
        got = {t["index"]: t["probability"] for t in item["top"]}
        np.testing.assert_allclose([got[k] for k in range(3)], p, rtol=1e-4)


def test_convert_cli_round_trips_a_training_net(ctx, tmp_path, capsys):
    from dlprim.cli.convert import main
    net, _, path = training_model(ctx, tmp_path)
    assert main([str(path), str(tmp_path / "net.json"), str(tmp_path / "net.dlp")]) == 0
    capsys.readouterr()
    again = dp.Net(ctx, mode="train")
    again.load_from_json_file(str(tmp_path / "net.json"))
    again.setup()
    again.load_parameters(str(tmp_path / "net.dlp"))
    x = {"data": np.random.default_rng(6).standard_normal((2, 1, 8, 8)).astype(np.float32),
         "label": np.array([1, 2], np.int32)}
    close(again(**x)["loss"], net(**x)["loss"], 1e-6)
