"""dlprim.fit / dlprim.evaluate and early stopping, in Python and in dlprim-train.

- fit learns a separable problem; its history has a value per epoch of each metric, and
  its last validation numbers are what evaluate gives for the final weights;
- arrays and an equivalent BatchLoader train to the same weights; a partial last batch
  trains as a hand-written loop of net(...) steps does;
- evaluate matches numpy (loss, accuracy, top-k from the net's own weights), runs in
  predict mode (BatchNorm's running statistics, no dropout) and changes nothing;
- EarlyStopping stops after `patience` epochs without improvement and restores the best
  weights; dlprim-train's early_stopping and best_metric do the same from a config,
  resume exactly, and bad values are named.
"""
import json
import os

import numpy as np
import pytest

import dlprim as dp
from dlprim.data import ArraySource, BatchLoader
from dlprim.errors import NonFiniteError, RunExistsError
from dlprim.net import weights
from dlprim.train import EarlyStopping, Trainer, checkpoint
from dlprim.train.config import ConfigError, validate_config

CLASSES = 3


def _mlp(ctx, batch=16, features=6, hidden=12, classes=CLASSES, seed=0, after_loss=False):
    cfg = dp.NetConfig()
    cfg.add_input("data", [batch, features])
    cfg.add_input("label", [batch], dtype="int")
    cfg.add("InnerProduct", name="fc1", options={"outputs": hidden, "activation": "relu"})
    cfg.add("InnerProduct", name="fc2", options={"outputs": classes})
    cfg.add("SoftmaxWithLoss", name="loss", inputs=["fc2", "label"])
    outputs = ["loss"]
    if after_loss:  # a value made after the loss: the memory plan may place it on the logits
        outputs.append(cfg.add("InnerProduct", name="extra", inputs=["fc1"],
                               options={"outputs": classes}))
    cfg.set_outputs(outputs)
    return dp.Net(ctx, cfg, seed=seed)


def _image_net(ctx, batch=16, seed=0):
    cfg = dp.NetConfig()
    cfg.add_input("data", [batch, 1, 4, 4])
    cfg.add_input("label", [batch], dtype="int")
    cfg.add("InnerProduct", name="fc1", options={"outputs": 12, "activation": "relu"})
    cfg.add("InnerProduct", name="fc2", options={"outputs": CLASSES})
    cfg.add("SoftmaxWithLoss", name="loss", inputs=["fc2", "label"])
    cfg.set_outputs(["loss"])
    return dp.Net(ctx, cfg, seed=seed)


def _clusters(n, shape=(6,), seed=0):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, CLASSES, n)
    centers = 2 * np.random.default_rng(99).standard_normal((CLASSES,) + shape)
    x = centers[y] + 0.3 * rng.standard_normal((n,) + shape)
    return x.astype(np.float32), y.astype(np.int64)


def _same(a, b):
    return a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


# ----- fit
def test_fit_learns_and_history_has_a_value_per_epoch(ctx):
    x, y = _clusters(96)
    xv, yv = _clusters(40, seed=1)
    net = _mlp(ctx)
    history = dp.fit(net, x, y, epochs=4, batch_size=16, solver=dp.Adam(net, lr=0.05),
                     validation=(xv, yv), progress=False)
    assert set(history) == {"loss", "accuracy", "lr", "val_loss", "val_accuracy"}
    assert all(len(v) == 4 for v in history.values())
    assert history["loss"][-1] < history["loss"][0]
    assert history["accuracy"][-1] > 0.95 and history["val_accuracy"][-1] > 0.95
    assert history["lr"] == [0.05] * 4
    # the last validation is a pass over (xv, yv) with the final weights
    final = dp.evaluate(net, xv, yv, batch_size=16)
    assert final["accuracy"] == history["val_accuracy"][-1]
    assert np.isclose(final["loss"], history["val_loss"][-1], rtol=1e-6)
    # the net is given back as it was planned: train mode, batch 16
    assert net.mode == dp.TRAIN and net.tensor("data").shape == (16, 6)
    assert not net.keep_intermediate_tensors

    plain = dp.fit(_mlp(ctx), x, y, epochs=2, progress=False)  # no validation: no val_*
    assert set(plain) == {"loss", "accuracy", "lr"} and len(plain["loss"]) == 2


