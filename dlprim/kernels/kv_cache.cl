<%include file="common.h"/>
## A key/value cache kept across a Net's passes (layers/kv_cache.py), updated in one
## launch. E: an unsigned integer type of the element's size (the cache stores bits,
## whatever its float type); P: the positions' type. pos holds one position per sample
## (per_row) or one for all.

// pos of sample n, or -1 where it is outside [0, L - T] (the cache would overflow)
inline long kv_position(__global const ${P} *pos, ulong pos_offset, uint per_row, ulong n,
                        uint t_len, uint capacity)
{
    long p = (long)pos[pos_offset + (per_row ? n : 0)];
    return (p < 0 || p + (long)t_len > (long)capacity) ? -1 : p;
}

// One element (n, h, j, e) of a cache of `width` per position, j its position: where j
// is one of this pass's (pos_n <= j < pos_n + T) it comes from the new rows, at
// src[n * s_n + t * s_t + h * s_h + e], and is written into the cache; either way it is
// copied to the layer's output. Each cache element belongs to one work-item: writing
// the new rows and reading the whole cache need no second launch.
inline void kv_element(ulong i, uint heads, uint t_len, uint capacity, uint width,
                       uint nlhd, ulong s_n, ulong s_t, ulong s_h,
                       __global const ${E} *src, __global ${E} *cache, __global ${E} *out,
                       __global const ${P} *pos, ulong pos_offset, uint per_row)
{
    ulong e = i % width, row = i / width;
    ulong j, h, n;
    if (nlhd) {  // (N, L, H, width)
        h = row % heads;
        j = (row / heads) % capacity;
        n = row / heads / capacity;
    } else {  // (N, H, L, width)
        j = row % capacity;
        h = (row / capacity) % heads;
        n = row / capacity / heads;
    }
    long p = kv_position(pos, pos_offset, per_row, n, t_len, capacity);
    ${E} value;
    if (p >= 0 && (long)j >= p && (long)j < p + (long)t_len) {
        value = src[n * s_n + ((ulong)((long)j - p)) * s_t + h * s_h + e];
        cache[i] = value;
    } else {
        value = cache[i];
    }
    out[i] = value;
}

// Segments of one index space, in order: the queries split off a packed input
// (queries_total items, 0 otherwise; laid out as the caches), the keys' cache, the
// values' cache, then the mask (mask_total items, 0 without one):
// mask[n, 0, t, j] = 0 where key j is in the cache and not after query t (at pos_n + t),
// -inf elsewhere; NaN over the whole sample where its position overflows the cache.
// A sample whose position overflows writes nothing into the caches.
__kernel void kv_update(ulong queries_total, ulong keys_total, ulong values_total,
                        ulong mask_total, uint heads, uint t_len, uint capacity,
                        uint key_width, uint value_width, uint nlhd,
                        ulong k_sn, ulong k_st, ulong k_sh, ulong v_sn, ulong v_st, ulong v_sh,
                        __global const ${E} *k, ulong k_offset, ulong q_offset,
                        __global const ${E} *v, ulong v_offset,
                        __global ${E} *keys, ulong keys_offset,
                        __global ${E} *values, ulong values_offset,
                        __global ${E} *keys_out, ulong keys_out_offset,
                        __global ${E} *values_out, ulong values_out_offset,
                        __global ${E} *queries, ulong queries_offset,
                        __global float *mask, ulong mask_offset,
                        __global const ${P} *pos, ulong pos_offset, uint per_row)
{
    ulong i = get_global_id(0);
    if (i < queries_total) {  // packed: the queries start at q_offset of k's buffer
        ulong e = i % key_width, row = i / key_width, h, t, n;
        if (nlhd) {
            h = row % heads;
            t = (row / heads) % t_len;
            n = row / heads / t_len;
        } else {
            t = row % t_len;
            h = (row / t_len) % heads;
            n = row / t_len / heads;
        }
        queries[queries_offset + i] = k[q_offset + n * k_sn + t * k_st + h * k_sh + e];
        return;
    }
    i -= queries_total;
    if (i < keys_total) {
        kv_element(i, heads, t_len, capacity, key_width, nlhd, k_sn, k_st, k_sh, k + k_offset,
                   keys + keys_offset, keys_out + keys_out_offset, pos, pos_offset, per_row);
        return;
    }
    i -= keys_total;
    if (i < values_total) {
        kv_element(i, heads, t_len, capacity, value_width, nlhd, v_sn, v_st, v_sh,
                   v + v_offset, values + values_offset, values_out + values_out_offset, pos,
                   pos_offset, per_row);
        return;
    }
    i -= values_total;
    if (i >= mask_total)
        return;
    ulong j = i % capacity, row = i / capacity;
    ulong t = row % t_len, n = row / t_len;
    long p = kv_position(pos, pos_offset, per_row, n, t_len, capacity);
    mask[mask_offset + i] = p < 0 ? NAN : ((long)j <= p + (long)t ? 0.0f : -INFINITY);
}
