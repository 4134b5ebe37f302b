"""The training loop behind dlprim-train: a config made into a net, loaders, solver and
schedule, trained by the epoch loop that ``dlprim.fit`` runs too (``loop.EpochLoop``).

Resuming is exact: the batch order is a function of (seed, epoch), the weights, solver
moments and step count, schedule position and the position inside the epoch are all in
the checkpoint, and every kernel is deterministic, so an interrupted and resumed run ends
at the same weights as an uninterrupted one.
"""
import logging
import os
import signal
from typing import Any, Dict, Optional

from ..context import Context
from ..data import make_loader
from ..errors import CheckpointError, MissingCheckpointError
from ..lr_schedules import create_schedule
from ..net import TRAIN, Net
from ..solvers import create_solver
from . import checkpoint
from .callbacks import EarlyStopping
from .graphs import deploy_meta, training_graph, with_logits_output
from .loop import EpochLoop, TrainResult
from .steps import roles_of

log = logging.getLogger(__name__)


def _solver_args(cfg):
    args = dict(cfg)
    betas = args.pop("betas", None)
    if betas is not None:
        args["beta1"], args["beta2"] = betas
    return args


class Trainer(EpochLoop):
    """Build everything a config names; ``run()`` trains (the loop of ``EpochLoop``).
    ``request_stop()`` (what Ctrl-C calls) makes the loop save a checkpoint after the
    current step and return."""

    def __init__(self, config: Dict[str, Any], ctx: Any = None,
                 progress: Optional[bool] = None) -> None:
        cfg = config
        ctx = ctx or Context(cfg["device"])
        batch = cfg["batch"]
        graph = training_graph(cfg["net"], batch)
        roles = roles_of(graph)
        net = Net(ctx, with_logits_output(graph, roles.logits), mode=TRAIN, seed=cfg["seed"])
        data = cfg["data"]
        train_loader = make_loader(data["train"], batch, "data.train", train=True,
                                   seed=cfg["seed"])
        # a text vocabulary is the training data's: validation text is encoded with it
        self.vocab = getattr(train_loader.source, "vocab", None)
        val_loader = (make_loader(data["val"], batch, "data.val", train=False,
                                  vocab=self.vocab) if data.get("val") else None)
        solver = create_solver(net, _solver_args(cfg["solver"]))
        sched = dict(cfg["schedule"] or {})
        if sched.get("type") == "onecycle":
            sched["total_steps"] = cfg["epochs"] * len(train_loader)
        schedule = create_schedule(solver, sched) if sched else None
        early = cfg.get("early_stopping")
        callbacks = [EarlyStopping(restore_best=False, **early)] if early else []
        settings = dict(cfg, progress=cfg["progress"] if progress is None else progress)
        super().__init__(net, solver, train_loader, settings, val_loader=val_loader,
                         schedule=schedule, callbacks=callbacks, graph=graph, roles=roles)
        self._check_shapes()

    def _check_shapes(self):
        want = self.net.tensor(self.roles.data).shape[1:]
        for name, loader in (("data.train", self.train_loader), ("data.val", self.val_loader)):
            if loader is not None and tuple(loader.shape) != tuple(want):
                raise ValueError("%s: samples are %s, the net input '%s' wants %s"
                                 % (name, "x".join(map(str, loader.shape)), self.roles.data,
                                    "x".join(map(str, want))))
        classes = self.net.tensor(self.roles.logits).shape[1]
        n = self.train_loader.num_classes
        if n is not None and n > classes:
            raise ValueError("data.train: %d classes, the net's '%s' has %d outputs"
                             % (n, self.roles.logits, classes))

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
        self._partial = list(state["partial"])
        self.metrics.restore(state["metrics"])
        self.restore_trackers(state, where)
        self._owns_out, self._saved_step = True, self.step
        return folder

    def _prepare_out(self):
        super()._prepare_out()
        if self.vocab is not None:  # what turns the model's ids back into text
            self.vocab.save(os.path.join(self.out, "vocab.json"))

    def _deploy(self, name):
        # what dlprim-predict needs beside the net: the data's preprocessing, class names
        deploy = super()._deploy(name)
        labels = getattr(self.train_loader.source, "classes", None)
        deploy["meta"] = deploy_meta(self.cfg["data"], name + ".dlp", self.roles.data, labels)
        return deploy

    def run(self) -> TrainResult:
        """Train the remaining epochs (validating, logging, checkpointing, stopping early
        where the config says) and save the model; returns a ``TrainResult``."""
        return super().run()

    def _nonfinite_advice(self):
        root = os.path.join(self.out, "checkpoints")
        kept = ("the last checkpoint in %s is from before it" % root if checkpoint.folders(root)
                else "no checkpoint was written yet")
        # a resumed solver takes its lr from the checkpoint, so a lower lr needs a new run
        return ("%s; lower solver.lr or set solver.clip_norm and start afresh (--force), or "
                "set \"stop_on_nonfinite\": false to train on regardless" % kept)


def install_sigint(trainer):
    """First Ctrl-C: stop after the current step with a checkpoint. Second: abort."""
    def handler(signum, frame):
        signal.signal(signal.SIGINT, signal.default_int_handler)
        trainer.request_stop()
    return signal.signal(signal.SIGINT, handler)
