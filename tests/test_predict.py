"""Net.predict (the predictions of a net with a loss, without labels, at any batch size,
leaving the net as it was) and dlprim-predict (image files through a trained model)."""
import csv
import io
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import dlprim as dp
from dlprim import models
from dlprim.errors import InputError
from dlprim.net.graph import GraphError, Graph
from dlprim.net.prediction import prediction_graph
from dlprim.train.graphs import deploy_graph

torch = pytest.importorskip("torch")

MNIST = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                     "examples", "mnist", "data")
MEAN, STD = 0.1307, 0.3081


def small_net(batch):
    """conv, BatchNorm, ReLU, max pool, dropout, fc and a loss: every mode difference."""
    cfg = dp.NetConfig()
    cfg.add_input("data", [batch, 2, 8, 8])
    cfg.add_input("label", [batch], dtype="int")
    cfg.add("Convolution2D", name="conv", params=["conv.weight", "conv.bias"],
            options={"channels_out": 4, "kernel": 3, "pad": 1})
    cfg.add("BatchNorm", name="bn", params=["bn.running_mean", "bn.running_var",
                                            "bn.weight", "bn.bias"])
    cfg.add("Activation", name="relu", options={"activation": "relu"}, inplace=True)
    cfg.add("Pooling2D", name="pool", options={"kernel": 2, "stride": 2})
    cfg.add("Dropout", name="drop", options={"ratio": 0.5}, inplace=True)
    cfg.add("InnerProduct", name="fc", params=["fc.weight", "fc.bias"], options={"outputs": 5})
    cfg.add("SoftmaxWithLoss", name="loss", inputs=["fc", "label"], outputs=["loss"])
    cfg.set_outputs(["loss"])
    return cfg


