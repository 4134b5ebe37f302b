"""The training loop behind dlprim-train: epochs of steps, validation, metrics, checkpoints.

Resuming is exact: the batch order is a function of (seed, epoch), the weights, solver
moments and step count, schedule position and the position inside the epoch are all in
the checkpoint, and every kernel is deterministic, so an interrupted and resumed run ends
at the same weights as an uninterrupted one.
"""
import json
import logging
import math
import os
import signal
import time
from collections import namedtuple
from typing import Any, Dict, Optional

import numpy as np

from ..context import Context
from ..data import make_loader
from ..errors import CheckpointError, MissingCheckpointError, NonFiniteError
from ..lr_schedules import create_schedule
from ..net import PREDICT, TRAIN, Net
from ..solvers import create_solver
from ..utils import atomic_write
from . import checkpoint, metrics, run_folder
from .graphs import deploy_graph, deploy_meta, loss_parts, training_graph, with_logits_output

log = logging.getLogger(__name__)

TrainResult = namedtuple("TrainResult", "out_dir epochs_done interrupted val_acc val_loss "
                                        "best_acc model metrics plot")


def _solver_args(cfg):
    args = dict(cfg)
    betas = args.pop("betas", None)
    if betas is not None:
        args["beta1"], args["beta2"] = betas
    return args


