<%include file="common.h"/>
## Weight-only int8 and 4-bit weights (core/quantize.py) widened to float32 where a
## product of many rows reads them (a prefill's GEMM; a few rows' product reads them as
## they are: gemv.cl).

// out[r, k] = q[r, k] * scale[r] over rows of K values
__kernel void dequantize_rows(ulong total, uint K, __global const char *q, ulong q_offset,
                              __global const float *scale, ulong scale_offset,
                              __global float *out, ulong out_offset)
{
    ulong i = get_global_id(0);
    if (i >= total)
        return;
    out[out_offset + i] = (float)q[q_offset + i] * scale[scale_offset + i / K];
}

// 4-bit weights: row r of W is ceil(K / 2) bytes, value k in byte k / 2 (the low nibble
// first), stored as q + 8 for q in [-8, 7], times the scale of its group of GROUP values
inline float q4_value(__global const uchar *row, __global const float *scales, int k)
{
    uchar byte = row[k / 2];
    int q = (int)((k & 1) ? (byte >> 4) : (byte & 15)) - 8;
    return (float)q * scales[k / ${GROUP}];
}

// out[r, k] = W[r, k] as float32 over rows of K values
__kernel void dequantize_q4(ulong total, uint K, __global const uchar *q, ulong q_offset,
                            __global const float *scale, ulong scale_offset,
                            __global float *out, ulong out_offset)
{
    ulong i = get_global_id(0);
    if (i >= total)
        return;
    ulong r = i / K;
    int k = (int)(i % K);
    out[out_offset + i] = q4_value(q + q_offset + r * ((K + 1) / 2),
                                   scale + scale_offset + r * ((K + ${GROUP} - 1) / ${GROUP}),
                                   k);
}
