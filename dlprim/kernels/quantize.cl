<%include file="common.h"/>
## Weight-only int8 (core/quantize.py): rows of int8 values, each row times its float32
## scale, widened to float32 where a product of many rows reads them (a prefill's GEMM).

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
