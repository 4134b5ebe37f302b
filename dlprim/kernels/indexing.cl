<%include file="common.h"/>
// Index reads and writes of the ocl device's indexing operators (core/indexing.py), over
// tensors seen as (outer, n, inner) around the indexed axis, the index side as
// (outer, m, inner). With wrap, a negative index counts from the end (PyTorch's rule for
// x[idx], take, index_fill; its other operators refuse one); an index outside [0, n) is
// reported through err (err[0] = 1, err[1] = the index as given) and touches nothing, so
// the host can raise PyTorch's error after the launch.
// S: the elements' storage bits (uchar, ushort, uint, ulong): these kernels only move
// values, so one build serves every dtype of a width. I: the index type (int or long).
// per_element: one index per element of the index side (gather, scatter) rather than one
// per (o, i) slice (index_select, index_copy).

inline long wrapped(long j, ulong n, uint wrap, __global long *err)
{
    long w = (j < 0 && wrap) ? j + (long)n : j;
    if (w < 0 || w >= (long)n) {
        err[1] = j;  // racing writers each leave a bad index: any one names the fault
        err[0] = 1;
        return -1;
    }
    return w;
}

inline ulong index_at(ulong g, ulong m, ulong inner, uint per_element)
{
    return per_element ? g : (g / inner) % m;
}

// dst[o, i, k] = src[o, idx, k]: dst of (outer, m, inner)
__kernel void take(ulong total, ulong n, ulong m, ulong inner, uint per_element, uint wrap,
                   __global const ${S} *src, ulong src_offset,
                   __global const ${I} *idx, ulong idx_offset,
                   __global ${S} *dst, ulong dst_offset,
                   __global long *err, ulong err_offset)
{
    ulong g = get_global_id(0);
    if (g >= total)
        return;
    long w = wrapped(idx[idx_offset + index_at(g, m, inner, per_element)], n, wrap,
                     err + err_offset);
    ulong k = g % inner, o = g / inner / m;
    dst[dst_offset + g] = w < 0 ? 0 : src[src_offset + (o * n + w) * inner + k];
}

// dst[o, idx, k] = src[o, i, k] (src_step 1) or src[0] (src_step 0, a fill value); with
// repeated indices one of the writes wins, as in PyTorch
__kernel void put(ulong total, ulong n, ulong m, ulong inner, uint per_element, uint wrap,
                  ulong src_step,
                  __global const ${S} *src, ulong src_offset,
                  __global const ${I} *idx, ulong idx_offset,
                  __global ${S} *dst, ulong dst_offset,
                  __global long *err, ulong err_offset)
{
    ulong g = get_global_id(0);
    if (g >= total)
        return;
    long w = wrapped(idx[idx_offset + index_at(g, m, inner, per_element)], n, wrap,
                     err + err_offset);
    ulong k = g % inner, o = g / inner / m;
    if (w >= 0)
        dst[dst_offset + (o * n + w) * inner + k] = src[src_offset + g * src_step];
}

// lin = lin * n + idx (first: lin = idx): several index tensors, one per indexed axis of
// size n, folded into one index over those axes together (row-major)
__kernel void combine(ulong total, ulong n, uint wrap, uint first,
                      __global const ${I} *idx, ulong idx_offset,
                      __global long *lin, ulong lin_offset,
                      __global long *err, ulong err_offset)
{
    ulong g = get_global_id(0);
    if (g >= total)
        return;
    long w = wrapped(idx[idx_offset + g], n, wrap, err + err_offset);
    long before = first ? 0 : lin[lin_offset + g];
    lin[lin_offset + g] = before * (long)n + (w < 0 ? 0 : w);
}