class Trainer:
    """Build everything a config names; ``run()`` trains. ``request_stop()`` (what Ctrl-C
    calls) makes the loop save a checkpoint after the current step and return."""

    def __init__(self, config: Dict[str, Any], ctx: Any = None,
                 progress: Optional[bool] = None) -> None:
        self.cfg = cfg = config
        self.ctx = ctx or Context(cfg["device"])
        self.out = cfg["out"]
        self.progress = cfg["progress"] if progress is None else progress
        batch = cfg["batch"]
        self.graph = training_graph(cfg["net"], batch)
        self.data_name, self.label_name, self.logits_name, self.loss_name = loss_parts(self.graph)
        self.net = Net(self.ctx, with_logits_output(self.graph, self.logits_name), mode=TRAIN,
                       seed=cfg["seed"])
        data = cfg["data"]
        self.train_loader = make_loader(data["train"], batch, "data.train", train=True,
                                        seed=cfg["seed"])
        # a text vocabulary is the training data's: validation text is encoded with it
        self.vocab = getattr(self.train_loader.source, "vocab", None)
        self.val_loader = (make_loader(data["val"], batch, "data.val", train=False,
                                       vocab=self.vocab) if data.get("val") else None)
        self._check_shapes()
        self.solver = create_solver(self.net, _solver_args(cfg["solver"]))
        sched = dict(cfg["schedule"] or {})
        self.per_iteration = sched.get("type") == "onecycle"
        if self.per_iteration:
            sched["total_steps"] = cfg["epochs"] * len(self.train_loader)
        self.schedule = create_schedule(self.solver, sched) if sched else None
        self.metrics = metrics.MetricsLog(self.out, cfg["metrics"], cfg.get("tensorboard", False))
        self.epoch, self.position, self.step = 0, 0, 0
        self.best_acc = None
        self._partial = [0.0, 0, 0]  # loss sum, correct, seen: the epoch so far
        self._stop = False
        self._owns_out = False  # resumed, or out checked for an earlier run (run_folder)
        self._saved_step = None  # the step of the checkpoint written or loaded last

    def _check_shapes(self):
        want = self.net.tensor(self.data_name).shape[1:]
        for name, loader in (("data.train", self.train_loader), ("data.val", self.val_loader)):
            if loader is not None and tuple(loader.shape) != tuple(want):
                raise ValueError("%s: samples are %s, the net input '%s' wants %s"
                                 % (name, "x".join(map(str, loader.shape)), self.data_name,
                                    "x".join(map(str, want))))
        classes = self.net.tensor(self.logits_name).shape[1]
        n = self.train_loader.num_classes
        if n is not None and n > classes:
            raise ValueError("data.train: %d classes, the net's '%s' has %d outputs"
                             % (n, self.logits_name, classes))

    def request_stop(self):
        """Make ``run()`` save a checkpoint after the current step and return."""
        self._stop = True

    # ----- one batch
    def _feed(self, x, y):
        net = self.net
        if net.tensor(self.data_name).shape[0] != x.shape[0]:
            net.reshape({self.data_name: x.shape, self.label_name: y.shape})
        label = net.tensor(self.label_name)
        net.tensor(self.data_name).to_device(x, wait=False)
        label.to_device(y.astype(label.dtype, copy=False), wait=False)

    def _read(self, y):
        """(loss, correct predictions): one per label, so a language model's (N, T)
        targets count T each against (N * T, vocab) logits."""
        loss = float(self.net.tensor(self.loss_name).to_host().ravel()[0])
        pred = self.net.tensor(self.logits_name).to_host().reshape(y.size, -1).argmax(1)
        return loss, int(np.sum(pred == y.ravel()))

    def train_step(self, x, y):
        """One step on batch (x, y): zero-grad, forward, backward, update; -> (loss, correct
        labels)."""
        self._feed(x, y)
        self.solver.zero_grad()
        self.net.forward()
        self.net.backward()
        self.solver.apply()
        return self._read(y)

    def evaluate(self):
        """(loss, accuracy) over the validation data, in predict mode."""
        if self.val_loader is None:
            return None, None
        self.net.mode = PREDICT
        total, correct, seen = 0.0, 0, 0
        try:
            for x, y in self.val_loader:
                self._feed(x, y)
                self.net.forward()
                loss, ok = self._read(y)
                total += loss * y.size
                correct += ok
                seen += y.size
        finally:
            self.net.mode = TRAIN
        return total / seen, correct / seen

    # ----- checkpoints
    def _state(self):
        return {"epoch": self.epoch, "position": self.position, "step": self.step,
                "best_acc": self.best_acc, "partial": self._partial,
                "schedule": self.schedule.state_dict() if self.schedule else None,
                "metrics": self.metrics.rows, "seed": self.cfg["seed"]}

    def save_checkpoint(self):
        """Write a checkpoint of weights, solver, schedule and position; returns its folder."""
        folder = checkpoint.save(os.path.join(self.out, "checkpoints"), self.step, self.net,
                                 self.solver, self._state(), self.graph,
                                 keep=self.cfg["checkpoint"]["keep"] or 1)
        self._saved_step = self.step
        return folder

    def resume(self, path):
        """Load the checkpoint at ``path`` (a folder or an output directory); returns it.
        A missing, damaged or foreign checkpoint is a CheckpointError naming the file."""
        folder = checkpoint.find(path)
        if folder is None:
            raise MissingCheckpointError(
                "%s: no checkpoint to resume from (no checkpoints/%s, no step-N folder); "
                "start afresh without --resume" % (path, checkpoint.LATEST))
        state = checkpoint.load(folder, self.net, self.solver)
        where = os.path.join(folder, "state.json")
        if self.schedule and state["schedule"]:
            kind = state["schedule"].get("type")
            if kind != type(self.schedule).__name__:
                raise CheckpointError("%s: the schedule is %s, the config's is %s"
                                      % (where, kind, type(self.schedule).__name__))
            try:
                self.schedule.load_state_dict(state["schedule"])
            except (KeyError, TypeError, ValueError) as e:
                raise CheckpointError("%s: schedule: %s" % (where, e)) from None
        batches = len(self.train_loader)
        if state["position"] > batches:
            raise CheckpointError("%s: 'position' %d is past the %d batches of an epoch (the "
                                  "batch size or the data changed since it was saved)"
                                  % (where, state["position"], batches))
        if state["seed"] != self.cfg["seed"]:
            log.warning("%s: saved with seed %d, the config has %d: batches from here on are "
                        "not those the interrupted run would have seen",
                        where, state["seed"], self.cfg["seed"])
        self.epoch, self.position, self.step = state["epoch"], state["position"], state["step"]
        self.best_acc, self._partial = state["best_acc"], list(state["partial"])
        self.metrics.restore(state["metrics"])
        self._owns_out, self._saved_step = True, self.step
        return folder

    def _save_model(self, name):
        self.net.save_parameters(os.path.join(self.out, name + ".dlp"))
        deploy = deploy_graph(self.graph)
        deploy["meta"] = deploy_meta(self.cfg["data"], name + ".dlp", self.data_name,
                                     getattr(self.train_loader.source, "classes", None))
        atomic_write(os.path.join(self.out, name + "-deploy.json"),
                     lambda f: f.write(json.dumps(deploy, indent=1).encode()))

    # ----- the loop
    def run(self) -> TrainResult:
        """Train the remaining epochs (validating, logging, checkpointing) and save the model;
        returns a ``TrainResult``.
        """
        if not self._owns_out:
            run_folder.claim(self.out, force=self.cfg["force"])
            self._owns_out = True
        os.makedirs(self.out, exist_ok=True)
        if self.vocab is not None:  # what turns the model's ids back into text
            self.vocab.save(os.path.join(self.out, "vocab.json"))
        epochs = self.cfg["epochs"]
        val_loss = val_acc = None
        while self.epoch < epochs:
            if self._stop:  # asked between epochs (during validation or a checkpoint)
                if self._saved_step != self.step:
                    self.save_checkpoint()
                return self._result(True, val_acc, val_loss)
            started = time.perf_counter()
            self.train_loader.set_epoch(self.epoch)
            self.train_loader.position = self.position
            bar = self._bar(len(self.train_loader), self.position, "epoch %d/%d" % (self.epoch + 1, epochs))
            images = 0
            for x, y in self.train_loader:
                loss, correct = self.train_step(x, y)
                self.position += 1
                self.step += 1
                if self.cfg["stop_on_nonfinite"] and not math.isfinite(loss):
                    if bar is not None:
                        bar.close()
                    raise NonFiniteError(self._nonfinite(loss))
                images += len(y)
                p = self._partial  # loss and accuracy per label (one per image, T per text window)
                p[0] += loss * y.size
                p[1] += correct
                p[2] += y.size
                if self.per_iteration and self.schedule:
                    self.schedule.step()
                if bar is not None:
                    bar.update(1)
                    bar.set_postfix(loss="%.4f" % (p[0] / p[2]), acc="%.3f" % (p[1] / p[2]),
                                    img_s="%.0f" % (images / (time.perf_counter() - started)))
                if self._stop:
                    if bar is not None:
                        bar.close()
                    self.ctx.finish()
                    self.save_checkpoint()
                    return self._result(True, val_acc, val_loss)
            if bar is not None:
                bar.close()
            seconds = time.perf_counter() - started
            val_loss, val_acc = self.evaluate()
            p = self._partial
            row = {"epoch": self.epoch + 1, "train_loss": p[0] / max(p[2], 1),
                   "train_acc": p[1] / max(p[2], 1), "val_loss": val_loss, "val_acc": val_acc,
                   "lr": float(self.solver.lr), "seconds": seconds,
                   "images_per_s": images / seconds if seconds > 0 else None}
            self.metrics.add(row)
            log.info("epoch %d: train loss %.4f acc %.4f%s", row["epoch"], row["train_loss"],
                     row["train_acc"], "" if val_acc is None else
                     ", val loss %.4f acc %.4f" % (val_loss, val_acc))
            if self.schedule and not self.per_iteration:
                self.schedule.step(val_loss if type(self.schedule).__name__ == "ReduceLROnPlateau"
                                   else None)
            score = val_acc if val_acc is not None else -row["train_loss"]
            if self.cfg["checkpoint"]["best"] and (self.best_acc is None or score > self.best_acc):
                self.best_acc = score
                self._save_model("best")
            self.epoch, self.position, self._partial = self.epoch + 1, 0, [0.0, 0, 0]
            if self.epoch % self.cfg["checkpoint"]["every"] == 0 or self.epoch == epochs:
                self.save_checkpoint()
        self._save_model("model")
        if self.cfg["plot"]:
            metrics.plot(self.metrics.rows, os.path.join(self.out, "curves.png"))
        return self._result(False, val_acc, val_loss)

    def _nonfinite(self, loss):
        root = os.path.join(self.out, "checkpoints")
        kept = ("the last checkpoint in %s is from before it" % root if checkpoint.folders(root)
                else "no checkpoint was written yet")
        # a resumed solver takes its lr from the checkpoint, so a lower lr needs a new run
        return ("training loss is %s at epoch %d, step %d (batch %d of %d in the epoch); %s; "
                "lower solver.lr or set solver.clip_norm and start afresh (--force), or set "
                "\"stop_on_nonfinite\": false to train on regardless"
                % (loss, self.epoch + 1, self.step, self.position, len(self.train_loader), kept))

    def _bar(self, total, initial, desc):
        if not self.progress:
            return None
        from tqdm.auto import tqdm
        return tqdm(total=total, initial=initial, desc=desc, unit="batch", leave=True)

    def _result(self, interrupted, val_acc, val_loss):
        plot = os.path.join(self.out, "curves.png")
        return TrainResult(self.out, self.epoch, interrupted, val_acc, val_loss, self.best_acc,
                           os.path.join(self.out, "model.dlp"), self.metrics.path,
                           plot if os.path.exists(plot) else None)


def install_sigint(trainer):
    """First Ctrl-C: stop after the current step with a checkpoint. Second: abort."""
    def handler(signum, frame):
        signal.signal(signal.SIGINT, signal.default_int_handler)
        trainer.request_stop()
    return signal.signal(signal.SIGINT, handler)
