"""Callbacks of the training loop (``dlprim.fit`` and dlprim-train), early stopping, and
``Best``: the best value of a metric so far, which early stopping and the choice of the
best model (``best.dlp``) share.

A callback is any object with some of these methods; the loop calls those it has:

- ``on_train_begin(net, metrics, epoch)``: before training; ``metrics`` are the names
  this run fills each epoch (``loss``, ``accuracy``, ``lr``, and ``val_loss``,
  ``val_accuracy`` with validation data), ``epoch`` the epochs already done: 0 for a new
  run, more for a resumed one, whose callbacks keep the state the checkpoint gave them.
- ``on_epoch_end(epoch, logs) -> bool``: after each epoch and its validation; ``epoch``
  counts the epochs done (1 after the first, as the ``epoch`` column of metrics.csv),
  ``logs`` maps those names to the epoch's values. A true return ends training after
  this epoch.
- ``on_train_end(net, logs)``: once training ends (all epochs, stopped early or
  interrupted), before the final model is saved; ``logs`` are the last epoch's.

Pure Python: the training config checks import it without OpenCL.
"""
import logging
import math
from typing import Any, Dict, Optional, Sequence

from ..utils import is_int

__all__ = ["METRICS", "MONITORED", "Callback", "Best", "EarlyStopping", "logs_of",
           "metric_problem"]

log = logging.getLogger(__name__)

# the name a history, a callback or a config uses -> the column of metrics.csv
METRICS = {"loss": "train_loss", "accuracy": "train_acc", "val_loss": "val_loss",
           "val_accuracy": "val_acc", "lr": "lr"}
MONITORED = ("loss", "accuracy", "val_loss", "val_accuracy")  # what a "best" can follow


def logs_of(row: Dict[str, Any]) -> Dict[str, float]:
    """{metric name: value} of one metrics.csv row (dict), values that are None left out."""
    return {name: row[column] for name, column in METRICS.items() if row.get(column) is not None}


def metric_problem(name: Any) -> Optional[str]:
    """What is wrong with ``name`` as a metric to follow, or None."""
    if name not in MONITORED:
        hint = [m for m in MONITORED if METRICS[m] == name]
        return "must be one of %s, got %r%s" % (", ".join(map(repr, MONITORED)), name,
                                                " (did you mean %r?)" % hint[0] if hint else "")
    return None


def _direction(metric, mode):
    """"min" or "max": "auto" makes losses smaller-is-better, accuracies larger."""
    if mode == "auto":
        return "min" if metric.endswith("loss") else "max"
    return mode


class Callback:
    """Base with methods that do nothing; subclass it and override the ones you need (or
    write any object with those methods: the loop needs no base class)."""

    def on_train_begin(self, net: Any, metrics: Sequence[str], epoch: int) -> None:
        """Training starts after ``epoch`` epochs done (0 for a new run)."""

    def on_epoch_end(self, epoch: int, logs: Dict[str, float]) -> bool:
        """Epoch ``epoch`` (1-based) ended with ``logs``; return True to stop training."""
        return False

    def on_train_end(self, net: Any, logs: Dict[str, float]) -> None:
        """Training ended; ``logs`` are the last epoch's."""


