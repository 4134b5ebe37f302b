"""EmbeddingBag's forward pass (``kernels/embedding_bag.cl``): per bag of indices, the
sum (optionally weighted per index), mean or maximum of the weight's rows, as PyTorch's
``_embedding_bag``; and the bag of each index (``offset2bag``), which the backward pass
scatters gradients by.

One work-item per (bag, column) walks its bag's indices: bags are short in practice
(tens of indices), and a column per work-item reads each row's values coalesced.
"""
import numpy as np

from ..dtypes import as_dtype, cl_type
from ..kernels import program
from ..utils import round_up
from .pointwise import memo

__all__ = ["EmbeddingBag", "embedding_bag", "MODES"]

MODES = ("sum", "mean", "max")


class EmbeddingBag:
    """The kernels for one weight dtype, index dtype, mode and whether per-sample weights
    come."""

    def __init__(self, ctx, dtype, index_dtype, mode, per_sample_weights):
        if mode not in MODES:
            raise ValueError("EmbeddingBag: mode must be one of %s, got %r" % (MODES, mode))
        self.index_dtype = as_dtype(index_dtype)
        if self.index_dtype not in (np.dtype(np.int64), np.dtype(np.int32)):
            raise TypeError("EmbeddingBag: indices must be int64 or int32, got %s"
                            % self.index_dtype.name)
        self.mode = mode
        self.program = program.get(ctx, "embedding_bag", T=cl_type(dtype),
                                   I=cl_type(self.index_dtype), MODE=MODES.index(mode),
                                   PSW=int(bool(per_sample_weights)))
        self._wg = min(256, ctx.facts.max_work_group)

    def forward_launches(self, weight, indices, offsets, bags, y, bag_size, argmax=None,
                         per_sample_weights=None, padding_idx=-1):
        """y (bags, D) and bag_size (bags,); argmax (bags, D) in mode max. ``offsets``
        has bags or bags + 1 entries (the last bag's end given: include_last_offset)."""
        rows, dim = weight.shape
        total = bags * dim
        if total == 0:
            return []
        u = np.uint64
        args = [u(bags), u(dim), u(rows), u(indices.size), u(offsets.size),
                np.int64(padding_idx), weight, indices, offsets,
                per_sample_weights if per_sample_weights is not None else weight, y, bag_size,
                argmax if argmax is not None else bag_size]
        return [program.Launch(self.program, "embedding_bag_forward",
                               (round_up(total, self._wg),), (self._wg,), args)]

    def offset2bag_launches(self, offsets, bags, out):
        """out[i] = the bag of index i, for out of the indices' size."""
        if out.size == 0:
            return []
        u = np.uint64
        return [program.Launch(self.program, "embedding_bag_offset2bag",
                               (round_up(out.size, self._wg),), (self._wg,),
                               [u(out.size), u(offsets.size), u(max(bags, 1)), offsets, out])]


def embedding_bag(ctx, dtype, index_dtype, mode, per_sample_weights=False):
    """The ``EmbeddingBag`` kernels of these parameters on ctx (built once)."""
    key = ("embedding_bag", as_dtype(dtype), as_dtype(index_dtype), mode,
           bool(per_sample_weights))
    return memo(ctx, key, lambda: EmbeddingBag(ctx, dtype, index_dtype, mode,
                                                per_sample_weights))
