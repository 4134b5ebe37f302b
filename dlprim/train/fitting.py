"""``dlprim.fit`` and ``dlprim.evaluate``: a Net trained or scored on numpy arrays or a
loader in one call, by the epoch loop of dlprim-train (``loop.EpochLoop``).

Arrays are wrapped as ``ArraySource`` + ``BatchLoader`` (uint8 pixels scaled to [0, 1] as
everywhere in dlprim, labels checked against the net's classes); a loader is a
``BatchLoader`` or any iterable of (x, y) batches. Every batch is checked as
``net(...)`` checks its inputs (kinds of numbers, labels in range). The net gets its
batch size, mode and input shapes back afterwards; fit changes its weights (and
BatchNorm statistics), evaluate nothing.
"""
import contextlib
import sys
from typing import Any, Dict, Iterable, List, Optional, Sequence

import numpy as np

from ..data import ArraySource, BatchLoader
from ..lr_schedules import ReduceLROnPlateau
from ..net import TRAIN
from ..net import inputs as input_rules
from ..solvers import create_solver
from ..utils import is_int
from .callbacks import METRICS
from .config import DEFAULTS
from .loop import EpochLoop, history_names
from .steps import evaluate_batches, roles_of

__all__ = ["fit", "evaluate"]


def fit(net: Any, x: Optional[np.ndarray] = None, y: Optional[np.ndarray] = None,
        loader: Optional[Iterable] = None, epochs: int = 1, batch_size: int = 32,
        solver: Any = None, schedule: Any = None, validation: Any = None,
        callbacks: Sequence[Any] = (), shuffle: bool = True, seed: int = 0,
        progress: Optional[bool] = None, out: Optional[str] = None) -> Dict[str, List[float]]:
    """Train ``net`` for ``epochs`` and return its history: {"loss", "accuracy", "lr"} and,
    with ``validation``, {"val_loss", "val_accuracy"}, each a list with one value per
    epoch (per label: one per image, T per (N, T) target window).

    ``net``: a Net in train mode with a loss output (``SoftmaxWithLoss``, ``NLLLoss`` or
    ``MSELoss`` of the logits and a label input), e.g. ``Net(ctx, models.lenet())``.
    Data: ``x`` (N, ...) samples and ``y`` (N,) integer labels, batched by ``batch_size``
    and shuffled each epoch from ``seed`` (when ``shuffle``); or ``loader``, a
    ``BatchLoader`` (epoch e is its ``set_epoch(e)``) or any iterable of (x, y) batches
    that can be iterated once per epoch. Batches of any size, the last partial one
    included, re-plan the net. ``validation``: (x_val, y_val) or a loader, scored after
    each epoch in predict mode.

    ``solver``: a solver of this net; default ``Adam`` with PyTorch's defaults, as
    dlprim-train's. ``schedule``: a ``dlprim.lr_schedules`` schedule of that solver,
    stepped after each epoch (``OneCycleLR`` after each batch; ``ReduceLROnPlateau`` on
    the validation loss). ``callbacks``: objects with ``on_train_begin``, ``on_epoch_end``
    (True stops), ``on_train_end`` (see ``dlprim.train.callbacks``), e.g. ``EarlyStopping``.
    ``progress``: a bar per epoch; None shows them on a terminal or in a notebook.
    ``out``: a folder that gets what dlprim-train writes (metrics.csv, curves.png,
    checkpoints, model.dlp and best.dlp with their deploy graphs); a folder holding an
    earlier run is refused (RunExistsError). A loss that becomes NaN or infinite stops
    training with a NonFiniteError naming the epoch and step.
    """
    roles = _roles(net, training=True)
    if not is_int(epochs) or epochs < 1:
        raise ValueError("fit: epochs must be a positive integer, got %r" % (epochs,))
    train = _batches(net, roles, x, y, loader, batch_size, shuffle, seed, "fit")
    val = None
    if validation is not None:
        if isinstance(validation, tuple) and len(validation) == 2:
            val = _batches(net, roles, validation[0], validation[1], None, batch_size, False,
                           seed, "fit validation")
        else:
            val = _batches(net, roles, None, None, validation, batch_size, False, seed,
                           "fit validation")
    if isinstance(schedule, ReduceLROnPlateau) and val is None:
        raise ValueError("fit: ReduceLROnPlateau steps on the validation loss; give validation=")
    if schedule is not None and solver is not None and schedule.solver is not solver:
        raise ValueError("fit: the schedule sets the lr of another solver than solver=")
    if solver is None:  # the schedule's, else dlprim-train's default: Adam, PyTorch's numbers
        solver = schedule.solver if schedule is not None else create_solver(net, {})
    settings = dict(DEFAULTS, epochs=epochs, seed=seed, out=out, force=False,
                    progress=_show_progress() if progress is None else bool(progress))
    with _borrowed(net, roles):
        loop = EpochLoop(net, solver, train, settings, val_loader=val, schedule=schedule,
                         callbacks=callbacks, roles=roles)
        loop.run()
    return {name: [row[METRICS[name]] for row in loop.metrics.rows]
            for name in history_names(val is not None)}


