"""dlprim-train under careless and hostile input: every refusal is a dlprim.Error of the
right built-in kind whose message names the culprit (field path, folder, file, epoch and
step), and nothing a run wrote is lost.

- values that make a run useless are refused before any work (NaN/inf hyperparameters,
  schedules, drop_last with fewer samples than a batch, empty data);
- an output folder holding a run is never overwritten without --resume or --force;
- damaged checkpoint files are named; --resume falls back past a damaged latest.json;
- a loss that becomes NaN stops the run, naming the epoch and step;
- written files get the user's normal permissions.
"""
import json
import logging
import os
import pathlib
import re
import shutil
import stat

import numpy as np
import pytest

import dlprim
from dlprim.data import write_idx
from dlprim.errors import (CheckpointError, MissingCheckpointError, NonFiniteError,
                           RunExistsError)
from dlprim.train import Trainer, main
from dlprim.train import checkpoint
from dlprim.train.config import ConfigError, apply_overrides, load_config, validate_config
from dlprim.train.run_folder import claim
from dlprim.utils import atomic_write


def _net(batch):
    return {"inputs": [{"name": "data", "shape": [batch, 1, 8, 8]},
                       {"name": "label", "shape": [batch], "dtype": "int"}],
            "outputs": ["loss"],
            "operators": [
                {"name": "fc1", "type": "InnerProduct", "inputs": ["data"], "outputs": ["fc1"],
                 "options": {"outputs": 8, "activation": "relu"}},
                {"name": "fc2", "type": "InnerProduct", "inputs": ["fc1"], "outputs": ["fc2"],
                 "options": {"outputs": 3}},
                {"name": "loss", "type": "SoftmaxWithLoss", "inputs": ["fc2", "label"],
                 "outputs": ["loss"]}]}


def _npz(path, n, seed=0):
    rng = np.random.default_rng(seed)
    np.savez(path, x=rng.standard_normal((n, 1, 8, 8)).astype(np.float32),
             y=np.arange(n) % 3)


def _raw(root, train=16, **changes):
    """A tiny valid config under ``root`` (16 samples, batch 8: 2 steps an epoch)."""
    _npz(os.path.join(root, "train.npz"), train)
    _npz(os.path.join(root, "val.npz"), 8, seed=1)
    raw = {"net": {"graph": _net(8)},
           "data": {"train": {"type": "npz", "path": "train.npz", "num_classes": 3},
                    "val": {"type": "npz", "path": "val.npz", "num_classes": 3}},
           "solver": {"type": "adam", "lr": 0.01}, "epochs": 3, "batch": 8, "seed": 1,
           "out": "run", "progress": False, "plot": False,
           "checkpoint": {"every": 1, "keep": 3, "best": True}}
    raw.update(changes)
    return raw


def _refused(raw, root, culprit, what=""):
    with pytest.raises(ConfigError) as info:
        validate_config(raw, str(root))
    err = info.value
    assert isinstance(err, dlprim.Error) and isinstance(err, ValueError)
    hits = [p for p in err.problems if p.startswith(culprit + ":")]
    assert hits and what in hits[0], (culprit, err.problems)


