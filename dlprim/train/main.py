"""Command line of dlprim-train (also ``python -m dlprim.train``)."""
import argparse
import os
import signal
import sys

from ..errors import Error
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


def _console_logging():
    """dlprim's log records (the epoch lines, warnings) on the console, as plain lines."""
    import logging
    logger = logging.getLogger("dlprim")
    if not any(isinstance(h, _Console) for h in logger.handlers):
        logger.addHandler(_Console())
    logger.setLevel(logging.INFO)


class _Console(__import__("logging").Handler):
    """Each record as a line on the current sys.stdout (looked up at every record, so a
    redirected stdout gets it)."""

    def emit(self, record):
        try:
            sys.stdout.write(self.format(record) + "\n")
            sys.stdout.flush()
        except Exception:  # a logging handler must not raise
            self.handleError(record)


def _fail(err, status):
    print("dlprim-train: %s" % err, file=sys.stderr)
    return status


def main(argv=None):
    """The dlprim-train program; returns the exit status (0 done, 1 training stopped by an
    error, 2 bad config, option, output folder or checkpoint, 130 interrupted)."""
    args = parse_args(argv)
    _console_logging()
    if args.example:  # the example's files are read from the package, its runs go here
        args.config = example_config(args.example)
        args.out = args.out or os.path.join("runs", args.example)
    try:
        cfg = apply_overrides(load_config(args.config), device=args.device, epochs=args.epochs,
                              batch=args.batch, out=args.out, resume=args.resume,
                              force=args.force or None)
    except ConfigError as err:
        return _fail(err, 2)
    if args.no_progress:
        cfg["progress"] = False
    resume = cfg.get("resume")
    try:
        from .run_folder import claim
        from .trainer import Trainer, install_sigint  # opens OpenCL: not needed above
        if not cfg["force"]:  # refuse before any device work; --force clears when training starts
            claim(cfg["out"], resume=bool(resume))
        trainer = Trainer(cfg)
        if resume:
            where = trainer.resume(cfg["out"] if resume is True else resume)
            print("resumed from %s (epoch %d, batch %d)" % (where, trainer.epoch + 1,
                                                            trainer.position), flush=True)
    except (Error, ValueError, FileNotFoundError) as err:
        return _fail(err, 2)
    except KeyboardInterrupt:
        return _fail("interrupted before training started; nothing was written", 130)
    previous = install_sigint(trainer)
    try:  # the handler stays while results are printed: a late Ctrl-C is no traceback
        print("training on %s" % trainer.ctx.name, flush=True)
        return _train(trainer, cfg)
    finally:
        signal.signal(signal.SIGINT, previous)


def _train(trainer, cfg):
    try:
        result = trainer.run()
    except Error as err:
        return _fail(err, 1)
    except KeyboardInterrupt:  # the second Ctrl-C
        return _fail("aborted; the last checkpoint in %s is intact, continue with --resume"
                     % os.path.join(os.path.abspath(cfg["out"]), "checkpoints"), 130)
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