def evaluate(net: Any, x: np.ndarray, y: np.ndarray, batch_size: int = 32,
             top_k: Sequence[int] = (1, 5)) -> Dict[str, float]:
    """Loss and accuracy of ``net`` over every sample of (x, y), in predict mode
    (BatchNorm on its running statistics, no dropout; no parameter or statistic changes):
    {"loss", "accuracy", "top<k>_accuracy" for each k > 1 of ``top_k`` up to the number of
    classes}. Each batch counts by its size, so the numbers are those of one pass over
    all samples; ``net`` is any Net with a loss output (see ``fit``)."""
    roles = _roles(net, training=False)
    ks = list(top_k)
    if not ks or not all(is_int(k) and k >= 1 for k in ks):
        raise ValueError("evaluate: top_k must be positive integers, got %r" % (top_k,))
    classes = net.tensor(roles.logits).shape[-1]
    batches = _batches(net, roles, x, y, None, batch_size, False, 0, "evaluate")
    with _borrowed(net, roles):
        return evaluate_batches(net, roles, batches, [k for k in ks if k <= classes])


def _roles(net, training):
    if not hasattr(net, "graph") or not hasattr(net, "tensor"):
        raise TypeError("a dlprim Net is needed, got %s" % type(net).__name__)
    roles = roles_of(net.graph.to_dict())
    if training and net.mode != TRAIN:
        raise ValueError("fit: the net is in mode %r; training needs mode %r (net.mode = "
                         "dp.TRAIN)" % (net.mode, TRAIN))
    return roles


def _batches(net, roles, x, y, loader, batch_size, shuffle, seed, who):
    """The batches of (x, y) arrays or of ``loader``, checked for the net (``_Checked``)."""
    if (loader is None) == (x is None and y is None):
        raise ValueError("%s: give x and y, or a loader (one of them)" % who)
    if loader is None:
        if x is None or y is None:
            raise ValueError("%s: give both x and y" % who)
        if not is_int(batch_size) or batch_size < 1:
            raise ValueError("%s: batch_size must be a positive integer, got %r"
                             % (who, batch_size))
        loader = _array_loader(net, roles, x, y, batch_size, shuffle, seed, who)
        sample = np.shape(x)[1:]
    else:
        sample = None
    return _Checked(net, roles, loader, sample, who)


def _array_loader(net, roles, x, y, batch_size, shuffle, seed, who):
    """x as one row per sample in an ArraySource (its pixel scaling and label checks)."""
    x = np.asarray(x)
    if net.tensor(roles.data).dtype.kind != "f":
        raise ValueError("%s: x, y arrays are float samples with a label each; the net input "
                         "'%s' is %s: pass loader= (any iterable of (x, y) batches)"
                         % (who, roles.data, net.tensor(roles.data).dtype))
    if x.ndim < 2:
        raise ValueError("%s: x must be (N, ...) samples, got shape %s" % (who, x.shape))
    classes = net.tensor(roles.logits).shape[-1]
    source = ArraySource(x.reshape(len(x), 1, 1, -1), y, num_classes=classes, name=who + " x, y")
    return BatchLoader(source, batch_size, shuffle=shuffle, seed=seed)


