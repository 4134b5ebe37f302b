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
and a first output, the queries, split off in the caches' layout. With option
``query_heads`` Q the packed input is (N, T, Q + 2 H, D), Q query heads then H key and H
value heads (grouped-query attention's projection). The packed layout may take the
rotary tables cos and sin after pos ((N or 1, T, D), the sine's first half negated, as
the Rotary layer reads them): the queries and the new keys are then rotated on their
way, the rotary embedding without a launch of its own. Option
``cache_layout`` "nlhd" keeps the caches, their outputs and those queries as
(N, L, H, D), what a ScaledDotProductAttention of layout "nlhd" reads; its output is then
(N, T, H, DV), the heads merged by a Reshape alone.

The caches are stored as the keys and values come: float32, or float16 / bfloat16 in a
net of precision "fp16" / "bf16". In a Net the cache outputs are the parameters
themselves (``Setup.param_outputs``: nothing is copied a pass, and an in-place write on
them gets memory of its own); the update (the new rows written, the queries and the
mask) is one launch. Given outputs of their own (a layer run alone), the caches are
copied to them too: in that launch on GPUs, by the driver's copy first on CPUs
(core/kv_cache.py). The position is read on the device, so one plan serves every step: a
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
    OPTIONS = {"length": None, "mask": True, "layout": "nhld", "cache_layout": "nhld",
               "query_heads": None}
    HAS_BACKWARD = False
    BACKWARD_READS_INPUTS = False
    HALF_STORAGE = "follows"  # (the caches are stored as the keys and values come)

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
        k_layout, v_layout, nlhd = self.layouts = self._layouts()
        packed = k_layout == "packed"
        tables = None
        if packed:
            n, t, h, d, q_heads, tables = self._packed_dims(in_specs)
            pos, dv, dtype = in_specs[1], d, in_specs[0].dtype
        else:
            if len(in_specs) != 3:
                self.fail("expects inputs k, v and pos, got %d" % len(in_specs))
            if self.options["query_heads"] is not None:
                self.fail("option 'query_heads' is for the packed layout")
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
        self.packed, self.q_heads = packed, q_heads if packed else 0
        self.per_row = pos.shape[0] == n and n > 1
        self.ops = KVCacheOps(self.ctx, n, h, t, length, dtype, pos.dtype, self.per_row, nlhd,
                              tables)
        masks = n if self.per_row else 1
        outputs = [TensorSpec(order(n, q_heads, t, d), dtype)] if packed else []
        outputs += [TensorSpec(shapes[0], dtype), TensorSpec(shapes[1], dtype)]
        if self.options["mask"]:
            outputs.append(TensorSpec((masks, 1, t, length), "float32"))
        # the caches handed on are the parameters themselves (no copy of them a pass)
        first = 1 if packed else 0
        return Setup(outputs,
                     params=[ParamSpec(s, dtype, trainable=False, name=w)
                             for s, w in zip(shapes, ("keys", "values"))],
                     param_outputs=[(first, 0), (first + 1, 1)])

    def _packed_dims(self, in_specs):
        """(N, T, H, D, query heads, the rotary tables' type or None) of the packed
        layout's inputs qkv, pos and optionally the rotary tables cos and sin, checked."""
        q_heads = self.options["query_heads"]
        if len(in_specs) not in (2, 4):
            self.fail("the packed layout expects inputs qkv and pos, and optionally the "
                      "rotary tables cos and sin, got %d" % len(in_specs))
        qkv = in_specs[0]
        if q_heads is None:
            if len(qkv.shape) != 5 or qkv.shape[2] != 3:
                self.fail("the packed layout's input qkv must be (N, T, 3, H, D), got shape %s"
                          % (qkv.shape,))
            n, t, _, h, d = qkv.shape
            q_heads = h
        else:
            if not is_int(q_heads) or q_heads < 1:
                self.fail("option 'query_heads' must be a positive int, got %r" % (q_heads,))
            if len(qkv.shape) != 4 or (qkv.shape[2] - q_heads) < 2 or \
                    (qkv.shape[2] - q_heads) % 2:
                self.fail("with query_heads %d the packed input qkv must be (N, T, %d + 2 H, "
                          "D), got shape %s" % (q_heads, q_heads, qkv.shape))
            n, t, parts, d = qkv.shape
            h = (parts - q_heads) // 2
        tables = None
        if len(in_specs) == 4:
            cos, sin = in_specs[2:]
            if cos.shape != sin.shape or cos.dtype != sin.dtype or \
                    tuple(cos.shape) not in ((1, t, d), (n, t, d)) or d % 2:
                self.fail("the rotary tables cos and sin must be (N or 1, T, D) = (%d or 1, "
                          "%d, %d) of one type, D even, got %s and %s"
                          % (n, t, d, cos.shape, sin.shape))
            tables = cos.dtype
        return n, t, h, d, q_heads, tables

    def init_params(self, params, rng):
        for p in params:
            p.zero_()

    def forward(self, x, y, params, ws, saved):
        k_layout, v_layout, _ = self.layouts
        queries = tables = None
        if self.packed:  # keys and values: where their heads start in each token's row
            n, h, t, d, _ = self.dims
            qkv, pos = x[:2]
            tables = x[2:] or None
            k, v = (Tensor(self.ctx, (n, t, h, d), qkv.dtype, buffer=qkv.buffer,
                           offset=qkv.offset + start * d)
                    for start in (self.q_heads, self.q_heads + h))
            queries, y = y[0], y[1:]
        else:
            k, v, pos = x
        return self.ops.update(k, v, pos, params[0], params[1], y[0], y[1], k_layout,
                               v_layout, queries=queries,
                               mask=y[2] if self.options["mask"] else None, tables=tables)


def _nhtd(shape, layout):
    """(N, H, T, D) of a pass's rows of ``shape`` in ``layout``."""
    n, a, b, d = shape
    return (n, b, a, d) if layout == "nlhd" else (n, a, b, d)
