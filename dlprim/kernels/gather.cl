<%include file="common.h"/>
// Index gathers and their adjoints, over tensors seen as (outer, n, inner) along the
// indexed axis: index_select / embedding (one index per output slice), gather (one index
// per output element) and the scatter-adds that are their gradients. An index outside
// [0, n) reads as NaN in a float output (0 in an integer one), so a bad index shows in
// the result instead of reading another tensor's memory; the adds skip it.
// T: the element type; I: the index type (long or int).

inline ${T} missing(void)
{
% if T in ("float", "half"):
    return NAN;
% else:
    return 0;
% endif
}

// dst[o, i, k] = src[o, idx[i], k], dst of (outer, m, inner), src of (outer, n, inner)
__kernel void index_select(ulong total, ulong n, ulong m, ulong inner,
                           __global const ${T} *src, ulong src_offset,
                           __global const ${I} *idx, ulong idx_offset,
                           __global ${T} *dst, ulong dst_offset)
{
    ulong g = get_global_id(0);
    if (g >= total)
        return;
    ulong k = g % inner, r = g / inner;
    ulong i = r % m, o = r / m;
    ${I} j = idx[idx_offset + i];
    dst[dst_offset + g] = (j >= 0 && (ulong)j < n) ? src[src_offset + (o * n + j) * inner + k]
                                                  : missing();
}

// dst[o, i, k] = src[o, idx[o, i, k], k], dst and idx of (outer, m, inner)
__kernel void gather(ulong total, ulong n, ulong m, ulong inner,
                     __global const ${T} *src, ulong src_offset,
                     __global const ${I} *idx, ulong idx_offset,
                     __global ${T} *dst, ulong dst_offset)
{
    ulong g = get_global_id(0);
    if (g >= total)
        return;
    ulong k = g % inner, o = g / inner / m;
    ${I} j = idx[idx_offset + g];
    dst[dst_offset + g] = (j >= 0 && (ulong)j < n) ? src[src_offset + (o * n + j) * inner + k]
                                                  : missing();
}

% if T == "float":
// dst += v with a compare-and-swap loop (OpenCL 1.2 has no float atomic add); the order
// of the adds into one element is not fixed, as with atomics anywhere
inline void atomic_add_float(volatile __global float *p, float v)
{
    union { uint u; float f; } old, next;
    do {
        old.f = *p;
        next.f = old.f + v;
    } while (atomic_cmpxchg((volatile __global uint *)p, old.u, next.u) != old.u);
}

// dst[o, idx[i], k] += alpha * src[o, i, k]; indices equal to skip (embedding's padding
// row) add nothing. dst of (outer, n, inner), src of (outer, m, inner)
__kernel void index_add(ulong total, ulong n, ulong m, ulong inner,
                        __global const float *src, ulong src_offset,
                        __global const ${I} *idx, ulong idx_offset,
                        __global float *dst, ulong dst_offset, float alpha, long skip)
{
    ulong g = get_global_id(0);
    if (g >= total)
        return;
    ulong k = g % inner, r = g / inner;
    ulong i = r % m, o = r / m;
    ${I} j = idx[idx_offset + i];
    if (j >= 0 && (ulong)j < n && (long)j != skip)
        atomic_add_float(dst + dst_offset + (o * n + j) * inner + k, alpha * src[src_offset + g]);
}

// dst[o, idx[o, i, k], k] += src[o, i, k]
__kernel void scatter_add(ulong total, ulong n, ulong m, ulong inner,
                          __global const float *src, ulong src_offset,
                          __global const ${I} *idx, ulong idx_offset,
                          __global float *dst, ulong dst_offset)
{
    ulong g = get_global_id(0);
    if (g >= total)
        return;
    ulong k = g % inner, o = g / inner / m;
    ${I} j = idx[idx_offset + g];
    if (j >= 0 && (ulong)j < n)
        atomic_add_float(dst + dst_offset + (o * n + j) * inner + k, src[src_offset + g]);
}
% endif
