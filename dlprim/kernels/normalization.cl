<%include file="common.h"/>
<%include file="wg_reduce.h"/>
// LayerNorm and RMSNorm as rows: one work-group normalises one row of K values, reading
// it from global memory once per pass (the later passes mostly hit the cache) instead of
// the four launches of the pointwise path (core/normalization.py).
// RMS: no mean (written as 0); AFFINE: times weight[k]; BIAS: plus bias[k].
// ACT_T: the storage of x, y, dy and dx (float, or half widened as it loads).
<% ACT_T = context.get("ACT_T", "float") %>

// y = (x - mean) * rstd [* weight + bias]; mean and rstd (one per row) kept for backward.
// The variance sums the centred values (two passes, as the pointwise path): a NaN in the
// row makes mean, rstd and the whole row NaN.
__kernel void normalization_rows_forward(ulong K, __global const ${ACT_T} *x, ulong x_offset,
                                __global ${ACT_T} *y, ulong y_offset,
                                __global float *mean, ulong mean_offset,
                                __global float *rstd, ulong rstd_offset,
                                __global const float *weight, ulong weight_offset,
                                __global const float *bias, ulong bias_offset,
                                float eps, __local float *scratch)
{
    const ulong row = get_group_id(0);
    const int lid = get_local_id(0), wg = get_local_size(0);
    x += x_offset + row * K;
    y += y_offset + row * K;
    const float inv = 1.0f / (float)K;
% if RMS:
    const float m = 0.0f;
% else:
    float s = 0.0f;
    for (ulong k = lid; k < K; k += wg)
        s += LD_${ACT_T}(x, k);
    const float m = wg_reduce_sum(scratch, s) * inv;
% endif
    float q = 0.0f;
    for (ulong k = lid; k < K; k += wg) {
        const float d = LD_${ACT_T}(x, k) - m;
        q += d * d;
    }
    const float r = rsqrt(wg_reduce_sum(scratch, q) * inv + eps);
    if (lid == 0) {
        mean[mean_offset + row] = m;
        rstd[rstd_offset + row] = r;
    }
    for (ulong k = lid; k < K; k += wg) {
        float v = (LD_${ACT_T}(x, k) - m) * r;
% if AFFINE:
        v *= weight[weight_offset + k];
% endif
% if BIAS:
        v += bias[bias_offset + k];
% endif
        ST_${ACT_T}(y, k, v);
    }
}

// With xhat = (x - mean) rstd and g = dy [* weight]:
// dx = beta * dx + rstd (g - mean(g) - xhat mean(g xhat))   (RMS: without mean(g));
// dx is not read when beta == 0
__kernel void normalization_rows_backward_data(ulong K, __global const ${ACT_T} *x, ulong x_offset,
                                      __global const ${ACT_T} *dy, ulong dy_offset,
                                      __global const float *mean, ulong mean_offset,
                                      __global const float *rstd, ulong rstd_offset,
                                      __global const float *weight, ulong weight_offset,
                                      __global ${ACT_T} *dx, ulong dx_offset,
                                      float beta, __local float *scratch)
{
    const ulong row = get_group_id(0);
    const int lid = get_local_id(0), wg = get_local_size(0);
    x += x_offset + row * K;
    dy += dy_offset + row * K;
    dx += dx_offset + row * K;
    const float inv = 1.0f / (float)K;
    const float m = mean[mean_offset + row], r = rstd[rstd_offset + row];
% if AFFINE:
#define G(k) (LD_${ACT_T}(dy, k) * weight[weight_offset + (k)])
% else:
#define G(k) LD_${ACT_T}(dy, k)
% endif
    float sg = 0.0f, sgx = 0.0f;
    for (ulong k = lid; k < K; k += wg) {
        const float g = G(k);
        sg += g;
        sgx += g * (LD_${ACT_T}(x, k) - m) * r;
    }
% if RMS:
    const float mg = 0.0f;
% else:
    const float mg = wg_reduce_sum(scratch, sg) * inv;
% endif
    const float mgx = wg_reduce_sum(scratch, sgx) * inv;
    for (ulong k = lid; k < K; k += wg) {
        const float v = r * (G(k) - mg - (LD_${ACT_T}(x, k) - m) * r * mgx);
        ST_${ACT_T}(dx, k, beta != 0.0f ? beta * LD_${ACT_T}(dx, k) + v : v);
    }
#undef G
}
