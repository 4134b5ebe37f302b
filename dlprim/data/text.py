"""Text for language models: a character vocabulary and a source of fixed-length windows.

A ``TextSource`` sample is a window of ``context`` characters as token ids (the input)
and the character after each of them (the targets), so a causal model learns to predict
every next character at once. The vocabulary is every character of the whole file,
sorted, so the training and validation parts of one file share it.
"""
import gzip
import json
import os

import numpy as np

from ..utils import atomic_write
from .errors import DataError, MissingDataError
from .sources import Source

__all__ = ["CharVocab", "TextSource", "read_text"]


class CharVocab:
    """Characters and their ids: id i is ``chars[i]``."""

    def __init__(self, chars):
        if not isinstance(chars, str) or not chars:
            raise DataError("a character vocabulary must be a non-empty string, got %r" % (chars,))
        if len(set(chars)) != len(chars):
            raise DataError("a character vocabulary must not repeat characters")
        self.chars = chars
        self._ids = {c: i for i, c in enumerate(chars)}

    @classmethod
    def from_text(cls, text):
        """The vocabulary of every character in ``text``, sorted by code point."""
        return cls("".join(sorted(set(text))))

    def __len__(self):
        return len(self.chars)

    def __eq__(self, other):
        return isinstance(other, CharVocab) and other.chars == self.chars

    def encode(self, text, name="text"):
        """Token ids (int64) of ``text``; a character outside the vocabulary is a DataError
        naming it and its position."""
        ids = np.fromiter((self._ids.get(c, -1) for c in text), dtype=np.int64, count=len(text))
        bad = np.flatnonzero(ids < 0)
        if bad.size:
            i = int(bad[0])
            raise DataError("%s: character %r at position %d is not in the vocabulary (%d "
                            "characters)" % (name, text[i], i, len(self)))
        return ids

    def decode(self, ids):
        """The text of token ids ``ids``."""
        ids = np.asarray(ids).ravel()
        if ids.size and (ids.min() < 0 or ids.max() >= len(self)):
            raise ValueError("token id outside 0..%d" % (len(self) - 1))
        return "".join(self.chars[int(i)] for i in ids)

    def save(self, path):
        """Write the vocabulary as JSON ({"chars": ...}), atomically."""
        data = json.dumps({"chars": self.chars}, ensure_ascii=False).encode("utf-8")
        atomic_write(path, lambda f: f.write(data))

    @classmethod
    def load(cls, path):
        """The vocabulary ``save`` wrote at ``path``."""
        try:
            with open(path, encoding="utf-8") as f:
                return cls(json.load(f)["chars"])
        except FileNotFoundError:
            raise MissingDataError("%s: no such file" % path) from None
        except (ValueError, KeyError, TypeError) as e:
            raise DataError("%s: not a character vocabulary (%s)" % (path, e)) from None


def read_text(path, name=None):
    """The UTF-8 text of the file at ``path`` (plain, or gzip when it ends in .gz)."""
    name = name or path
    if not os.path.isfile(path):
        raise MissingDataError("%s: no such file %s" % (name, path))
    try:
        opener = gzip.open if path.endswith(".gz") else open
        with opener(path, "rb") as f:
            raw = f.read()
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise DataError("%s: %s is not UTF-8 text (byte %d)" % (name, path, e.start)) from None
    except (OSError, EOFError) as e:
        raise DataError("%s: cannot read %s (%s)" % (name, path, e)) from None


def _fraction(name, key, value):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
        raise DataError("%s: %s must be a fraction of the text in [0, 1], got %r"
                        % (name, key, value))
    return float(value)


class TextSource(Source):
    """Windows of ``context`` characters of a text file, for a causal language model.

    Only the part from fraction ``begin`` to ``end`` of the text is used (so one file
    gives a training part and a validation part). Sample i starts at character
    ``i * context`` of that part: tokens are its ``context`` characters, targets the
    ``context`` characters one further on, both int64. ``vocab`` (a CharVocab) defaults
    to every character of the whole file.
    """
    dtype = np.int64

    def __init__(self, path, context, vocab=None, begin=0.0, end=1.0, name=None):
        self.name = name or path
        if isinstance(context, bool) or not isinstance(context, (int, np.integer)) or context <= 0:
            raise DataError("%s: context must be a positive integer, got %r" % (self.name, context))
        begin, end = _fraction(self.name, "begin", begin), _fraction(self.name, "end", end)
        if begin >= end:
            raise DataError("%s: begin %g must be before end %g" % (self.name, begin, end))
        text = read_text(path, self.name)
        self.path, self.context = path, int(context)
        self.vocab = vocab if vocab is not None else CharVocab.from_text(text)
        part = text[int(round(begin * len(text))):int(round(end * len(text)))]
        self.ids = self.vocab.encode(part, self.name)
        self.num_classes = len(self.vocab)
        self.shape = (self.context,)
        self._count = (len(self.ids) - 1) // self.context
        if self._count <= 0:
            raise DataError("%s: %d characters (begin %g to end %g of %s) are too few for one "
                            "window of context %d plus its target"
                            % (self.name, len(part), begin, end, path, self.context))

    def __len__(self):
        return self._count

    def describe(self, index):
        return "window %d (characters %d..%d)" % (index, index * self.context,
                                                 (index + 1) * self.context)

    def __getitem__(self, index):
        start = self._index(index) * self.context
        return (self.ids[start:start + self.context],
                self.ids[start + 1:start + 1 + self.context])

    def fetch(self, indices):
        starts = np.asarray(indices, dtype=np.int64)[:, None] * self.context
        window = starts + np.arange(self.context)
        return self.ids[window], self.ids[window + 1]
