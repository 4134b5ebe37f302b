"""The launch of a key/value cache (``kernels/kv_cache.cl``, the KVCache layer): this
pass's rows written at a position read on the device, the whole caches handed on (where
the outputs are not the caches themselves), the
queries of a packed input split off (and with the keys rotated by the rotary position
embedding) and the additive mask of attention over the cache, all in one launch."""
import numpy as np

from ..dtypes import cl_type
from ..kernels import program
from ..tensor import same_memory
from .copy import BufferCopy
from ..utils import round_up

__all__ = ["KVCacheOps", "LAYOUTS", "source_strides"]

_BITS = {1: "uchar", 2: "ushort", 4: "uint", 8: "ulong"}  # elements copied as their bits

# how a pass's keys or values are laid out: (N, H, T, D), (N, T, H, D), or one part of a
# (N, T, 3, H, D) projection of queries, keys and values together
LAYOUTS = ("nhld", "nlhd", "packed")


def source_strides(layout, heads, t_len, width, parts=None):
    """(sample, token, head) strides in elements of a pass's rows in ``layout``; packed:
    ``parts`` heads of ``width`` a token (queries, keys and values together)."""
    if layout == "nhld":
        return heads * t_len * width, width, t_len * width
    if layout == "nlhd":
        return t_len * heads * width, heads * width, width
    return t_len * parts * width, parts * width, width  # packed


class KVCacheOps:
    """Caches of ``length`` positions for (N, H) = (``samples``, ``heads``) rows of
    ``t_len`` new tokens; ``dtype``: the cached elements' type; ``pos_dtype``: int32 or
    int64; ``per_row``: one position per sample (else one for all); ``nlhd``: the caches
    are (N, L, H, D) (else (N, H, L, D)); ``table_dtype``: the rotary tables' type, where
    the queries and keys are rotated (None: not)."""

    def __init__(self, ctx, samples, heads, t_len, length, dtype, pos_dtype, per_row,
                 nlhd=False, table_dtype=None):
        self.ctx, self.heads, self.t_len, self.length = ctx, heads, t_len, length
        self.samples, self.per_row, self.nlhd = samples, int(per_row), int(nlhd)
        dtype = np.dtype(dtype)
        self.rotary = table_dtype is not None
        # (X and C name the float types of the rotation only: one build serves every
        # storage of a width without it)
        self.program = program.get(ctx, "kv_cache", E=_BITS[dtype.itemsize],
                                   P="int" if np.dtype(pos_dtype) == np.int32 else "long",
                                   ROTARY=int(self.rotary),
                                   X=cl_type(dtype) if self.rotary else "",
                                   C=cl_type(table_dtype) if self.rotary else "")
        self._wg = min(256, ctx.facts.max_work_group)

    def update(self, k, v, pos, keys, values, keys_out, values_out, k_layout="nhld",
               v_layout="nhld", queries=None, mask=None, tables=None):
        """One launch: keys[n, h, pos_n + t] = k's row (n, h, t), values from v alike
        (nothing where pos_n overflows), the caches copied whole into ``keys_out`` and
        ``values_out`` unless those are ``keys`` and ``values`` themselves (a Net's
        KVCache; on CPUs the copies are two driver copies first); with ``queries`` (k and v ``packed``: views of the projection
        where the keys' and the values' heads start, the queries' heads ahead of the
        keys') those heads copied there in the caches' layout; with ``mask`` (N or 1, 1,
        T, length) float32, 0 where j <= pos + t, -inf elsewhere, NaN over a sample whose
        position overflows the cache; ``tables`` (cos, sin) (N or 1, T, D): the queries
        and the new keys rotated by them (the KVCacheOps made with ``table_dtype``)."""
        u32, u64 = np.uint32, np.uint64
        n, h, t = self.samples, self.heads, self.t_len
        d, dv = keys.shape[-1], values.shape[-1]
        q_heads = 0 if queries is None else queries.size // (n * t * d)
        parts = q_heads + 2 * h
        ks = source_strides(k_layout, h, t, d, parts)
        vs = source_strides(v_layout, h, t, dv, parts)
        q_total = 0 if queries is None else queries.size
        m_total = 0 if mask is None else mask.size
        # 2-D: (an element of a row, the rows of every segment), the mask cut in rows too.
        # CPUs copy the caches out with the driver's copy first, and the kernel then
        # writes only this pass's rows (a kernel's copy is several times slower there);
        # outputs that are the caches themselves (a Net's KVCache) need no copy at all
        handed = not (same_memory(keys, keys_out) and same_memory(values, values_out))
        whole = handed and not self.ctx.facts.is_cpu
        span = max(d, dv)
        k_rows, v_rows = (keys.size // d, values.size // dv) if whole else (n * h * t,) * 2
        rows = q_total // d + k_rows + v_rows + -(-m_total // span)
        wide = program.pow2_at_most(min(span, self._wg))
        tall = max(1, self._wg // wide)
        absent = keys_out  # (a valid buffer for an absent tensor's pointer; never touched)
        q = queries if queries is not None else absent
        m = mask if mask is not None else absent
        rotation = []
        if self.rotary:
            cos, sin = tables
            rotation = [cos.buffer, u64(cos.offset), sin.buffer, u64(sin.offset),
                        u32(cos.size // (t * d))]
        out = [BufferCopy(keys, keys_out), BufferCopy(values, values_out)] \
            if handed and not whole else []
        return out + [program.Launch(self.program, "kv_update",
                                     (round_up(span, wide), round_up(rows, tall)), (wide, tall), [
            u64(q_total), u64(k_rows), u64(v_rows), u32(whole), u64(m_total), u32(span), u32(h),
            u32(q_heads), u32(t), u32(self.length), u32(d), u32(dv), u32(self.nlhd),
            *(u64(s) for s in ks), *(u64(s) for s in vs),
            k.buffer, u64(k.offset), u64(0 if queries is None else k.offset - q_heads * d),
            v.buffer, u64(v.offset),
            keys.buffer, u64(keys.offset), values.buffer, u64(values.offset),
            keys_out.buffer, u64(keys_out.offset), values_out.buffer, u64(values_out.offset),
            q.buffer, u64(q.offset), m.buffer, u64(m.offset),
            pos.buffer, u64(pos.offset), u32(self.per_row), *rotation])]
