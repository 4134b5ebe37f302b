<%include file="common.h"/>
## BatchNorm over x seen as (N, C, S), a row of S contiguous values per (n, c), in the
## kernels core/batchnorm.py launches on GPUs ("channels"). A work-item takes V values of
## a row at a time (V = 4 where S and every tensor's offset divide by 4, else 1) and finds
## its row through divisor_args' multiply and shift (exact below 2^31 vectors): the
## pointwise generator's path spends per value on index arithmetic and scalar half loads
## what these spend per vector.
## Reductions (moments, gradient sums): one work-group of WG per (channel, part of the
## batch), a result per (part, channel) in `parts`, then a finish kernel per channel that
## merges the parts in order, so the sums are deterministic.
## ACT_T: the storage of x, y, dy and dx (float, half or bfloat16); statistics are float.
## ACTIVATION (core/batchnorm.py BN_ACTIVATIONS: its gradient follows from its output):
## the activation that alone reads the BatchNorm's output, run by these kernels in place
## of its own launches. bn_apply applies it; the backward kernels take the activation's
## dy and first turn it into the BatchNorm's, z = xhat [* gamma + beta] recomputed from x.
<%
from dlprim.core.activation import ACTIVATIONS
ACT_T = context.get("ACT_T", "float")
ACTIVATION = context.get("ACTIVATION", "identity")
FUSED = ACTIVATION != "identity"
V = VEC
%>
% if FUSED:
#define ACT_GRAD(y, dy) ${ACTIVATIONS[ACTIVATION].backward}
% endif
% if V == 4:
typedef float4 vec_t;
    % if ACT_T == "float":
#define LOAD_V(p, i) (*(__global const float4 *)((p) + (i)))
#define STORE_V(p, i, v) (*(__global float4 *)((p) + (i)) = (v))
    % elif ACT_T == "half":
#define LOAD_V(p, i) load_half4_aligned((p) + (i))
#define STORE_V(p, i, v) store_half4_aligned((v), (p) + (i))
    % else:
#define LOAD_V(p, i) bfloat16_bits4_value(*(__global const ushort4 *)((p) + (i)))
#define STORE_V(p, i, v) (*(__global ushort4 *)((p) + (i)) = bfloat16_bits4(v))
    % endif
#define VSUM(v) (((v).s0 + (v).s1) + ((v).s2 + (v).s3))
% else:
typedef float vec_t;
#define LOAD_V(p, i) LD_${ACT_T}(p, i)
#define STORE_V(p, i, v) ST_${ACT_T}(p, i, v)
#define VSUM(v) (v)
% endif

// the arguments that walk one part's rows of channel c: vector j of the part is row
// n0 + j / SV, values V (j % SV) .. of it
#define PART_ARGS uint C, uint S, uint SV, uint SV_m, uint SV_l, uint N, uint part_rows
#define PART_BEGIN \
    const uint c = get_group_id(1), part = get_group_id(2), lid = get_local_id(0); \
    const uint n0 = part * part_rows; \
    const uint vectors = (min(N, n0 + part_rows) - n0) * SV;
#define PART_AT(j) (((ulong)(n0 + DLP_DIV_U32(j, SV)) * C + c) * S + ((j) - DLP_DIV_U32(j, SV) * SV) * ${V})

// (count, mean, M2) of a += b (Chan et al. 1979): one pass, no cancellation when
// |mean| >> std; an empty b leaves a as it is, a NaN anywhere makes the mean NaN
inline void merge_moments(float *n, float *m, float *q, float nb, float mb, float qb)
{
    if (nb > 0.0f) {
        const float total = *n + nb, d = mb - *m, w = nb / total;
        *m += d * w;
        *q += qb + d * d * *n * w;
        *n = total;
    }
}

