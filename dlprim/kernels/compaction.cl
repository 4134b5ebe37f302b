<%include file="common.h"/>
// Stream compaction for the operators whose output size depends on the data (nonzero,
// masked_select, masked_scatter; core/indexing.py): a mask (uchar, nonzero = keep) is cut
// into blocks of `chunk` elements; count_blocks counts each block's kept elements,
// scan_counts turns the counts into each block's first output row (and the total, which
// the host reads back), and one of the write kernels walks each block again in order.
// S: the storage bits of the values moved (uchar, ushort, uint, ulong).
#define SCAN_WG 64

__kernel void count_blocks(ulong total, ulong chunk,
                           __global const uchar *mask, ulong mask_offset,
                           __global long *counts, ulong counts_offset)
{
    ulong b = get_global_id(0), lo = b * chunk;
    if (lo >= total)
        return;
    ulong hi = min(total, lo + chunk);
    long c = 0;
    for (ulong p = lo; p < hi; p++)
        c += mask[mask_offset + p] != 0;
    counts[counts_offset + b] = c;
}

// one work-group of SCAN_WG: each work-item sums a stretch of blocks, the first scans the
// SCAN_WG sums, each rewrites its stretch as running totals; counts[blocks] = the total
__kernel __attribute__((reqd_work_group_size(SCAN_WG, 1, 1)))
void scan_counts(ulong blocks, __global long *counts, ulong counts_offset)
{
    __local long part[SCAN_WG];
    __global long *c = counts + counts_offset;
    ulong t = get_local_id(0), per = (blocks + SCAN_WG - 1) / SCAN_WG;
    ulong lo = min(blocks, t * per), hi = min(blocks, lo + per);
    long s = 0;
    for (ulong b = lo; b < hi; b++)
        s += c[b];
    part[t] = s;
    barrier(CLK_LOCAL_MEM_FENCE);
    if (t == 0) {
        long run = 0;
        for (int i = 0; i < SCAN_WG; i++) {
            long v = part[i];
            part[i] = run;
            run += v;
        }
        c[blocks] = run;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    long run = part[t];
    for (ulong b = lo; b < hi; b++) {
        long v = c[b];
        c[b] = run;
        run += v;
    }
}

<%def name="walk()">\
    ulong b = get_global_id(0), lo = b * chunk;
    if (lo >= total)
        return;
    ulong hi = min(total, lo + chunk);
    long r = counts[counts_offset + b];
</%def>

// out[r, :] = the coordinates of the r-th kept element in a tensor of sizes shape[0:ndim]
__kernel void positions(ulong total, ulong chunk, ulong ndim,
                        __global const uchar *mask, ulong mask_offset,
                        __global const long *counts, ulong counts_offset,
                        __global const long *shape, ulong shape_offset,
                        __global long *out, ulong out_offset)
{
${walk()}
    for (ulong p = lo; p < hi; p++) {
        if (!mask[mask_offset + p])
            continue;
        ulong q = p;
        for (ulong d = ndim; d-- > 0;) {
            ulong size = (ulong)shape[shape_offset + d];
            out[out_offset + r * ndim + d] = (long)(q % size);
            q /= size;
        }
        r++;
    }
}

// dst[r] = src[p] for the r-th kept position p (masked_select)
__kernel void select_values(ulong total, ulong chunk,
                            __global const uchar *mask, ulong mask_offset,
                            __global const long *counts, ulong counts_offset,
                            __global const ${S} *src, ulong src_offset,
                            __global ${S} *dst, ulong dst_offset)
{
${walk()}
    for (ulong p = lo; p < hi; p++)
        if (mask[mask_offset + p])
            dst[dst_offset + r++] = src[src_offset + p];
}

// dst[p] = src[r] for the r-th kept position p (masked_scatter)
__kernel void scatter_values(ulong total, ulong chunk,
                             __global const uchar *mask, ulong mask_offset,
                             __global const long *counts, ulong counts_offset,
                             __global const ${S} *src, ulong src_offset,
                             __global ${S} *dst, ulong dst_offset)
{
${walk()}
    for (ulong p = lo; p < hi; p++)
        if (mask[mask_offset + p])
            dst[dst_offset + p] = src[src_offset + r++];
}
