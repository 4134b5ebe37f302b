"""Precisions "fp16" and "bf16": where activations are stored in 16 bits, and the loss
scale ("fp16" only).

**Storage.** Each layer class says how it takes 16-bit float activations (float16 for
"fp16", bfloat16 for "bf16"; ``HALF_STORAGE``,
``layers/base.py``): "prefers" (the convolutions: half halves their traffic), "follows"
(memory-bound layers: they store their float outputs as their inputs are), "reads"
(takes either as it comes, its outputs float32: the cross-entropy loss, which widens
16-bit logits as it loads them), "none" (float32 only: the other losses, and the layers
whose kernels have no half path yet) or "exact" (Cast). ``with_casts`` walks the graph
in order and puts a ``Cast`` operator before each operator whose float input is stored
otherwise than it takes it: half into a "prefers"
layer, float32 into a "none" layer; a "follows" layer takes half when any float input of
it is half and casts its other float inputs to half. The Cast writes the name it reads
(a new value of it), so later readers of the name share the conversion and a net input's
name still means the buffer users write. Parameters, their gradients and the solver's
state stay float32; so do integer tensors (labels, indices). A graph that already has
its Casts comes back unchanged, so a rewritten graph can be loaded again.

**Loss scale.** Half has 5 exponent bits: gradients below 6e-8 flush to zero (bfloat16
keeps float32's 8, so "bf16" needs no scale). The loss
gradients start at ``loss_weight * scale`` instead of ``loss_weight``, which lifts every
gradient by ``scale``; the solver divides the parameter gradients by it, and skips the
step when any of them is not finite (an overflow), halving the scale. After
``growth_interval`` finite steps in a row the scale doubles. These are PyTorch
GradScaler's defaults.

Pure Python: the caller gives each operator's output specs (``specs_of``).
"""
import logging

import numpy as np

from ..dtypes import DTYPES, as_dtype, dtype_name, is_float

__all__ = ["with_casts", "LossScale", "HALF", "FLOAT"]

log = logging.getLogger(__name__)

HALF, FLOAT = np.dtype(np.float16), np.dtype(np.float32)
_SHORT = {"float16": "half", "bfloat16": "bfloat16"}  # in the Casts' names


def with_casts(graph, half_storage, specs_of, half=HALF):
    """The graph's dict with Cast operators where storage types meet (module docstring);
    ``half``: the 16-bit storage (float16 or bfloat16).

    ``half_storage(type)``: the layer type's HALF_STORAGE; ``specs_of(op, in_specs)``: the
    (shape, dtype) of each output of operator ``op`` (an OpDef of ``graph``; its Casts
    write the names they read, so its inputs keep their names) given (shape, dtype) of its
    inputs, asked in graph order.
    """
    half = as_dtype(half)
    current = {name: (tuple(shape), np.dtype(DTYPES[dtype]))
               for name, (shape, dtype, _) in graph.inputs.items()}
    names = {op.name for op in graph.ops}
    ops = []
    for op in graph.ops:
        want = _wanted(half_storage(op.type), [current[n][1] for n in op.inputs], half)
        for n in dict.fromkeys(op.inputs):  # each name once, in order
            shape, dtype = current[n]
            if want is None or not is_float(dtype) or dtype == want:
                continue
            cast = _fresh("%s.%s_to_%s" % (op.name, n, _SHORT.get(dtype_name(want), "float")),
                          names)
            ops.append({"name": cast, "type": "Cast", "inputs": [n], "outputs": [n],
                        "options": {"dtype": dtype_name(want)}})
            current[n] = (shape, want)
        ops.append(op.to_dict())
        for n, (shape, dtype) in zip(op.outputs, specs_of(op, [current[n] for n in op.inputs])):
            current[n] = (tuple(shape), np.dtype(dtype))
    out = graph.to_dict()
    out["operators"] = ops
    return out


def _wanted(storage, dtypes, half):
    """The float type an operator's float inputs must have (None: as they come)."""
    if storage == "prefers":
        return half
    if storage == "follows":
        return half if half in dtypes else None
    if storage in ("exact", "reads"):
        return None
    return FLOAT


def _fresh(name, taken):
    """``name``, or with a number appended where another operator has it."""
    out, i = name, 1
    while out in taken:
        i += 1
        out = "%s_%d" % (name, i)
    taken.add(out)
    return out


class LossScale:
    """Dynamic loss scaling (module docstring): ``scale`` multiplies the loss gradients;
    ``update(finite)`` after each step's check halves it on an overflow and doubles it
    after ``growth_interval`` finite steps; ``skipped`` counts the steps left out."""

    def __init__(self, scale=2.0 ** 16, growth_factor=2.0, backoff_factor=0.5,
                 growth_interval=2000):
        if not (scale > 0 and np.isfinite(scale)):
            raise ValueError("loss scale must be a positive finite number, got %r" % (scale,))
        if not growth_factor > 1 or not 0 < backoff_factor < 1:
            raise ValueError("loss scale: growth_factor must be above 1 and backoff_factor in "
                             "(0, 1), got %r and %r" % (growth_factor, backoff_factor))
        if int(growth_interval) < 1:
            raise ValueError("loss scale: growth_interval must be at least 1, got %r"
                             % (growth_interval,))
        self.scale = float(scale)
        self.growth_factor, self.backoff_factor = float(growth_factor), float(backoff_factor)
        self.growth_interval = int(growth_interval)
        self.good_steps = 0
        self.skipped = 0

    def __repr__(self):
        return "LossScale(scale=%g, good_steps=%d, skipped=%d)" % (
            self.scale, self.good_steps, self.skipped)

    def update(self, finite):
        """After a step whose gradients were all finite (``finite``) or not."""
        if not finite:
            self.skipped += 1
            self.good_steps = 0
            self.scale = max(self.scale * self.backoff_factor, 2.0 ** -24)
            log.info("fp16: gradients overflowed; step skipped, loss scale now %g", self.scale)
            return
        self.good_steps += 1
        if self.good_steps >= self.growth_interval:
            self.good_steps = 0
            grown = self.scale * self.growth_factor
            if np.isfinite(np.float32(grown)):
                self.scale = grown

    def state_dict(self):
        return {"scale": self.scale, "good_steps": self.good_steps, "skipped": self.skipped}

    def load_state_dict(self, state):
        self.scale = float(state["scale"])
        self.good_steps = int(state.get("good_steps", 0))
        self.skipped = int(state.get("skipped", 0))