def test_arrays_and_an_equivalent_loader_train_alike(ctx):
    x, y = _clusters(50, shape=(1, 4, 4), seed=2)
    a, b, c = (_image_net(ctx) for _ in range(3))
    start = a.get_parameters()
    dp.fit(a, x, y, epochs=2, batch_size=16, seed=5, progress=False)
    dp.fit(b, loader=BatchLoader(ArraySource(x, y), 16, seed=5), epochs=2, progress=False)
    dp.fit(c, x, y, epochs=2, batch_size=16, seed=6, progress=False)
    pa, pb, pc = a.get_parameters(), b.get_parameters(), c.get_parameters()
    assert _same(pa, pb)
    assert not _same(pa, start) and not _same(pa, pc)   # trained, and the seed orders batches


def test_partial_last_batch_trains_like_a_hand_written_loop(ctx):
    x, y = _clusters(37, seed=3)   # batches of 16, 16 and 5
    net, reference = _mlp(ctx), _mlp(ctx)
    dp.fit(net, x, y, epochs=2, batch_size=16, shuffle=False,
           solver=dp.SGD(net, lr=0.1, momentum=0.9), progress=False)
    opt = dp.SGD(reference, lr=0.1, momentum=0.9)
    for _ in range(2):
        for start in range(0, 37, 16):
            opt.zero_grad()
            reference(data=x[start:start + 16], label=y[start:start + 16])
            reference.backward()
            opt.step()
    got, want = net.get_parameters(), reference.get_parameters()
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-6, err_msg=k)
    assert net.tensor("data").shape == (16, 6)


def test_fit_with_a_loader_of_batches_and_a_schedule(ctx):
    x, y = _clusters(48, seed=4)
    batches = [(x[i:i + 20], y[i:i + 20]) for i in range(0, 48, 20)]   # 20, 20, 8
    net = _mlp(ctx)
    opt = dp.SGD(net, lr=0.1)
    history = dp.fit(net, loader=batches, epochs=3, schedule=dp.lr_schedules.StepLR(opt, 1, 0.5),
                     progress=False)
    assert np.allclose(history["lr"], [0.1, 0.05, 0.025])   # the lr each epoch trained with
    assert np.isclose(opt.lr, 0.0125)


def test_fit_refuses_what_it_cannot_use(ctx):
    x, y = _clusters(20)
    net = _mlp(ctx)
    with pytest.raises(ValueError, match="x and y, or a loader"):
        dp.fit(net, x, y, loader=[(x, y)], progress=False)
    with pytest.raises(ValueError, match="wants 6"):
        dp.fit(net, np.zeros((20, 5), np.float32), y, progress=False)
    with pytest.raises(ValueError, match="label 3 .*outside 0..2"):
        dp.fit(net, x, np.full(20, 3), progress=False)
    with pytest.raises(dp.errors.LabelError):   # labels of a loader are checked too
        dp.fit(net, loader=[(x, np.full(20, 7))], progress=False)
    once = ((x[i:i + 10], y[i:i + 10]) for i in (0, 10))
    with pytest.raises(ValueError, match="no batches in epoch 2"):   # a generator runs dry
        dp.fit(net, loader=once, epochs=2, progress=False)
    with pytest.raises(ValueError, match="monitor 'val_loss'.*give validation data"):
        dp.fit(net, x, y, callbacks=[EarlyStopping()], progress=False)
    net.mode = dp.PREDICT
    with pytest.raises(ValueError, match="needs mode 'train'"):
        dp.fit(net, x, y, progress=False)


def test_fit_stops_on_a_nonfinite_loss(ctx):
    x, y = _clusters(32)
    net = _mlp(ctx)
    with pytest.raises(NonFiniteError, match=r"at epoch \d+, step \d+ \(batch \d+ of 2"):
        dp.fit(net, x, y, epochs=3, batch_size=16, solver=dp.SGD(net, lr=1e30), progress=False)


