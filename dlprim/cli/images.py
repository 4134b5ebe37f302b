"""Image files as a classifier's input, for dlprim-predict: which files, and their pixels
as the net's input rows.

Pixels are scaled to [0, 1] (uint8 / 255, or the training data's ``scale``), converted
to grey or RGB as the net's input channels ask, brought to the input size (the
training data's deterministic transforms, such as resize and center_crop, then a
bilinear resize to the size if they did not reach it) and normalised
(``(x - mean) / std`` per channel).
"""
import os

import numpy as np

from ..data import transforms as tf
from ..data.errors import DataError, MissingDataError, require_pillow
from ..data.sources import IMAGE_EXTENSIONS, open_image

__all__ = ["image_files", "Preprocess"]

GEOMETRIC = {"resize", "center_crop"}  # transforms that set the size


def image_files(paths):
    """The files to classify: each path that is a file, and the image files under each
    folder (sub-folders too, sorted). MissingDataError for a path that is not there or a
    folder without images."""
    files = []
    for path in paths:
        if os.path.isdir(path):
            found = []
            for folder, dirs, names in os.walk(path):
                dirs[:] = sorted(d for d in dirs if not d.startswith("."))
                found += [os.path.join(folder, n) for n in sorted(names)
                          if n.lower().endswith(IMAGE_EXTENSIONS) and not n.startswith(".")]
            if not found:
                raise MissingDataError("%s: no image files (%s) in this folder"
                                       % (path, " ".join(IMAGE_EXTENSIONS)))
            files += found
        elif os.path.exists(path):
            files.append(path)
        else:
            raise MissingDataError("%s: no such file or folder" % path)
    return files


class Preprocess:
    """Image file -> float32 (C, H, W) row for a net input of ``channels`` (1 or 3) and
    ``size`` (h, w).

    ``mean``/``std`` (a number or one per channel) normalise; None takes the recorded
    ``normalize`` transform, if any. ``recorded``: the deploy file's ``meta`` (its
    ``scale`` and ``transforms``); its geometric transforms are skipped when
    ``own_size`` (the size was chosen on the command line), its normalisation when
    ``mean`` or ``std`` is given.
    """

    def __init__(self, channels, size, mean=None, std=None, recorded=None, own_size=False):
        self.mode = {1: "L", 3: "RGB"}[channels]
        self._image = require_pillow("reading images")
        recorded = recorded or {}
        own_norm = mean is not None or std is not None
        kept = [t for t in recorded.get("transforms") or []
                if not (own_size and t.get("type") in GEOMETRIC)
                and not (own_norm and t.get("type") == "normalize")]
        try:
            steps = [tf.ToFloat(recorded.get("scale"))] + tf.from_config(kept).transforms
        except ValueError as e:
            raise DataError("the deploy file's meta.transforms%s" % e) from None
        steps.append(tf.Resize(list(size)))
        if own_norm:
            steps.append(tf.Normalize(_values("--mean", mean, 0.0, channels),
                                      _values("--std", std, 1.0, channels)))
        self.pipeline = tf.Compose(steps)

    def __call__(self, path):
        """The net input row for the image file at ``path``; DataError naming the file when
        it cannot be read."""
        try:
            pixels = np.asarray(open_image(self._image, path, self.mode))
        except (OSError, ValueError) as e:
            raise DataError("%s: cannot read image: %s" % (path, e)) from None
        pixels = pixels[None] if pixels.ndim == 2 else pixels.transpose(2, 0, 1)
        return self.pipeline(pixels, None)


def _values(option, values, default, channels):
    """One number or one per channel, checked; ``default`` when not given."""
    if values is None:
        return [default]
    if len(values) not in (1, channels):
        raise DataError("%s has %d values; the net's input has %d channel%s: give 1 value%s"
                        % (option, len(values), channels, "" if channels == 1 else "s",
                           "" if channels == 1 else " or %d" % channels))
    if option == "--std" and min(values) <= 0:
        raise DataError("--std must be > 0, got %s" % " ".join("%g" % v for v in values))
    if not np.all(np.isfinite(values)):
        raise DataError("%s must be finite numbers, got %s" % (option, " ".join(map(str, values))))
    return [float(v) for v in values]