class Best:
    """The best value of ``metric`` so far and the epoch it came at; a value counts as
    better when it beats the best by more than ``min_delta`` (smaller for ``mode`` "min",
    larger for "max"; "auto" takes min for losses, max for accuracies). NaN or infinite
    values never count as better."""

    def __init__(self, metric: str, mode: str = "auto", min_delta: float = 0.0) -> None:
        problem = metric_problem(metric)
        if problem:
            raise ValueError("metric: %s" % problem)
        self.metric, self.mode, self.min_delta = metric, _direction(metric, mode), float(min_delta)
        self.reset()

    def reset(self):
        """Forget every value seen."""
        self.value = self.epoch = None

    def follows(self, state):
        """Whether ``state`` (a ``state_dict()``) is of this metric and direction."""
        return (isinstance(state, dict)
                and (state.get("metric"), state.get("mode")) == (self.metric, self.mode))

    def __repr__(self):
        return "Best(%r, %s, value %r at epoch %r)" % (self.metric, self.mode, self.value,
                                                        self.epoch)

    def better(self, value):
        """Whether ``value`` beats the best so far (always, for the first finite value)."""
        if value is None or not math.isfinite(value):
            return False
        if self.value is None:
            return True
        if self.mode == "min":
            return value < self.value - self.min_delta
        return value > self.value + self.min_delta

    def update(self, epoch: int, logs: Dict[str, float]) -> bool:
        """Take epoch ``epoch``'s ``logs``; True when its value is the new best."""
        if self.metric not in logs:
            raise ValueError("%r is not among this run's metrics (%s)%s"
                             % (self.metric, ", ".join(sorted(logs)),
                                "; it needs validation data" if self.metric.startswith("val_")
                                else ""))
        value = logs[self.metric]
        if not self.better(value):
            return False
        self.value, self.epoch = float(value), int(epoch)
        return True

    def state_dict(self):
        """The metric, direction, min_delta, best value and its epoch (JSON-ready)."""
        return {"metric": self.metric, "mode": self.mode, "min_delta": self.min_delta,
                "value": self.value, "epoch": self.epoch}

    def load_state_dict(self, state):
        """Continue from a ``state_dict()`` of the same metric and direction (ValueError
        otherwise: its best value would mean something else)."""
        if not self.follows(state):
            raise ValueError("the state is not of %r (%s): %r" % (self.metric, self.mode, state))
        value, epoch = state.get("value"), state.get("epoch")
        if (value is None) != (epoch is None) or (value is not None and not (
                isinstance(value, (int, float)) and math.isfinite(value) and is_int(epoch))):
            raise ValueError("the best value and epoch must be a finite number and an "
                             "integer (or both null), got %r and %r" % (value, epoch))
        self.value = None if value is None else float(value)
        self.epoch = epoch


