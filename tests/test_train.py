"""dlprim-train: a short run writes everything; interrupt + resume is exact; bad configs
are refused before any work; checkpoints survive a crash mid-write."""
import json
import os

import numpy as np
import pytest

from dlprim.net import weights
from dlprim.train import Trainer, main
from dlprim.train import checkpoint
from dlprim.train.config import apply_overrides, load_config


def _net(batch):
    return {
        "inputs": [{"name": "data", "shape": [batch, 1, 4, 4]},
                   {"name": "label", "shape": [batch], "dtype": "int"}],
        "outputs": ["loss"],
        "operators": [
            {"name": "fc1", "type": "InnerProduct", "inputs": ["data"], "outputs": ["fc1"],
             "options": {"outputs": 16, "activation": "relu"}},
            {"name": "fc2", "type": "InnerProduct", "inputs": ["fc1"], "outputs": ["fc2"],
             "options": {"outputs": 3}},
            {"name": "loss", "type": "SoftmaxWithLoss", "inputs": ["fc2", "label"],
             "outputs": ["loss"]},
        ]}


def _data(path, n, seed):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 3, n).astype(np.int64)
    centers = np.random.default_rng(0).standard_normal((3, 1, 4, 4)).astype(np.float32)
    x = centers[y] + 0.3 * rng.standard_normal((n, 1, 4, 4)).astype(np.float32)
    np.savez(path, x=x, y=y)


@pytest.fixture
def config(tmp_path):
    _data(tmp_path / "train.npz", 70, 1)   # 70 = 4 full batches of 16 and a partial one
    _data(tmp_path / "val.npz", 30, 2)
    cfg = {"net": {"graph": _net(16)},
           "data": {"train": {"type": "npz", "path": "train.npz", "num_classes": 3},
                    "val": {"type": "npz", "path": "val.npz", "num_classes": 3}},
           "solver": {"type": "adam", "lr": 0.02}, "schedule": {"type": "step", "step_size": 1,
                                                                 "gamma": 0.9},
           "epochs": 3, "batch": 16, "seed": 3, "out": "run", "progress": False}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    return path


def _weights(out):
    return weights.load(os.path.join(out, "model.dlp"))


def test_precision_reaches_the_net(ctx, config):
    assert Trainer(load_config(str(config)), ctx).net.precision == "fp32"
    cfg = apply_overrides(load_config(str(config)), precision="tf32")
    assert Trainer(cfg, ctx).net.precision == "tf32"


def test_short_run_writes_everything(ctx, config, capsys):
    cfg = load_config(str(config))
    result = Trainer(cfg, ctx).run()
    out = cfg["out"]
    assert result.epochs_done == 3 and not result.interrupted
    for name in ("model.dlp", "model-deploy.json", "best.dlp", "best-deploy.json", "metrics.csv"):
        assert os.path.isfile(os.path.join(out, name)), name
    assert checkpoint.find(out) is not None
    rows = open(os.path.join(out, "metrics.csv")).read().splitlines()
    assert len(rows) == 4 and rows[0].startswith("epoch,train_loss")
    losses = [float(r.split(",")[1]) for r in rows[1:]]
    assert losses[-1] < losses[0], losses
    assert result.val_acc > 0.8
    deploy = json.load(open(os.path.join(out, "model-deploy.json")))
    assert deploy["outputs"] == ["prob"] and [i["name"] for i in deploy["inputs"]] == ["data"]
    pytest.importorskip("matplotlib")
    assert result.plot and os.path.getsize(result.plot) > 1000


class StopAfter(Trainer):
    def __init__(self, cfg, ctx, steps):
        super().__init__(cfg, ctx)
        self.left = steps

    def train_step(self, x, y):
        out = super().train_step(x, y)
        self.left -= 1
        if self.left == 0:
            self.request_stop()
        return out