def test_fit_writes_a_run_folder_as_dlprim_train(ctx, tmp_path):
    x, y = _clusters(32)
    out = str(tmp_path / "run")
    net = _mlp(ctx)
    dp.fit(net, x, y, epochs=2, batch_size=16, validation=(x, y), out=out, progress=False)
    for name in ("metrics.csv", "model.dlp", "model-deploy.json", "best.dlp", "best-deploy.json"):
        assert os.path.isfile(os.path.join(out, name)), name
    rows = dp.plot.read_metrics(os.path.join(out, "metrics.csv"))
    assert [r["epoch"] for r in rows] == [1, 2]
    state = checkpoint.load_state(checkpoint.find(out))
    assert (state["epoch"], state["step"]) == (2, 4)
    assert _same(weights.load(os.path.join(out, "model.dlp")), net.get_parameters())
    with pytest.raises(RunExistsError):   # an earlier run is never written over
        dp.fit(net, x, y, out=out, progress=False)


# ----- evaluate
def _reference(params, x, y, ks):
    """Loss, accuracy and top-k of the two-layer net in float64 numpy."""
    p = {k: v.astype(np.float64) for k, v in params.items()}
    h = np.maximum(x @ p["fc1.0"].T + p["fc1.1"], 0)
    z = h @ p["fc2.0"].T + p["fc2.1"]
    z = z - z.max(1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(1, keepdims=True))
    order = np.argsort(-z, axis=1)
    out = {"loss": -logp[np.arange(len(y)), y].mean(), "accuracy": np.mean(order[:, 0] == y)}
    for k in ks:
        out["top%d_accuracy" % k] = np.mean((order[:, :k] == y[:, None]).any(1))
    return out


def test_evaluate_matches_numpy(ctx):
    rng = np.random.default_rng(5)
    x = rng.standard_normal((29, 6)).astype(np.float32)   # batches 8, 8, 8, 5
    y = rng.integers(0, 7, 29)
    net = _mlp(ctx, batch=8, classes=7, after_loss=True)
    got = dp.evaluate(net, x, y, batch_size=8, top_k=(1, 3, 5, 9))   # 9 > 7 classes: left out
    params = {k: v for k, v in net.get_parameters().items() if k.startswith("fc")}
    want = _reference(params, x.astype(np.float64), y, (3, 5))
    assert set(got) == set(want) == {"loss", "accuracy", "top3_accuracy", "top5_accuracy"}
    for k in want:
        assert np.isclose(got[k], want[k], rtol=1e-5), (k, got[k], want[k])
    assert got["top5_accuracy"] > got["top3_accuracy"] > got["accuracy"]


def _bn_net(ctx, mode=dp.TRAIN):
    cfg = dp.NetConfig()
    cfg.add_input("data", [6, 2, 4, 4])
    cfg.add_input("label", [6], dtype="int")
    cfg.add("Convolution2D", name="conv", options={"channels_out": 4, "kernel": 3, "pad": 1})
    cfg.add("BatchNorm", name="bn")
    cfg.add("Activation", name="relu", options={"activation": "relu"})
    cfg.add("Dropout", name="drop", options={"ratio": 0.5})
    cfg.add("GlobalPooling", name="gap", options={"mode": "avg"})
    cfg.add("InnerProduct", name="fc", options={"outputs": CLASSES})
    cfg.add("SoftmaxWithLoss", name="loss", inputs=["fc", "label"])
    cfg.set_outputs(["loss"])
    return dp.Net(ctx, cfg, mode=mode)


def test_evaluate_runs_in_predict_mode_and_changes_nothing(ctx):
    rng = np.random.default_rng(6)
    x = rng.standard_normal((6, 2, 4, 4)).astype(np.float32) + 1.5
    y = rng.integers(0, CLASSES, 6)
    net = _bn_net(ctx)
    dp.fit(net, x, y, epochs=2, batch_size=6, progress=False)   # running stats move off 0/1
    before = net.get_parameters()
    first = dp.evaluate(net, x, y, batch_size=6)
    assert dp.evaluate(net, x, y, batch_size=4) == pytest.approx(first, rel=1e-6)
    assert _same(net.get_parameters(), before)          # weights and BatchNorm statistics
    assert net.mode == dp.TRAIN and net.tensor("data").shape == (6, 2, 4, 4)
    predict = _bn_net(ctx, mode=dp.PREDICT)              # the same weights at inference
    predict.set_parameters(before)
    assert np.isclose(first["loss"], float(predict(data=x, label=y)["loss"][0]), rtol=1e-5)


# ----- early stopping
class _Weights:
    """A stand-in net: its weights are the epoch number it was trained to."""
    epoch = 0

    def get_parameters(self):
        return {"w": np.array([self.epoch])}

    def set_parameters(self, arrays):
        self.epoch = int(arrays["w"][0])