// per (part, channel): count, mean and M2 of its values at parts[0, 1, 2][part][c]
__kernel __attribute__((reqd_work_group_size(${WG}, 1, 1)))
void bn_moments(PART_ARGS, __global const ${ACT_T} *x, ulong x_offset,
                __global float *parts, ulong parts_offset)
{
    PART_BEGIN
    x += x_offset;
    float n = 0.0f, m = 0.0f, q = 0.0f;
    for (uint j = lid; j < vectors; j += ${WG}) {
        const vec_t v = LOAD_V(x, PART_AT(j));
        const float vm = VSUM(v) * ${1.0 / V}f;
        const vec_t d = v - vm;
        merge_moments(&n, &m, &q, ${V}.0f, vm, VSUM(d * d));
    }
    __local float ln[${WG}], lm[${WG}], lq[${WG}];
    ln[lid] = n; lm[lid] = m; lq[lid] = q;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint s = ${WG // 2}; s > 0; s >>= 1) {
        if (lid < s) {
            n = ln[lid]; m = lm[lid]; q = lq[lid];
            merge_moments(&n, &m, &q, ln[lid + s], lm[lid + s], lq[lid + s]);
            ln[lid] = n; lm[lid] = m; lq[lid] = q;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lid == 0) {
        const ulong at = parts_offset + (ulong)part * C + c, plane = (ulong)get_num_groups(2) * C;
        parts[at] = ln[0]; parts[at + plane] = lm[0]; parts[at + 2 * plane] = lq[0];
    }
}

// per channel: the parts merged in order; mean and biased variance (M2 / count) for
// normalising, running = (1 - momentum) running + momentum * batch, with the unbiased
// variance (unbiased = momentum * count / (count - 1))
__kernel void bn_moments_finish(uint C, uint parts_n,
                                __global const float *parts, ulong parts_offset,
                                __global float *mean, ulong mean_offset,
                                __global float *var, ulong var_offset,
                                __global float *running_mean, ulong running_mean_offset,
                                __global float *running_var, ulong running_var_offset,
                                float momentum, float unbiased, float inv_count)
{
    const uint c = get_global_id(0);
    if (c >= C)
        return;
    parts += parts_offset;
    const ulong plane = (ulong)parts_n * C;
    float n = 0.0f, m = 0.0f, q = 0.0f;
    for (uint p = 0; p < parts_n; p++) {
        const ulong at = (ulong)p * C + c;
        merge_moments(&n, &m, &q, parts[at], parts[at + plane], parts[at + 2 * plane]);
    }
    const float v = q * inv_count;
    mean[mean_offset + c] = m;
    var[var_offset + c] = v;
    running_mean += running_mean_offset + c;
    running_var += running_var_offset + c;
    *running_mean = (1.0f - momentum) * *running_mean + momentum * m;
    *running_var = (1.0f - momentum) * *running_var + unbiased * v;
}

// per (part, channel): sum dy and sum dy xhat, xhat = (x - mean) / sqrt(var + eps), at
// parts[0, 1][part][c]
__kernel __attribute__((reqd_work_group_size(${WG}, 1, 1)))
void bn_grad_sums(PART_ARGS, __global const ${ACT_T} *x, ulong x_offset,
                  __global const ${ACT_T} *dy, ulong dy_offset,
                  __global const float *mean, ulong mean_offset,
                  __global const float *var, ulong var_offset, float eps,
% if FUSED and AFFINE:
                  __global const float *gamma, ulong gamma_offset,
                  __global const float *beta, ulong beta_offset,
% endif
                  __global float *parts, ulong parts_offset)
{
    PART_BEGIN
    x += x_offset;
    dy += dy_offset;
    const float mu = mean[mean_offset + c];
% if FUSED:
    const float istd = rsqrt(var[var_offset + c] + eps);
% endif
    float s_dy = 0.0f, s_dyx = 0.0f;  // s_dyx: sum dy (x - mean), times istd at the end
    for (uint j = lid; j < vectors; j += ${WG}) {
        const ulong at = PART_AT(j);
        const vec_t d = LOAD_V(x, at) - mu;
% if FUSED:
        const vec_t z = ${"d * istd * gamma[gamma_offset + c] + beta[beta_offset + c]" if AFFINE else "d * istd"};
        const vec_t y = ACT_${ACTIVATION}(z), dy_act = LOAD_V(dy, at);
        const vec_t g = ACT_GRAD(y, dy_act);
% else:
        const vec_t g = LOAD_V(dy, at);
% endif
        s_dy += VSUM(g);
        s_dyx += VSUM(g * d);
    }
    __local float l_dy[${WG}], l_dyx[${WG}];
    l_dy[lid] = s_dy; l_dyx[lid] = s_dyx;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint s = ${WG // 2}; s > 0; s >>= 1) {
        if (lid < s) {
            l_dy[lid] += l_dy[lid + s];
            l_dyx[lid] += l_dyx[lid + s];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lid == 0) {
        const ulong at = parts_offset + (ulong)part * C + c, plane = (ulong)get_num_groups(2) * C;
        parts[at] = l_dy[0];
        parts[at + plane] = l_dyx[0] * rsqrt(var[var_offset + c] + eps);
    }
}

// per channel: the parts' sums in order, into s_dy and s_dyx, and added to dbeta and
// dgamma where asked (add_dbeta, add_dgamma: the parameters' gradients, without a launch
// of their own)
__kernel void bn_grad_sums_finish(uint C, uint parts_n,
                                  __global const float *parts, ulong parts_offset,
                                  __global float *s_dy, ulong s_dy_offset,
                                  __global float *s_dyx, ulong s_dyx_offset,
                                  __global float *dbeta, ulong dbeta_offset,
                                  __global float *dgamma, ulong dgamma_offset,
                                  int add_dbeta, int add_dgamma)
{
    const uint c = get_global_id(0);
    if (c >= C)
        return;
    parts += parts_offset;
    const ulong plane = (ulong)parts_n * C;
    float a = 0.0f, b = 0.0f;
    for (uint p = 0; p < parts_n; p++) {
        a += parts[(ulong)p * C + c];
        b += parts[(ulong)p * C + c + plane];
    }
    s_dy[s_dy_offset + c] = a;
    s_dyx[s_dyx_offset + c] = b;
    if (add_dbeta)
        dbeta[dbeta_offset + c] += a;
    if (add_dgamma)
        dgamma[dgamma_offset + c] += b;
}

// the channel of vector j of the whole tensor (planes of SV vectors, C planes per n)
#define CHANNEL(j) (DLP_DIV_U32(j, SV) - DLP_DIV_U32(DLP_DIV_U32(j, SV), C) * C)
#define POINTWISE_ARGS uint vectors, uint SV, uint SV_m, uint SV_l, uint C, uint C_m, uint C_l

// y = (x - mean) / sqrt(var + eps) [* gamma + beta]
__kernel void bn_apply(POINTWISE_ARGS, __global const ${ACT_T} *x, ulong x_offset,
                       __global ${ACT_T} *y, ulong y_offset,
                       __global const float *mean, ulong mean_offset,
                       __global const float *var, ulong var_offset,
% if AFFINE:
                       __global const float *gamma, ulong gamma_offset,
                       __global const float *beta, ulong beta_offset,
% endif
                       float eps)
{
    const uint j = get_global_id(0);
    if (j >= vectors)
        return;
    const uint c = CHANNEL(j);
    const ulong at = (ulong)j * ${V};
    vec_t v = (LOAD_V(x + x_offset, at) - mean[mean_offset + c]) * rsqrt(var[var_offset + c] + eps);
% if AFFINE:
    v = v * gamma[gamma_offset + c] + beta[beta_offset + c];
% endif
% if FUSED:
    v = ACT_${ACTIVATION}(v);
% endif
    STORE_V(y + y_offset, at, v);
}

// dx = beta_dx * dx + gamma istd (dy - inv_m (s_dy + xhat s_dyx)) with batch statistics
// (BATCH), gamma istd dy with fixed ones; dx is not read when beta_dx is 0
__kernel void bn_backward_data(POINTWISE_ARGS, __global const ${ACT_T} *x, ulong x_offset,
                               __global const ${ACT_T} *dy, ulong dy_offset,
                               __global const float *mean, ulong mean_offset,
                               __global const float *var, ulong var_offset,
                               __global const float *s_dy, ulong s_dy_offset,
                               __global const float *s_dyx, ulong s_dyx_offset,
% if AFFINE:
                               __global const float *gamma, ulong gamma_offset,
% endif
% if FUSED and AFFINE:
                               __global const float *beta, ulong beta_offset,
% endif
                               __global ${ACT_T} *dx, ulong dx_offset,
                               float eps, float inv_m, float beta_dx)
{
    const uint j = get_global_id(0);
    if (j >= vectors)
        return;
    const uint c = CHANNEL(j);
    const ulong at = (ulong)j * ${V};
    const float istd = rsqrt(var[var_offset + c] + eps);
% if AFFINE:
    const float scale = gamma[gamma_offset + c] * istd;
% else:
    const float scale = istd;
% endif
% if BATCH or FUSED:
    const vec_t xhat = (LOAD_V(x + x_offset, at) - mean[mean_offset + c]) * istd;
% endif
% if FUSED:
    const vec_t z = ${"xhat * gamma[gamma_offset + c] + beta[beta_offset + c]" if AFFINE else "xhat"};
    const vec_t y = ACT_${ACTIVATION}(z), dy_act = LOAD_V(dy + dy_offset, at);
    const vec_t g = ACT_GRAD(y, dy_act);
% else:
    const vec_t g = LOAD_V(dy + dy_offset, at);
% endif
% if BATCH:
    vec_t r = scale * (g - inv_m * (s_dy[s_dy_offset + c] + xhat * s_dyx[s_dyx_offset + c]));
% else:
    vec_t r = scale * g;
% endif
    if (beta_dx != 0.0f)
        r += beta_dx * LOAD_V(dx + dx_offset, at);
    STORE_V(dx + dx_offset, at, r);
}
