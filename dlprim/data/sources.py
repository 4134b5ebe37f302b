"""Data sources: indexable (image, label) collections.

Every source has ``len``, ``source[i] -> (image float32 (C, H, W), label int)``,
``num_classes``, ``shape`` (of one image, as stored), ``name`` (prefix of its error
messages, e.g. "data.train") and ``describe(i)`` (how an error names sample i).
uint8 pixels come out scaled to [0, 1] (``ToFloat``); float data is passed through
unless ``scale`` is given. Labels are checked against ``num_classes`` when loaded, so a
bad label is reported before training starts.

For the loader, ``sample(i)`` gives a sample before its conversion to float and
``as_array`` converts it: an image folder's sample is a Pillow image not yet decoded,
which transforms may decode at a reduced size and crop in 8 bits (see transforms.py).
"""
import io
import os
import stat
from typing import Any, Tuple

import numpy as np

from .errors import DataError, MissingDataError, require_pillow
from .idx import read_idx
from .transforms import ToFloat

__all__ = ["Source", "ArraySource", "MnistSource", "NpzSource", "FolderSource",
           "IMAGE_EXTENSIONS", "open_image"]

IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".ppm", ".pgm", ".tif", ".tiff",
                    ".webp")


def _check_num_classes(name, num_classes):
    if (not isinstance(num_classes, (int, np.integer)) or isinstance(num_classes, bool)
            or num_classes <= 0):
        raise DataError("%s: num_classes must be a positive integer, got %r" % (name, num_classes))
    return int(num_classes)


def _as_labels(name, labels, count):
    labels = np.asarray(labels)
    if labels.ndim != 1:
        raise DataError("%s: labels must be one-dimensional, got shape %s" % (name, labels.shape))
    if labels.shape[0] != count:
        raise DataError("%s: %d images but %d labels" % (name, count, labels.shape[0]))
    if labels.dtype.kind == "f":
        bad = np.flatnonzero(labels != np.round(labels))
        if bad.size:
            raise DataError("%s: label %r at index %d is not a whole number"
                            % (name, labels[bad[0]].item(), bad[0]))
    elif labels.dtype.kind not in "iub":
        raise DataError("%s: labels must be integers, got dtype %s" % (name, labels.dtype))
    return labels.astype(np.int64)


def _check_range(source, labels):
    bad = np.flatnonzero((labels < 0) | (labels >= source.num_classes))
    if bad.size:
        i = int(bad[0])
        raise DataError("%s: label %d at %s outside 0..%d"
                        % (source.name, labels[i], source.describe(i), source.num_classes - 1))


class Source:
    """Base of the sources: subclasses set name, num_classes, shape and ``__getitem__``;
    ``dtype`` is that of the samples as batched (float32 pixels unless a source says
    otherwise)."""
    dtype = np.float32
    name = "data"
    num_classes = 0
    shape = ()

    def __len__(self):
        raise NotImplementedError

    def describe(self, index):
        """Sample ``index`` in words, for error messages."""
        return "index %d" % index

    def _index(self, index):
        n = len(self)
        if not -n <= index < n:
            raise IndexError("%s: index %d outside 0..%d" % (self.name, index, n - 1))
        return index % n

    def fetch(self, indices):
        """Images and labels at ``indices``: (list of CHW float32 arrays or an NCHW array,
        int32 labels)."""
        pairs = [self[int(i)] for i in indices]
        return [p[0] for p in pairs], np.array([p[1] for p in pairs], dtype=np.int32)

    def sample(self, index: int) -> Tuple[Any, int]:
        """(image, label) of sample ``index`` as transforms first see it; ``as_array``
        turns that image into the float32 CHW array. Here both are ``self[index]``."""
        return self[index]

    def as_array(self, image: Any) -> np.ndarray:
        """The float32 CHW array of an image that ``sample`` gave (and transforms of
        Pillow images may have changed)."""
        return image

    def unreadable(self, index: int, error: BaseException) -> DataError:
        """The DataError for an error raised while reading sample ``index``."""
        return DataError("%s: cannot read %s: %s" % (self.name, self.describe(index), error))

    def __repr__(self):
        return "%s(%r, %d samples, %d classes, shape %s)" % (
            type(self).__name__, self.name, len(self), self.num_classes, self.shape)


class ArraySource(Source):
    """In-memory images (N, H, W), (N, C, H, W) or with ``channels_last`` (N, H, W, C)."""

    def __init__(self, images, labels, num_classes=None, name="arrays", scale=None,
                 channels_last=False):
        self.name = name
        images = np.asarray(images)
        if images.ndim == 3:
            images = images[:, None]
        elif images.ndim == 4 and channels_last:
            images = images.transpose(0, 3, 1, 2)
        elif images.ndim != 4:
            raise DataError("%s: images must have 3 or 4 dimensions (N[, C], H, W), got shape %s"
                            % (name, images.shape))
        if images.dtype.kind not in "uif":
            raise DataError("%s: images must be numeric, got dtype %s" % (name, images.dtype))
        self.images = images
        self.labels = _as_labels(name, labels, images.shape[0])
        if num_classes is None:
            num_classes = int(self.labels.max()) + 1 if self.labels.size else 1
        self.num_classes = _check_num_classes(name, num_classes)
        self.shape = tuple(images.shape[1:])
        self._to_float = ToFloat(scale)
        _check_range(self, self.labels)

    def __len__(self):
        return self.images.shape[0]

    def __getitem__(self, index):
        index = self._index(index)
        return self._to_float(self.images[index]), int(self.labels[index])

    def fetch(self, indices):
        indices = np.asarray(indices, dtype=np.int64)
        return self._to_float(self.images[indices]), self.labels[indices].astype(np.int32)


