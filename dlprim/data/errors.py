"""Errors of data loading; each message names the source, file or sample index."""
from ..errors import Error

__all__ = ["DataError", "MissingDataError", "require_pillow"]


class DataError(Error, ValueError):
    """Bad or unreadable data: a corrupt file, a label out of range, a wrong image size."""


class MissingDataError(DataError, FileNotFoundError):
    """A data file or folder that does not exist."""


def require_pillow(what):
    """The PIL.Image module, or a DataError that names the extra which installs it."""
    try:
        from PIL import Image
    except ImportError:
        raise DataError("%s needs Pillow, which is not installed: pip install 'dlprim[image]'"
                        % what) from None
    return Image
