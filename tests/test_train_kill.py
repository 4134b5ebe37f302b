"""kill -9 and Ctrl-C of dlprim-train at random moments (seeded) leave a checkpoint that
loads, progress is never lost, and --resume ends at the weights of a run never
interrupted; a crash at each step of writing a checkpoint leaves one that loads.

The run is tiny and checkpoints every epoch of two steps, so most of its time is spent
writing checkpoints: a random kill often lands inside one.
"""
import json
import os
import random
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from dlprim.net import weights
from dlprim.train import Trainer, checkpoint
from dlprim.train.config import load_config

from test_hostile_train import _raw

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EPOCHS = 20


@pytest.fixture
def setup(ctx, tmp_path):
    """(config path, checked config, reference weights and metrics of an uninterrupted run)."""
    raw = _raw(str(tmp_path), epochs=EPOCHS, checkpoint={"every": 1, "keep": 2, "best": True})
    path = tmp_path / "config.json"
    path.write_text(json.dumps(dict(raw, out="reference")))
    reference = load_config(str(path))
    Trainer(reference, ctx).run()
    path.write_text(json.dumps(raw))
    return str(path), load_config(str(path)), _finals(reference)


def _finals(cfg):
    rows = open(os.path.join(cfg["out"], "metrics.csv")).read().splitlines()
    return weights.load(os.path.join(cfg["out"], "model.dlp")), [r.split(",")[:5] for r in rows]


def _start(ctx, config, *args):
    env = dict(os.environ, DLPRIM_DEVICE=ctx.device_string,
               PYTHONPATH=os.pathsep.join([ROOT] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    return subprocess.Popen([sys.executable, "-m", "dlprim.train", config, "--no-progress"] + list(args),
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _training(p):
    """Wait until ``p`` has set up and trains (the start of a process is seconds of
    imports and kernel builds that write nothing: kills there would test little)."""
    for line in p.stdout:
        if line.startswith("training on"):
            return
    pytest.fail("dlprim-train ended before training: %s" % p.stderr.read())


def _loaded_step(ctx, cfg):
    """The step of the checkpoint --resume would take, loaded into a fresh trainer; None
    when the run wrote none yet."""
    if checkpoint.find(cfg["out"]) is None:
        return None
    t = Trainer(cfg, ctx)
    t.resume(cfg["out"])
    return t.step


def _finish_and_compare(ctx, config, cfg, reference, resume):
    p = _start(ctx, config, "--resume" if resume else "--force")
    out, err = p.communicate(timeout=300)
    assert p.returncode == 0, err
    final, rows = _finals(cfg)
    ref_weights, ref_rows = reference
    assert rows == ref_rows
    for name in ref_weights:
        assert np.array_equal(final[name], ref_weights[name]), name


def test_kill_9_at_random_moments(ctx, setup):
    config, cfg, reference = setup
    rng = random.Random(9)
    step = None
    for _ in range(4):
        p = _start(ctx, config, "--force" if step is None else "--resume")
        _training(p)
        time.sleep(rng.uniform(0.0, 0.6))
        p.kill()
        p.communicate()
        now = _loaded_step(ctx, cfg)
        assert step is None or (now is not None and now >= step), (step, now)  # nothing lost
        step = now
    _finish_and_compare(ctx, config, cfg, reference, resume=step is not None)


def test_ctrl_c_at_random_moments_saves_and_exits(ctx, setup):
    config, cfg, reference = setup
    rng = random.Random(3)
    step = None
    for _ in range(3):
        p = _start(ctx, config, "--force" if step is None else "--resume")
        _training(p)
        time.sleep(rng.uniform(0.0, 0.6))
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=120)
        assert "Traceback" not in err, err
        if "model:" in out:            # it had finished (a Ctrl-C in its last instant may
            break                      # still end it by SIGINT: -2)
        assert p.returncode == 130 and "interrupted: checkpoint saved" in out, (out, err)
        now = _loaded_step(ctx, cfg)
        assert now is not None and (step is None or now >= step), (step, now)
        step = now
    _finish_and_compare(ctx, config, cfg, reference, resume=step is not None)


def test_crash_at_each_step_of_a_checkpoint_write(ctx, setup, monkeypatch):
    """Every rename (each file's, the folder's, the pointer's) and the pruning fail in
    turn; what is on disk then always loads, at the old step or the new one."""
    _, cfg, _ = setup
    cfg = dict(cfg, epochs=1)
    t = Trainer(cfg, ctx)
    t.run()
    real_replace, real_rmtree = os.replace, checkpoint.shutil.rmtree
    calls = {"n": 0, "at": 0}

    def counted(real):
        def call(*args, **kwargs):
            calls["n"] += 1
            if calls["n"] == calls["at"]:
                raise OSError("crash at call %d" % calls["n"])
            return real(*args, **kwargs)
        return call
    monkeypatch.setattr(os, "replace", counted(real_replace))
    monkeypatch.setattr(checkpoint.shutil, "rmtree", counted(real_rmtree))
    at = 1
    while True:
        old = _loaded_step(ctx, cfg)
        calls["n"], calls["at"] = 0, at
        t.step += 1
        try:
            t.save_checkpoint()
        except OSError as e:
            assert "crash at call %d" % at in str(e)
        else:
            break                      # no call left to fail
        assert _loaded_step(ctx, cfg) in (old, t.step)
        at += 1
    assert at > 6                       # 4 files, the folder, the pointer, the pruning
    assert _loaded_step(ctx, cfg) == t.step


def test_a_step_saved_twice_gets_a_new_folder(ctx, setup):
    """Stopped at the end of an epoch and resumed, a run saves the same step again: the
    folder the pointer names is never removed or rewritten in place."""
    _, cfg, _ = setup
    cfg = dict(cfg, epochs=1)
    t = Trainer(cfg, ctx)
    t.run()
    root = os.path.join(cfg["out"], "checkpoints")
    first = checkpoint.find(cfg["out"])
    before = {n: open(os.path.join(first, n), "rb").read() for n in checkpoint.FILES}
    second = t.save_checkpoint()
    assert os.path.basename(second) == os.path.basename(first) + "-1"
    assert checkpoint.find(cfg["out"]) == second
    assert {n: open(os.path.join(first, n), "rb").read() for n in checkpoint.FILES} == before
    assert checkpoint.folders(root) == [os.path.basename(first), os.path.basename(second)]
