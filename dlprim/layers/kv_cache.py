"""KVCache: the keys and values of a decoder's attention kept in the Net from pass to pass,
for generation one token (or a chunk) at a time over a planned graph.

    inputs   k (N, H, T, D), v (N, H, T, DV) of this pass's T tokens, pos (1,) or (N,)
             int32/int64: where they go (the number of tokens cached before them)
    params   the caches (N, H, L, D) and (N, H, L, DV), L = option ``length``, not trained
    outputs  keys (N, H, L, D) and values (N, H, L, DV): the whole cache after the write,
             and mask (N or 1, 1, T, L), float32: 0 where key j is cached and not after
             query t (j <= pos + t), -inf elsewhere; the additive mask of a
             ScaledDotProductAttention over the outputs. Option ``mask`` false leaves
             the mask out (two outputs): the layers of a decoder share one

The position is read on the device, so one plan serves every step: a prefill of T tokens
and a decode of one are two plans of the same Net (``Net.reshape``), sharing the caches,
and the caller moves ``pos`` on between passes. A position with pos + T > L (or pos < 0)
writes nothing and makes that sample's mask NaN, so its attention is NaN, never a
plausible value. Inference only (no backward); the caches start at zero
(``init_params``) and are reset by writing them (``Net.set_parameters``).
"""

import numpy as np

from ..core.kv_cache import KVCacheOps
from ..dtypes import dtype_name
from ..utils import is_int
from .base import Layer, ParamSpec, Setup, TensorSpec, register

__all__ = ["KVCache"]


@register("KVCache")
class KVCache(Layer):
    """Write this pass's keys and values at ``pos`` into caches of ``length`` positions."""
    OPTIONS = {"length": None, "mask": True}
    HAS_BACKWARD = False
    BACKWARD_READS_INPUTS = False
    HALF_STORAGE = "none"  # (the caches are parameters, which are float32)

    def build(self, in_specs):
        length = self.options["length"]
        if not is_int(length) or length < 1:
            self.fail("option 'length' (the cache's positions) must be a positive int, got %r"
                      % (length,))
        if len(in_specs) != 3:
            self.fail("expects inputs k, v and pos, got %d" % len(in_specs))
        k, v, pos = in_specs
        for what, spec in (("k", k), ("v", v)):
            if len(spec.shape) != 4:
                self.fail("input %s must be (N, H, T, D), got shape %s" % (what, spec.shape))
        n, h, t, d = k.shape
        if v.shape[:3] != k.shape[:3] or v.dtype != k.dtype:
            self.fail("inputs k %s %s and v %s %s differ in (N, H, T) or dtype"
                      % (k.shape, dtype_name(k.dtype), v.shape, dtype_name(v.dtype)))
        if pos.dtype not in (np.dtype(np.int32), np.dtype(np.int64)) or \
                tuple(pos.shape) not in ((1,), (n,)):
            self.fail("input pos must be int32 or int64 of shape (1,) or (N,) = (%d,), got %s %s"
                      % (n, dtype_name(pos.dtype), pos.shape))
        if t > length:
            self.fail("%d tokens in one pass do not fit a cache of length %d" % (t, length))
        if self.param_specs is not None and self.param_specs[0].shape[:2] != (n, h):
            self.fail("the cache was set up for (N, H) = %s, the inputs have %s"
                      % (self.param_specs[0].shape[:2], (n, h)))
        self.dims = (n, h, t, d, v.shape[3])
        self.per_row = pos.shape[0] == n and n > 1
        self.ops = KVCacheOps(self.ctx, n, h, t, length, k.dtype.itemsize, pos.dtype,
                              self.per_row)
        shapes = [(n, h, length, d), (n, h, length, v.shape[3])]
        masks = n if self.per_row else 1
        outputs = [TensorSpec(shapes[0], k.dtype), TensorSpec(shapes[1], k.dtype)]
        if self.options["mask"]:
            outputs.append(TensorSpec((masks, 1, t, length), "float32"))
        return Setup(outputs,
                     params=[ParamSpec(s, k.dtype, trainable=False, name=w)
                             for s, w in zip(shapes, ("keys", "values"))])

    def init_params(self, params, rng):
        for p in params:
            p.zero_()

    def forward(self, x, y, params, ws, saved):
        d, dv = self.dims[3:]
        pos = x[2]
        out = self.ops.write(x[0], params[0], x[1], params[1], pos, d, dv)
        out += self.ops.read(params[0], y[0], params[1], y[1])
        return out + (self.ops.mask(y[2], pos) if self.options["mask"] else [])
