<%namespace name="vectors" file="lanes_sum.h"/>
<%
# LayerNorm and RMSNorm on CPUs, float32, x seen as (N, K) rows of contiguous values
# (core/normalization.py, kernels "cpu_rows"): a work-item takes a row in passes while it
# is in cache (its sum, the squared deviations from its mean, then the output; in the
# backward pass the two gradient sums, then dx), VW values a vector, the last K % VW one
# by one (the parameters' gradients are the generator's column sums). RMS: no mean
# (written 0). AFFINE: times weight[k]; BIAS: plus bias[k]. vec_type_hint: the vectors
# are the work-item's own.
%>
${vectors.lanes_sum(VW)}
## dy [* weight] of the VW values at i (backward: e = dy's row, w = the weights)
<%def name="g_vector()">${"vload%d(0, e + i) * vload%d(0, w + i)" % (VW, VW) if AFFINE else "vload%d(0, e + i)" % VW}</%def>

// y = (x - mean) rstd [* weight + bias] of row n, its mean and rstd kept: work-item n
__kernel __attribute__((vec_type_hint(float${VW})))
void norm_rows_forward(uint K, __global const float *x, ulong x_offset,
                       __global float *y, ulong y_offset, __global float *mean, ulong mean_offset,
                       __global float *rstd, ulong rstd_offset,
                       __global const float *weight, ulong weight_offset,
                       __global const float *bias, ulong bias_offset, float eps)
{
    const ulong n = get_global_id(0);
    __global const float *p = x + x_offset + n * K;
    __global float *q = y + y_offset + n * K;
    const uint full = K / ${VW} * ${VW};
${vectors.row_moments(VW, "p", "K", "mu", "m2", not RMS)}
    const float r = rsqrt(m2 / K + eps);
    mean[mean_offset + n] = mu;
    rstd[rstd_offset + n] = r;
    __global const float *w = weight + weight_offset;
    __global const float *b = bias + bias_offset;
    for (uint i = 0; i < full; i += ${VW}) {
        float${VW} v = (vload${VW}(0, p + i) - mu) * r;
% if AFFINE:
        v *= vload${VW}(0, w + i);
% endif
% if BIAS:
        v += vload${VW}(0, b + i);
% endif
        vstore${VW}(v, 0, q + i);
    }
    for (uint i = full; i < K; i++) {
        float v = (p[i] - mu) * r;
% if AFFINE:
        v *= w[i];
% endif
% if BIAS:
        v += b[i];
% endif
        q[i] = v;
    }
}

// dx = rstd (g - mean(g) - xhat mean(g xhat)) [+ beta dx] of row n, g = dy [* weight]
// (RMS: without mean(g)): work-item n
__kernel __attribute__((vec_type_hint(float${VW})))
void norm_rows_backward_data(uint K, __global const float *x, ulong x_offset,
                             __global const float *dy, ulong dy_offset,
                             __global const float *mean, ulong mean_offset,
                             __global const float *rstd, ulong rstd_offset,
                             __global const float *weight, ulong weight_offset,
                             __global float *dx, ulong dx_offset, float beta)
{
    const ulong n = get_global_id(0);
    __global const float *p = x + x_offset + n * K;
    __global const float *e = dy + dy_offset + n * K;
    __global const float *w = weight + weight_offset;
    __global float *q = dx + dx_offset + n * K;
    const float mu = mean[mean_offset + n], r = rstd[rstd_offset + n];
    const uint full = K / ${VW} * ${VW};
    float${VW} acc_g = 0.0f, acc_gx = 0.0f;
    for (uint i = 0; i < full; i += ${VW}) {
        const float${VW} g = ${g_vector()};
        acc_g += g;
        acc_gx += g * ((vload${VW}(0, p + i) - mu) * r);
    }
    float s1 = lanes_sum(acc_g), s2 = lanes_sum(acc_gx);
    for (uint i = full; i < K; i++) {
        const float g = e[i]${" * w[i]" if AFFINE else ""};
        s1 += g;
        s2 += g * ((p[i] - mu) * r);
    }
    const float m1 = ${"0.0f" if RMS else "s1 / K"}, m2 = s2 / K;
    for (uint i = 0; i < full; i += ${VW}) {
        const float${VW} g = ${g_vector()};
        float${VW} v = r * (g - m1 - (vload${VW}(0, p + i) - mu) * r * m2);
        if (beta != 0.0f)
            v += beta * vload${VW}(0, q + i);
        vstore${VW}(v, 0, q + i);
    }
    for (uint i = full; i < K; i++) {
        const float g = e[i]${" * w[i]" if AFFINE else ""};
        float v = r * (g - m1 - (p[i] - mu) * r * m2);
        if (beta != 0.0f)
            v += beta * q[i];
        q[i] = v;
    }
}
