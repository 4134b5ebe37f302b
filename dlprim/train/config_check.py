"""Field-by-field checks that collect problems instead of stopping at the first one.

Each check records "field.path: what is wrong" and returns the value to keep, so a
config validator can run every check and report all problems together.
"""
import difflib
import json
import os

from ..utils import is_int

__all__ = ["Checker", "is_num", "join"]


def is_num(v):
    """True for an int or float that is not a bool."""
    return isinstance(v, (int, float)) and not isinstance(v, bool)


class Checker:
    """Collects problems; every check returns the value to keep (default when bad)."""

    def __init__(self, base_dir):
        self.base_dir, self.problems = base_dir, []

    def bad(self, path, message):
        """Record a problem at ``path`` ("config" when empty)."""
        self.problems.append("%s: %s" % (path or "config", message))

    def fields(self, path, value, known, required=()):
        """``value`` as a dict without comments; unknown and missing fields reported."""
        if not isinstance(value, dict):
            self.bad(path, "must be an object, got %s" % json.dumps(value))
            return {}
        value = {k: v for k, v in value.items() if not str(k).startswith("_")}
        for key in value:
            if key not in known:
                near = difflib.get_close_matches(key, known, 1)
                self.bad(join(path, key), "unknown field" + (" (did you mean %r?)" % near[0]
                                                             if near else ""))
        for key in required:
            if value.get(key) is None:
                self.bad(join(path, key), "required")
        return value

    def integer(self, path, value, low=1):
        """``value`` must be an integer >= ``low``."""
        if not is_int(value) or value < low:
            self.bad(path, "%s, got %s" % ("must be a positive integer" if low == 1 else
                                           "must be an integer >= %d" % low, json.dumps(value)))
        return value

    def number(self, path, value, low=None, high=None, low_open=True, high_open=True):
        """``value`` must be a number inside the (open or closed) bounds given."""
        if not is_num(value):
            self.bad(path, "must be a number, got %s" % json.dumps(value))
        elif low is not None and (value <= low if low_open else value < low):
            self.bad(path, "must be %s %r, got %r" % (">" if low_open else ">=", low, value))
        elif high is not None and (value >= high if high_open else value > high):
            self.bad(path, "must be %s %r, got %r" % ("<" if high_open else "<=", high, value))
        return value

    def boolean(self, path, value):
        """``value`` must be true or false."""
        if not isinstance(value, bool):
            self.bad(path, "must be true or false, got %s" % json.dumps(value))
        return value

    def choice(self, path, value, options):
        """``value`` must be one of ``options``."""
        if value not in options:
            self.bad(path, "must be one of %s, got %s" % (", ".join(map(json.dumps, options)),
                                                           json.dumps(value)))
        return value

    def path(self, path, value, kind=None, base=None):
        """``value`` made absolute from ``base``; ``kind`` "file"/"dir" must exist."""
        if not isinstance(value, str) or not value:
            self.bad(path, "must be a path string, got %s" % json.dumps(value))
            return value
        full = os.path.normpath(os.path.join(base or self.base_dir, os.path.expanduser(value)))
        if kind == "file" and not os.path.isfile(full):
            self.bad(path, "no such file: %s" % full)
        elif kind == "dir" and not os.path.isdir(full):
            self.bad(path, "no such directory: %s" % full)
        return full


def join(path, key):
    """The field path of ``key`` inside ``path`` ("solver" + "lr" -> "solver.lr")."""
    return "%s.%s" % (path, key) if path else str(key)
