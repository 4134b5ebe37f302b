// The second launch of depthwise backward-filter (conv_depthwise.cl, conv_depthwise_cpu.cl)
// where the batch*pixels sum was split: part[chunk][n] summed over the chunks.
#ifndef DLPRIM_DEPTHWISE_SUM_H
#define DLPRIM_DEPTHWISE_SUM_H
// dw = beta * dw + sum over chunks of part
__kernel void depthwise_filter_sum(int n, int chunks, __global const float *part, ulong part_offset,
                                   __global float *dw, ulong dw_offset, float beta)
{
    const int i = get_global_id(0);
    if (i >= n)
        return;
    float sum = 0.0f;
    for (int c = 0; c < chunks; c++)
        sum += part[part_offset + c * n + i];
    dw[dw_offset + i] = beta == 0.0f ? sum : beta * dw[dw_offset + i] + sum;
}
#endif
