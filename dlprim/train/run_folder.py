"""The output folder of a run: a new run never writes over an earlier one by accident.

A folder holds a run when it has any of the files a run writes (model, best model,
metrics, curves, a text vocabulary, checkpoints). Starting afresh there is refused with a
``RunExistsError`` unless the run is resumed (``--resume``) or overwritten
(``--force``, which first removes those files, and only those, so that checkpoints of
the two runs never mix).
"""
import logging
import os
import shutil

from ..errors import RunExistsError

__all__ = ["RUN_FILES", "run_files", "claim"]

log = logging.getLogger(__name__)

RUN_FILES = ("model.dlp", "model-deploy.json", "best.dlp", "best-deploy.json", "metrics.csv",
             "metrics.jsonl", "curves.png", "vocab.json", "tensorboard", "checkpoints")


def run_files(out):
    """The names of ``RUN_FILES`` present in ``out`` (an empty checkpoints folder is not)."""
    found = []
    for name in RUN_FILES:
        path = os.path.join(out, name)
        if os.path.isdir(path) and not os.path.islink(path):
            if os.listdir(path):
                found.append(name + "/")
        elif os.path.lexists(path):
            found.append(name)
    return found


def claim(out, resume=False, force=False):
    """Make ``out`` ready for a run: nothing to do when it holds none or the run is
    resumed; with ``force``, remove the earlier run's files; else RunExistsError."""
    found = [] if resume else run_files(out)
    if not found:
        return
    if not force:
        raise RunExistsError(
            "%s already holds a run (%s): continue it with --resume (\"resume\": true), "
            "or start afresh over it with --force (\"force\": true), or choose another --out"
            % (out, ", ".join(found)))
    log.warning("--force: removing the earlier run in %s (%s)", out, ", ".join(found))
    for name in found:
        path = os.path.join(out, name.rstrip("/"))
        if name.endswith("/"):
            shutil.rmtree(path)
        else:
            os.unlink(path)
