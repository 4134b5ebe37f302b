"""The training loop behind dlprim-train: a config made into a net, loaders, solver and
schedule, trained by the epoch loop that ``dlprim.fit`` runs too (``loop.EpochLoop``).

Resuming is exact: the batch order is a function of (seed, epoch), the weights, solver
moments and step count, schedule position and the position inside the epoch are all in
the checkpoint, and every kernel is deterministic, so an interrupted and resumed run ends
at the same weights as an uninterrupted one.

With a communicator of several ranks (``mpiexec -n N``) each rank trains on its part of
every global batch with the gradients averaged (``dlprim.distributed``; the pieces in
``parallel.py``); the metrics are those of all ranks, and only rank 0 writes files.
"""
import logging
import os
import signal
from typing import Any, Dict, Optional

from ..context import Context
from ..data import make_loader
from ..distributed import Communicator, ShardedLoader
from ..distributed.data_parallel import DataParallel
from ..errors import CheckpointError, MissingCheckpointError
from ..lr_schedules import create_schedule
from ..net import TRAIN, Net
from ..solvers import create_solver
from . import checkpoint, parallel
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
    current step and return.

    ``comm`` (a ``dlprim.distributed`` communicator; default: this process alone) with
    several ranks trains data-parallel: ``batch`` per rank, or the config's
    ``distributed.global_batch`` split over the ranks; the device is the config's or
    else ``comm.device``. Making it runs no collective, so every rank can agree on
    failures first; ``synchronize()`` (called by ``run`` and ``resume`` when not yet)
    then copies rank 0's parameters to all."""

    def __init__(self, config: Dict[str, Any], ctx: Any = None,
                 progress: Optional[bool] = None, comm: Optional[Communicator] = None) -> None:
        cfg = config
        self.comm = comm = Communicator() if comm is None else comm
        self.parallel, self._asked = None, False
        batch, self.global_batch = parallel.batch_sizes(cfg, comm.size)
        ctx = ctx or Context(cfg["device"] or (comm.device if comm.size > 1 else None))
        graph = training_graph(cfg["net"], batch)
        roles = roles_of(graph)
        net = Net(ctx, with_logits_output(graph, roles.logits), mode=TRAIN, seed=cfg["seed"],
                  precision=cfg.get("precision", "fp32"))
        data = cfg["data"]
        train_loader = make_loader(data["train"], batch, "data.train", train=True,
                                   seed=cfg["seed"])
        # a text vocabulary is the training data's: validation text is encoded with it
        self.vocab = getattr(train_loader.source, "vocab", None)
        val_loader = (make_loader(data["val"], batch, "data.val", train=False,
                                  vocab=self.vocab) if data.get("val") else None)
        if comm.size > 1:
            train_loader = ShardedLoader(train_loader, comm.rank, comm.size)
            val_loader = val_loader and ShardedLoader(val_loader, comm.rank, comm.size)
        solver = create_solver(net, _solver_args(cfg["solver"]))
        sched = dict(cfg["schedule"] or {})
        if sched.get("type") == "onecycle":
            sched["total_steps"] = cfg["epochs"] * len(train_loader)
        schedule = create_schedule(solver, sched) if sched else None
        early = cfg.get("early_stopping")
        callbacks = [EarlyStopping(restore_best=False, **early)] if early else []
        settings = dict(cfg, progress=cfg["progress"] if progress is None else progress)
        if comm.rank != 0:  # rank 0 writes and reports for all
            settings.update(out=None, progress=False)
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

    # ----- several ranks
    def synchronize(self) -> None:
        """Start data-parallel training: rank 0's parameters and statistics onto every
        rank (a collective: every rank calls it). Nothing to do on one rank."""
        if self.comm.size > 1 and self.parallel is None:
            bucket = int(self.cfg.get("distributed", {}).get("bucket_mb", 25) * 2 ** 20)
            self.parallel = DataParallel(self.net, self.solver, self.comm, max(bucket, 4))

    def train_step(self, x, y):
        if self.comm.size == 1:
            return super().train_step(x, y)
        self.synchronize()
        return parallel.train_step(self.net, self.parallel, self.roles, x, y)

    def batch_totals(self, loss, correct, y):
        if self.comm.size == 1:
            return super().batch_totals(loss, correct, y)
        # a stop asked on any rank (Ctrl-C reaches each at its own moment) stops all at
        # this same step, so that they leave the loop together
        total, correct, labels, images, asked = self.comm.sum_values(
            [loss * y.size, correct, y.size, len(y), float(self._asked)])
        self._stop = asked > 0
        return total / labels, int(correct), int(labels), int(images)

    def request_stop(self):
        if self.comm.size == 1:
            return super().request_stop()
        # the loop's stop flag changes only where the ranks agree on it (a signal may
        # come between an agreement and the loop's look at the flag)
        self._asked = True

    def stop_requested(self):
        if self.comm.size > 1:  # every rank leaves at the same point, or none does
            self._stop = self.comm.sum_values([float(self._asked)])[0] > 0
        return self._stop

    def evaluate(self):
        if self.comm.size == 1:
            return super().evaluate()
        # evaluation and every file saved after it use rank 0's BatchNorm statistics
        self.synchronize()
        self.parallel.sync_statistics()
        if self.val_loader is None:
            return None, None
        return parallel.evaluate(self.net, self.roles, self.val_loader, self.comm)

    def _interrupted(self):
        if self.parallel is not None:
            self.parallel.sync_statistics()
        return super()._interrupted()

    def _state(self):
        # the global batch turns the position into samples, so that a run resumed with
        # another number of ranks goes on from the same sample
        return dict(super()._state(), global_batch=self.global_batch)

    # ----- resuming
    def resume(self, path):
        """Load the checkpoint at ``path`` (a folder or an output directory); returns it.
        A missing, damaged or foreign checkpoint is a CheckpointError naming the file.
        With several ranks, rank 0 reads it and sends it to the others."""
        self.synchronize()
        folder, state, solver_state = parallel.from_root(self.comm, lambda: self._load(path))
        if self.parallel is not None:  # the last collective here: what follows may fail
            self.parallel.broadcast_parameters()
        if self.comm.rank != 0:
            self.solver.load_state_dict(solver_state)
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
        state["position"] = parallel.carry_position(state, self.global_batch, where)
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

    def _load(self, path):
        """(folder, training state, solver state) of the checkpoint at ``path``, loaded
        into this rank's net and solver."""
        folder = checkpoint.find(path)
        if folder is None:
            raise MissingCheckpointError(
                "%s: no checkpoint to resume from (no checkpoints/%s, no step-N folder); "
                "start afresh without --resume" % (path, checkpoint.LATEST))
        state = checkpoint.load(folder, self.net, self.solver)
        return folder, state, (self.solver.state_dict() if self.comm.size > 1 else None)

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
        self.synchronize()
        return super().run()

    def _nonfinite_advice(self):
        if self.out is None:  # a rank that writes nothing
            return super()._nonfinite_advice()
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
