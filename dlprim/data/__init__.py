"""Datasets and batch loaders: MNIST idx files, .npz arrays, image folders, text for
language models; transforms; a shuffling, prefetching BatchLoader.

``make_source`` and ``make_transforms`` build them from a training config's
``data.train`` / ``data.val`` entry (see docs/train.md and dlprim.train.config).
"""
from .errors import DataError, MissingDataError, WorkerError
from .idx import read_idx, write_idx
from .loader import BatchLoader
from .sources import ArraySource, FolderSource, MnistSource, NpzSource, Source
from .text import CharVocab, TextSource, read_text
from .transforms import (CenterCrop, ColorJitter, Compose, HorizontalFlip, Normalize,
                         RandomCrop, RandomResizedCrop, RandomRotation, Resize, ToFloat,
                         Transform, from_config as make_transforms)

__all__ = ["DataError", "MissingDataError", "WorkerError", "read_idx", "write_idx",
           "BatchLoader", "Source", "ArraySource", "MnistSource", "NpzSource", "FolderSource",
           "TextSource", "CharVocab", "read_text", "Transform", "Compose",
           "ToFloat", "Normalize", "RandomCrop", "HorizontalFlip", "Resize", "CenterCrop",
           "RandomResizedCrop", "ColorJitter", "RandomRotation",
           "make_transforms", "make_source", "make_loader"]


def make_source(entry, name="data", vocab=None):
    """The source described by a config data entry ({"type": "mnist"|"npz"|"folder"|"text",
    ...}); paths are taken as given (the config loader has made them absolute). ``vocab``
    (a CharVocab) is the vocabulary of a text source, by default its file's."""
    kind = entry.get("type")
    if kind == "text":
        return TextSource(entry["path"], entry["context"], vocab=vocab,
                          begin=entry.get("begin", 0.0), end=entry.get("end", 1.0), name=name)
    common = {"name": name, "scale": entry.get("scale")}
    if kind == "mnist":
        return MnistSource(entry["images"], entry["labels"],
                           num_classes=entry.get("num_classes") or 10, **common)
    if kind == "npz":
        return NpzSource(entry["path"], x=entry.get("x", "x"), y=entry.get("y", "y"),
                         num_classes=entry.get("num_classes"),
                         channels_last=entry.get("channels_last", False), **common)
    if kind == "folder":
        return FolderSource(entry["path"], mode=entry.get("mode", "RGB"), **common)
    raise DataError("%s.type: unknown source type %r; known: mnist, npz, folder, text"
                    % (name, kind))


def make_loader(entry, batch, name="data", train=True, seed=0, prefetch=2, vocab=None):
    """A BatchLoader over ``make_source(entry, name, vocab)`` with the entry's transforms
    and ``num_workers``; shuffled (and ``drop_last`` honoured) only for training."""
    try:
        transforms = make_transforms(entry.get("transforms"))
    except ValueError as e:
        raise DataError("%s.transforms%s" % (name, e)) from None
    return BatchLoader(make_source(entry, name, vocab), batch, shuffle=train and entry.get("shuffle", True),
                       seed=seed, drop_last=train and entry.get("drop_last", False),
                       transforms=transforms, prefetch=prefetch,
                       num_workers=entry.get("num_workers") or 0)