@pytest.mark.parametrize("precision", ["fp32", "fp16", "bf16"])
def test_interrupt_and_resume_is_exact(ctx, config, tmp_path, precision):
    cfg = load_config(str(config))
    cfg["precision"] = precision  # fp16: the loss scale travels in the checkpoint
    cfg["out"] = str(tmp_path / "whole")
    Trainer(cfg, ctx).run()

    cfg["out"] = str(tmp_path / "parts")
    first = StopAfter(cfg, ctx, 7)          # stops inside the second epoch
    assert first.run().interrupted
    second = Trainer(cfg, ctx)
    if precision == "fp16":
        second.net.loss_scale.scale = 1.0  # what the checkpoint holds must replace it
    second.resume(cfg["out"])
    assert (second.epoch, second.position) == (1, 2)
    if precision == "fp16":
        assert second.net.loss_scale.scale == first.net.loss_scale.scale == 2.0 ** 16
    second.run()
    a, b = _weights(tmp_path / "whole"), _weights(tmp_path / "parts")
    assert a.keys() == b.keys()
    for k in a:
        assert np.array_equal(a[k], b[k]), k
    rows_a = open(tmp_path / "whole" / "metrics.csv").read().splitlines()
    rows_b = open(tmp_path / "parts" / "metrics.csv").read().splitlines()
    assert [r.split(",")[:5] for r in rows_a] == [r.split(",")[:5] for r in rows_b]


def test_crash_while_checkpointing_keeps_the_previous(ctx, config, tmp_path, monkeypatch):
    cfg = load_config(str(config))
    cfg["epochs"] = 1
    t = Trainer(cfg, ctx)
    t.run()
    before = checkpoint.find(cfg["out"])
    state = checkpoint.load_state(before)

    def broken(path):
        with open(path, "wb") as f:
            f.write(b"half")
        raise OSError("disk full")
    monkeypatch.setattr(t.solver, "save_state", broken)
    t.step += 5
    with pytest.raises(OSError, match="disk full"):
        t.save_checkpoint()
    assert checkpoint.find(cfg["out"]) == before
    assert checkpoint.load_state(before) == state
    t2 = Trainer(cfg, ctx)
    t2.resume(cfg["out"])
    assert t2.step == state["step"]


def test_cli_rejects_bad_config_listing_every_problem(tmp_path, capsys):
    bad = {"net": {"path": "missing.json"}, "data": {"train": {"type": "npz", "path": "nope.npz"}},
           "solver": {"type": "adam", "lr": -1}, "epochs": 0}
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(bad))
    assert main([str(path)]) == 2
    err = capsys.readouterr().err
    for field in ("net.path", "data.train.path", "solver.lr", "epochs"):
        assert field in err, (field, err)


def test_cli_trains_and_reports_paths(ctx, config, capsys, monkeypatch):
    monkeypatch.setenv("DLPRIM_DEVICE", ctx.device_string)
    assert main([str(config), "--epochs", "1", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "model:" in out and "metrics:" in out and "checkpoints:" in out


def test_ctrl_c_saves_a_checkpoint_and_stops(ctx, config):
    import signal
    from dlprim.train.trainer import install_sigint

    class InterruptAt(Trainer):
        steps = 0

        def train_step(self, x, y):
            out = super().train_step(x, y)
            InterruptAt.steps += 1
            if InterruptAt.steps == 3:
                os.kill(os.getpid(), signal.SIGINT)   # what Ctrl-C sends
            return out

    cfg = load_config(str(config))
    t = InterruptAt(cfg, ctx)
    previous = install_sigint(t)
    try:
        result = t.run()
    finally:
        signal.signal(signal.SIGINT, previous)
    assert result.interrupted and InterruptAt.steps == 3
    state = checkpoint.load_state(checkpoint.find(cfg["out"]))
    assert (state["epoch"], state["position"], state["step"]) == (0, 3, 3)


def test_tensorboard_scalars_beside_the_metrics(ctx, config):
    pytest.importorskip("tensorboardX")
    import struct
    from tensorboardX.proto import event_pb2
    raw = json.loads(open(config).read())
    raw.update(tensorboard=True, epochs=2)
    open(config, "w").write(json.dumps(raw))
    cfg = load_config(str(config))
    Trainer(cfg, ctx).run()
    folder = os.path.join(cfg["out"], "tensorboard")
    loss = []
    for name in os.listdir(folder):  # TFRecords: length, its crc, an Event, its crc
        data = open(os.path.join(folder, name), "rb").read()
        while data:
            n = struct.unpack("<Q", data[:8])[0]
            event = event_pb2.Event.FromString(data[12:12 + n])
            data = data[16 + n:]
            loss += [(event.step, v.simple_value) for v in event.summary.value
                     if v.tag == "train_loss"]
    loss.sort()  # a file per epoch, listed in any order
    assert [step for step, _ in loss] == [1, 2]
    rows = open(os.path.join(cfg["out"], "metrics.csv")).read().splitlines()
    assert abs(loss[-1][1] - float(rows[-1].split(",")[1])) < 1e-4