# ----- values that make a run useless, refused before any work
NAN, INF = float("nan"), float("inf")
USELESS = [
    ({"solver": {"type": "adam", "lr": NAN}}, "solver.lr", "finite"),
    ({"solver": {"type": "adam", "lr": INF}}, "solver.lr", "finite"),
    ({"solver": {"type": "adam", "lr": 1e39}}, "solver.lr", "float32"),
    ({"solver": {"type": "adam", "weight_decay": -INF}}, "solver.weight_decay", "finite"),
    ({"solver": {"type": "adam", "beta1": NAN}}, "solver.beta1", "nan"),
    ({"solver": {"type": "adamw", "eps": NAN}}, "solver.eps", "nan"),
    ({"solver": {"type": "sgd", "momentum": NAN}}, "solver.momentum", "nan"),
    ({"solver": {"type": "sgd", "clip_norm": INF}}, "solver.clip_norm", "inf"),
    ({"solver": {"type": "sgd", "clip_value": NAN}}, "solver.clip_value", "nan"),
    ({"schedule": {"type": "step", "step_size": 1, "gamma": NAN}}, "schedule.gamma", "finite"),
    ({"schedule": {"type": "step", "step_size": INF}}, "schedule.step_size", "finite"),
    ({"schedule": {"type": "step", "step_size": 2.5}}, "schedule.step_size", "integer"),
    ({"schedule": {"type": "step", "step_size": "10"}}, "schedule.step_size", "'10'"),
    ({"schedule": {"type": "exponential", "gamma": INF}}, "schedule.gamma", "inf"),
    ({"schedule": {"type": "multistep", "milestones": [2, NAN]}}, "schedule.milestones[1]", "nan"),
    ({"schedule": {"type": "cosine", "eta_min": NAN}}, "schedule.eta_min", "nan"),
    ({"schedule": {"type": "cosine", "warmup_start": 2}}, "schedule.warmup_start", "<= 1"),
    ({"schedule": {"type": "onecycle", "max_lr": INF}}, "schedule.max_lr", "inf"),
    ({"schedule": {"type": "onecycle", "max_lr": 0.1, "div_factor": 0}},
     "schedule.div_factor", "> 0"),
    ({"schedule": {"type": "onecycle", "max_lr": 0.1, "max_momentum": 1.0}},
     "schedule.max_momentum", "< 1"),
    ({"schedule": {"type": "plateau", "patience": -1}}, "schedule.patience", ">= 0"),
    ({"schedule": {"type": "plateau", "factor": NAN}}, "schedule.factor", "nan"),
    ({"stop_on_nonfinite": "yes"}, "stop_on_nonfinite", "true or false"),
    ({"force": 1}, "force", "true or false"),
    ({"epochs": 0}, "epochs", "positive"),
]


@pytest.mark.parametrize("change, culprit, what", USELESS,
                         ids=["%s=%s" % (c, json.dumps(ch)[:40]) for ch, c, _ in USELESS])
def test_useless_value_is_refused(tmp_path, change, culprit, what):
    _refused(_raw(tmp_path, **change), tmp_path, culprit, what)


def test_nan_literal_in_the_json_file(tmp_path):
    # Python's json reads NaN and Infinity; a config file may carry them
    text = json.dumps(_raw(tmp_path)).replace('"lr": 0.01', '"lr": NaN')
    (tmp_path / "c.json").write_text(text)
    with pytest.raises(ConfigError, match="solver.lr: must be a finite number"):
        load_config(str(tmp_path / "c.json"))


def test_plateau_without_validation_data(tmp_path):
    raw = _raw(tmp_path, schedule={"type": "plateau"})
    raw["data"]["val"] = None
    _refused(raw, tmp_path, "schedule.type", "data.val")


def test_drop_last_with_fewer_samples_than_a_batch_npz(tmp_path):
    raw = _raw(tmp_path, train=6)
    raw["data"]["train"]["drop_last"] = True
    _refused(raw, tmp_path, "data.train.drop_last", "6 training samples")
    raw["data"]["train"]["drop_last"] = False   # a partial batch is trained on: fine
    validate_config(raw, str(tmp_path))


def test_drop_last_with_fewer_samples_than_a_batch_mnist(tmp_path):
    write_idx(str(tmp_path / "im.gz"), np.zeros((5, 8, 8), np.uint8))
    write_idx(str(tmp_path / "lb.gz"), np.zeros(5, np.uint8))
    raw = _raw(tmp_path)
    raw["data"]["train"] = {"type": "mnist", "images": "im.gz", "labels": "lb.gz",
                            "drop_last": True}
    _refused(raw, tmp_path, "data.train.drop_last", "5 training samples")


def test_drop_last_with_fewer_samples_than_a_batch_folder(tmp_path):
    image = pytest.importorskip("PIL.Image")
    for cls in ("a", "b"):
        (tmp_path / "imgs" / cls).mkdir(parents=True)
        image.new("L", (8, 8)).save(str(tmp_path / "imgs" / cls / "0.png"))
    raw = _raw(tmp_path)
    raw["data"]["train"] = {"type": "folder", "path": "imgs", "mode": "L", "drop_last": True}
    _refused(raw, tmp_path, "data.train.drop_last", "2 training samples")


def test_batch_override_that_empties_every_epoch(tmp_path):
    raw = _raw(tmp_path)
    raw["data"]["train"]["drop_last"] = True
    cfg = validate_config(raw, str(tmp_path))
    with pytest.raises(ConfigError) as info:
        apply_overrides(cfg, batch=32)
    assert info.value.problems[0].startswith("data.train.drop_last: the 16 training samples")
    assert "--batch" in info.value.problems[0]


