<%include file="common.h"/>
## A key/value cache kept across a Net's passes (layers/kv_cache.py). E: an unsigned
## integer type of the element's size (the cache stores bits, whatever its float type);
## P: the positions' type. pos holds one position per sample (per_row) or one for all.

// pos of sample n, or -1 where it is outside [0, L - T] (the cache would overflow)
inline long kv_position(__global const ${P} *pos, ulong pos_offset, uint per_row, ulong n,
                        uint t_len, uint capacity)
{
    long p = (long)pos[pos_offset + (per_row ? n : 0)];
    return (p < 0 || p + (long)t_len > (long)capacity) ? -1 : p;
}

// cache[n, h, pos_n + t, :] = new[n, h, t, :] over every (n, h, t, d) of one of them
inline void kv_put(ulong i, uint heads, uint t_len, uint capacity, uint width,
                   __global const ${E} *src, __global ${E} *cache, __global const ${P} *pos,
                   ulong pos_offset, uint per_row)
{
    ulong d = i % width, row = i / width;
    ulong t = row % t_len, nh = row / t_len;
    long p = kv_position(pos, pos_offset, per_row, nh / heads, t_len, capacity);
    if (p < 0)
        return;  // (the mask of this pass is NaN: nothing reads a plausible value)
    cache[(nh * capacity + (ulong)p + t) * width + d] = src[i];
}

// the keys' rows (the first keys_total items), then the values' rows, in one launch
__kernel void kv_write(ulong keys_total, ulong total, uint heads, uint t_len, uint capacity,
                       uint key_width, uint value_width,
                       __global const ${E} *k, ulong k_offset, __global ${E} *keys,
                       ulong keys_offset, __global const ${E} *v, ulong v_offset,
                       __global ${E} *values, ulong values_offset,
                       __global const ${P} *pos, ulong pos_offset, uint per_row)
{
    ulong i = get_global_id(0);
    if (i >= total)
        return;
    if (i < keys_total)
        kv_put(i, heads, t_len, capacity, key_width, k + k_offset, keys + keys_offset, pos,
               pos_offset, per_row);
    else
        kv_put(i - keys_total, heads, t_len, capacity, value_width, v + v_offset,
               values + values_offset, pos, pos_offset, per_row);
}

// the two caches copied out whole (the layer's outputs), in one launch
__kernel void kv_read(ulong keys_total, ulong total, __global const ${E} *keys,
                      ulong keys_offset, __global ${E} *keys_out, ulong keys_out_offset,
                      __global const ${E} *values, ulong values_offset,
                      __global ${E} *values_out, ulong values_out_offset)
{
    ulong i = get_global_id(0);
    if (i >= total)
        return;
    if (i < keys_total)
        keys_out[keys_out_offset + i] = keys[keys_offset + i];
    else
        values_out[values_out_offset + i - keys_total] =
            values[values_offset + i - keys_total];
}

// mask[n, 0, t, j] = 0 where key j is in the cache and not after query t (at pos_n + t),
// -inf elsewhere; NaN over the whole sample where its position overflows the cache
__kernel void kv_mask(ulong total, uint t_len, uint capacity,
                      __global float *mask, ulong mask_offset,
                      __global const ${P} *pos, ulong pos_offset, uint per_row)
{
    ulong i = get_global_id(0);
    if (i >= total)
        return;
    ulong j = i % capacity, row = i / capacity;
    ulong t = row % t_len, n = row / t_len;
    long p = kv_position(pos, pos_offset, per_row, n, t_len, capacity);
    mask[mask_offset + i] = p < 0 ? NAN : ((long)j <= p + (long)t ? 0.0f : -INFINITY);
}