def test_early_stopping_counts_patience_and_restores_the_best():
    net, stop = _Weights(), EarlyStopping("val_loss", patience=2, min_delta=0.01)
    stop.on_train_begin(net, ["loss", "val_loss"], 0)
    losses = [1.0, 0.5, 0.495, 0.6, 0.3, 0.4, 0.45]   # 0.495 is within min_delta: no better
    said = []
    for epoch, value in enumerate(losses, 1):
        net.epoch = epoch
        said.append(stop.on_epoch_end(epoch, {"loss": 0.0, "val_loss": value}))
        if said[-1]:
            break
    assert said == [False, False, False, True]   # epochs 3 and 4 did not improve on 2
    assert (stop.best.epoch, stop.best.value, stop.stopped_epoch) == (2, 0.5, 4)
    stop.on_train_end(net, {})
    assert net.epoch == 2
    saved = json.loads(json.dumps(stop.state_dict()))
    again = EarlyStopping("val_loss", patience=2, min_delta=0.01)
    again.load_state_dict(saved)
    assert again.should_stop and again.best.epoch == 2
    accuracy = EarlyStopping("val_accuracy", patience=1)   # "auto": larger is better
    accuracy.on_train_begin(net, ["val_accuracy"], 0)
    assert [accuracy.on_epoch_end(e, {"val_accuracy": v}) for e, v in
            enumerate([0.5, 0.7, float("nan")], 1)] == [False, False, True]
    with pytest.raises(ValueError, match="patience"):
        EarlyStopping(patience=-1)
    with pytest.raises(ValueError, match="did you mean 'val_accuracy'"):
        EarlyStopping("val_acc")


def test_fit_stops_early_with_the_best_weights(ctx):
    x, y = _clusters(48)
    xv, yv = x, (y + 1) % CLASSES      # validation disagrees: its loss grows as training goes on
    net = _mlp(ctx)
    seen = {}

    class Snapshots(dp.train.Callback):
        def on_epoch_end(self, epoch, logs):
            seen[epoch] = net.get_parameters()

    stop = EarlyStopping("val_loss", patience=2)
    history = dp.fit(net, x, y, epochs=10, batch_size=16, solver=dp.Adam(net, lr=0.05),
                     validation=(xv, yv), callbacks=[Snapshots(), stop], progress=False)
    assert len(history["loss"]) == 3 and stop.stopped_epoch == 3
    assert int(np.argmin(history["val_loss"])) + 1 == stop.best.epoch == 1
    assert _same(net.get_parameters(), seen[1]) and not _same(seen[1], seen[3])


# ----- dlprim-train
def _raw(root, **changes):
    x, y = _clusters(40, shape=(1, 4, 4), seed=7)
    np.savez(os.path.join(root, "train.npz"), x=x, y=y)
    np.savez(os.path.join(root, "val.npz"), x=x, y=(y + 1) % CLASSES)   # disagreeing labels
    raw = {"net": {"graph": {
               "inputs": [{"name": "data", "shape": [16, 1, 4, 4]},
                          {"name": "label", "shape": [16], "dtype": "int"}],
               "outputs": ["loss"],
               "operators": [
                   {"name": "fc1", "type": "InnerProduct", "inputs": ["data"], "outputs": ["fc1"],
                    "options": {"outputs": 12, "activation": "relu"}},
                   {"name": "fc2", "type": "InnerProduct", "inputs": ["fc1"], "outputs": ["fc2"],
                    "options": {"outputs": CLASSES}},
                   {"name": "loss", "type": "SoftmaxWithLoss", "inputs": ["fc2", "label"],
                    "outputs": ["loss"]}]}},
           "data": {"train": {"type": "npz", "path": "train.npz", "num_classes": CLASSES},
                    "val": {"type": "npz", "path": "val.npz", "num_classes": CLASSES}},
           "solver": {"type": "adam", "lr": 0.05}, "epochs": 10, "batch": 16, "seed": 1,
           "out": "run", "progress": False, "plot": False,
           "checkpoint": {"every": 1, "keep": 20, "best": True},
           "early_stopping": {"monitor": "val_loss", "patience": 2}}
    raw.update(changes)
    return raw