class _Checked:
    """A loader's batches as the net takes them: checked by the rules of ``net(...)``
    (numbers of the input's kind, labels in range), converted to the inputs' dtypes, the
    samples of arrays given as rows shaped back (``sample``); the loader's ``set_epoch``,
    ``position`` and ``len`` passed through where it has them."""

    def __init__(self, net, roles, loader, sample, who):
        self.net, self.roles, self.loader, self.sample, self.who = net, roles, loader, sample, who
        self.readers = input_rules.readers(net.graph, net.layers)
        want = tuple(net.tensor(roles.data).shape[1:])
        if sample is not None and tuple(sample) != want and (1,) + tuple(sample) == want:
            self.sample = want  # (N, H, W) images for a (N, 1, H, W) input, as ArraySource
        self.want = want

    def __len__(self):
        return len(self.loader)

    def set_epoch(self, epoch):
        if hasattr(self.loader, "set_epoch"):
            self.loader.set_epoch(epoch)

    @property
    def position(self):
        return getattr(self.loader, "position", 0)

    @position.setter
    def position(self, value):
        if hasattr(self.loader, "position"):
            self.loader.position = value
        elif value:
            raise ValueError("%s: this loader cannot start inside an epoch" % self.who)

    def __iter__(self):
        roles = self.roles
        for item in self.loader:
            try:
                x, y = item
            except (TypeError, ValueError):
                raise ValueError("%s: the loader must give (x, y) pairs, got %s"
                                 % (self.who, type(item).__name__)) from None
            x = np.asarray(x)
            if self.sample is not None:
                x = x.reshape((x.shape[0],) + tuple(self.sample))
            if tuple(x.shape[1:]) != self.want:
                raise ValueError("%s: samples are %s, the net input '%s' wants %s"
                                 % (self.who, "x".join(map(str, x.shape[1:])), roles.data,
                                    "x".join(map(str, self.want))))
            arrays = input_rules.as_arrays({roles.data: x, roles.label: y}, self.net.graph,
                                           self.readers)
            if arrays[roles.label].shape[:1] != x.shape[:1]:
                raise ValueError("%s: a batch of %d samples has labels of shape %s"
                                 % (self.who, x.shape[0], arrays[roles.label].shape))
            input_rules.check_values(arrays, self.readers)
            yield tuple(input_rules.converted(n, arrays[n], self.net.tensor(n).dtype, self.readers)
                        for n in (roles.data, roles.label))


@contextlib.contextmanager
def _borrowed(net, roles):
    """Run with the logits readable after each step (a net whose logits are no output
    keeps every activation meanwhile: its memory plan may reuse theirs); then give the
    net back its mode and input shapes."""
    mode = net.mode
    shapes = {name: tuple(net.tensor(name).shape) for name in net.input_names}
    kept = roles.logits not in net.output_names and not net.keep_intermediate_tensors
    if kept:
        net.keep_intermediate_tensors = True
    try:
        yield
    finally:
        if net.mode != mode:
            net.mode = mode
        if any(tuple(net.tensor(n).shape) != s for n, s in shapes.items()):
            net.reshape(shapes)
        if kept:
            net.keep_intermediate_tensors = False


def _show_progress():
    """Progress bars by default on a terminal or in a notebook, not in logs or pipes."""
    try:
        if sys.stderr.isatty():
            return True
    except (AttributeError, ValueError):
        pass
    ipython = sys.modules.get("IPython")
    return bool(ipython is not None and getattr(ipython, "get_ipython", lambda: None)())