@pytest.mark.parametrize("split", ["train", "val"])
def test_data_without_samples(tmp_path, split):
    raw = _raw(tmp_path)
    _npz(tmp_path / "empty.npz", 0)
    raw["data"][split]["path"] = "empty.npz"
    _refused(raw, tmp_path, "data." + split, "no samples")


def test_force_override_must_be_a_flag(tmp_path):
    cfg = validate_config(_raw(tmp_path), str(tmp_path))
    with pytest.raises(ConfigError, match="--force: must be true or false"):
        apply_overrides(cfg, force="yes")


def test_force_and_resume_together(tmp_path):
    _refused(_raw(tmp_path, force=True, resume=True), tmp_path, "force", "give one of them")
    cfg = validate_config(_raw(tmp_path, resume=True), str(tmp_path))
    with pytest.raises(ConfigError, match="--force: force starts afresh"):
        apply_overrides(cfg, force=True)


# ----- an output folder that holds a run
@pytest.mark.parametrize("held", ["model.dlp", "best.dlp", "metrics.csv",
                                  "checkpoints/latest.json"])
def test_out_holding_a_run_is_refused(tmp_path, held):
    out = tmp_path / "run"
    (out / os.path.dirname(held)).mkdir(parents=True, exist_ok=True)
    (out / held).write_bytes(b"earlier work")
    with pytest.raises(RunExistsError) as info:
        claim(str(out))
    err = info.value
    assert isinstance(err, dlprim.Error) and isinstance(err, FileExistsError)
    text = str(err)
    assert str(out) in text and held.split("/")[0] in text
    assert "--resume" in text and "--force" in text
    claim(str(out), resume=True)                      # resuming is no overwrite
    assert (out / held).read_bytes() == b"earlier work"
    (out / "notes.txt").write_text("mine")
    claim(str(out), force=True)                       # removes the run's files, only those
    assert not (out / held).exists() and (out / "notes.txt").read_text() == "mine"


def test_cli_refuses_before_any_work(tmp_path, capsys):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "model.dlp").write_bytes(b"earlier model")
    (tmp_path / "c.json").write_text(json.dumps(_raw(tmp_path)))
    assert main([str(tmp_path / "c.json"), "--device", "no-such-device"]) == 2
    err = capsys.readouterr().err      # refused before the device string was even looked at
    assert "%s already holds a run (model.dlp)" % (tmp_path / "run") in err
    assert (tmp_path / "run" / "model.dlp").read_bytes() == b"earlier model"


def test_trainer_refuses_too_and_force_starts_afresh(ctx, tmp_path):
    cfg = validate_config(_raw(tmp_path, epochs=1), str(tmp_path))
    stale = os.path.join(cfg["out"], "checkpoints", "step-00000099")
    os.makedirs(stale)
    with pytest.raises(RunExistsError, match="checkpoints/"):
        Trainer(cfg, ctx).run()
    assert os.path.isdir(stale)
    cfg["force"] = True
    Trainer(cfg, ctx).run()
    # the earlier run's checkpoints are gone, so the two runs can never mix
    assert checkpoint.folders(os.path.join(cfg["out"], "checkpoints")) == ["step-00000002"]


# ----- damaged checkpoints
@pytest.fixture(scope="module")
def trained(ctx, tmp_path_factory):
    """A finished 3-epoch run with checkpoints step-2, -4, -6 (latest)."""
    root = tmp_path_factory.mktemp("trained")
    raw = _raw(str(root), schedule={"type": "step", "step_size": 1, "gamma": 0.9})
    Trainer(validate_config(raw, str(root)), ctx).run()
    return root, raw


@pytest.fixture
def run(trained, tmp_path):
    """A copy of the trained run to damage: (config, checkpoints folder)."""
    root, raw = trained
    shutil.copytree(str(root), str(tmp_path / "p"))
    cfg = validate_config(raw, str(tmp_path / "p"))
    return cfg, os.path.join(cfg["out"], "checkpoints")


POINTER_DAMAGE = {
    "truncated": lambda p: p.write_text('{"checkpoint": "step-0'),
    "a list": lambda p: p.write_text("[]"),
    "no checkpoint key": lambda p: p.write_text('{"step": 6}'),
    "a number": lambda p: p.write_text('{"checkpoint": 6}'),
    "outside the folder": lambda p: p.write_text('{"checkpoint": "../../etc"}'),
    "dangling": lambda p: p.write_text('{"checkpoint": "step-00000042"}'),
    "deleted": lambda p: p.unlink(),
    "binary": lambda p: p.write_bytes(b"\xff\xfe\x00"),
}


