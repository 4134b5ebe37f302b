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

// y[m, n] = act(sum_k x[m, k] W[n, k] + bias[n]) for a few rows m: a team of TEAM
// work-items per column n strides over K (their sums added in local memory); on CPUs a
// team of one (TEAM 1) walks its column alone
__kernel __attribute__((reqd_work_group_size(${TEAM} * ${TEAMS}, 1, 1)))
void q4_gemv(int M, int N, int K, __global const float *x, ulong x_offset,
             __global const uchar *q, ulong q_offset, __global const float *scale,
             ulong scale_offset, __global const float *bias, ulong bias_offset,
             __global float *y, ulong y_offset, float beta)
{
    __local float sums[${TEAM} * ${TEAMS}];
    const int lane = get_local_id(0) % ${TEAM}, team = get_local_id(0) / ${TEAM};
    const int n = get_group_id(0) * ${TEAMS} + team;
    const int col = min(n, N - 1);
    __global const uchar *row = q + q_offset + (ulong)col * ((K + 1) / 2);
    __global const float *scales = scale + scale_offset +
                                   (ulong)col * ((K + ${GROUP} - 1) / ${GROUP});
    for (int m = 0; m < M; m++) {
        __global const float *xr = x + x_offset + (ulong)m * K;
        // eight values (four bytes, one group's scale: GROUP is a multiple of 8) a step,
        // the even ones in the low nibbles, the odd in the high
        float4 acc4 = (float4)(0.0f);
        int k = lane * 8;
        for (; k + 8 <= K; k += ${TEAM} * 8) {
            uchar4 b = vload4(0, row + k / 2);
            float4 lo = convert_float4(b & (uchar4)(15)) - 8.0f;
            float4 hi = convert_float4(b >> (uchar4)(4)) - 8.0f;
            float8 xv = vload8(0, xr + k);
            acc4 += (xv.even * lo + xv.odd * hi) * scales[k / ${GROUP}];
        }
        float acc = (acc4.x + acc4.y) + (acc4.z + acc4.w);
        if (k < K && k + 8 > K)  // the last, partial step of the lane that reaches it
            for (; k < K; k++)
                acc += xr[k] * q4_value(row, scales, k);
        sums[get_local_id(0)] = acc;
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int step = ${TEAM} / 2; step > 0; step /= 2) {
            if (lane < step)
                sums[get_local_id(0)] += sums[get_local_id(0) + step];
            barrier(CLK_LOCAL_MEM_FENCE);
        }
        if (lane == 0 && n < N) {
            float v = sums[get_local_id(0)];
% if BIAS:
            v += bias[bias_offset + n];
% endif
            __global float *out = y + y_offset + (ulong)m * N + n;
            if (beta != 0.0f)  // (a residual the layer put there first)
                v += beta * *out;
            *out = ACT_${ACTIVATION}(v);
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
}
