"""KVCache: the keys and values of a decoder's attention kept in the Net from pass to pass,
for generation one token (or a chunk) at a time over a planned graph.

    inputs   k (N, H, T, D), v (N, H, T, DV) of this pass's T tokens, pos (1,) or (N,)
             int32/int64: where they go (the number of tokens cached before them)
    params   the caches (N, H, L, D) and (N, H, L, DV), L = option ``length``, not trained
    outputs  keys (N, H, L, D) and values (N, H, L, DV): the whole cache after the write,
             and mask (N or 1, 1, T, L), float32: 0 where key j is cached and not after
             query t (j <= pos + t), -inf elsewhere; the additive mask of a
             ScaledDotProductAttention over the outputs. Option ``mask`` false leaves
             the mask out: the layers of a decoder share one

Option ``layout`` says how the inputs are laid out: "nhld" as above, "nlhd" (N, T, H, D)
(a projection split into heads by a Reshape alone), a pair of those (k's, v's), or
"packed": one input qkv (N, T, 3, H, D) (one Linear's queries, keys and values) then pos,
and a first output, the queries, split off in the caches' layout. Option
``cache_layout`` "nlhd" keeps the caches, their outputs and those queries as
(N, L, H, D), what a ScaledDotProductAttention of layout "nlhd" reads; its output is then
(N, T, H, DV), the heads merged by a Reshape alone.

The whole update (the new rows written, the caches handed on, the queries and the mask)
is one launch. The position is read on the device, so one plan serves every step: a
prefill of T tokens and a decode of one are two plans of the same Net (``Net.reshape``),
sharing the caches, and the caller moves ``pos`` on between passes. A position with
pos + T > L (or pos < 0) writes nothing and makes that sample's mask NaN, so its
attention is NaN, never a plausible value. Inference only (no backward); the caches
start at zero (``init_params``) and are reset by writing them (``Net.set_parameters``).
"""

import numpy as np

from ..core.kv_cache import LAYOUTS, KVCacheOps
from ..dtypes import dtype_name
from ..tensor import Tensor
from ..utils import is_int
from .base import Layer, ParamSpec, Setup, TensorSpec, register

__all__ = ["KVCache"]


@register("KVCache")
class KVCache(Layer):
    """Write this pass's keys and values at ``pos`` into caches of ``length`` positions."""
    OPTIONS = {"length": None, "mask": True, "layout": "nhld", "cache_layout": "nhld"}
    HAS_BACKWARD = False
    BACKWARD_READS_INPUTS = False
    HALF_STORAGE = "none"  # (the caches are parameters, which are float32)

    def _layouts(self):
        """(k's layout, v's layout, whether the caches are nlhd), checked."""
        layout, cache = self.options["layout"], self.options["cache_layout"]
        pair = [layout, layout] if isinstance(layout, str) else list(layout)
        if len(pair) != 2 or any(not isinstance(a, str) or a not in LAYOUTS for a in pair) or \
                ("packed" in pair and pair != ["packed", "packed"]):
            self.fail("option 'layout' must be one of %s or a pair (k's, v's) of nhld and "
                      "nlhd, got %r" % (", ".join(LAYOUTS), layout))
        if cache not in ("nhld", "nlhd"):
            self.fail("option 'cache_layout' must be nhld or nlhd, got %r" % (cache,))
        return pair[0], pair[1], cache == "nlhd"

    def build(self, in_specs):
        length = self.options["length"]
        if not is_int(length) or length < 1:
            self.fail("option 'length' (the cache's positions) must be a positive int, got %r"
                      % (length,))
        k_layout, v_layout, nlhd = self._layouts()
        packed = k_layout == "packed"
        if len(in_specs) != (2 if packed else 3):
            self.fail("expects inputs %s, got %d" % ("qkv and pos" if packed else "k, v and pos",
                                                      len(in_specs)))
        if packed:
            qkv, pos = in_specs
            if len(qkv.shape) != 5 or qkv.shape[2] != 3:
                self.fail("the packed layout's input qkv must be (N, T, 3, H, D), got shape %s"
                          % (qkv.shape,))
            n, t, _, h, d = qkv.shape
            dv, dtype = d, qkv.dtype
        else:
            k, v, pos = in_specs
            for what, spec, lay in (("k", k, k_layout), ("v", v, v_layout)):
                if len(spec.shape) != 4:
                    self.fail("input %s must be (%s), got shape %s"
                              % (what, "N, T, H, D" if lay == "nlhd" else "N, H, T, D",
                                 spec.shape))
            (n, h, t, d), (nv, hv, tv, dv) = (_nhtd(k.shape, k_layout),
                                              _nhtd(v.shape, v_layout))
            if (nv, hv, tv) != (n, h, t) or v.dtype != k.dtype:
                self.fail("inputs k %s %s and v %s %s differ in (N, H, T) or dtype"
                          % (k.shape, dtype_name(k.dtype), v.shape, dtype_name(v.dtype)))
            dtype = k.dtype
        if pos.dtype not in (np.dtype(np.int32), np.dtype(np.int64)) or \
                tuple(pos.shape) not in ((1,), (n,)):
            self.fail("input pos must be int32 or int64 of shape (1,) or (N,) = (%d,), got %s %s"
                      % (n, dtype_name(pos.dtype), pos.shape))
        if t > length:
            self.fail("%d tokens in one pass do not fit a cache of length %d" % (t, length))
        order = (lambda *s: (s[0], s[2], s[1], s[3])) if nlhd else (lambda *s: s)
        shapes = [order(n, h, length, d), order(n, h, length, dv)]
        if self.param_specs is not None and self.param_specs[0].shape != shapes[0]:
            self.fail("the cache was set up as %s, the inputs need %s"
                      % (self.param_specs[0].shape, shapes[0]))
        self.dims = (n, h, t, d, dv)
        self.packed = packed
        self.per_row = pos.shape[0] == n and n > 1
        self.ops = KVCacheOps(self.ctx, n, h, t, length, dtype.itemsize, pos.dtype,
                              self.per_row, nlhd)
        masks = n if self.per_row else 1
        outputs = [TensorSpec(order(n, h, t, d), dtype)] if packed else []
        outputs += [TensorSpec(shapes[0], dtype), TensorSpec(shapes[1], dtype)]
        if self.options["mask"]:
            outputs.append(TensorSpec((masks, 1, t, length), "float32"))
        return Setup(outputs,
                     params=[ParamSpec(s, dtype, trainable=False, name=w)
                             for s, w in zip(shapes, ("keys", "values"))])

    def init_params(self, params, rng):
        for p in params:
            p.zero_()

    def forward(self, x, y, params, ws, saved):
        k_layout, v_layout, _ = self._layouts()
        queries = None
        if self.packed:  # keys and values: parts 1 and 2 of each token's projection
            n, h, t, d, _ = self.dims
            qkv, pos = x
            k, v = (Tensor(self.ctx, (n, t, 1, h, d), qkv.dtype, buffer=qkv.buffer,
                           offset=qkv.offset + part * h * d) for part in (1, 2))
            queries, y = y[0], y[1:]
        else:
            k, v, pos = x
        return self.ops.update(k, v, pos, params[0], params[1], y[0], y[1], k_layout,
                               v_layout, queries=queries,
                               mask=y[2] if self.options["mask"] else None)


def _nhtd(shape, layout):
    """(N, H, T, D) of a pass's rows of ``shape`` in ``layout``."""
    n, a, b, d = shape
    return (n, b, a, d) if layout == "nlhd" else (n, a, b, d)
