"""One batch through a classification net with a loss: write it, train on it, score it.

Shared by dlprim-train's Trainer, ``dlprim.fit`` and ``dlprim.evaluate``, so that the
numbers they report are computed one way. Loss and accuracy are per label: an image has
one, a language model's (N, T) targets T each against (N * T, vocab) logits.
"""
from collections import namedtuple
from typing import Any, Dict, Iterable, Sequence, Tuple

import numpy as np

from ..net import PREDICT
from .graphs import loss_parts

__all__ = ["ONCE", "Roles", "roles_of", "feed", "read", "train_step", "evaluate_batches", "hits"]

# why an iterable may give nothing the second time
ONCE = " (a generator or iterator can be gone through once only: give a list or a BatchLoader)"

Roles = namedtuple("Roles", "data label logits loss")
Roles.__doc__ = "The names of a training net's data and label inputs, logits and loss."


def roles_of(graph: dict) -> Roles:
    """The ``Roles`` of a graph dict (ValueError when it has no loss of a known kind)."""
    return Roles(*loss_parts(graph))


def feed(net: Any, roles: Roles, x: np.ndarray, y: np.ndarray) -> None:
    """Write batch (x, y) into the net's inputs without waiting, re-planning it first when
    the batch has another size (a last partial batch)."""
    data, label = net.tensor(roles.data), net.tensor(roles.label)
    if tuple(data.shape) != x.shape or tuple(label.shape) != y.shape:
        net.reshape({roles.data: x.shape, roles.label: y.shape})
        data, label = net.tensor(roles.data), net.tensor(roles.label)
    data.to_device(x.astype(data.dtype, copy=False), wait=False)
    label.to_device(y.astype(label.dtype, copy=False), wait=False)


def hits(logits: np.ndarray, y: np.ndarray, ks: Sequence[int] = (1,)) -> Dict[int, int]:
    """{k: labels whose class is among the k highest logits}; k = 1 is the argmax (the
    first of tied maxima), larger k count the classes scored strictly above the label's."""
    scores = logits.reshape(y.size, -1)
    labels = y.ravel().astype(np.int64)
    out = {}
    for k in ks:
        if k == 1:
            out[k] = int(np.sum(scores.argmax(1) == labels))
        else:
            own = scores[np.arange(labels.size), labels]
            out[k] = int(np.sum((scores > own[:, None]).sum(1) < k))
    return out


def read(net: Any, roles: Roles, y: np.ndarray,
         ks: Sequence[int] = (1,)) -> Tuple[float, Dict[int, int]]:
    """(loss, {k: top-k hits}) of the batch just run (waits for the device)."""
    loss = float(net.tensor(roles.loss).to_host().ravel()[0])
    # the logits' values (an fp16 or bf16 net stores them in 16 bits: the loss reads them
    # as they are; bfloat16's host copy would be its bits)
    return loss, hits(net.tensor(roles.logits).numpy(), y, ks)


def train_step(net: Any, solver: Any, roles: Roles, x: np.ndarray,
               y: np.ndarray) -> Tuple[float, int]:
    """One step on batch (x, y): zero-grad, forward, backward, update; -> (loss, correct
    labels)."""
    feed(net, roles, x, y)
    solver.zero_grad(net)
    net.forward()
    net.backward()
    solver.apply(net)
    loss, top = read(net, roles, y)
    return loss, top[1]


def evaluate_batches(net: Any, roles: Roles, batches: Iterable, top_k: Sequence[int] = (1,),
                     what: str = "the data") -> Dict[str, float]:
    """{"loss", "accuracy", "top<k>_accuracy" for each k > 1 of ``top_k``} over
    every label of ``batches`` (each batch weighted by its labels), run in predict mode
    (BatchNorm on its running statistics, no dropout, nothing updated); the net's mode
    is restored after. ValueError naming ``what`` when ``batches`` gives none."""
    ks = sorted(set(top_k) | {1})
    previous = net.mode
    net.mode = PREDICT
    total, seen, correct = 0.0, 0, dict.fromkeys(ks, 0)
    try:
        for x, y in batches:
            feed(net, roles, x, y)
            net.forward()
            loss, top = read(net, roles, y, ks)
            total += loss * y.size
            seen += y.size
            for k in ks:
                correct[k] += top[k]
    finally:
        net.mode = previous
    if seen == 0:
        raise ValueError("%s gave no batches to evaluate%s" % (what, ONCE))
    result = {"loss": total / seen, "accuracy": correct[1] / seen}
    result.update(("top%d_accuracy" % k, correct[k] / seen) for k in ks if k > 1)
    return result
