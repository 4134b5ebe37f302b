"""The epoch loop that dlprim-train's Trainer and ``dlprim.fit`` both run.

Each epoch: batches from the loader's (epoch, position) on, a training step each (progress
bar with the running loss, accuracy and images/s), the schedule stepped per batch
(one-cycle) or per epoch, then validation in predict mode, one metrics row (logged as a
line, written to metrics.csv when there is an output folder), the best model and the
callbacks (early stopping), a checkpoint every ``checkpoint.every`` epochs. The state
that a checkpoint keeps (epoch, position in it, step, the epoch's running sums, the best
value, early-stopping counters, schedule, metrics rows) lives here, so a resumed run ends
as an uninterrupted one would.
"""
import json
import logging
import math
import os
import time
from collections import namedtuple
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

from ..errors import CheckpointError, NonFiniteError
from ..lr_schedules import OneCycleLR, ReduceLROnPlateau
from ..utils import atomic_write
from . import checkpoint, metrics, run_folder
from .callbacks import Best, EarlyStopping, logs_of
from .graphs import deploy_graph
from .steps import ONCE, evaluate_batches, roles_of, train_step

__all__ = ["EpochLoop", "TrainResult", "history_names"]

log = logging.getLogger(__name__)

TrainResult = namedtuple("TrainResult", "out_dir epochs_done interrupted val_acc val_loss "
                                        "best_acc model metrics plot best stopped_early")
TrainResult.__doc__ = """What a run did: ``out_dir``, ``epochs_done``, ``interrupted``; the
last epoch's ``val_acc`` and ``val_loss``; ``best_acc``, the validation accuracy of the
epoch kept as the best model; ``model``, ``metrics`` and ``plot`` paths (None where not
written); ``best``, the best-model state ({"metric", "mode", "value", "epoch", ...});
``stopped_early``, the epoch at which early stopping ended the run, else None."""


def history_names(validation: bool) -> List[str]:
    """The metric names a run fills each epoch, with or without validation data."""
    names = ["loss", "accuracy", "lr"]
    return names + ["val_loss", "val_accuracy"] if validation else names


