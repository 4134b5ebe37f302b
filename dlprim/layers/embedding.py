"""Embedding: rows of a learned table picked by integer indices (``nn.Embedding``).

Indices (int32 or int64, any shape) -> shape + [embedding_dim]. The parameter ``weight``
is (num_embeddings, embedding_dim), initialised N(0, 1) with the ``padding_idx`` row at 0.
Backward adds each output row's gradient into the table row it came from (repeated
indices sum; the padding row gets none); the indices get no gradient. An index outside
[0, num_embeddings) is an InputError when it comes from the host, and reads as NaN when
it is computed on the device (core/gather.py).

Option ``weights`` "int8" stores the table for inference (predict mode; not trained) as
int8 with a second parameter, one float32 scale a row (``core/quantize.quantize_rows``):
a quarter of the bytes; the looked-up rows come out float32.
"""
import math

import numpy as np

from ..core.gather import index_ops
from ..core.quantize import quantize_rows
from ..errors import InputError
from ..utils import is_int
from .base import Layer, ParamSpec, Setup, TensorSpec, register


@register("Embedding")
class Embedding(Layer):
    """A lookup table of ``num_embeddings`` vectors of ``embedding_dim``."""
    OPTIONS = {"num_embeddings": None, "embedding_dim": None, "padding_idx": None,
               "weights": "float32"}
    BACKWARD_READS_INPUTS = True
    NO_GRAD_INPUTS = (0,)

    def __init__(self, ctx, name=None, **options):
        super().__init__(ctx, name=name, **options)
        o = self.options
        for key in ("num_embeddings", "embedding_dim"):
            if not is_int(o[key]) or o[key] < 1:
                self.fail("option %r must be a positive int, got %r" % (key, o[key]))
        pad = o["padding_idx"]
        if pad is not None and (not is_int(pad) or not -o["num_embeddings"] <= pad
                                < o["num_embeddings"]):
            self.fail("option 'padding_idx' must be null or an index into the %d embeddings, "
                      "got %r" % (o["num_embeddings"], pad))
        self.rows, self.dim = int(o["num_embeddings"]), int(o["embedding_dim"])
        if o["weights"] not in ("float32", "int8"):
            self.fail("option 'weights': unknown %r; known: float32, int8" % (o["weights"],))
        self.int8 = o["weights"] == "int8"
        self.padding = -1 if pad is None else int(pad) % self.rows

    def build(self, in_specs):
        if len(in_specs) != 1:
            self.fail("expects 1 input (the indices), got %d" % len(in_specs))
        spec = in_specs[0]
        if spec.dtype not in (np.dtype(np.int32), np.dtype(np.int64)):
            self.fail("indices must be int32 or int64, got %s" % spec.dtype.name)
        if self.int8 and self.mode == "train":
            self.fail("an int8 table is for inference (predict mode): it is not trained")
        self.count = math.prod(spec.shape)
        self.ops = index_ops(self.ctx, np.int8 if self.int8 else np.float32, spec.dtype)
        table = [ParamSpec((self.rows, self.dim), np.int8, trainable=False),
                 ParamSpec((self.rows,), trainable=False)] if self.int8 else \
            [ParamSpec((self.rows, self.dim))]
        return Setup([TensorSpec(tuple(spec.shape) + (self.dim,))], table)

    def init_params(self, params, rng):
        table = rng.standard_normal((self.rows, self.dim)).astype(np.float32)
        if self.padding >= 0:
            table[self.padding] = 0
        for p, values in zip(params, quantize_rows(table) if self.int8 else [table]):
            p.to_device(values)

    def check_input_data(self, index, array, where):
        """Host indices must be integers in [0, num_embeddings)."""
        if array.dtype.kind not in "iu":
            raise InputError("%s '%s': indices (net input '%s') must be integers, got %s"
                             % (self.type_name, self.name, where, array.dtype.name))
        bad = (array < 0) | (array >= self.rows)
        if bad.any():
            pos = np.unravel_index(int(np.flatnonzero(bad)[0]), array.shape)
            raise InputError("%s '%s': index %d at position %s of net input '%s' is outside "
                             "[0, %d)" % (self.type_name, self.name, int(array[bad][0]),
                                          tuple(int(p) for p in pos), where, self.rows))

    def forward(self, x, y, params, ws, saved):
        idx = x[0].view((self.count,))
        if self.int8:
            return self.ops.select_scaled(params[0], params[1], idx,
                                          y[0].view((self.count, self.dim)), self.rows,
                                          self.count, self.dim)
        return self.ops.launches("index_select", params[0], idx, y[0].view((self.count, self.dim)),
                                 1, self.rows, self.count, self.dim)

    def backward(self, x, dx, y, dy, params, dparams, ws, saved, accumulate):
        if not dparams or dparams[0] is None:
            return []
        idx = x[0].view((self.count,))
        return self.ops.launches("index_add", dy[0].view((self.count, self.dim)), idx,
                                 dparams[0], 1, self.rows, self.count, self.dim,
                                 skip=self.padding)
