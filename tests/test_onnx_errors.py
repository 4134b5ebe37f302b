"""ONNX import: refusals (unsupported operators listed before anything is built, missing
and broken files, onnx not installed), dlprim-convert, and import for training."""
import io
import subprocess
import sys

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import dlprim as dp  # noqa: E402
import dlprim.onnx as dox  # noqa: E402
from dlprim.cli import convert  # noqa: E402

node = helper.make_node
pytestmark = [pytest.mark.filterwarnings("ignore::DeprecationWarning"),
              pytest.mark.filterwarnings("ignore::UserWarning")]


def small_model(nodes, inits=None, opset=13, outputs=("y",)):
    g = helper.make_graph(nodes, "t", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 8, 8])],
                          [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
                          [numpy_helper.from_array(np.asarray(a), n) for n, a in (inits or {}).items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def test_every_unsupported_operator_is_listed_before_building(ctx):
    m = small_model([
        node("Relu", ["x"], ["a"], name="fine"),
        node("NonZero", ["a"], ["b"], name="nz"),
        # operators whose results are random or whose shapes depend on the data
        node("Bernoulli", ["a"], ["c"], name="coin"),
        node("RandomNormalLike", ["a"], ["d"], name="noise"),
        node("Unique", ["a"], ["e"], name="uniq"),
        node("Custom", ["a"], ["f"], name="mine", domain="com.example"),
        node("Shape", ["b"], ["g"], name="after_unknown"),  # downstream of NonZero: not listed
        node("Multinomial", ["a"], ["h"], name="draw"),
    ], {}, outputs=("b", "c", "d", "e", "f", "g", "h"))
    with pytest.raises(dox.UnsupportedModelError) as info:
        dox.to_netconfig(m)
    found = {(t, n) for t, n, _ in info.value.problems}
    assert found == {("NonZero", "nz"), ("Bernoulli", "coin"), ("RandomNormalLike", "noise"),
                     ("Unique", "uniq"), ("Custom", "mine"), ("Multinomial", "draw")}
    text = str(info.value)
    for t, n in found:
        assert "%s '%s'" % (t, n) in text
    assert "depends on the data" in text  # each with its reason, not only its name
    # load() refuses in the same way, without touching the device (no context needed)
    with pytest.raises(dox.UnsupportedModelError):
        dox.load(m, ctx=None)


def test_missing_file_and_broken_models(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.onnx"):
        dox.to_netconfig(tmp_path / "nope.onnx")
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"this is not a protobuf \xff\xfe")
    with pytest.raises(dox.OnnxImportError, match="bad.onnx"):
        dox.to_netconfig(bad)
    with pytest.raises(dox.OnnxImportError, match="no graph"):
        dox.to_netconfig(onnx.ModelProto())
    with pytest.raises(TypeError, match="ONNX file path"):
        dox.to_netconfig(42)
    # opsets 1 to 8 are read (dlprim/onnx/legacy.py); a definition of them with no
    # opset-9 meaning is refused naming it
    old = small_model([node("Relu", ["x"], ["y"])], opset=5)
    dox.to_netconfig(old)
    tile_1 = small_model([node("Tile", ["x", "t", "a"], ["y"])],
                         {"t": np.array([2], np.int64), "a": np.array([1], np.int64)}, opset=5)
    with pytest.raises(dox.UnsupportedModelError, match="Tile"):
        dox.to_netconfig(tile_1)
    dangling = small_model([node("Add", ["x", "ghost"], ["y"])])
    with pytest.raises(dox.OnnxImportError, match="ghost"):
        dox.to_netconfig(dangling)


def test_dlprim_imports_without_onnx_and_names_the_extra(monkeypatch):
    code = "import sys, dlprim, dlprim.onnx; assert 'onnx' not in sys.modules, 'onnx imported'"
    subprocess.run([sys.executable, "-c", code], check=True)
    monkeypatch.setitem(sys.modules, "onnx", None)  # as if it were not installed
    with pytest.raises(ImportError, match=r"dlprim\[onnx\]"):
        dox.to_netconfig(b"")


def test_dlprim_convert_writes_a_loadable_net(ctx, tmp_path, capsys):
    w = np.random.default_rng(0).standard_normal((4, 3, 3, 3)).astype(np.float32)
    m = small_model([node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), node("Sigmoid", ["c"], ["y"])], {"w": w})
    onnx.save(m, str(tmp_path / "m.onnx"))
    args = [str(tmp_path / "m.onnx"), str(tmp_path / "m.json"), str(tmp_path / "m.dlp")]
    assert convert.main(args + ["--batch", "3"]) == 0
    assert "1 operators" in capsys.readouterr().out
    net = dp.Net(ctx, mode="predict")
    net.load_from_json_file(str(tmp_path / "m.json"))
    net.setup()
    net.load_parameters(str(tmp_path / "m.dlp"))
    x = np.random.default_rng(1).standard_normal((3, 3, 8, 8)).astype(np.float32)
    y = net(x=x)["y"]
    ref = dox.load(m, ctx, batch=3)(x=x)["y"]
    np.testing.assert_allclose(y, ref, rtol=1e-6)
    tf32 = dox.load(m, ctx, batch=3, precision="tf32")   # tensor cores where there are some
    assert tf32.precision == "tf32"
    np.testing.assert_allclose(tf32(x=x)["y"], ref, rtol=2e-3, atol=2e-3)
    with pytest.raises(ValueError, match="precision must be one of fp32, tf32, fp16, bf16, got 'fp8'"):
        dox.load(m, ctx, precision="fp8")
    assert convert.main([str(tmp_path / "none.onnx")] + args[1:]) == 1
    assert "does not exist" in capsys.readouterr().err


def test_train_mode_import_matches_pytorch_training(ctx):
    torch = pytest.importorskip("torch")
    from onnx_models import build
    model = build("resnet_basic")
    x = torch.from_numpy(np.random.default_rng(3).standard_normal((4, 3, 32, 32)).astype(np.float32))
    label = torch.tensor([1, 7, 3, 3])
    f = io.BytesIO()
    torch.onnx.export(model, x, f, opset_version=17, dynamo=False, input_names=["data"],
                      output_names=["logits"], training=torch.onnx.TrainingMode.TRAINING)
    cfg, weights = dox.to_netconfig(f.getvalue(), mode="train")
    assert sum(op["type"] == "BatchNorm" for op in cfg.operators) == 6  # not folded away
    cfg.add_input("label", (4,), dtype="int")
    cfg.add("SoftmaxWithLoss", name="loss", inputs=["logits", "label"], outputs=["loss"])
    cfg.set_outputs(["logits", "loss"])
    net = dp.Net(ctx, cfg, mode="train")
    net.set_parameters(weights)
    ours = net(data=x.numpy(), label=label.numpy().astype(np.int32))
    net.zero_grad()
    net.backward()
    model.train()
    logits = model(x)
    loss = torch.nn.functional.cross_entropy(logits, label)
    loss.backward()
    np.testing.assert_allclose(ours["logits"], logits.detach().numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(ours["loss"][0], loss.item(), rtol=1e-4)
    state = dict(model.named_parameters())
    grads = net.grads
    checked = 0
    for name, p in state.items():
        if name in grads:
            np.testing.assert_allclose(grads[name].to_host(), p.grad.numpy(), rtol=1e-3, atol=1e-4,
                                       err_msg=name)
            checked += 1
    assert checked == len(state)  # every weight trains, under its PyTorch name
    buffers = dict(model.named_buffers())
    params = net.get_parameters()
    for name in ("0.1.running_mean", "0.1.running_var"):
        np.testing.assert_allclose(params[name], buffers[name].numpy(), rtol=1e-4, atol=1e-5)
    trained = dox.load(f.getvalue(), ctx, mode="train")
    assert trained.mode == "train" and trained.trainable_size > 0


def test_symbolic_sizes_beyond_the_batch_take_given_shapes(ctx):
    """A model exported with a symbolic sequence length (as HuggingFace's exports are)
    imports with ``shapes=`` for each length and matches numpy; without it, or with
    sizes the model contradicts, the error names the input and what to give."""
    w = np.random.default_rng(0).standard_normal((8, 4)).astype(np.float32)
    x_info = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "sequence", 8])
    g = helper.make_graph(
        [node("MatMul", ["x", "w"], ["a"]), node("Shape", ["x"], ["s"]),
         node("Slice", ["s", "zero", "two"], ["lead"]),
         node("Concat", ["lead", "minus"], ["to"], axis=0),
         node("Reshape", ["a", "to"], ["flat"]), node("Softmax", ["flat"], ["y"], axis=1)],
        "t", [x_info], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(w, "w"),
         numpy_helper.from_array(np.array([0], np.int64), "zero"),
         numpy_helper.from_array(np.array([2], np.int64), "two"),
         numpy_helper.from_array(np.array([-1], np.int64), "minus")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    with pytest.raises(dox.OnnxImportError, match=r"'x'.*shapes=\{'x'"):
        dox.to_netconfig(m)
    for n, s in ((2, 5), (3, 11)):
        x = np.random.default_rng(s).standard_normal((n, s, 8)).astype(np.float32)
        net = dox.load(m, ctx, shapes={"x": (n, s, 8)})
        got = net(x=x)["y"]
        a = x.astype(np.float64) @ w  # (n, s, 4): the Reshape to Shape(x)[:2] + [-1]
        want = np.exp(a - a.max(1, keepdims=True))
        np.testing.assert_allclose(got, want / want.sum(1, keepdims=True), rtol=1e-5, atol=1e-6)
    for shapes, what in (({"x": (2, 5)}, "3 dimensions"), ({"x": (2, 5, 9)}, "size 8 on axis 2"),
                         ({"z": (2, 5, 8)}, "not a model input"), ({"x": (2, 0, 8)}, "positive")):
        with pytest.raises(dox.OnnxImportError, match=what):
            dox.to_netconfig(m, shapes=shapes)
