<%include file="common.h"/>
## A key/value cache kept across a Net's passes (layers/kv_cache.py), updated in one
## launch. E: an unsigned integer type of the element's size (the cache stores bits,
## whatever its float type); P: the positions' type. pos holds one position per sample
## (per_row) or one for all. ROTARY: the queries and the new keys are rotated on their way
## (the rotary position embedding, x cos + swap(x) sin over each head's row, the sine's
## first half negated in the table), X the elements' float type and C the tables'.

// pos of sample n, or -1 where it is outside [0, L - T] (the cache would overflow)
inline long kv_position(__global const ${P} *pos, ulong pos_offset, uint per_row, ulong n,
                        uint t_len, uint capacity)
{
    long p = (long)pos[pos_offset + (per_row ? n : 0)];
    return (p < 0 || p + (long)t_len > (long)capacity) ? -1 : p;
}

% if ROTARY:
// element e of a head's row (width D), at src[at], rotated by the table row at `table`
inline float kv_rotated(__global const ${E} *src, ulong at, ulong e, uint width,
                        __global const ${C} *cosines, __global const ${C} *sines, ulong table)
{
    __global const ${X} *x = (__global const ${X} *)src;
    ulong halfway = width / 2, partner = e < halfway ? at + halfway : at - halfway;
    return LD_${X}(x, at) * LD_${C}(cosines, table + e) +
           LD_${X}(x, partner) * LD_${C}(sines, table + e);
}
% endif

// With `whole`: element e of row `row` of a cache of `width` per position ((n, h, j) of
// it, j its position): where j is one of this pass's (pos_n <= j < pos_n + T) it comes
// from the new rows, at src[n * s_n + t * s_t + h * s_h + e], and is written into the
// cache; either way it is copied to the layer's output. Each cache element belongs to
// one work-item: writing the new rows and reading the whole cache need no second
// launch. Without: `row` is (n, h, t) of this pass, written into the cache and the
// output at pos_n + t (the caches were copied to the outputs before).
inline void kv_element(ulong row, ulong e, uint whole, uint heads, uint t_len,
                       uint capacity, uint width, uint nlhd, ulong s_n, ulong s_t, ulong s_h,
                       __global const ${E} *src, __global ${E} *cache, __global ${E} *out,
                       __global const ${P} *pos, ulong pos_offset, uint per_row
% if ROTARY:
                       , uint rotate, __global const ${C} *cosines,
                       __global const ${C} *sines, uint table_rows
% endif
                       )
{
    ulong i, j, h, n, t;
    long p;
    if (!whole) {  // row (n, h, t) of this pass: the caches were copied out already
        t = row % t_len;
        h = (row / t_len) % heads;
        n = row / t_len / heads;
        p = kv_position(pos, pos_offset, per_row, n, t_len, capacity);
        if (p < 0)
            return;
        j = (ulong)p + t;
        i = (nlhd ? (n * capacity + j) * heads + h : (n * heads + h) * capacity + j) * width
            + e;
    } else {
        i = row * width + e;
        if (nlhd) {  // (N, L, H, width)
            h = row % heads;
            j = (row / heads) % capacity;
            n = row / heads / capacity;
        } else {  // (N, H, L, width)
            j = row % capacity;
            h = (row / capacity) % heads;
            n = row / capacity / heads;
        }
        p = kv_position(pos, pos_offset, per_row, n, t_len, capacity);
        if (p < 0 || (long)j < p || (long)j >= p + (long)t_len) {
            out[i] = cache[i];
            return;
        }
        t = (ulong)((long)j - p);
    }
    ulong at = n * s_n + t * s_t + h * s_h + e;
% if ROTARY:
    if (rotate) {  // (rounded once into the storage: the cache and the output agree)
        float v = kv_rotated(src, at, e, width, cosines, sines,
                             ((table_rows > 1 ? n : 0) * t_len + t) * width);
        ST_${X}((__global ${X} *)cache, i, v);
        ST_${X}((__global ${X} *)out, i, v);
        return;
    }
% endif
    ${E} value = src[at];
    cache[i] = value;
    out[i] = value;
}

// A 2-D launch: dimension 0 the element within a row (span = the widest row), dimension
// 1 the rows of the segments, in order: the queries split off a packed input
// (queries_total elements, 0 otherwise; laid out as the caches), the keys' rows, the
// values' rows (k_rows and v_rows: the caches' whole, or with `whole` 0 only this
// pass's, where the caches were copied to the outputs before), then the mask, cut in
// rows of span (mask_total elements, 0 without one):
// mask[n, 0, t, j] = 0 where key j is in the cache and not after query t (at pos_n + t),
// -inf elsewhere; NaN over the whole sample where its position overflows the cache.
// A sample whose position overflows writes nothing into the caches. (Along dimension 0
// neighbours touch neighbours, and a row's index arithmetic is one per row where a CPU
// runs dimension 0 as vector lanes.)
__kernel void kv_update(ulong queries_total, ulong k_rows, ulong v_rows, uint whole,
                        ulong mask_total, uint span, uint heads, uint query_heads, uint t_len,
                        uint capacity,
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
                        __global const ${P} *pos, ulong pos_offset, uint per_row
% if ROTARY:
                        , __global const ${C} *cosines, ulong cos_offset,
                        __global const ${C} *sines, ulong sin_offset, uint table_rows
% endif
                        )
{
    ulong e = get_global_id(0), row = get_global_id(1);
    ulong q_rows = queries_total / key_width;
    if (row < q_rows) {  // packed: query_heads heads from q_offset of k's buffer
        if (e >= key_width)
            return;
        ulong h, t, n;
        if (nlhd) {
            h = row % query_heads;
            t = (row / query_heads) % t_len;
            n = row / query_heads / t_len;
        } else {
            t = row % t_len;
            h = (row / t_len) % query_heads;
            n = row / t_len / query_heads;
        }
        ulong at = q_offset + n * k_sn + t * k_st + h * k_sh + e, i = row * key_width + e;
% if ROTARY:
        ST_${X}((__global ${X} *)(queries + queries_offset), i,
                kv_rotated(k, at, e, key_width, cosines + cos_offset, sines + sin_offset,
                           ((table_rows > 1 ? n : 0) * t_len + t) * key_width));
% else:
        queries[queries_offset + i] = k[at];
% endif
        return;
    }
    row -= q_rows;
    if (row < k_rows) {
        if (e < key_width)
            kv_element(row, e, whole, heads, t_len, capacity, key_width, nlhd, k_sn, k_st, k_sh,
                       k + k_offset, keys + keys_offset, keys_out + keys_out_offset, pos,
                       pos_offset, per_row
% if ROTARY:
                       , 1, cosines + cos_offset, sines + sin_offset, table_rows
% endif
                       );
        return;
    }
    row -= k_rows;
    if (row < v_rows) {
        if (e < value_width)
            kv_element(row, e, whole, heads, t_len, capacity, value_width, nlhd, v_sn, v_st,
                       v_sh,
                       v + v_offset, values + values_offset, values_out + values_out_offset,
                       pos, pos_offset, per_row
% if ROTARY:
                       , 0, cosines, sines, table_rows
% endif
                       );
        return;
    }
    ulong i = (row - v_rows) * span + e;
    if (e >= span || i >= mask_total)
        return;
    ulong j = i % capacity, mrow = i / capacity;
    ulong t = mrow % t_len, n = mrow / t_len;
    long p = kv_position(pos, pos_offset, per_row, n, t_len, capacity);
    mask[mask_offset + i] = p < 0 ? NAN : ((long)j <= p + (long)t ? 0.0f : -INFINITY);
}
