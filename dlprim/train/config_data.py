"""The ``data`` section of a training config: its schema and checks.

Checks record problems on a ``config_check.Checker`` (all of them, by field path) and
look cheaply inside the data files (idx headers, .npz array names, class folders), so a
wrong file is reported with the config's other problems, before any work.
"""
import copy
import os
import zipfile

import numpy as np

from ..data import transforms as _transforms
from ..data.errors import DataError
from ..data.idx import read_idx_shape
from ..data.sources import IMAGE_EXTENSIONS
from ..utils import is_int
from .config_check import is_num, join

__all__ = ["check_data", "sample_count", "DATA_TYPES"]

_DATA_COMMON = {"type": None, "transforms": [], "num_classes": None, "scale": None,
                "shuffle": True, "drop_last": False, "num_workers": 0}
DATA_TYPES = {  # type -> {field: default}; a None default means the field is required
    "mnist": {"images": None, "labels": None},
    "npz": {"path": None, "x": "x", "y": "y", "channels_last": False},
    "folder": {"path": None, "mode": "RGB"},
    "text": {"path": None, "context": None, "begin": 0.0, "end": 1.0},
}
_FILES = {"mnist": {"images": "file", "labels": "file"}, "npz": {"path": "file"},
          "folder": {"path": "dir"}, "text": {"path": "file"}}


def check_data(c, value):
    """The checked ``data`` section: train (required) and val (None when absent)."""
    data = c.fields("data", value, ["train", "val"], required=["train"])
    out = {}
    for split in ("train", "val"):
        if data.get(split) is not None:
            out[split] = _data_entry(c, "data." + split, data[split])
        else:
            out[split] = None
    return out


def _data_entry(c, path, value):
    kind = value.get("type") if isinstance(value, dict) else None
    if kind not in DATA_TYPES:
        if isinstance(value, dict):
            c.choice(path + ".type", kind, list(DATA_TYPES))
        return c.fields(path, value, list(_DATA_COMMON))
    specific = DATA_TYPES[kind]
    before = len(c.problems)
    entry = c.fields(path, value, list(_DATA_COMMON) + list(specific),
                     required=[k for k, v in specific.items() if v is None])
    for key, default in list(_DATA_COMMON.items()) + list(specific.items()):
        if default is not None:
            entry.setdefault(key, copy.deepcopy(default))
        else:
            entry.setdefault(key, None)
    for key, kind_of_path in _FILES[kind].items():
        if entry[key] is not None:
            entry[key] = c.path(join(path, key), entry[key], kind_of_path)
    if entry["num_classes"] is not None:
        c.integer(path + ".num_classes", entry["num_classes"])
    if entry["scale"] is not None:
        c.number(path + ".scale", entry["scale"])
    c.integer(path + ".num_workers", entry["num_workers"], low=0)
    for key in ("shuffle", "drop_last") + (("channels_last",) if kind == "npz" else ()):
        c.boolean(join(path, key), entry[key])
    for key in ("x", "y") if kind == "npz" else ():
        if not isinstance(entry[key], str):
            c.bad(join(path, key), "must be an array name (string)")
    if kind == "folder":
        c.choice(path + ".mode", entry["mode"], ["RGB", "L"])
        _need_pillow(c, path + ".type", "image folders")
    if kind == "text":
        _text_fields(c, path, entry)
    if len(c.problems) == before:
        _probe(c, path, kind, entry)
    entry["transforms"] = _transform_list(c, path + ".transforms", entry["transforms"])
    return entry


def _text_fields(c, path, entry):
    if entry["context"] is not None:
        c.integer(path + ".context", entry["context"])
    for key in ("begin", "end"):
        c.number(join(path, key), entry[key], low=0, high=1, low_open=False, high_open=False)
    if (all(isinstance(entry[k], (int, float)) for k in ("begin", "end"))
            and entry["begin"] >= entry["end"]):
        c.bad(path + ".end", "must be after begin (%g)" % entry["begin"])
    for key in ("transforms", "scale", "num_classes"):
        if entry[key]:
            c.bad(join(path, key), "does not apply to text (the characters are the classes)")


