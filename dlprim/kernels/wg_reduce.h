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
inline float2 wg_row_max_sumexp(__local float *scratch, __global const ${X_T} *x, ulong C)
{
    int lid = get_local_id(0), wg = get_local_size(0);
    float m = -INFINITY;
    for (ulong c = lid; c < C; c += wg)
        m = fmax(m, LD_${X_T}(x, c));
    m = wg_reduce_max(scratch, m);
    float s = 0.0f;
    for (ulong c = lid; c < C; c += wg)
        s += exp(LD_${X_T}(x, c) - m);
    return (float2)(m, wg_reduce_sum(scratch, s));
}
#endif
