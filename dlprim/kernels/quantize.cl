<%include file="common.h"/>
<%namespace name="q4" file="q4_loads.h"/>
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

${q4.loads(GROUP)}

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
    out[out_offset + i] = q4_at(q + q_offset + r * ((K + 1) / 2),
                                scale + scale_offset + r * ((K + ${GROUP} - 1) / ${GROUP}), k);
}