class EpochLoop:
    """Epochs of training steps over ``net`` (train mode, with a loss) and ``solver``.

    ``settings`` holds the fields of a checked training config that the loop reads:
    ``epochs``, ``seed``, ``out`` (None: nothing is written), ``force``, ``progress``,
    ``stop_on_nonfinite``, ``metrics``, ``tensorboard``, ``plot``, ``checkpoint``
    ({every, keep, best}) and ``best_metric`` (None: "val_accuracy" with validation data,
    else "loss"). ``train_loader`` has ``set_epoch(e)``, a settable ``position`` and
    ``len`` where it can; ``graph`` (the net's JSON dict, by default ``net.graph``) is what
    checkpoints and the deploy graph are made from.
    """

    def __init__(self, net: Any, solver: Any, train_loader: Any, settings: Dict[str, Any],
                 val_loader: Optional[Iterable] = None, schedule: Any = None,
                 callbacks: Sequence[Any] = (), graph: Optional[dict] = None,
                 roles: Any = None) -> None:
        self.net, self.solver, self.cfg = net, solver, settings
        self.ctx = net.ctx
        self.graph = graph if graph is not None else net.graph.to_dict()
        self.roles = roles or roles_of(self.graph)
        self.train_loader, self.val_loader, self.schedule = train_loader, val_loader, schedule
        self.per_iteration = isinstance(schedule, OneCycleLR)
        self.callbacks = list(callbacks)
        self.out = settings["out"]
        self.progress = settings["progress"]
        self.metrics = metrics.MetricsLog(self.out, settings["metrics"], settings["tensorboard"])
        metric = settings.get("best_metric") or ("val_accuracy" if val_loader is not None
                                                 else "loss")
        self.best = Best(metric)
        self.epoch, self.position, self.step = 0, 0, 0
        self.stopped_early = None
        self._partial = [0.0, 0, 0]  # loss sum, correct, seen: the epoch so far
        self._stop = False
        self._owns_out = False  # resumed, or out checked for an earlier run (run_folder)
        self._saved_step = None  # the step of the checkpoint written or loaded last

    @property
    def early_stopping(self):
        """The first EarlyStopping among the callbacks (its state goes into checkpoints)."""
        return next((cb for cb in self.callbacks if isinstance(cb, EarlyStopping)), None)

    def request_stop(self) -> None:
        """Make ``run()`` save a checkpoint after the current step and return."""
        self._stop = True

    def stop_requested(self) -> bool:
        """Whether a stop was asked for (a data-parallel Trainer asks all its ranks)."""
        return self._stop

    # ----- one batch, and validation
    def train_step(self, x: Any, y: Any) -> Tuple[float, int]:
        """One step on batch (x, y): zero-grad, forward, backward, update; -> (loss, correct
        labels)."""
        return train_step(self.net, self.solver, self.roles, x, y)

    def batch_totals(self, loss: float, correct: int, y: Any) -> Tuple[float, int, int, int]:
        """(mean loss, correct labels, labels, samples) of the step just taken on labels
        ``y``, over every process that took part: this one alone here; a data-parallel
        Trainer adds up its ranks'."""
        return loss, correct, y.size, len(y)

    def evaluate(self) -> Tuple[Optional[float], Optional[float]]:
        """(loss, accuracy) over the validation data, in predict mode; (None, None) without."""
        if self.val_loader is None:
            return None, None
        result = evaluate_batches(self.net, self.roles, self.val_loader,
                                  what="the validation data")
        return result["loss"], result["accuracy"]

    # ----- checkpoints and models
    def _state(self):
        early = self.early_stopping
        return {"epoch": self.epoch, "position": self.position, "step": self.step,
                "best": self.best.state_dict(), "partial": self._partial,
                "early_stopping": early.state_dict() if early else None,
                "schedule": self.schedule.state_dict() if self.schedule else None,
                "metrics": self.metrics.rows, "seed": self.cfg["seed"]}

    def save_checkpoint(self) -> str:
        """Write a checkpoint of weights, solver, schedule and position; returns its folder."""
        folder = checkpoint.save(os.path.join(self.out, "checkpoints"), self.step, self.net,
                                 self.solver, self._state(), self.graph,
                                 keep=self.cfg["checkpoint"]["keep"] or 1)
        self._saved_step = self.step
        return folder

    def restore_trackers(self, state: Dict[str, Any], where: str) -> None:
        """Set the best value and early-stopping counters from a checkpoint's ``state``
        (CheckpointError naming ``where`` when malformed). Where it has none for the metric
        followed now (a checkpoint of an older version, a config that changed the metric),
        they are recomputed from its metrics rows: the values the run would have had."""
        trackers = [("best", self.best, self.best.update)]
        early = self.early_stopping
        if early is not None:
            trackers.append(("early_stopping", early, early.on_epoch_end))
        for key, tracker, update in trackers:
            saved = state.get(key)
            if not tracker.follows(saved):
                log.info("%s: no %s state for %s; recomputed from the metrics rows",
                         where, key, tracker.metric)
                tracker.reset()
                for row in self.metrics.rows:
                    logs = logs_of(row)
                    if tracker.metric in logs:
                        update(row["epoch"], logs)
                continue
            try:
                tracker.load_state_dict(saved)
            except ValueError as err:
                raise CheckpointError("%s: %r: %s" % (where, key, err)) from None

    def _deploy(self, name):
        """The inference graph saved beside the weights ``name``.dlp."""
        return deploy_graph(self.graph)

    def _save_model(self, name):
        self.net.save_parameters(os.path.join(self.out, name + ".dlp"))
        deploy = self._deploy(name)
        atomic_write(os.path.join(self.out, name + "-deploy.json"),
                     lambda f: f.write(json.dumps(deploy, indent=1).encode()))

    def _prepare_out(self):
        """Claim the output folder (an earlier run there is refused unless ``force``)."""
        if not self._owns_out:
            run_folder.claim(self.out, force=self.cfg["force"])
            self._owns_out = True
        os.makedirs(self.out, exist_ok=True)

    # ----- the loop
    def run(self) -> TrainResult:
        """Train the remaining epochs (validating, logging, checkpointing) and save the
        model; returns a ``TrainResult``."""
        if self.out is not None:
            self._prepare_out()
        names = history_names(self.val_loader is not None)
        for cb in self.callbacks:
            if hasattr(cb, "on_train_begin"):
                cb.on_train_begin(self.net, names, self.epoch)
        while self.epoch < self.cfg["epochs"]:
            if any(getattr(cb, "should_stop", False) for cb in self.callbacks):
                self.stopped_early = self.epoch  # a resumed run that had stopped early
                break
            if self.stop_requested():  # asked between epochs (in validation or a save)
                return self._interrupted()
            bar = self._train_epoch()
            if bar is False:
                return self._interrupted()
            if self._end_epoch(bar):
                self.stopped_early = self.epoch
                break
        self._end_callbacks()
        if self.out is not None:
            self._save_model("model")
            if self.cfg["plot"]:
                metrics.plot(self.metrics.rows, os.path.join(self.out, "curves.png"))
        return self._result(False)

    def _interrupted(self):
        if self.out is not None and self._saved_step != self.step:
            self.ctx.finish()
            self.save_checkpoint()
        self._end_callbacks()
        return self._result(True)

    def _end_callbacks(self):
        logs = logs_of(self.metrics.rows[-1]) if self.metrics.rows else {}
        for cb in self.callbacks:
            if hasattr(cb, "on_train_end"):
                cb.on_train_end(self.net, logs)

    def _train_epoch(self):
        """The epoch's remaining batches; its progress bar (None without progress), or
        False when a stop was requested (after a step)."""
        self._started, self._images = time.perf_counter(), 0
        loader = self.train_loader
        loader.set_epoch(self.epoch)
        loader.position = self.position
        bar = self._bar(self.position)
        fresh, steps = self.position == 0, self.step
        p = self._partial  # loss and accuracy per label (one per image, T per text window)
        for x, y in loader:
            loss, correct = self.train_step(x, y)
            loss, correct, labels, images = self.batch_totals(loss, correct, y)
            self.position += 1
            self.step += 1
            if self.cfg["stop_on_nonfinite"] and not math.isfinite(loss):
                if bar is not None:
                    bar.close()
                raise NonFiniteError(self._nonfinite(loss))
            self._images += images
            p[0] += loss * labels
            p[1] += correct
            p[2] += labels
            if self.per_iteration and self.schedule:
                self.schedule.step()
            if bar is not None:
                bar.update(1)
                rate = self._images / (time.perf_counter() - self._started)
                bar.set_postfix(loss="%.4f" % (p[0] / p[2]), acc="%.3f" % (p[1] / p[2]),
                                img_s="%.0f" % rate)
            if self._stop:
                if bar is not None:
                    bar.close()
                return False
        if fresh and self.step == steps:
            if bar is not None:
                bar.close()
            raise ValueError("the training data gave no batches in epoch %d%s"
                             % (self.epoch + 1, ONCE))
        return bar

    def _end_epoch(self, bar):
        """Validation, metrics row, schedule, best model, callbacks, checkpoint; True when a
        callback stops training."""
        seconds = time.perf_counter() - self._started
        val_loss, val_acc = self.evaluate()
        p = self._partial
        row = {"epoch": self.epoch + 1, "train_loss": p[0] / max(p[2], 1),
               "train_acc": p[1] / max(p[2], 1), "val_loss": val_loss, "val_acc": val_acc,
               "lr": float(self.solver.lr), "seconds": seconds,
               "images_per_s": self._images / seconds if seconds > 0 else None}
        self.metrics.add(row)
        log.info("epoch %d: train loss %.4f acc %.4f%s", row["epoch"], row["train_loss"],
                 row["train_acc"], "" if val_acc is None else
                 ", val loss %.4f acc %.4f" % (val_loss, val_acc))
        if bar is not None:
            if val_acc is not None:
                bar.set_postfix(loss="%.4f" % row["train_loss"], acc="%.3f" % row["train_acc"],
                                val_loss="%.4f" % val_loss, val_acc="%.3f" % val_acc)
            bar.close()
        if self.schedule and not self.per_iteration:
            self.schedule.step(val_loss if isinstance(self.schedule, ReduceLROnPlateau) else None)
        logs = logs_of(row)
        if self.best.update(row["epoch"], logs) and self.out is not None \
                and self.cfg["checkpoint"]["best"]:
            self._save_model("best")
        stop = False
        for cb in self.callbacks:
            if hasattr(cb, "on_epoch_end") and cb.on_epoch_end(row["epoch"], logs):
                stop = True
        self.epoch, self.position, self._partial = self.epoch + 1, 0, [0.0, 0, 0]
        if self.out is not None and (self.epoch % self.cfg["checkpoint"]["every"] == 0
                                     or self.epoch == self.cfg["epochs"] or stop):
            self.save_checkpoint()
        return stop

    def _nonfinite(self, loss):
        batches = _length(self.train_loader)
        where = ("training loss is %s at epoch %d, step %d (batch %d%s in the epoch)"
                 % (loss, self.epoch + 1, self.step, self.position,
                    "" if batches is None else " of %d" % batches))
        return "%s; %s" % (where, self._nonfinite_advice())

    def _nonfinite_advice(self):
        return "lower the solver's lr or set its clip_norm and train afresh"

    def _bar(self, initial):
        if not self.progress:
            return None
        from tqdm.auto import tqdm
        return tqdm(total=_length(self.train_loader), initial=initial, unit="batch", leave=True,
                    desc="epoch %d/%d" % (self.epoch + 1, self.cfg["epochs"]))

    def _result(self, interrupted):
        last = self.metrics.rows[-1] if self.metrics.rows else {}
        best_row = next((r for r in self.metrics.rows if r["epoch"] == self.best.epoch), {})
        out = self.out
        plot = os.path.join(out, "curves.png") if out is not None else None
        model = os.path.join(out, "model.dlp") if out is not None else None
        return TrainResult(out, self.epoch, interrupted, last.get("val_acc"), last.get("val_loss"),
                           best_row.get("val_acc"), model, self.metrics.path,
                           plot if plot and os.path.exists(plot) else None,
                           self.best.state_dict(), self.stopped_early)


def _length(loader):
    try:
        return len(loader)
    except TypeError:
        return None