@pytest.mark.parametrize("damage", sorted(POINTER_DAMAGE))
def test_damaged_latest_json_falls_back_to_the_newest_complete(ctx, run, damage, caplog):
    cfg, root = run
    POINTER_DAMAGE[damage](pathlib.Path(root, "latest.json"))
    os.unlink(os.path.join(root, "step-00000006", "solver.npz"))   # the newest is incomplete
    t = Trainer(cfg, ctx)
    with caplog.at_level(logging.WARNING, logger="dlprim.train.checkpoint"):
        folder = t.resume(cfg["out"])
    assert folder == os.path.join(root, "step-00000004") and t.step == 4
    assert "latest.json" in caplog.text and "step-00000004" in caplog.text


def test_nothing_complete_to_fall_back_on(ctx, run):
    cfg, root = run
    with open(os.path.join(root, "latest.json"), "w") as f:
        f.write("{")
    for name in checkpoint.folders(root):
        os.unlink(os.path.join(root, name, "state.json"))
    with pytest.raises(CheckpointError) as info:
        Trainer(cfg, ctx).resume(cfg["out"])
    assert isinstance(info.value, ValueError) and isinstance(info.value, dlprim.Error)
    assert os.path.join(root, "latest.json") in str(info.value)
    assert "no complete checkpoint" in str(info.value)


def _state(folder, change):
    path = os.path.join(folder, "state.json")
    state = json.load(open(path))
    change(state)
    with open(path, "w") as f:
        json.dump(state, f)


FOLDER_DAMAGE = [  # (what, damage(folder), file named, words in the message)
    ("state truncated", lambda d: open(os.path.join(d, "state.json"), "w").write('{"epo'),
     "state.json", "not valid JSON"),
    ("state not an object", lambda d: open(os.path.join(d, "state.json"), "w").write("3"),
     "state.json", "object"),
    ("epoch a string", lambda d: _state(d, lambda s: s.update(epoch="3")),
     "state.json", "'epoch' must be an integer"),
    ("step key absent", lambda d: _state(d, lambda s: s.pop("step")),
     "state.json", "'step' missing"),
    ("partial short", lambda d: _state(d, lambda s: s.update(partial=[1.0])),
     "state.json", "'partial'"),
    ("position past the epoch", lambda d: _state(d, lambda s: s.update(position=99)),
     "state.json", "'position' 99"),
    ("schedule changed", lambda d: _state(d, lambda s: s.update(
        schedule={"type": "CosineLR", "last_step": 1, "base_lr": 0.1})),
     "state.json", "the schedule is CosineLR, the config's is StepLR"),
    ("solver truncated", lambda d: _truncate(os.path.join(d, "solver.npz")),
     "solver.npz", "zip"),
    ("solver moments of another net", lambda d: _resave_solver(d, size=5),
     "solver.npz", "shape (5,)"),
    ("solver of another type", lambda d: _resave_solver(d, kind="SGD"),
     "solver.npz", "for SGD, not Adam"),
    ("solver lr NaN", lambda d: _resave_solver(d, lr=NAN),
     "solver.npz", "lr"),
    ("weights truncated", lambda d: _truncate(os.path.join(d, "weights.dlp")),
     "weights.dlp", ""),
    ("weights missing", lambda d: os.unlink(os.path.join(d, "weights.dlp")),
     "weights.dlp", "missing"),
    ("net.json missing", lambda d: os.unlink(os.path.join(d, "net.json")),
     "net.json", "missing"),
]


