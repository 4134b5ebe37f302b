"""Small helpers every part uses, with no dependencies: atomic file writes and integer
rounding (grid sizes, alignment, tile counts)."""
import os
import tempfile

__all__ = ["atomic_write", "ceil_div", "round_up"]


def ceil_div(a, b):
    """``a / b`` rounded up, for non-negative integers (tiles covering a size)."""
    return -(-int(a) // int(b))


def round_up(n, m):
    """``n`` rounded up to a multiple of ``m`` (global sizes of launches, alignment)."""
    return ceil_div(n, m) * int(m)


def atomic_write(path, write_fn):
    """Write a file so that readers see the old content or the new, never a part.

    ``write_fn(f)`` writes into ``f``, a binary file opened "w+b" in the same directory;
    it is flushed, fsynced and renamed over ``path``. If ``write_fn`` raises, ``path``
    is left as it was and the temporary file is removed.
    """
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp",
                               dir=directory)
    try:
        with os.fdopen(fd, "w+b") as f:
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
    try:  # make the rename itself durable where the platform allows
        dfd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError:
        pass
