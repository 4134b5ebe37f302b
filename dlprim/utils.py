"""Small helpers every part uses, depending on nothing but the error family: atomic file
writes, the check before opening a file, integer rounding (grid sizes, alignment, tile
counts), the test of what counts as a size, and the list of unknown names with the nearest
known spelling of each."""
import collections
import difflib
import numbers
import os
import secrets
import stat
from typing import Any, Iterable

from .errors import MissingFileError

__all__ = ["atomic_write", "fsync_dir", "ceil_div", "round_up", "is_int", "shape_problem",
           "check_regular_file", "unknown_names", "cache_dir", "BoundedCache"]


def is_int(value):
    """True for an int or a numpy integer, never for a bool. Sizes are integers as numpy
    and PyTorch take them: 8.0, 8.9, "8" and True are refused, never truncated."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def shape_problem(shape, what):
    """None when ``shape`` is a list or tuple of non-negative integers; else a message that
    names ``what`` and the element at fault, e.g. ``shape[1] is 8.9, not an integer``.
    Callers raise it as the error of their part (LayerError, GraphError ...)."""
    if not isinstance(shape, (list, tuple)):
        return "%s must be a list of integers, got %s %r" % (what, type(shape).__name__, shape)
    for i, n in enumerate(shape):
        if not is_int(n):
            return "%s[%d] is %r (%s), not an integer" % (what, i, n, type(n).__name__)
        if n < 0:
            return "%s[%d] is %d, a size must not be negative" % (what, i, n)
    return None


def unknown_names(names: Iterable[Any], known: Iterable[Any]) -> str:
    """``'a' (did you mean 'b'?), 'c'``: each of ``names`` quoted, with the nearest of
    ``known`` where one is close, for errors about keys or options nobody knows."""
    shown = []
    for name in names:
        near = difflib.get_close_matches(str(name), [str(k) for k in known], 1)
        shown.append("%r%s" % (name, " (did you mean %r?)" % near[0] if near else ""))
    return ", ".join(shown)


def cache_dir():
    """Where dlprim keeps what it learns of a machine (tuned tiles, device probes, the
    OpenCL vendors folder it registers pip's drivers in): DLPRIM_CACHE_DIR, else
    platformdirs' user cache dir for 'dlprim', else ~/.cache/dlprim."""
    env = os.environ.get("DLPRIM_CACHE_DIR")
    if env:
        return env
    try:
        import platformdirs
        return platformdirs.user_cache_dir("dlprim")
    except ImportError:
        return os.path.join(os.path.expanduser("~"), ".cache", "dlprim")


def ceil_div(a, b):
    """``a / b`` rounded up, for non-negative integers (tiles covering a size)."""
    return -(-int(a) // int(b))


def round_up(n, m):
    """``n`` rounded up to a multiple of ``m`` (global sizes of launches, alignment)."""
    return ceil_div(n, m) * int(m)


def _temporary(directory, base):
    """(fd, path) of a new file beside the target, created with O_EXCL and mode 0o666 so
    the process umask applies as for any new file (``mkstemp`` would force 0o600)."""
    flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
    for _ in range(100):
        tmp = os.path.join(directory, ".%s.%s.tmp" % (base, secrets.token_hex(4)))
        try:
            return os.open(tmp, flags, 0o666), tmp
        except FileExistsError:
            continue
    raise FileExistsError("%s: no free temporary name beside %s" % (directory, base))


def atomic_write(path, write_fn):
    """Write a file so that readers see the old content or the new, never a part.

    ``write_fn(f)`` writes into ``f``, a binary file opened "w+b" in the same directory;
    it is flushed, fsynced and renamed over ``path``. If ``write_fn`` raises, ``path``
    is left as it was and the temporary file is removed. A new file gets the mode any
    new file gets (0o666 less the umask); a replaced file keeps its mode.
    """
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = _temporary(directory, os.path.basename(path))
    try:
        with os.fdopen(fd, "w+b") as f:
            try:
                os.chmod(tmp, stat.S_IMODE(os.stat(path).st_mode))
            except FileNotFoundError:
                pass
            write_fn(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    fsync_dir(directory)


def fsync_dir(directory):
    """Make the renames and creations inside ``directory`` durable (fsync on the folder),
    where the platform allows it; a no-op elsewhere."""
    try:
        dfd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError:
        pass


def check_regular_file(path, what, error):
    """Check ``path`` before it is opened: a MissingFileError when it is not there, and
    ``error`` (the caller's class) for a FIFO, socket, device or folder, which would block
    or never end; ``what`` names the file in the message ("parameter file")."""
    path = os.fspath(path)
    if os.path.isfile(path):
        return
    if os.path.exists(path):
        raise error("%s '%s' is not a regular file" % (what, path))
    raise MissingFileError("%s '%s' does not exist" % (what, path))


class BoundedCache(collections.OrderedDict):
    """A dict that keeps its ``maxsize`` most recently used entries: memoized ops and
    recordings keyed by shapes (a model run over many sequence lengths makes new keys
    without end) cannot grow memory without bound. ``get`` and ``[]`` count as a use."""

    def __init__(self, maxsize):
        super().__init__()
        self.maxsize = int(maxsize)

    def get(self, key, default=None):
        try:
            value = super().__getitem__(key)
        except KeyError:
            return default
        self.move_to_end(key)
        return value

    def __getitem__(self, key):
        value = super().__getitem__(key)
        self.move_to_end(key)
        return value

    def __setitem__(self, key, value):
        super().__setitem__(key, value)
        self.move_to_end(key)
        while len(self) > self.maxsize:
            self.popitem(last=False)
