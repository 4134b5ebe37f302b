"""Command line of dlprim-train (also ``python -m dlprim.train``).

Under an MPI launcher (``mpiexec -n N dlprim-train config.json``) every rank runs this
program: they agree on any setup failure before the first collective (rank 0 reports
it, all exit with its status), only rank 0 prints and writes, and a failure during
training on any rank aborts the whole job (MPI_Abort) rather than leave the others
waiting; docs/distributed.md.
"""
import argparse
import logging
import os
import signal
import sys

from ..core.precision import PRECISIONS
from ..distributed.comm import DistributedError, init
from ..errors import Error, NonFiniteError
from .config import ConfigError, apply_overrides, load_config


def parse_args(argv):
    """The parsed command line of dlprim-train."""
    p = argparse.ArgumentParser(prog="dlprim-train",
                                description="Train a network from a JSON config (docs/train.md).")
    p.add_argument("config", nargs="?", help="training config (JSON)")
    p.add_argument("--example", choices=EXAMPLES,
                   help="train an example that comes with dlprim instead (its config and "
                        "data are in the package; output in ./runs/NAME unless --out)")
    p.add_argument("--device", help='OpenCL device: "cpu", "gpu", "P:D" or an index')
    p.add_argument("--epochs", type=int)
    p.add_argument("--batch", type=int)
    p.add_argument("--precision", choices=PRECISIONS,
                   help="fp32 (default); tf32: TF32 products on tensor cores; fp16: half "
                        "activations, float32 parameters; bf16: bfloat16 activations "
                        "(docs/precision.md)")
    p.add_argument("--out", help="output folder (model, checkpoints, metrics, plot)")
    p.add_argument("--resume", nargs="?", const=True,
                   help="continue from the latest checkpoint in --out, or from this path")
    p.add_argument("--force", action="store_true",
                   help="start afresh even where --out holds an earlier run (its files are removed)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    args = p.parse_args(argv)
    if (args.config is None) == (args.example is None):
        p.error("give a config file or --example NAME (one of them)")
    return args


EXAMPLES = ("mnist", "charlm")  # packaged as dlprim.examples.<name> (examples/ in the source)


def example_config(name):
    """The path of the packaged example ``name``'s config.json."""
    from importlib.resources import files
    return str(files("dlprim.examples." + name) / "config.json")


def _console_logging(quiet=False):
    """dlprim's log records (the epoch lines, warnings) on the console, as plain lines;
    ``quiet`` (ranks other than 0, which report for all): warnings and errors only."""
    logger = logging.getLogger("dlprim")
    if not any(isinstance(h, _Console) for h in logger.handlers):
        logger.addHandler(_Console())
    logger.setLevel(logging.WARNING if quiet else logging.INFO)


class _Console(logging.Handler):
    """Each record as a line: the epoch lines (INFO) on the current sys.stdout, warnings
    and errors on sys.stderr, so output a program writes to stdout (dlprim-predict's JSON,
    in the same process) stays clean; both looked up at every record, so redirected
    streams get them."""

    def emit(self, record):
        try:
            stream = sys.stderr if record.levelno >= logging.WARNING else sys.stdout
            stream.write(self.format(record) + "\n")
            stream.flush()
        except Exception:  # a logging handler must not raise
            self.handleError(record)


def _fail(err, status):
    print("dlprim-train: %s" % err, file=sys.stderr)
    return status


def _failure(err, status):
    """This rank's (status, message) for the setup agreement; None as the message for an
    error that only repeats rank 0's (rank 0 reports it)."""
    return (status, None if getattr(err, "from_rank", None) is not None else str(err))


def _agreed(comm, failure):
    """0 when no rank failed; else the first failure's status, rank 0 having printed
    each distinct message once (naming the ranks where not all of them had it)."""
    from .parallel import failures
    found = failures(comm, failure)
    if not found:
        return 0
    if comm.rank == 0:
        messages = {}
        for rank, _, message in found:
            if message is not None:
                messages.setdefault(message, []).append(rank)
        for message, ranks in messages.items():
            who = ("" if len(ranks) == comm.size else
                   "rank%s %s: " % ("s" if len(ranks) > 1 else "", ", ".join(map(str, ranks))))
            _fail(who + message, 0)
    return found[0][1]


def main(argv=None):
    """The dlprim-train program; returns the exit status (0 done, 1 training stopped by an
    error, 2 bad config, option, output folder or checkpoint, 130 interrupted)."""
    logger = logging.getLogger("dlprim")
    level, handlers = logger.level, list(logger.handlers)
    try:
        return _main(argv)
    finally:  # the console lines end with the program: another run in this process
        for handler in logger.handlers[:]:  # (dlprim-predict's JSON on stdout) gets none
            if handler not in handlers:
                logger.removeHandler(handler)
        logger.setLevel(level)


def _main(argv):
    args = parse_args(argv)
    try:
        comm = init()  # the MPI job this process is a rank of, or itself alone
    except DistributedError as err:
        return _fail(err, 2)
    leader = comm.rank == 0
    _console_logging(quiet=not leader)
    if args.example:  # the example's files are read from the package, its runs go here
        args.config = example_config(args.example)
        args.out = args.out or os.path.join("runs", args.example)
    failure, trainer = None, None
    try:
        cfg = apply_overrides(load_config(args.config), device=args.device, epochs=args.epochs,
                              batch=args.batch, out=args.out, resume=args.resume,
                              force=args.force or None, precision=args.precision)
        if args.no_progress:
            cfg["progress"] = False
        resume = cfg.get("resume")
        from .run_folder import claim
        from .trainer import Trainer, install_sigint  # opens OpenCL: not needed above
        if leader and not cfg["force"]:  # refuse before device work; --force clears at start
            claim(cfg["out"], resume=bool(resume))
        trainer = Trainer(cfg, comm=comm)
    except (Error, ValueError, FileNotFoundError) as err:
        failure = _failure(err, 2)
    except KeyboardInterrupt:
        failure = (130, "interrupted before training started; nothing was written")
    status = _agreed(comm, failure)  # before the first collective: no rank waits alone
    if status:
        return status
    try:
        if resume:
            where = trainer.resume(cfg["out"] if resume is True else resume)
            if leader:
                print("resumed from %s (epoch %d, batch %d)" % (where, trainer.epoch + 1,
                                                                trainer.position), flush=True)
        else:
            trainer.synchronize()
    except (Error, ValueError, FileNotFoundError) as err:
        failure = _failure(err, 2)
    status = _agreed(comm, failure)
    if status:
        return status
    previous = install_sigint(trainer)
    try:  # the handler stays while results are printed: a late Ctrl-C is no traceback
        if leader:
            print("training on %s%s" % (trainer.ctx.name, "" if comm.size == 1 else
                                        ", %d ranks (global batch %d)"
                                        % (comm.size, trainer.global_batch)), flush=True)
        return _train(trainer, cfg, comm)
    finally:
        signal.signal(signal.SIGINT, previous)


def _abort(comm, err, status):
    """Print this rank's failure and end every rank of the job: the others would wait
    for it at their next collective."""
    _fail("rank %d of %d: %s; aborting all ranks" % (comm.rank, comm.size, err), status)
    comm.abort(status)


def _train(trainer, cfg, comm):
    try:
        result = trainer.run()
    except NonFiniteError as err:  # the loss of all ranks: every rank stops at this step
        return _fail(err, 1) if comm.rank == 0 else 1
    except Error as err:
        if comm.size > 1:
            _abort(comm, err, 1)
        return _fail(err, 1)
    except KeyboardInterrupt:  # the second Ctrl-C
        message = ("aborted; the last checkpoint in %s is intact, continue with --resume"
                   % os.path.join(os.path.abspath(cfg["out"]), "checkpoints"))
        if comm.size > 1:
            _abort(comm, message, 130)
        return _fail(message, 130)
    if comm.rank != 0:
        return 130 if result.interrupted else 0
    out = os.path.abspath(result.out_dir)
    if result.interrupted:
        print("interrupted: checkpoint saved in %s; continue with --resume" %
              os.path.join(out, "checkpoints"))
        return 130
    print("validation accuracy: %s" % ("n/a" if result.val_acc is None else "%.4f" % result.val_acc))
    if result.stopped_early is not None:
        print("stopped early after epoch %d (early_stopping)" % result.stopped_early)
    print("model:       %s (deploy graph %s)" % (result.model, os.path.join(out, "model-deploy.json")))
    best = result.best
    print("best model:  %s%s" % (os.path.join(out, "best.dlp"), "" if best["epoch"] is None else
                                 " (epoch %d, %s %.4f)" % (best["epoch"], best["metric"],
                                                           best["value"])))
    print("checkpoints: %s" % os.path.join(out, "checkpoints"))
    print("metrics:     %s" % result.metrics)
    print("plot:        %s" % (result.plot or "not written (install the 'plot' extra: matplotlib)"))
    return 0
