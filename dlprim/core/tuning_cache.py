"""Tuned results of ``dlprim-tune``: one JSON file per kernel (``gemm_tuning.json``,
``conv_tuning.json``) in the user cache directory, ``{device key: {shape class: tile}}``.
The device key holds the driver version, so a new driver starts from the tables again.
"""
import json
import os

from ..utils import atomic_write, cache_dir

__all__ = ["cache_dir", "cache_file", "device_key", "tuned_entry", "store_tuned"]


def cache_file(kernel="gemm"):
    """The file of one kernel's tuned tiles: ``<kernel>_tuning.json`` in ``cache_dir()``."""
    return os.path.join(cache_dir(), "%s_tuning.json" % kernel)


def device_key(facts):
    """'<device name> | <driver version>': what a stored result is valid for."""
    return "%s | %s" % (facts.name, facts.driver_version)


_loaded = {}  # path -> (mtime, contents): re-read only when the file changes


def _load(path):
    try:
        mtime = os.stat(path).st_mtime_ns
    except OSError:
        return {}
    hit = _loaded.get(path)
    if hit and hit[0] == mtime:
        return hit[1]
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError):
        data = {}
    _loaded[path] = (mtime, data)
    return data


def tuned_entry(facts, kernel, cls):
    """The stored tile (unchecked) for this device, driver, kernel and shape class, or None."""
    entry = _load(cache_file(kernel)).get(device_key(facts), {})
    return entry.get(cls) if isinstance(entry, dict) else None


def store_tuned(facts, results, kernel="gemm"):
    """Merge {shape class: tile} for this device into the kernel's file (written
    atomically); returns its path."""
    path = cache_file(kernel)
    data = dict(_load(path))
    entry = dict(data.get(device_key(facts), {}))
    entry.update({cls: {k: int(v) for k, v in t.items()} for cls, t in results.items()})
    data[device_key(facts)] = entry
    os.makedirs(os.path.dirname(path), exist_ok=True)
    text = json.dumps(data, indent=1, sort_keys=True).encode()
    atomic_write(path, lambda f: f.write(text))
    # two stores within the file system's time resolution keep one mtime: remember
    # what was written rather than trusting the next stat
    _loaded[path] = (os.stat(path).st_mtime_ns, data)
    return path
