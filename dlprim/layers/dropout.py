"""Dropout: in train mode each element is kept with probability 1 - ratio and scaled by
1 / (1 - ratio) (inverted dropout, as PyTorch); predict mode is the identity.

The mask comes from the counter-based Philox stream (dlprim/core/random.py): element i of
step t uses uniform value i of the stream (key, offset = t * counters(size)), kept when
u >= ratio. The key is ``seed`` in its low 32 bits and a CRC of the layer's name in the
high 32 bits, so a seed reproduces every mask and two Dropout layers never share one.
The uniform values of the current step are a saved tensor: the training forward writes
them and backward reads them, in memory the Net plans like any other.
"""
import zlib

import numpy as np

from ..core.pointwise import PointwiseBroadcast
from ..core.random import RandomFill, counters
from ..tensor import same_memory
from .base import TRAIN, Layer, Setup, TensorSpec, register


@register("Dropout")
class Dropout(Layer):
    """Inverted dropout: in training each element is zeroed with probability ``ratio`` and
    the rest scaled by 1 / (1 - ratio); in predict mode the identity. Masks come from Philox.
    """
    HALF_STORAGE = "follows"
    OPTIONS = {"ratio": 0.5, "seed": 0}
    BACKWARD_READS_INPUTS = False
    BACKWARD_READS_OUTPUTS = False
    INPLACE = True

    def __init__(self, ctx, name=None, **options):
        super().__init__(ctx, name=name, **options)
        ratio = self.options["ratio"]
        if isinstance(ratio, bool) or not isinstance(ratio, (int, float, np.integer, np.floating)) \
                or not 0 <= ratio < 1:
            self.fail("option 'ratio' must be a number in [0, 1), got %r" % (ratio,))
        seed = self.options["seed"]
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= seed < 2 ** 32:
            self.fail("option 'seed' must be an int in [0, 2**32), got %r" % (seed,))
        self.ratio = float(ratio)
        self.key = (zlib.crc32(self.name.encode()) << 32) | int(seed)
        self.step_offset = 0   # Philox counter of the next mask; moves on every train step

    def build(self, in_specs):
        spec = self.single_input(in_specs)
        io = (spec.shape, spec.dtype)
        self._copy = PointwiseBroadcast(self.ctx, [io], [io], "y0 = x0;", name="dropout_copy")
        if self.ratio > 0:   # built in either mode: a Net switches modes without setup
            self._fill = RandomFill(self.ctx, spec.shape, "uniform")
            # y = x * scale where u >= ratio; dx = dy * scale there
            self._apply = PointwiseBroadcast(self.ctx, [io, io], [io],
                                             "y0 = x1 >= w0 ? x0 * w1 : 0.0f;",
                                             ["float", "float"], name="dropout_apply")
        # the uniform values behind the mask live from forward to backward
        saved = [TensorSpec(spec.shape, spec.dtype)] if self.active else []
        return Setup([TensorSpec(spec.shape, spec.dtype)], saved=saved)

    @property
    def active(self):
        """Whether elements are dropped now (train mode and ratio > 0)."""
        return self.mode == TRAIN and self.ratio > 0

    def _scalars(self):
        return [self.ratio, 1.0 / (1.0 - self.ratio)]

    def _mask(self, saved, shape):
        if not saved or saved[0].shape != shape:
            self.fail("train mode reads a mask that only a setup in train mode saves")
        return saved[0]

    def forward(self, x, y, params, ws, saved):
        if not self.active:
            return [] if same_memory(x[0], y[0]) else self._copy.launches(x, y)
        u = self._mask(saved, x[0].shape)
        fill = self._fill.launches(u, self.key, self.step_offset)
        return [_NextMask(self, fill[0], u.size)] + self._apply.launches([x[0], u], y, self._scalars())

    def backward(self, x, dx, y, dy, params, dparams, ws, saved, accumulate):
        if dx[0] is None:
            return []
        beta = float(accumulate[0])
        if not self.active:
            return self._copy.launches(dy, dx, beta=beta)
        u = self._mask(saved, dx[0].shape)
        return self._apply.launches([dy[0], u], dx, self._scalars(), beta=beta)


class _NextMask:
    """Fill the mask from the layer's current counter, then move the counter on: re-running
    a planned iteration gives a new mask, and re-planning continues the same stream."""

    def __init__(self, layer, launch, size):
        self.layer, self.launch, self.size, self.name = layer, launch, size, "dropout_mask"

    def __call__(self, queue):
        RandomFill.set_counter(self.launch, self.layer.key, self.layer.step_offset)
        event = self.launch(queue)
        self.layer.step_offset += counters(self.size)
        return event