class TorchSmall(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(2, 4, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(4)
        self.fc = torch.nn.Linear(64, 5)

    def forward(self, x):
        x = torch.nn.functional.max_pool2d(torch.relu(self.bn(self.conv(x))), 2)
        return self.fc(torch.nn.functional.dropout(x, 0.5, self.training).flatten(1))


def torch_logits(params, x):
    """The logits PyTorch's eval mode gives with these parameters (running statistics)."""
    model = TorchSmall().eval()
    model.load_state_dict({k: torch.from_numpy(v) for k, v in params.items()})
    with torch.no_grad():
        return model(torch.from_numpy(x)).numpy()


def trained(ctx, steps=3, seed=0):
    """The small net after a few Adam steps: weights and BatchNorm statistics moved."""
    net = dp.Net(ctx, small_net(4), mode="train", seed=seed)
    opt = dp.Adam(net, lr=0.05)
    rng = np.random.default_rng(seed)
    for _ in range(steps):
        opt.zero_grad()
        net(data=rng.standard_normal((4, 2, 8, 8)).astype(np.float32),
            label=rng.integers(0, 5, 4).astype(np.int32))
        net.backward()
        opt.step()
    return net, opt


def step(net, opt, x, y):
    opt.zero_grad()
    loss = net(data=x, label=y)["loss"]
    net.backward()
    opt.step()
    return loss


@pytest.mark.parametrize("rows", [1, 3, 4, 11])   # fewer, as many and more than planned (4)
def test_predict_gives_the_logits_without_labels(ctx, rows):
    net, _ = trained(ctx)
    params = net.get_parameters()
    assert np.abs(params["bn.running_mean"]).max() > 1e-3   # statistics did move
    x = np.random.default_rng(rows).standard_normal((rows, 2, 8, 8)).astype(np.float32)
    out = net.predict(data=x)
    assert list(out) == ["fc"] and out["fc"].shape == (rows, 5)
    np.testing.assert_allclose(out["fc"], torch_logits(params, x), rtol=1e-4, atol=1e-5)
    # the deploy graph (loss out, a Softmax prob in) of the same weights: its softmax
    deploy = dp.Net(ctx, deploy_graph(small_net(4).to_dict(), batch=rows), mode="predict")
    deploy.set_parameters(params)
    prob = deploy(data=x)["prob"]
    e = np.exp(out["fc"] - out["fc"].max(1, keepdims=True))
    np.testing.assert_allclose(e / e.sum(1, keepdims=True), prob, rtol=1e-5, atol=1e-6)


def test_predict_leaves_the_net_as_it_was_and_training_goes_on(ctx):
    net, opt = trained(ctx)
    twin, twin_opt = trained(ctx)   # the same steps, never asked to predict
    before = net.get_parameters()
    plan, mode = net.plan, net.mode
    x = np.random.default_rng(5).standard_normal((4, 2, 8, 8)).astype(np.float32)
    y = np.array([0, 1, 2, 3], np.int32)
    net.tensor("data").to_device(x)
    for rows in (2, 9, 4):
        net.predict(data=np.random.default_rng(rows).standard_normal(
            (rows, 2, 8, 8)).astype(np.float32), label=np.zeros(rows, np.int32))
    after = net.get_parameters()
    for name in before:   # weights and BatchNorm statistics, bit for bit
        assert np.array_equal(before[name], after[name]), name
    assert net.mode == mode == "train" and net.plan is plan
    assert net.tensor("data").shape == (4, 2, 8, 8)
    assert np.array_equal(net.tensor("data").to_host(), x)
    for _ in range(2):   # training goes on exactly as the twin's
        assert np.array_equal(step(net, opt, x, y), step(twin, twin_opt, x, y))
    for name, value in twin.get_parameters().items():
        assert np.array_equal(net.get_parameters()[name], value), name
    assert not np.array_equal(net.get_parameters()["fc.weight"], before["fc.weight"])


def test_predict_sees_the_current_weights(ctx):
    net, opt = trained(ctx)
    x = np.random.default_rng(1).standard_normal((3, 2, 8, 8)).astype(np.float32)
    first = net.predict(data=x)["fc"]
    step(net, opt, np.repeat(x[:1], 4, 0), np.zeros(4, np.int32))
    second = net.predict(data=x)["fc"]
    assert not np.allclose(first, second)
    np.testing.assert_allclose(second, torch_logits(net.get_parameters(), x), rtol=1e-4, atol=1e-5)
    params = net.get_parameters()
    params["fc.bias"] = params["fc.bias"] + 1.0
    net.set_parameters(params)
    np.testing.assert_allclose(net.predict(data=x)["fc"], second + 1.0, rtol=1e-5, atol=1e-5)


def test_predict_keeps_outputs_that_are_not_losses(ctx):
    cfg = models.mlp(batch=4, inputs=6, hidden=(8,), classes=3)
    cfg.set_outputs(["loss", "fc2"])   # as dlprim-train's net shows its logits
    net = dp.Net(ctx, cfg, mode="train")
    x = np.random.default_rng(0).random((6, 6)).astype(np.float32)
    out = net.predict(data=x)
    p = net.get_parameters()
    ref = np.maximum(x @ p["fc1.weight"].T + p["fc1.bias"], 0) @ p["fc2.weight"].T + p["fc2.bias"]
    assert list(out) == ["fc2"]
    np.testing.assert_allclose(out["fc2"], ref, rtol=1e-4, atol=1e-5)


def test_predict_refuses_what_it_cannot_use(ctx):
    net = dp.Net(ctx, models.mlp(batch=4, inputs=6, hidden=(8,), classes=3), mode="train")
    x = np.zeros((2, 6), np.float32)
    with pytest.raises(InputError, match="'image' is not a net input"):
        net.predict(image=x)
    with pytest.raises(InputError, match="input 'data' is missing"):
        net.predict(label=np.zeros(2, np.int32))
    with pytest.raises(InputError, match="'data' has shape \\(0, 6\\)"):
        net.predict(data=np.zeros((0, 6), np.float32))
    with pytest.raises(InputError, match="data"):
        net.predict(data=np.zeros((2, 6), np.int32))   # integers for a float input


def _graph(cfg):
    return Graph(cfg.to_dict())


def test_prediction_graph_leaves_out_the_loss_and_the_labels():
    part = prediction_graph(_graph(models.lenet(batch=8)), {"data": (2, 1, 28, 28)})
    assert part.outputs == ["fc2"] and part.from_loss
    assert [i["name"] for i in part.graph["inputs"]] == ["data"]
    assert part.graph["inputs"][0]["shape"] == [2, 1, 28, 28]
    assert "loss" not in [op["name"] for op in part.graph["operators"]]
    # a language model: its targets reach the loss through a reshape, which goes too
    gpt = prediction_graph(_graph(models.gpt(vocab=7, context=4, layers=1, heads=1, dim=8)))
    assert [i["name"] for i in gpt.graph["inputs"]] == ["tokens"]
    assert "targets/rows" not in [op["name"] for op in gpt.graph["operators"]]
    # an output computed from the labels is not a prediction
    cfg = models.mlp(batch=2, inputs=4, hidden=(), classes=3)
    cfg.add("Reshape", name="lab", inputs=["label"], options={"dims": [-1]})
    cfg.set_outputs(["loss", "lab"])
    part = prediction_graph(_graph(cfg))
    assert part.outputs == ["fc1"] and len(part.graph["operators"]) == 1
    # a net with nothing to predict
    only = dp.NetConfig()
    only.add_input("data", [2, 3])
    only.add_input("label", [2, 3])
    only.add("MSELoss", name="loss", inputs=["label", "data"], outputs=["loss"])
    only.set_outputs(["loss"])
    assert prediction_graph(_graph(only)).outputs == ["label"]   # the estimate is an input
    deploy = dp.NetConfig()
    deploy.add_input("data", [2, 3])
    deploy.add("Softmax", name="prob")
    deploy.set_outputs(["prob"])
    assert prediction_graph(_graph(deploy)).outputs == ["prob"]
    # DLPrimitives' benchmark nets call their logits "loss": a loss that compares nothing
    bench = models.mlp(batch=2, inputs=4, hidden=(), classes=3, train=False)
    bench.add("InnerProduct", name="head", inputs=["fc1"], outputs=["loss"],
              options={"outputs": 2})
    bench.set_outputs(["loss"])
    part = prediction_graph(_graph(bench))
    assert part.outputs == ["loss"] and not part.from_loss
    # two losses read one name before and after an in-place write: two values, one name
    twice = models.mlp(batch=2, inputs=4, hidden=(), classes=3)
    twice.add("Activation", name="relu", inputs=["fc1"], outputs=["fc1"],
              options={"activation": "relu"})
    twice.add("SoftmaxWithLoss", name="loss2", inputs=["fc1", "label"], outputs=["loss2"])
    twice.set_outputs(["loss", "loss2"])
    with pytest.raises(GraphError, match="'fc1' is written again in place \\(by operator 'relu'"):
        prediction_graph(_graph(twice))
    nothing = dp.NetConfig()
    nothing.add_input("data", [2, 3])
    nothing.add("Softmax", name="prob")
    with pytest.raises(GraphError, match="the net lists no outputs"):
        prediction_graph(_graph(nothing))


# ----- dlprim-predict

TINY = {"inputs": [{"name": "data", "shape": [32, 1, 28, 28]},
                   {"name": "label", "shape": [32], "dtype": "int"}],
        "outputs": ["loss"],
        "operators": [
            {"name": "fc1", "type": "InnerProduct", "inputs": ["data"], "outputs": ["fc1"],
             "options": {"outputs": 24, "activation": "relu"}},
            {"name": "fc2", "type": "InnerProduct", "inputs": ["fc1"], "outputs": ["fc2"],
             "options": {"outputs": 10}},
            {"name": "loss", "type": "SoftmaxWithLoss", "inputs": ["fc2", "label"],
             "outputs": ["loss"]}]}


@pytest.fixture(scope="module")
def run(tmp_path_factory, ctx):
    """A tiny net trained by dlprim-train's Trainer (one epoch of 256 MNIST digits) and
    twelve other digits as PNG files, three in a sub-folder."""
    pil = pytest.importorskip("PIL.Image")
    from dlprim.data import read_idx
    from dlprim.train import Trainer
    from dlprim.train.config import load_config
    root = tmp_path_factory.mktemp("predict")
    images = read_idx(os.path.join(MNIST, "train-images-idx3-ubyte.gz"))
    labels = read_idx(os.path.join(MNIST, "train-labels-idx1-ubyte.gz"))
    np.savez(root / "train.npz", x=images[:256, None], y=labels[:256])
    (root / "net.json").write_text(json.dumps(TINY))
    normalize = [{"type": "normalize", "mean": MEAN, "std": STD}]
    config = {"net": {"path": "net.json"}, "epochs": 1, "batch": 32, "out": "run",
              "data": {"train": {"type": "npz", "path": "train.npz", "num_classes": 10,
                                 "transforms": [{"type": "flip", "p": 0.0}] + normalize}},
              "solver": {"type": "adam", "lr": 0.01}, "progress": False, "plot": False}
    (root / "config.json").write_text(json.dumps(config))
    Trainer(load_config(str(root / "config.json")), ctx).run()
    digits = root / "digits"
    (digits / "more").mkdir(parents=True)
    files = []
    for i in range(12):
        path = digits / ("more" if i >= 9 else "") / ("%02d.png" % i)
        pil.fromarray(images[1000 + i]).save(path)
        files.append(str(path))
    return {"root": root, "deploy": str(root / "run" / "model-deploy.json"),
            "weights": str(root / "run" / "model.dlp"), "net": str(root / "net.json"),
            "digits": str(digits), "files": files, "pixels": images[1000:1012]}


def reference(ctx, run):
    """Top-1 and probabilities of net.predict over the same pixels, normalised by hand."""
    net = dp.Net(ctx, TINY, mode="train")
    net.load_parameters(run["weights"])
    x = ((run["pixels"][:, None] / np.float32(255)) - MEAN) / STD
    logits = net.predict(data=x.astype(np.float32))["fc2"].astype(np.float64)
    e = np.exp(logits - logits.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)


def cli(argv, capsys):
    from dlprim.cli.predict import main
    status = main(argv)
    out, err = capsys.readouterr()
    return status, out, err


def test_deploy_file_records_the_preprocessing(run):
    meta = json.load(open(run["deploy"]))["meta"]
    assert meta["weights"] == "model.dlp" and meta["input"] == "data" and meta["output"] == "prob"
    assert meta["transforms"] == [{"type": "normalize", "mean": MEAN, "std": STD}]   # no flip
    assert meta["scale"] is None


def test_deploy_meta_keeps_what_validation_did():
    from dlprim.train.graphs import deploy_meta
    crop = {"type": "random_crop", "size": 24, "padding": 2}
    norm = {"type": "normalize", "mean": [0.5, 0.4, 0.3], "std": 0.2}
    train = {"transforms": [crop, {"type": "flip"}, norm], "scale": None}
    meta = deploy_meta({"train": train, "val": None}, "best.dlp", "image", ["cat", "dog"])
    assert meta == {"weights": "best.dlp", "input": "image", "output": "prob", "scale": None,
                    "transforms": [norm], "labels": ["cat", "dog"]}
    val = {"transforms": [{"type": "resize", "size": 32}, {"type": "center_crop", "size": 28}],
           "scale": 0.5}
    meta = deploy_meta({"train": train, "val": val}, "model.dlp", "data")
    assert meta["transforms"] == val["transforms"] and meta["scale"] == 0.5
    assert "labels" not in meta


def test_cli_takes_the_class_names_of_the_deploy_file(run, capsys, tmp_path):
    deploy = json.load(open(run["deploy"]))
    deploy["meta"]["labels"] = ["digit %d" % i for i in range(10)]
    deploy["meta"]["weights"] = run["weights"]   # an absolute path works too
    (tmp_path / "named-deploy.json").write_text(json.dumps(deploy))
    status, out, err = cli(["--deploy", str(tmp_path / "named-deploy.json"), "--top", "1",
                            run["files"][3]], capsys)
    plain = cli(["--deploy", run["deploy"], "--top", "1", run["files"][3]], capsys)[1]
    index, prob = plain.split(": ")[1].split()
    assert status == 0 and out == "%s: %s digit %s %s\n" % (run["files"][3], index, index, prob)
    deploy["meta"]["labels"] = ["too", "few"]
    (tmp_path / "named-deploy.json").write_text(json.dumps(deploy))
    status, _, err = cli(["--deploy", str(tmp_path / "named-deploy.json"), run["files"][3]],
                         capsys)
    assert status == 2 and "meta.labels: 2 labels, the net has 10 classes" in err


def test_cli_deploy_json_agrees_with_net_predict(ctx, run, capsys):
    status, out, err = cli(["--deploy", run["deploy"], "--format", "json", "--top", "3",
                            "--batch", "5", run["digits"]], capsys)
    assert status == 0, err
    items = json.loads(out)
    assert [i["file"] for i in items] == run["files"]   # sorted, sub-folders after files
    probs = reference(ctx, run)
    assert len(set(probs.argmax(1))) > 2   # the test would mean little on a constant net
    for item, p in zip(items, probs):
        assert [t["index"] for t in item["top"]] == list(np.argsort(-p, kind="stable")[:3])
        np.testing.assert_allclose([t["probability"] for t in item["top"]],
                                   np.sort(p)[::-1][:3], rtol=1e-4, atol=1e-6)
        assert all(t["label"] is None for t in item["top"])


@pytest.mark.parametrize("precision, atol", [("fp16", 5e-3), ("bf16", 3e-2)])
def test_cli_fp16_agrees_with_fp32(run, capsys, precision, atol):
    # 16-bit activations through the deploy graph: the same classes, probabilities close
    args = ["--deploy", run["deploy"], "--format", "json", "--top", "1", run["digits"]]
    status, out, err = cli(args + ["--precision", precision], capsys)
    assert status == 0, err
    half = json.loads(out)
    full = json.loads(cli(args, capsys)[1])
    assert [i["top"][0]["index"] for i in half] == [i["top"][0]["index"] for i in full]
    np.testing.assert_allclose([i["top"][0]["probability"] for i in half],
                               [i["top"][0]["probability"] for i in full], atol=atol)


def test_cli_net_and_weights_csv_with_labels(ctx, run, capsys, tmp_path):
    names = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]
    (tmp_path / "labels.txt").write_text("\n".join(names) + "\n")
    status, out, err = cli(["--net", run["net"], "--weights", run["weights"], "--mean", str(MEAN),
                            "--std", str(STD), "--labels", str(tmp_path / "labels.txt"),
                            "--format", "csv", "--top", "2"] + run["files"][:4], capsys)
    assert status == 0, err
    rows = list(csv.reader(io.StringIO(out)))
    assert rows[0] == ["file", "index1", "label1", "probability1", "index2", "label2",
                       "probability2"]
    probs = reference(ctx, run)[:4]
    for row, p, path in zip(rows[1:], probs, run["files"]):
        best = int(np.argmax(p))
        assert row[:3] == [path, str(best), names[best]]
        assert float(row[3]) == pytest.approx(p[best], rel=1e-4) and float(row[3]) >= float(row[6])
    assert len(rows) == 5


def test_cli_onnx_model(ctx, run, capsys, tmp_path):
    pytest.importorskip("onnx")
    deploy = dp.Net(ctx, mode="predict")
    deploy.load_from_json_file(run["deploy"])
    deploy.setup()
    deploy.load_parameters(run["weights"])
    deploy.to_onnx(str(tmp_path / "digits.onnx"))
    status, out, err = cli(["--onnx", str(tmp_path / "digits.onnx"), "--mean", str(MEAN),
                            "--std", str(STD), "--format", "json", "--top", "1"]
                           + run["files"][:5], capsys)
    assert status == 0, err
    probs = reference(ctx, run)[:5]
    for item, p in zip(json.loads(out), probs):
        assert item["top"][0]["index"] == int(np.argmax(p))   # a Softmax output: not applied twice
        assert item["top"][0]["probability"] == pytest.approx(p.max(), rel=1e-4)


def test_cli_text_without_normalisation_differs(ctx, run, capsys):
    status, out, _ = cli(["--deploy", run["deploy"], run["files"][0]], capsys)
    assert status == 0 and out.startswith(run["files"][0] + ": ") and out.count(",") == 4
    raw = cli(["--deploy", run["deploy"], "--mean", "0", "--std", "1", "--top", "1",
               run["files"][0]], capsys)[1]   # options replace the recorded normalisation
    assert raw.split(": ")[1].strip() != out.split(": ")[1].split(",")[0]


def test_cli_errors_are_messages(run, capsys, tmp_path):
    deploy, one = run["deploy"], run["files"][0]
    cases = [(["--deploy", deploy, str(tmp_path / "missing.png")], "missing.png: no such file"),
             (["--deploy", deploy, "--top", "11", one], "--top 11 is more than the 10 classes"),
             (["--deploy", deploy, "--mean", "0.1", "0.2", one], "--mean has 2 values"),
             (["--deploy", deploy, "--std", "0", one], "--std must be > 0"),
             (["--deploy", str(tmp_path / "none.json"), one], "none.json' does not exist"),
             (["--net", run["net"], "--weights", str(tmp_path / "w.dlp"), one], "w.dlp"),
             (["--deploy", deploy, "--labels", run["net"], one], "labels, the net has 10")]
    for argv, message in cases:
        status, out, err = cli(argv, capsys)
        assert status == 2 and message in err and "Traceback" not in err, (argv, err)
    with pytest.raises(SystemExit) as e:
        cli(["--net", run["net"], one], capsys)
    assert e.value.code == 2 and "--net needs --weights" in capsys.readouterr().err


def test_cli_refuses_a_model_without_an_image_input(ctx, tmp_path, capsys, run):
    cfg = models.mlp(batch=2, inputs=784, hidden=(4,), classes=10, train=False)
    cfg.save(str(tmp_path / "mlp.json"))
    dp.Net(ctx, cfg).save_parameters(str(tmp_path / "mlp.dlp"))
    status, _, err = cli(["--net", str(tmp_path / "mlp.json"), "--weights",
                          str(tmp_path / "mlp.dlp"), run["files"][0]], capsys)
    assert status == 2 and "no image input" in err and "'data' (N, 784) float" in err


def test_cli_reports_unreadable_images_and_goes_on(run, capsys, tmp_path):
    bad = tmp_path / "bad.png"
    bad.write_bytes(b"not a png at all")
    status, out, err = cli(["--deploy", run["deploy"], "--format", "csv", str(bad),
                            run["files"][1]], capsys)
    assert status == 1 and "bad.png: cannot read image" in err and "Traceback" not in err
    assert [r[0] for r in csv.reader(io.StringIO(out))][1:] == [run["files"][1]]


def test_cli_as_a_program(run):
    env = dict(os.environ)
    if env.get("DLPRIM_TEST_DEVICE"):
        env["DLPRIM_DEVICE"] = env["DLPRIM_TEST_DEVICE"]
    done = subprocess.run([sys.executable, "-m", "dlprim.cli.predict", "--deploy", run["deploy"],
                           "--top", "1", run["files"][2]], capture_output=True, text=True,
                          env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(run["files"][2] + ": ") and done.stdout.count("\n") == 1
