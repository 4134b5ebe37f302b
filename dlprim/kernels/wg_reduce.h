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
#endif
