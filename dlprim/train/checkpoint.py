"""Checkpoints written so that a crash at any moment leaves the previous one usable.

A checkpoint is a folder ``checkpoints/step-<N>/`` (weights.dlp, solver.npz, state.json,
net.json). Each file is fsynced, the folder is written under a temporary name and renamed
into place whole, then the pointer file ``checkpoints/latest.json`` is replaced
atomically. A folder name is never reused (a second save of step N, as when a run stopped
at the end of an epoch is resumed, goes to ``step-<N>-1``), so the folder the pointer
names is never removed or half rewritten while it names it.

Readers follow the pointer. When it is missing, damaged, or names a folder that is gone
or incomplete (a kill between the rename and the pointer's update, a hand edit), they
fall back to the newest complete folder and log a warning. Damage is a
``CheckpointError`` naming the file and what is wrong in it.
"""
import json
import logging
import math
import os
import re
import shutil
import zipfile

from ..errors import CheckpointError, Error, MissingCheckpointError
from ..utils import atomic_write, fsync_dir

__all__ = ["save", "find", "load", "load_state", "folders", "LATEST", "FILES"]

log = logging.getLogger(__name__)

LATEST = "latest.json"
FILES = ("weights.dlp", "solver.npz", "state.json", "net.json")
_NAME = re.compile(r"^step-(\d+)(?:-(\d+))?$")


def _write_json(path, obj):
    atomic_write(path, lambda f: f.write(json.dumps(obj, indent=1, sort_keys=True).encode()))


def _key(name):
    m = _NAME.match(name)
    return (int(m.group(1)), int(m.group(2) or 0))


def folders(root):
    """The checkpoint folder names under ``root``, oldest first (by step, then save)."""
    if not os.path.isdir(root):
        return []
    return sorted((n for n in os.listdir(root) if _NAME.match(n)
                   and os.path.isdir(os.path.join(root, n))), key=_key)


def _free_name(root, step):
    name, again = "step-%08d" % step, 0
    while os.path.lexists(os.path.join(root, name)):
        again += 1
        name = "step-%08d-%d" % (step, again)
    return name


def save(root, step, net, solver, state, graph, keep=2):
    """Write checkpoint number ``step`` under ``root`` and point ``latest.json`` at it."""
    os.makedirs(root, exist_ok=True)
    name = _free_name(root, step)
    tmp = os.path.join(root, ".%s.tmp" % name)
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    net.save_parameters(os.path.join(tmp, "weights.dlp"))
    solver.save_state(os.path.join(tmp, "solver.npz"))
    _write_json(os.path.join(tmp, "state.json"), state)
    _write_json(os.path.join(tmp, "net.json"), graph)
    final = os.path.join(root, name)
    os.replace(tmp, final)
    fsync_dir(root)  # the folder's rename reaches the disk before the pointer names it
    _write_json(os.path.join(root, LATEST), {"checkpoint": name, "step": step})
    _prune(root, keep, name)
    return final


def _prune(root, keep, current):
    """Keep ``current`` and the ``keep - 1`` folders before it. Folders after it are from
    a line of training that a resume from an older checkpoint abandoned, and temporary
    folders and files (".*.tmp") are from saves that a crash cut short: all go."""
    names = folders(root)
    older = [n for n in names if _key(n) < _key(current)]
    doomed = older[:max(len(older) - max(keep - 1, 0), 0)]
    doomed += [n for n in names if _key(n) > _key(current)]
    doomed += [n for n in os.listdir(root) if n.startswith(".") and n.endswith(".tmp")]
    for n in doomed:
        path = os.path.join(root, n)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            try:
                os.unlink(path)
            except OSError:
                pass


# ----- reading
def _read_json(path):
    try:
        with open(path, "rb") as f:
            return json.loads(f.read().decode("utf-8"))
    except FileNotFoundError:
        raise MissingCheckpointError("%s: missing" % path) from None
    except (ValueError, UnicodeDecodeError) as e:  # truncated or not JSON at all
        raise CheckpointError("%s: not valid JSON (%s)" % (path, e)) from None


def _pointer(root):
    """The folder that ``root/latest.json`` names; CheckpointError when it names none."""
    path = os.path.join(root, LATEST)
    pointer = _read_json(path)
    name = pointer.get("checkpoint") if isinstance(pointer, dict) else None
    if not isinstance(pointer, dict) or "checkpoint" not in pointer:
        raise CheckpointError('%s: must be an object with "checkpoint": a folder name, got %s'
                              % (path, json.dumps(pointer)[:80]))
    if not isinstance(name, str) or not _NAME.match(name):
        raise CheckpointError('%s: "checkpoint" must name a step-N folder beside it, got %s'
                              % (path, json.dumps(name)[:80]))
    folder = os.path.join(root, name)
    if not os.path.isdir(folder):
        raise MissingCheckpointError("%s: names %s, which does not exist" % (path, name))
    return folder


