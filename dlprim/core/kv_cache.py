"""The launch of a key/value cache (``kernels/kv_cache.cl``, the KVCache layer): this
pass's rows written at a position read on the device, the whole caches handed on, the
queries of a packed input split off and the additive mask of attention over the cache,
all in one launch."""
import numpy as np

from ..kernels import program
from ..utils import round_up

__all__ = ["KVCacheOps", "LAYOUTS", "source_strides"]

_BITS = {1: "uchar", 2: "ushort", 4: "uint", 8: "ulong"}  # elements copied as their bits

# how a pass's keys or values are laid out: (N, H, T, D), (N, T, H, D), or one part of a
# (N, T, 3, H, D) projection of queries, keys and values together
LAYOUTS = ("nhld", "nlhd", "packed")


def source_strides(layout, heads, t_len, width):
    """(sample, token, head) strides in elements of a pass's rows in ``layout``."""
    if layout == "nhld":
        return heads * t_len * width, width, t_len * width
    if layout == "nlhd":
        return t_len * heads * width, heads * width, width
    return t_len * 3 * heads * width, 3 * heads * width, width  # packed


class KVCacheOps:
    """Caches of ``length`` positions for (N, H) = (``samples``, ``heads``) rows of
    ``t_len`` new tokens; ``itemsize``: the cached elements' bytes; ``pos_dtype``:
    int32 or int64; ``per_row``: one position per sample (else one for all); ``nlhd``:
    the caches are (N, L, H, D) (else (N, H, L, D))."""

    def __init__(self, ctx, samples, heads, t_len, length, itemsize, pos_dtype, per_row,
                 nlhd=False):
        self.ctx, self.heads, self.t_len, self.length = ctx, heads, t_len, length
        self.samples, self.per_row, self.nlhd = samples, int(per_row), int(nlhd)
        self.program = program.get(ctx, "kv_cache", E=_BITS[itemsize],
                                   P="int" if np.dtype(pos_dtype) == np.int32 else "long")
        self._wg = min(256, ctx.facts.max_work_group)

    def update(self, k, v, pos, keys, values, keys_out, values_out, k_layout="nhld",
               v_layout="nhld", queries=None, mask=None):
        """One launch: keys[n, h, pos_n + t] = k's row (n, h, t), values from v alike
        (nothing where pos_n overflows), the caches copied whole into ``keys_out`` and
        ``values_out``; with ``queries`` (k and v ``packed``: views of parts 1 and 2 of
        the projection) part 0 copied there in the caches' layout; with ``mask`` (N or
        1, 1, T, length) float32, 0 where j <= pos + t, -inf elsewhere, NaN over a sample
        whose position overflows the cache."""
        u32, u64 = np.uint32, np.uint64
        n, h, t = self.samples, self.heads, self.t_len
        d, dv = keys.shape[-1], values.shape[-1]
        ks, vs = source_strides(k_layout, h, t, d), source_strides(v_layout, h, t, dv)
        q_total = 0 if queries is None else queries.size
        m_total = 0 if mask is None else mask.size
        total = q_total + keys.size + values.size + m_total
        absent = keys_out  # (a valid buffer for an absent tensor's pointer; never touched)
        q = queries if queries is not None else absent
        m = mask if mask is not None else absent
        return [program.Launch(self.program, "kv_update", (round_up(total, self._wg),),
                               (self._wg,), [
            u64(q_total), u64(keys.size), u64(values.size), u64(m_total), u32(h), u32(t),
            u32(self.length), u32(d), u32(dv), u32(self.nlhd),
            *(u64(s) for s in ks), *(u64(s) for s in vs),
            k.buffer, u64(k.offset), u64(0 if queries is None else k.offset - h * d), v.buffer, u64(v.offset),
            keys.buffer, u64(keys.offset), values.buffer, u64(values.offset),
            keys_out.buffer, u64(keys_out.offset), values_out.buffer, u64(values_out.offset),
            q.buffer, u64(q.offset), m.buffer, u64(m.offset),
            pos.buffer, u64(pos.offset), u32(self.per_row)])]