def _truncate(path):
    data = open(path, "rb").read()
    with open(path, "wb") as f:
        f.write(data[:len(data) // 2])


def _resave_solver(folder, size=None, kind=None, lr=None):
    path = os.path.join(folder, "solver.npz")
    with np.load(path) as data:
        meta = json.loads(bytes(data["__meta__"]).decode())
        moments = {k: data[k] for k in data.files if k != "__meta__"}
    if size is not None:
        moments = {k: np.zeros(size, np.float32) for k in moments}
    meta["type"] = kind or meta["type"]
    if lr is not None:
        meta["hyper"]["lr"] = lr
    np.savez(path, __meta__=np.frombuffer(json.dumps(meta).encode(), np.uint8), **moments)


@pytest.mark.parametrize("what, damage, culprit, words", FOLDER_DAMAGE,
                         ids=[d[0] for d in FOLDER_DAMAGE])
def test_damaged_checkpoint_file_is_named(ctx, run, what, damage, culprit, words):
    cfg, root = run
    folder = os.path.join(root, "step-00000006")
    damage(folder)
    with pytest.raises(CheckpointError) as info:     # the folder named directly: no fallback
        Trainer(cfg, ctx).resume(folder)
    err = info.value
    assert isinstance(err, dlprim.Error) and isinstance(err, ValueError)
    assert os.path.join(folder, culprit) in str(err) and words in str(err), str(err)
    if "missing" in what:
        assert isinstance(err, (MissingCheckpointError, FileNotFoundError))


def test_resume_from_an_older_checkpoint_drops_the_abandoned_line(ctx, run):
    cfg, root = run
    t = Trainer(dict(cfg, epochs=2), ctx)
    t.resume(os.path.join(root, "step-00000002"))
    t.run()
    # step 4 again, under a new name; the abandoned step-6 is gone, so it can never be
    # taken for the newest
    assert checkpoint.find(cfg["out"]) == os.path.join(root, "step-00000004-1")
    assert checkpoint.folders(root) == ["step-00000002", "step-00000004", "step-00000004-1"]


def test_resume_with_nothing_to_resume(ctx, tmp_path, capsys):
    (tmp_path / "c.json").write_text(json.dumps(_raw(tmp_path)))
    assert main([str(tmp_path / "c.json"), "--resume"]) == 2
    err = capsys.readouterr().err
    assert "%s: no checkpoint to resume from" % (tmp_path / "run") in err
    cfg = load_config(str(tmp_path / "c.json"))
    with pytest.raises(MissingCheckpointError) as info:
        Trainer(cfg, ctx).resume(cfg["out"])
    assert isinstance(info.value, FileNotFoundError)


# ----- a loss that becomes NaN
def test_nonfinite_loss_stops_naming_epoch_and_step(ctx, tmp_path):
    raw = _raw(tmp_path, solver={"type": "sgd", "lr": 1e30}, epochs=2)
    raw["data"]["train"]["shuffle"] = False
    with pytest.raises(NonFiniteError) as info:
        Trainer(validate_config(raw, str(tmp_path)), ctx).run()
    err = info.value
    assert isinstance(err, dlprim.Error) and isinstance(err, FloatingPointError)
    assert re.search(r"loss is (nan|-?inf) at epoch 1, step 2 \(batch 2 of 2 in the epoch\)",
                     str(err)), str(err)
    assert "stop_on_nonfinite" in str(err)
    raw["stop_on_nonfinite"], raw["out"] = False, "run2"     # asked for: trains on
    assert Trainer(validate_config(raw, str(tmp_path)), ctx).run().epochs_done == 2


def test_cli_exit_status_on_a_nonfinite_loss(ctx, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("DLPRIM_DEVICE", ctx.device_string)
    raw = _raw(tmp_path, solver={"type": "sgd", "lr": 1e30})
    raw["data"]["train"]["shuffle"] = False
    (tmp_path / "c.json").write_text(json.dumps(raw))
    assert main([str(tmp_path / "c.json")]) == 1
    assert re.search(r"dlprim-train: training loss is (nan|-?inf) at epoch 1, step 2 ",
                     capsys.readouterr().err)


# ----- permissions of what is written
@pytest.fixture
def umask():
    def set_mask(mask):
        os.umask(mask)
    old = os.umask(0o022)
    yield set_mask
    os.umask(old)


def _mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.mark.parametrize("mask", [0o022, 0o077, 0o002])
def test_new_files_get_the_umask_mode(tmp_path, umask, mask):
    umask(mask)
    atomic_write(tmp_path / "f", lambda f: f.write(b"x"))
    assert _mode(tmp_path / "f") == 0o666 & ~mask


def test_replaced_file_keeps_its_mode(tmp_path, umask):
    (tmp_path / "f").write_bytes(b"old")
    os.chmod(tmp_path / "f", 0o640)
    atomic_write(tmp_path / "f", lambda f: f.write(b"new"))
    assert _mode(tmp_path / "f") == 0o640 and (tmp_path / "f").read_bytes() == b"new"


def test_run_outputs_are_not_private(ctx, tmp_path, umask):
    umask(0o022)
    cfg = validate_config(_raw(tmp_path, epochs=1), str(tmp_path))
    Trainer(cfg, ctx).run()
    folder = checkpoint.find(cfg["out"])
    for path in [os.path.join(cfg["out"], n) for n in ("model.dlp", "metrics.csv")] + \
            [os.path.join(folder, n) for n in checkpoint.FILES]:
        assert _mode(path) == 0o644, path