def _check_folder(folder):
    """CheckpointError naming the first file of ``folder`` that is missing or damaged in
    a way seen without loading (state.json fully; solver.npz as a zip; weights' magic)."""
    for name in FILES:
        if not os.path.isfile(os.path.join(folder, name)):
            raise MissingCheckpointError("%s: missing" % os.path.join(folder, name))
    load_state(folder)
    solver = os.path.join(folder, "solver.npz")
    if not zipfile.is_zipfile(solver):
        raise CheckpointError("%s: not a .npz (zip) file: truncated or overwritten" % solver)


def _is_folder(path):
    return _NAME.match(os.path.basename(os.path.normpath(path))) is not None or any(
        os.path.isfile(os.path.join(path, name)) for name in FILES)


def find(path):
    """The checkpoint folder that ``path`` names: a checkpoint folder itself (which must
    be complete), a ``checkpoints`` folder, or a run's output folder. None when there is
    no checkpoint at all; CheckpointError when there are only damaged ones.

    Through ``latest.json``: the folder it names, or, when it is missing, damaged or
    names a folder that is gone or incomplete, the newest complete one (with a warning).
    """
    if os.path.isdir(path) and _is_folder(path):
        _check_folder(path)
        return path
    for root in (path, os.path.join(path, "checkpoints")):
        if os.path.lexists(os.path.join(root, LATEST)) or folders(root):
            return _follow(root)
    return None


def _follow(root):
    try:
        folder = _pointer(root)
        _check_folder(folder)
        return folder
    except CheckpointError as err:
        problem = err
    for name in reversed(folders(root)):
        folder = os.path.join(root, name)
        try:
            _check_folder(folder)
        except CheckpointError:
            continue
        log.warning("%s; resuming from the newest complete checkpoint instead: %s",
                    problem, folder)
        return folder
    raise type(problem)("%s; and no complete checkpoint folder in %s to fall back on"
                        % (problem, root))


# ----- state.json
def _count(v):
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


# key -> (test, what it must be)
_STATE = {
    "epoch": (_count, "an integer >= 0"),
    "position": (_count, "an integer >= 0"),
    "step": (_count, "an integer >= 0"),
    "seed": (_count, "an integer >= 0"),
    "partial": (lambda v: isinstance(v, list) and len(v) == 3 and all(map(_number, v)),
                "[loss sum, correct, seen]: three finite numbers"),
    "schedule": (lambda v: v is None or isinstance(v, dict), "an object or null"),
    "metrics": (lambda v: isinstance(v, list) and all(isinstance(r, dict) for r in v),
                "a list of objects (one per epoch)"),
}
# entries that older checkpoints lack: the loop recomputes them from the metrics rows
_OPTIONAL_STATE = {
    "best": (lambda v: v is None or isinstance(v, dict), "an object or null"),
    "early_stopping": (lambda v: v is None or isinstance(v, dict), "an object or null"),
}


def load_state(folder):
    """The training state (``state.json``) of a checkpoint folder, checked: a
    CheckpointError names the file and the entry that is missing or wrong."""
    path = os.path.join(folder, "state.json")
    state = _read_json(path)
    if not isinstance(state, dict):
        raise CheckpointError("%s: must be a JSON object, got %s" % (path, json.dumps(state)[:80]))
    for key, (test, what) in list(_STATE.items()) + list(_OPTIONAL_STATE.items()):
        if key not in state:
            if key in _OPTIONAL_STATE:
                continue
            raise CheckpointError("%s: %r missing" % (path, key))
        if not test(state[key]):
            raise CheckpointError("%s: %r must be %s, got %s"
                                  % (path, key, what, json.dumps(state[key])[:80]))
    return state


def _named(path, err):
    text = str(err)
    return text if path in text else "%s: %s" % (path, text)


def load(folder, net, solver):
    """Restore weights and solver state from a checkpoint folder; returns its state.
    Every failure is a CheckpointError naming the file (a net or solver that differs
    from the checkpoint's included)."""
    state = load_state(folder)
    for name, restore in (("weights.dlp", net.load_parameters), ("solver.npz", solver.load_state)):
        path = os.path.join(folder, name)
        try:
            restore(path)
        except FileNotFoundError:
            raise MissingCheckpointError("%s: missing" % path) from None
        except (Error, ValueError, KeyError, OSError) as e:
            raise CheckpointError(_named(path, e)) from None
    return state
