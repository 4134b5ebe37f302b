<%include file="common.h"/>
// split-K second pass: C = act(sum of the partial products + beta * C + bias);
// the partials (alpha already applied) are M x N with row pitch N, part_stride apart,
// batch-major. C_T: C's storage (float or half).
<% C_T = context.get("C_T", "float") %>
__kernel void gemm_reduce(int M, int N, int splits,
                          __global const float *W, ulong w_offset, ulong part_stride,
                          __global ${C_T} *C, ulong c_offset, int ldc, ulong stride_c,
                          __global const float *bias, ulong bias_offset, float beta)
{
    const int n = get_global_id(0), m = get_global_id(1);
    const ulong batch = get_global_id(2);
    if (m >= M || n >= N)
        return;
    __global const float *w = W + w_offset + batch * splits * part_stride + (ulong)m * N + n;
    float v = 0.0f;
    for (int p = 0; p < splits; p++)
        v += w[p * part_stride];
    __global ${C_T} *c = C + c_offset + batch * stride_c + (ulong)m * ldc + n;
    if (beta != 0.0f)
        v += beta * LD_${C_T}(c, 0);
% if BIAS == "row":
    v += bias[bias_offset + m];
% elif BIAS == "col":
    v += bias[bias_offset + n];
% endif
    ST_${C_T}(c, 0, ACT_${ACTIVATION}(v));
}
