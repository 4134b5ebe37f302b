"""Checkpoints written so that a crash at any moment leaves the previous one usable.

A checkpoint is a folder ``checkpoints/step-<N>/`` (weights.dlp, solver.npz, state.json,
net.json). It is written under a temporary name and renamed into place whole; then the
pointer file ``checkpoints/latest.json`` is replaced atomically. Readers follow the
pointer, so they see either the old checkpoint or the new one, never half of one.
"""
import json
import os
import shutil

from ..utils import atomic_write

LATEST = "latest.json"


def _write_json(path, obj):
    atomic_write(path, lambda f: f.write(json.dumps(obj, indent=1, sort_keys=True).encode()))


def save(root, step, net, solver, state, graph, keep=2):
    """Write checkpoint number ``step`` under ``root`` and point ``latest.json`` at it."""
    os.makedirs(root, exist_ok=True)
    name = "step-%08d" % step
    final = os.path.join(root, name)
    tmp = os.path.join(root, ".%s.tmp" % name)
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    net.save_parameters(os.path.join(tmp, "weights.dlp"))
    solver.save_state(os.path.join(tmp, "solver.npz"))
    _write_json(os.path.join(tmp, "state.json"), state)
    _write_json(os.path.join(tmp, "net.json"), graph)
    if os.path.exists(final):
        shutil.rmtree(final)
    os.replace(tmp, final)
    _write_json(os.path.join(root, LATEST), {"checkpoint": name, "step": step})
    _prune(root, keep, name)
    return final


def _prune(root, keep, current):
    names = sorted(n for n in os.listdir(root) if n.startswith("step-") and n != current)
    for n in names[:max(len(names) - max(keep - 1, 0), 0)]:
        shutil.rmtree(os.path.join(root, n), ignore_errors=True)


def find(path):
    """The checkpoint folder that ``path`` names: a checkpoint folder itself, a
    ``checkpoints`` folder, or a run's output folder. None when there is none."""
    for root in (path, os.path.join(path, "checkpoints")):
        if os.path.isfile(os.path.join(root, "state.json")):
            return root
        pointer = os.path.join(root, LATEST)
        if os.path.isfile(pointer):
            with open(pointer) as f:
                name = json.load(f)["checkpoint"]
            folder = os.path.join(root, name)
            if os.path.isfile(os.path.join(folder, "state.json")):
                return folder
    return None


def load_state(folder):
    """The training state (``state.json``) of a checkpoint folder."""
    with open(os.path.join(folder, "state.json")) as f:
        return json.load(f)
