"""Launches of a key/value cache (``kernels/kv_cache.cl``, the KVCache layer): this pass's
rows written at a position read on the device, and the additive mask of attention over
the cache."""
import numpy as np

from ..kernels import program
from ..utils import round_up

__all__ = ["KVCacheOps"]

_BITS = {1: "uchar", 2: "ushort", 4: "uint", 8: "ulong"}  # elements copied as their bits


class KVCacheOps:
    """Caches of ``length`` positions for (N, H) = (``samples``, ``heads``) rows of
    ``t_len`` new tokens; ``itemsize``: the cached elements' bytes; ``pos_dtype``:
    int32 or int64; ``per_row``: one position per sample (else one for all)."""

    def __init__(self, ctx, samples, heads, t_len, length, itemsize, pos_dtype, per_row):
        self.ctx, self.heads, self.t_len, self.length = ctx, heads, t_len, length
        self.samples, self.per_row = samples, int(per_row)
        self.program = program.get(ctx, "kv_cache", E=_BITS[itemsize],
                                   P="int" if np.dtype(pos_dtype) == np.int32 else "long")
        self._wg = min(256, ctx.facts.max_work_group)

    def _launch(self, kernel, total, args):
        return program.Launch(self.program, kernel, (round_up(total, self._wg),), (self._wg,),
                              [np.uint64(total)] + args)

    def write(self, k, keys, v, values, pos, key_width, value_width):
        """keys[n, h, pos_n + t, :] = k[n, h, t, :], and values from v alike (nothing where
        pos_n overflows), in one launch."""
        u32, u64 = np.uint32, np.uint64
        rows = self.samples * self.heads * self.t_len
        keys_total, total = rows * key_width, rows * (key_width + value_width)
        return [program.Launch(self.program, "kv_write", (round_up(total, self._wg),),
                               (self._wg,), [
            u64(keys_total), u64(total), u32(self.heads), u32(self.t_len), u32(self.length),
            u32(key_width), u32(value_width), k.buffer, u64(k.offset), keys.buffer,
            u64(keys.offset), v.buffer, u64(v.offset), values.buffer, u64(values.offset),
            pos.buffer, u64(pos.offset), u32(self.per_row)])]

    def read(self, keys, keys_out, values, values_out):
        """The whole caches copied into the outputs, in one launch."""
        u64 = np.uint64
        total = keys.size + values.size
        return [program.Launch(self.program, "kv_read", (round_up(total, self._wg),),
                               (self._wg,), [
            u64(keys.size), u64(total), keys.buffer, u64(keys.offset), keys_out.buffer,
            u64(keys_out.offset), values.buffer, u64(values.offset), values_out.buffer,
            u64(values_out.offset)])]

    def mask(self, mask, pos):
        """mask (N or 1, 1, T, length) float32: 0 where j <= pos + t, -inf elsewhere, NaN
        over a sample whose position overflows the cache."""
        u32, u64 = np.uint32, np.uint64
        return [self._launch("kv_mask", mask.size, [
            u32(self.t_len), u32(self.length), mask.buffer, u64(mask.offset), pos.buffer,
            u64(pos.offset), u32(self.per_row)])]