class EarlyStopping(Callback):
    """Stop training when ``monitor`` has not improved for ``patience`` epochs.

    An epoch improves when its ``monitor`` value beats the best so far by more than
    ``min_delta`` (``mode`` "min" or "max"; "auto": min for losses, max for accuracies;
    see ``Best``). After ``patience`` epochs in a row without improvement (``patience``
    0: the first one), ``on_epoch_end`` asks the loop to stop. With ``restore_best`` the
    net ends training with the weights (and BatchNorm statistics) of the best epoch,
    kept on the host each time one improves. ``monitor`` is one of ``MONITORED``:
    "loss", "accuracy", "val_loss", "val_accuracy".

    ``state_dict()``/``load_state_dict()`` carry the counters through a checkpoint, so a
    resumed run stops where the uninterrupted one would have.
    """
    OPTIONS = {"monitor": "val_loss", "patience": 5, "min_delta": 0.0, "mode": "auto"}

    def __init__(self, monitor: str = "val_loss", patience: int = 5, min_delta: float = 0.0,
                 mode: str = "auto", restore_best: bool = True) -> None:
        found = self.problems(dict(monitor=monitor, patience=patience, min_delta=min_delta,
                                   mode=mode))
        if not isinstance(restore_best, bool):
            found.append(("restore_best", "must be True or False, got %r" % (restore_best,)))
        if found:
            raise ValueError("EarlyStopping: %s %s" % found[0])
        self.monitor, self.patience, self.min_delta, self.mode = monitor, patience, min_delta, mode
        self.restore_best = restore_best
        self._net = None
        self.reset()

    @classmethod
    def problems(cls, options):
        """[(option, what is wrong)] of ``options`` (OPTIONS' names); empty when all is
        well. Construction raises the first; dlprim-train's config check reports each."""
        found = []
        problem = metric_problem(options.get("monitor"))
        if problem:
            found.append(("monitor", problem))
        patience = options.get("patience")
        if not is_int(patience) or patience < 0:
            found.append(("patience", "must be an integer >= 0, got %r" % (patience,)))
        delta = options.get("min_delta")
        if (not isinstance(delta, (int, float)) or isinstance(delta, bool)
                or not math.isfinite(delta) or delta < 0):
            found.append(("min_delta", "must be a finite number >= 0, got %r" % (delta,)))
        if options.get("mode") not in ("auto", "min", "max"):
            found.append(("mode", 'must be "auto", "min" or "max", got %r'
                          % (options.get("mode"),)))
        return found

    def __repr__(self):
        return ("EarlyStopping(monitor=%r, patience=%d, min_delta=%r, mode=%r, restore_best=%r;"
                " best %r at epoch %r, %d epochs without improvement)"
                % (self.monitor, self.patience, self.min_delta, self.mode, self.restore_best,
                   self.best.value, self.best.epoch, self.wait))

    def reset(self):
        """Forget every epoch seen (a new run starts from here)."""
        self.best = Best(self.monitor, self.mode, self.min_delta)
        self.wait, self.stopped_epoch, self._last_epoch = 0, None, None
        self._weights = None

    metric = property(lambda self: self.monitor, doc="The metric followed (``monitor``).")

    def follows(self, state):
        """Whether ``state`` (a ``state_dict()``) is of this monitor and direction."""
        return isinstance(state, dict) and self.best.follows(state.get("best"))

    @property
    def should_stop(self):
        """True once ``patience`` epochs in a row (at least one) did not improve."""
        return self.wait > 0 and self.wait >= self.patience

    def on_train_begin(self, net: Any, metrics: Sequence[str], epoch: int) -> None:
        if self.monitor not in metrics:
            raise ValueError("EarlyStopping: monitor %r is not a metric of this run (it has "
                             "%s)%s" % (self.monitor, ", ".join(metrics),
                                        "; give validation data or monitor %r"
                                        % self.monitor[4:] if self.monitor.startswith("val_")
                                        else ""))
        self._net = net
        if epoch == 0:
            self.reset()

    def on_epoch_end(self, epoch: int, logs: Dict[str, float]) -> bool:
        self._last_epoch = epoch
        if self.best.update(epoch, logs):
            self.wait = 0
            if self.restore_best and self._net is not None:
                self._weights = self._net.get_parameters()
            return False
        self.wait += 1
        if not self.should_stop:
            return False
        self.stopped_epoch = epoch
        log.info("early stopping after epoch %d: %s has not improved on %s (epoch %s) for "
                 "%d epoch%s", epoch, self.monitor, "n/a" if self.best.value is None else
                 "%.6g" % self.best.value, self.best.epoch, self.wait,
                 "" if self.wait == 1 else "s")
        return True

    def on_train_end(self, net: Any, logs: Dict[str, float]) -> None:
        if (self.restore_best and self._weights is not None
                and self.best.epoch != self._last_epoch):
            net.set_parameters(self._weights)
            log.info("restored the weights of epoch %d (best %s %.6g)", self.best.epoch,
                     self.monitor, self.best.value)

    def state_dict(self):
        """The best value and epoch, the epochs without improvement, the epoch it stopped
        at (None while it has not): what a resumed run needs (JSON-ready; the kept
        weights are not part of it)."""
        return {"best": self.best.state_dict(), "wait": self.wait,
                "stopped_epoch": self.stopped_epoch}

    def load_state_dict(self, state):
        """Continue from a ``state_dict()``; ValueError (changing nothing) when it follows
        another metric or is malformed."""
        if not isinstance(state, dict):
            raise ValueError("must be an object, got %r" % (state,))
        best = Best(self.monitor, self.mode, self.min_delta)
        best.load_state_dict(state.get("best"))
        wait, stopped = state.get("wait"), state.get("stopped_epoch")
        if not is_int(wait) or wait < 0 or not (stopped is None or is_int(stopped)):
            raise ValueError("'wait' must be an integer >= 0 and 'stopped_epoch' an integer "
                             "or null, got %r and %r" % (wait, stopped))
        self.best, self.wait, self.stopped_epoch = best, wait, stopped
        self._last_epoch = None
