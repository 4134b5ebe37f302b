<%namespace name="vectors" file="lanes_sum.h"/>
<%
# BatchNorm's statistics on CPUs, float32: per-channel count, mean and M2 (the sum of
# squared deviations) of x seen as (N, C, S), as core/batchnorm.py's generator pass gives
# them, without its division per value (Welford's update, which bounded that pass at
# about 7 GB/s on a 2-core EPYC). A work-item takes one (image, channel) row of S values
# in two passes while the row is in cache: its sum, then the squared deviations from its
# mean, VW values a vector (the most accurate order there is); a second kernel merges a
# channel's N rows with Chan et al.'s formula, a division per row. vec_type_hint: the
# vectors are the work-item's own (Intel's CPU runtime; PoCL keeps the generator).
%>
${vectors.lanes_sum(VW)}

// rows[2 (n C + c)]: the row's mean, then its M2; work-item (c, n)
__kernel __attribute__((vec_type_hint(float${VW})))
void bn_row_moments(uint C, uint S, __global const float *x, ulong x_offset,
                    __global float *rows, ulong rows_offset)
{
    const uint c = get_global_id(0), n = get_global_id(1);
    const ulong row = (ulong)n * C + c;
    __global const float *p = x + x_offset + row * S;
${vectors.row_moments(VW, "p", "S", "mean", "m2")}
    rows[rows_offset + 2 * row] = mean;
    rows[rows_offset + 2 * row + 1] = m2;
}

// count, mean and M2 of channel c from its N rows (each of S values): work-item c
__kernel void bn_row_moments_merge(uint N, uint C, uint S, __global const float *rows,
                                   ulong rows_offset, __global float *count, ulong count_offset,
                                   __global float *mean, ulong mean_offset,
                                   __global float *m2, ulong m2_offset)
{
    const uint c = get_global_id(0);
    if (c >= C)
        return;
    float na = 0.0f, ma = 0.0f, qa = 0.0f;
    for (uint n = 0; n < N; n++) {
        const ulong at = rows_offset + 2 * ((ulong)n * C + c);
        const float nb = S, total = na + nb, d = rows[at] - ma;
        ma += d * (nb / total);
        qa += rows[at + 1] + d * d * (na * (nb / total));
        na = total;
    }
    count[count_offset + c] = na;
    mean[mean_offset + c] = ma;
    m2[m2_offset + c] = qa;
}
