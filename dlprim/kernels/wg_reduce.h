// Work-group tree reductions over a __local scratch of get_local_size(0) floats.
// The local size must be a power of two; every work item of the group must call them.
#ifndef DLPRIM_WG_REDUCE_H
#define DLPRIM_WG_REDUCE_H
inline float wg_reduce_sum(__local float *scratch, float v)
{
    int lid = get_local_id(0);
    scratch[lid] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int stride = get_local_size(0) / 2; stride > 0; stride /= 2) {
        if (lid < stride)
            scratch[lid] += scratch[lid + stride];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    v = scratch[0];
    barrier(CLK_LOCAL_MEM_FENCE);  // scratch is reused by the caller's next reduction
    return v;
}

// fmax: a NaN is dropped (callers that need it get it back otherwise, see softmax.cl)
inline float wg_reduce_max(__local float *scratch, float v)
{
    int lid = get_local_id(0);
    scratch[lid] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int stride = get_local_size(0) / 2; stride > 0; stride /= 2) {
        if (lid < stride)
            scratch[lid] = fmax(scratch[lid], scratch[lid + stride]);
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    v = scratch[0];
    barrier(CLK_LOCAL_MEM_FENCE);
    return v;
}

// (m, s): the maximum of a row of C values and the sum of exp(x - m) over it, computed
// by the whole work-group; log sum exp(x) = m + log(s) without overflow. Softmax and
// cross entropy share it. The row is stored as X_T (the template's, float by default:
// 16-bit values widen as they load; LD_ of common.h).
<% X_T = context.get("X_T", "float") %>
// One pass over the row: each work item keeps its own running maximum m_t and sum s_t of
// exp(x - m_t), rescaling the sum when the maximum grows (rarely, after the first few
// values), and the group then brings every s_t to the group's maximum. (Two passes, the
// maximum then the sums, read the row twice: GPT-2's 50,257 logits a row are 100 KB.) A
// NaN makes s NaN; a row whose values are all -inf gives m = -inf and s = 0, which the
// callers' m + log s and exp(x - m) / s turn into NaN as the two passes did.
inline float2 wg_row_max_sumexp(__local float *scratch, __global const ${X_T} *x, ulong C)
{
    int lid = get_local_id(0), wg = get_local_size(0);
    float m = -INFINITY, s = 0.0f;
    for (ulong c = lid; c < C; c += wg) {
        const float v = LD_${X_T}(x, c);
        if (v > m) {
            s = s * exp(m - v) + 1.0f;  // (exp(-inf) = 0 while nothing was summed yet)
            m = v;
        } else if (v != -INFINITY) {
            s += exp(v - m);
        }
    }
    const float top = wg_reduce_max(scratch, m);
    // an item that saw no value above -inf has s = 0, or NaN where it saw a NaN, which
    // must stay (0 * NaN); exp(-inf - top) would be NaN where top is -inf too
    s = m == -INFINITY ? s * 0.0f : s * exp(m - top);
    return (float2)(top, wg_reduce_sum(scratch, s));
}
#endif