def _config(root, **changes):
    return validate_config(_raw(root, **changes), str(root))


def test_train_config_stops_early_and_keeps_the_best_by_its_metric(ctx, tmp_path):
    cfg = _config(tmp_path, best_metric="val_loss")
    result = Trainer(cfg, ctx).run()
    assert (result.epochs_done, result.stopped_early, result.interrupted) == (3, 3, False)
    rows = dp.plot.read_metrics(os.path.join(cfg["out"], "metrics.csv"))
    assert len(rows) == 3
    assert result.best["metric"] == "val_loss" and result.best["epoch"] == 1
    first = checkpoint.folders(os.path.join(cfg["out"], "checkpoints"))[0]   # after epoch 1
    assert _same(weights.load(os.path.join(cfg["out"], "best.dlp")),
                 weights.load(os.path.join(cfg["out"], "checkpoints", first, "weights.dlp")))
    state = checkpoint.load_state(checkpoint.find(cfg["out"]))
    assert state["early_stopping"]["wait"] == 2 and state["early_stopping"]["stopped_epoch"] == 3
    again = Trainer(cfg, ctx)             # resuming a run that stopped early trains no more
    again.resume(cfg["out"])
    assert again.run().epochs_done == 3


def test_cli_says_it_stopped_early(ctx, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("DLPRIM_DEVICE", ctx.device_string)
    (tmp_path / "c.json").write_text(json.dumps(_raw(tmp_path, best_metric="val_loss")))
    assert dp.train.main([str(tmp_path / "c.json"), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "early stopping after epoch 3: val_loss has not improved" in out
    assert "stopped early after epoch 3" in out and "(epoch 1, val_loss " in out
    # the program's console lines end with it: a record after it is not on stdout
    import logging
    logging.getLogger("dlprim.test").info("after the program")
    assert "after the program" not in capsys.readouterr().out


def test_early_stopping_survives_an_interruption_exactly(ctx, tmp_path):
    whole = _config(tmp_path, out="whole")
    Trainer(whole, ctx).run()
    parts = dict(whole, out=str(tmp_path / "parts"))

    class StopAt(Trainer):
        def train_step(self, x, y):
            out = super().train_step(x, y)
            if self.step == 7:          # 3 steps an epoch: the first of epoch 3
                self.request_stop()
            return out
    assert StopAt(parts, ctx).run().interrupted
    resumed = Trainer(parts, ctx)
    resumed.resume(parts["out"])
    assert resumed.early_stopping.wait == 1   # epoch 2 did not improve on epoch 1
    result = resumed.run()
    assert result.stopped_early == 3
    assert _same(weights.load(os.path.join(whole["out"], "model.dlp")),
                 weights.load(os.path.join(parts["out"], "model.dlp")))
    rows = [[r.split(",")[:5] for r in
             open(os.path.join(c["out"], "metrics.csv")).read().splitlines()]
            for c in (whole, parts)]
    assert rows[0] == rows[1] and len(rows[0]) == 4


def test_bad_early_stopping_and_best_metric_are_named(tmp_path):
    with pytest.raises(ConfigError) as info:
        _config(tmp_path, early_stopping={"monitor": "val_acc", "patience": -1,
                                          "min_delta": float("nan"), "mode": "up", "wait": 3},
                best_metric="accuracy_top1")
    problems = "\n".join(info.value.problems)
    for words in ("early_stopping.monitor: must be one of", "did you mean 'val_accuracy'",
                  "early_stopping.patience: must be an integer >= 0",
                  "early_stopping.min_delta: must be a finite number",
                  "early_stopping.mode: must be", "early_stopping.wait: unknown field",
                  "best_metric: must be one of"):
        assert words in problems, (words, problems)
    raw_data = {"train": {"type": "npz", "path": "train.npz", "num_classes": CLASSES}}
    with pytest.raises(ConfigError, match="early_stopping.monitor: 'val_loss' needs "
                                          "validation data"):
        _config(tmp_path, data=raw_data)
    cfg = _config(tmp_path, early_stopping={"monitor": "accuracy"})
    assert cfg["early_stopping"] == {"monitor": "accuracy", "patience": 5, "min_delta": 0.0,
                                     "mode": "auto"}
    assert _config(tmp_path, early_stopping=None)["best_metric"] is None
