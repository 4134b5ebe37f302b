"""Errors of data loading; each message names the source, file or sample index."""
from ..errors import Error

__all__ = ["DataError", "MissingDataError", "WorkerError", "require_pillow"]


class DataError(Error, ValueError):
    """Bad or unreadable data: a corrupt file, a label out of range, a wrong image size."""


class MissingDataError(DataError, FileNotFoundError):
    """A data file or folder that does not exist."""


class WorkerError(Error, RuntimeError):
    """A loader worker process that stopped without answering (killed, out of memory),
    or an error of one that cannot be carried over as it was."""


def require_pillow(what):
    """The PIL.Image module, or a DataError that names the extra which installs it."""
    try:
        from PIL import Image
    except ImportError:
        raise DataError("%s needs Pillow, which is not installed: pip install 'dlprim[image]'"
                        % what) from None
    return Image