class MnistSource(ArraySource):
    """A pair of MNIST idx files (plain or .gz): images 0x00000803, labels 0x00000801."""

    def __init__(self, images, labels, num_classes=10, name=None, scale=None):
        data = read_idx(images, ndim=3)
        targets = read_idx(labels, ndim=1)
        self.paths = (images, labels)
        super().__init__(data, targets, num_classes, name or images, scale)


class NpzSource(ArraySource):
    """Arrays ``x`` (images) and ``y`` (labels) of a numpy .npz file."""

    def __init__(self, path, x="x", y="y", num_classes=None, name=None, scale=None,
                 channels_last=False):
        if not os.path.isfile(path):
            raise MissingDataError("%s: no such file" % path)
        try:
            with np.load(path, allow_pickle=False) as archive:
                for key in (x, y):
                    if key not in archive.files:
                        raise DataError("%s: no array %r (arrays: %s)"
                                        % (path, key, ", ".join(archive.files) or "none"))
                images, labels = archive[x], archive[y]
        except DataError:
            raise
        except (OSError, ValueError) as e:
            raise DataError("%s: cannot read as .npz (%s)" % (path, e)) from None
        self.path = path
        super().__init__(images, labels, num_classes, name or path, scale, channels_last)


class FolderSource(Source):
    """Images in one sub-folder per class; sorted class names give indices 0, 1, ...

    ``mode`` is the Pillow mode images are converted to: "RGB" (3 channels) or "L"
    (grayscale, 1 channel). ``shape`` is that of the first image; sizes may differ
    between images when a resize/center_crop transform evens them out.
    """

    def __init__(self, path, mode="RGB", name=None, scale=None, extensions=IMAGE_EXTENSIONS):
        self.name = name or path
        require_pillow("%s: an image folder" % self.name)
        if mode not in ("RGB", "L"):
            raise DataError("%s: mode must be 'RGB' or 'L', got %r" % (self.name, mode))
        if not os.path.isdir(path):
            raise MissingDataError("%s: no such directory" % path)
        self.path, self.mode = path, mode
        self.classes = sorted(d for d in os.listdir(path)
                              if not d.startswith(".") and os.path.isdir(os.path.join(path, d)))
        if not self.classes:
            raise DataError("%s: no class sub-folders in %s" % (self.name, path))
        self.files, labels = [], []
        for label, cls in enumerate(self.classes):
            folder = os.path.join(path, cls)
            # regular files only (links to them too): opening a FIFO blocks forever, a
            # device or socket is no image
            with os.scandir(folder) as entries:
                names = sorted(e.name for e in entries
                               if e.name.lower().endswith(extensions) and e.is_file())
            self.files += [os.path.join(folder, f) for f in names]
            labels += [label] * len(names)
        if not self.files:
            raise DataError("%s: no images (%s) in the class folders of %s"
                            % (self.name, " ".join(extensions), path))
        self.labels = np.array(labels, dtype=np.int64)
        self.num_classes = len(self.classes)
        self._to_float = ToFloat(scale)
        self.shape = self[0][0].shape

    def __len__(self):
        return len(self.files)

    def describe(self, index):
        return "index %d (%s)" % (index, self.files[index])

    def unreadable(self, index: int, error: BaseException) -> DataError:
        return DataError("%s: cannot read image %s: %s" % (self.name, self.files[index], error))

    def __getitem__(self, index):
        index = self._index(index)
        try:
            return self.as_array(self.sample(index)[0]), int(self.labels[index])
        except (OSError, ValueError, SyntaxError, EOFError) as e:
            raise self.unreadable(index, e) from None

    def sample(self, index: int) -> Tuple[Any, int]:
        """(Pillow image in ``mode``, label); a JPEG already in ``mode`` is not decoded
        yet, so that a transform may have it decoded at a reduced size."""
        index = self._index(index)
        return open_image(require_pillow("an image folder"), self.files[index], self.mode), \
            int(self.labels[index])

    def as_array(self, image: Any) -> np.ndarray:
        pixels = np.asarray(image if image.mode == self.mode else image.convert(self.mode))
        pixels = pixels[None] if pixels.ndim == 2 else pixels.transpose(2, 0, 1)
        return self._to_float(pixels)


def open_image(image: Any, path: str, mode: str) -> Any:
    """The image file at ``path`` as a Pillow image in ``mode``, read whole into memory
    but decoded only when first used where the file is in ``mode`` already (so a JPEG
    may still be decoded at a reduced size, ``Image.draft``); ``image`` is PIL.Image.

    Opened without blocking and checked to be a regular file, in case it was replaced by
    a FIFO after the folder was listed. An image of more than
    ``PIL.Image.MAX_IMAGE_PIXELS`` pixels (a "decompression bomb" could fill the memory)
    is a DataError, which the caller prefixes with the file: the size comes from the
    header, before anything is decoded.
    """
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise DataError("not a regular file")
        data = f.read()
    try:
        im = image.open(io.BytesIO(data))  # reads the header only
    except image.DecompressionBombError as e:
        raise DataError("too large to decode safely (%s)" % e) from None
    limit = image.MAX_IMAGE_PIXELS
    if limit and im.size[0] * im.size[1] > limit:
        raise DataError("too large to decode safely (%d pixels, %dx%d, more than "
                        "PIL.Image.MAX_IMAGE_PIXELS = %d)"
                        % ((im.size[0] * im.size[1],) + im.size + (limit,)))
    return im if im.mode == mode else im.convert(mode)


def _decode(image, path, mode):
    """The pixels of the image file at ``path`` in Pillow ``mode``: an (H, W) or (H, W, C)
    uint8 array (``open_image`` decoded); ``image`` is PIL.Image."""
    return np.asarray(open_image(image, path, mode))
