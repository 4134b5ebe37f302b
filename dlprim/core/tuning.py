"""GEMM tile parameters: a default table per device family and shape class, plus tuned
results stored by ``dlprim.cli.tune`` in the user cache directory.

A tile config is a dict of the kernel template's tiling parameters:
``TILE_M, TILE_N, TILE_K`` (work-group tile), ``BLOCK_M, BLOCK_N`` (per-thread register
block), ``VEC`` (1 or 4: width of local-memory reads, and of the pieces a thread's block
is cut into) and ``GROUP`` (tile rows walked together for cache reuse; 1 = plain order).
"""
import json
import os
from ..utils import ceil_div

__all__ = ["TILE_KEYS", "CLASSES", "shape_class", "default_tile", "tuned_tile", "pick_tile",
           "check_tile", "cache_dir", "cache_file", "device_key", "store_tuned"]

TILE_KEYS = ("TILE_M", "TILE_N", "TILE_K", "BLOCK_M", "BLOCK_N", "VEC", "GROUP")
SMALL = 64  # M or N under this is a "small" side: big tiles would leave most threads idle


def _tile(tm, tn, tk, bm, bn, vec=4, group=1):
    return dict(zip(TILE_KEYS, (tm, tn, tk, bm, bn, vec, group)))


CLASSES = ("huge", "large", "medium", "narrow_m", "narrow_n", "small_m", "small_n", "small")

# family -> shape class -> tile; CPUs (PoCL) get small tiles and one config for every
# class, which also keeps the number of builds low there.
_TABLE = {
    "gpu": {"huge": _tile(128, 256, 8, 8, 16, 4, 8), "large": _tile(128, 128, 16, 8, 8, 4, 8),
            "medium": _tile(128, 64, 16, 8, 8, 4, 8),
            "narrow_m": _tile(64, 128, 16, 8, 8), "narrow_n": _tile(128, 64, 16, 8, 8),
            "small_m": _tile(32, 32, 16, 4, 4), "small_n": _tile(32, 32, 16, 4, 4),
            "small": _tile(32, 32, 16, 4, 4)},
    "intel": dict({"huge": _tile(64, 64, 16, 4, 4), "large": _tile(64, 64, 16, 4, 4), "small_m": _tile(32, 64, 16, 4, 4),
                   "small_n": _tile(64, 32, 16, 4, 4), "small": _tile(32, 32, 16, 4, 4)},
                  medium=_tile(32, 32, 16, 4, 4), narrow_m=_tile(64, 64, 16, 4, 4),
                  narrow_n=_tile(64, 64, 16, 4, 4)),
    "cpu": dict.fromkeys(CLASSES, _tile(32, 32, 16, 4, 4)),
    "other": dict.fromkeys(CLASSES, _tile(32, 32, 8, 4, 4)),
}


def shape_class(M, N, batch=1, compute_units=0):
    """Which tile shape suits C's shape.

    'small' (M and N under 64), 'small_m' / 'small_n' (one side under 64), 'narrow_m' /
    'narrow_n' (one side 64..127, where a 128-high tile would idle half its threads),
    'medium' (too few 128x128 tiles to give every compute unit one), 'huge' (enough
    128x256 tiles for 2.5 per compute unit, so the last partial wave costs little), else
    'large'.
    """
    small_m, small_n = M < SMALL, N < SMALL
    if small_m and small_n:
        return "small"
    if small_m or small_n:
        return "small_m" if small_m else "small_n"
    if M < 2 * SMALL:
        return "narrow_m"
    if N < 2 * SMALL:
        return "narrow_n"
    if ceil_div(M, 128) * ceil_div(N, 128) * batch < compute_units:
        return "medium"
    if ceil_div(M, 128) * ceil_div(N, 256) * batch * 2 >= 5 * compute_units:
        return "huge"
    return "large"


def _family(facts):
    if facts.is_cpu:
        return "cpu"
    if facts.vendor_id in ("nvidia", "amd"):
        return "gpu"
    if facts.vendor_id == "intel":
        return "intel"
    return "other" if not facts.is_gpu else "intel"


def default_tile(facts, cls):
    return dict(_TABLE[_family(facts)][cls])


def check_tile(tile, facts):
    """Raise ValueError naming the first inconsistent tile parameter."""
    missing = [k for k in TILE_KEYS if k not in tile]
    if missing:
        raise ValueError("gemm tile: missing %s" % ", ".join(missing))
    t = {k: int(tile[k]) for k in TILE_KEYS}
    if any(v <= 0 for v in t.values()):
        raise ValueError("gemm tile: every parameter must be positive, got %s" % t)
    if t["VEC"] not in (1, 4):
        raise ValueError("gemm tile: VEC must be 1 or 4, got %d" % t["VEC"])
    for side in "MN":
        tm, bm = t["TILE_" + side], t["BLOCK_" + side]
        if tm % bm or bm % t["VEC"] or tm % 4:
            raise ValueError("gemm tile: TILE_%s=%d must be a multiple of 4 and of BLOCK_%s=%d, "
                             "itself a multiple of VEC=%d" % (side, tm, side, bm, t["VEC"]))
    if t["TILE_K"] % 4:
        raise ValueError("gemm tile: TILE_K=%d must be a multiple of 4" % t["TILE_K"])
    threads = (t["TILE_M"] // t["BLOCK_M"]) * (t["TILE_N"] // t["BLOCK_N"])
    if threads > facts.max_work_group:
        raise ValueError("gemm tile: %d threads per work-group, the device allows %d"
                         % (threads, facts.max_work_group))
    local = 2 * t["TILE_K"] * (t["TILE_M"] + t["TILE_N"] + 8) * 4
    if local > facts.local_mem:
        raise ValueError("gemm tile: needs %d bytes of local memory, the device has %d"
                         % (local, facts.local_mem))
    return t


# ----- tuned results
def cache_dir():
    """DLPRIM_CACHE_DIR, else platformdirs' user cache dir for 'dlprim', else ~/.cache/dlprim."""
    env = os.environ.get("DLPRIM_CACHE_DIR")
    if env:
        return env
    try:
        import platformdirs
        return platformdirs.user_cache_dir("dlprim")
    except ImportError:
        return os.path.join(os.path.expanduser("~"), ".cache", "dlprim")


def cache_file():
    return os.path.join(cache_dir(), "gemm_tuning.json")


def device_key(facts):
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


def tuned_tile(facts, cls):
    """The stored best tile for this device, driver and shape class, or None."""
    entry = _load(cache_file()).get(device_key(facts), {}).get(cls)
    if not entry:
        return None
    try:
        return check_tile(entry, facts)
    except (ValueError, TypeError):
        return None  # stale or foreign entry: fall back to the table


def pick_tile(facts, M, N, batch=1):
    cls = shape_class(M, N, batch, facts.compute_units)
    return tuned_tile(facts, cls) or default_tile(facts, cls)


def store_tuned(facts, results):
    """Merge {shape class: tile} for this device into the cache file (written atomically)."""
    path = cache_file()
    data = dict(_load(path))
    entry = dict(data.get(device_key(facts), {}))
    entry.update({cls: {k: int(t[k]) for k in TILE_KEYS} for cls, t in results.items()})
    data[device_key(facts)] = entry
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".%d.tmp" % os.getpid()
    with open(tmp, "w") as f:
        json.dump(data, f, indent=1, sort_keys=True)
    os.replace(tmp, path)
    return path