def _text_windows(entry):
    """The number of windows of a text entry (reads the file); None when its fields are
    wrong (reported elsewhere)."""
    from ..data.text import read_text
    if not is_int(entry["context"]) or entry["context"] <= 0 or not all(
            is_num(entry[k]) for k in ("begin", "end")):
        return None
    text = read_text(entry["path"])
    part = text[int(round(entry["begin"] * len(text))):int(round(entry["end"] * len(text)))]
    return max((len(part) - 1) // entry["context"], 0)


def _probe(c, path, kind, entry):
    """Cheap look inside the data files (headers, array names, class folders), so that a
    wrong file is reported with the config's other problems, before any work."""
    if kind == "mnist":
        counts = {}
        for key, ndim in (("images", 3), ("labels", 1)):
            try:
                counts[key] = read_idx_shape(entry[key], ndim)[0]
            except DataError as e:
                c.bad(join(path, key), str(e))
        if len(counts) == 2 and counts["images"] != counts["labels"]:
            c.bad(path + ".labels", "%d labels for %d images" % (counts["labels"], counts["images"]))
    elif kind == "npz":
        try:
            with np.load(entry["path"], allow_pickle=False) as archive:
                names = archive.files
        except (OSError, ValueError) as e:
            c.bad(path + ".path", "cannot read as .npz (%s)" % e)
            return
        for key in ("x", "y"):
            if entry[key] not in names:
                c.bad(join(path, key), "no array %r in %s (arrays: %s)"
                      % (entry[key], entry["path"], ", ".join(names) or "none"))
    elif kind == "text":
        try:
            if _text_windows(entry) == 0:
                c.bad(path + ".context", "the text (begin %g to end %g of %s) is too short for "
                      "one window of %d characters plus its target"
                      % (entry["begin"], entry["end"], entry["path"], entry["context"]))
        except DataError as e:
            c.bad(path + ".path", str(e))
    elif not any(os.path.isdir(os.path.join(entry["path"], d)) and not d.startswith(".")
                 for d in os.listdir(entry["path"])):
        c.bad(path + ".path", "no class sub-folders in %s" % entry["path"])


def _need_pillow(c, path, what):
    try:
        import PIL.Image  # noqa: F401
    except ImportError:
        c.bad(path, "%s need Pillow, which is not installed: pip install 'dlprim[image]'" % what)


def _transform_list(c, path, value):
    if not isinstance(value, list):
        c.bad(path, "must be a list of transforms")
        return []
    for i, item in enumerate(value):
        here = "%s[%d]" % (path, i)
        name = item.get("type") if isinstance(item, dict) else None
        if name not in _transforms.TRANSFORMS:
            c.choice(here + ".type", name, sorted(_transforms.TRANSFORMS))
            continue
        required, optional = _transforms.options_of(name)
        options = c.fields(here, item, ["type"] + required + list(optional), required=required)
        options.pop("type")
        if any(k not in required + list(optional) or options.get(k) is None
               for k in set(options) | set(required)):
            continue
        try:
            _transforms.TRANSFORMS[name](**options)
        except DataError as e:
            c.bad(here, str(e))
        except ValueError as e:  # "field: problem" from the transform's constructor
            field, _, problem = str(e).partition(": ")
            c.bad(here + "." + field, problem) if problem else c.bad(here, str(e))
    return value


def sample_count(entry):
    """The number of samples of a checked data entry, read cheaply (an idx header, the
    header of the .npz image array, the image names of a folder); None when that cannot
    be told without loading (a problem with the entry is reported elsewhere)."""
    try:
        if entry["type"] == "mnist":
            return read_idx_shape(entry["images"], 3)[0]
        if entry["type"] == "npz":
            with np.load(entry["path"], allow_pickle=False) as archive:
                with archive.zip.open(entry["x"] + ".npy") as f:
                    version = np.lib.format.read_magic(f)
                    read = getattr(np.lib.format, "read_array_header_%d_%d" % version, None)
                    shape = read(f)[0] if read else ()
            return shape[0] if shape else None
        if entry["type"] == "text":
            return _text_windows(entry)
        count = 0
        for d in os.listdir(entry["path"]):
            folder = os.path.join(entry["path"], d)
            if not d.startswith(".") and os.path.isdir(folder):
                count += sum(1 for f in os.listdir(folder) if f.lower().endswith(IMAGE_EXTENSIONS))
        return count
    except (DataError, OSError, ValueError, KeyError, TypeError, zipfile.BadZipFile):
        return None
