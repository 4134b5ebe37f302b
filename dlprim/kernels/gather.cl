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

// Each kernel takes the index of element g of the (outer, m, inner) side: for the
// "select" kernels one per (o, i) slice, idx[i]; for the element kernels one per element,
// idx[o, i, k]. (outer, n, inner) is the other side, which the index points into.
<%def name="index_of(per_element)">${"idx[idx_offset + g]" if per_element else "idx[idx_offset + (g / inner) % m]"}</%def>

% if T == "char":
// dst[o, i, k] = src[o, idx[i], k] * scale[o, idx[i]]: the rows of an int8 table with one
// float32 scale a row (a weight-only quantized embedding), as float32
__kernel void index_select_scaled(ulong total, ulong n, ulong m, ulong inner,
                                  __global const char *src, ulong src_offset,
                                  __global const float *scale, ulong scale_offset,
                                  __global const ${I} *idx, ulong idx_offset,
                                  __global float *dst, ulong dst_offset)
{
    ulong g = get_global_id(0);
    if (g >= total)
        return;
    ulong k = g % inner, o = g / inner / m;
    ${I} j = ${index_of(False)};
    dst[dst_offset + g] = (j >= 0 && (ulong)j < n)
        ? (float)src[src_offset + (o * n + j) * inner + k] * scale[scale_offset + o * n + j]
        : NAN;
}
% endif

% for name, per_element in (("index_select", False), ("gather", True)):
// dst[o, i, k] = src[o, ${"idx[o, i, k]" if per_element else "idx[i]"}, k]: dst of (outer, m, inner)
__kernel void ${name}(ulong total, ulong n, ulong m, ulong inner,
                      __global const ${T} *src, ulong src_offset,
                      __global const ${I} *idx, ulong idx_offset,
                      __global ${T} *dst, ulong dst_offset)
{
    ulong g = get_global_id(0);
    if (g >= total)
        return;
    ulong k = g % inner, o = g / inner / m;
    ${I} j = ${index_of(per_element)};
    dst[dst_offset + g] = (j >= 0 && (ulong)j < n) ? src[src_offset + (o * n + j) * inner + k]
                                                  : missing();
}

% endfor

% if T == "float":
// dst += v with a compare-and-swap loop (OpenCL 1.2 has no float atomic add); the order
// of the adds into one element is not fixed, as with atomics anywhere. Each try starts
// from the value the last compare-and-swap saw, the first from a guess of 0: a plain read
// of *p beside other work-items' atomics would be a data race (oclgrind reports it).
inline void atomic_add_float(volatile __global float *p, float v)
{
    union { uint u; float f; } old, next;
    uint seen = 0;
    do {
        old.u = seen;
        next.f = old.f + v;
        seen = atomic_cmpxchg((volatile __global uint *)p, old.u, next.u);
    } while (seen != old.u);
}

% for name, per_element in (("index_add", False), ("scatter_add", True)):
// dst[o, ${"idx[o, i, k]" if per_element else "idx[i]"}, k] += ${"" if per_element else "alpha * "}src[o, i, k]\
${"" if per_element else "; the index skip (embedding's padding row) adds nothing"}
__kernel void ${name}(ulong total, ulong n, ulong m, ulong inner,
                      __global const float *src, ulong src_offset,
                      __global const ${I} *idx, ulong idx_offset,
                      __global float *dst, ulong dst_offset${"" if per_element else ", float alpha, long skip"})
{
    ulong g = get_global_id(0);
    if (g >= total)
        return;
% if per_element:
    const float alpha = 1.0f;
    const long skip = -1;
% endif
    ulong k = g % inner, o = g / inner / m;
    ${I} j = ${index_of(per_element)};
    if (j >= 0 && (ulong)j < n && (long)j != skip)
        atomic_add_float(dst + dst_offset + (o * n + j) * inner + k, alpha * src[src_offset + g]);
}

% endfor
% endif
