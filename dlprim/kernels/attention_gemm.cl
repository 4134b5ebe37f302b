<%include file="common.h"/>
// Attention through GEMMs (core/attention.py, kernels "gemm"): the score rows S = scale Q K^T
// of every (batch*head) row are stored (B, L, S) float32, made and read by Gemm; these
// kernels do the row-wise parts, one work item per query row i of batch row bh (CPUs run
// a row as a loop, where the fused kernels' per-item tiles do not vectorize). Any layout
// (the statistics and delta are read through attention.h's STAT_AT; the scores are always
// (B, L, S)); the mask, the causal frontier and the dropout factors are attention.h's,
// with the same semantics as the fused kernels (a row masked whole by -inf gives zeros,
// by a large finite value uniform weights).
<%include file="attention.h"/>

// DROPOUT: the weights P V multiplies are P times the factors of attention.h's KEEP
// (0 or 1 / (1 - p); one Philox draw per four keys), the statistics those of P itself

// the scores of row (bh, i) into probabilities in place (times the dropout factors), and
// the row's statistics (the maximum m and log l, as the fused kernels keep them for the
// backward pass)
__kernel void attention_gemm_softmax(uint lq, uint lk, __global float *s, ulong s_offset,
                                     __global float *stats, ulong stats_offset MASK_ARGS
                                     DROP_ARGS)
{
    uint i = get_global_id(0), bh = get_global_id(1);
    if (i >= lq)
        return;
    __global float *row = s + s_offset + ((ulong)bh * lq + i) * lk;
    float m = NEG_INF;
    for (uint j = 0; j < lk; j++) {
        float x = row[j] + MASK_AT(i, j);
        row[j] = x;
        if (x > m || isnan(x))  // a NaN score (or mask) makes the whole row NaN, as fmax
            m = x;              // would not
    }
    float l = 0.0f;
    for (uint j = 0; j < lk; j++) {
        float e = (row[j] == NEG_INF || m == NEG_INF) ? 0.0f : exp(row[j] - m);
        row[j] = e;
        l += e;
    }
    float inv = l > 0.0f ? 1.0f / l : 0.0f;
% if DROPOUT:
    for (uint j = 0; j < lk; j += 4) {
        uint4 r = KEEP_DRAW(i, j >> 2);
        for (uint e = 0; e < 4 && j + e < lk; e++)
            row[j + e] *= inv * keep_lane(r, e, drop_threshold, keep_scale);
    }
% else:
    for (uint j = 0; j < lk; j++)
        row[j] *= inv;
% endif
    ulong at = stats_offset + STATS_AT(bh, lq, i);
    stats[at] = m;
    stats[at + 1] = log(l);
}

// the forward's probabilities again from the recomputed scores and the statistics
// (DROP_ARGS unused: every kernel of the family takes the step's seed and offset last)
__kernel void attention_gemm_probs(uint lq, uint lk, __global float *s, ulong s_offset,
                                   __global const float *stats, ulong stats_offset MASK_ARGS
                                   DROP_ARGS)
{
    uint i = get_global_id(0), bh = get_global_id(1);
    if (i >= lq)
        return;
    __global float *row = s + s_offset + ((ulong)bh * lq + i) * lk;
    ulong at = stats_offset + STATS_AT(bh, lq, i);
    float m = stats[at], log_l = stats[at + 1];
    for (uint j = 0; j < lk; j++)
        row[j] = prob(row[j] + MASK_AT(i, j), m, log_l);
}

// dS = P (dP keep - delta_i) scale in place of dP: the scores' gradient (scale included,
// so dQ = dS K and dK = dS^T Q); DROPOUT: P becomes P keep in place (what dV = (P keep)^T
// dO reads next)
__kernel void attention_gemm_dscores(uint lq, uint lk, float scale,
                                     __global float *p, ulong p_offset,
                                     __global float *dp, ulong dp_offset,
                                     __global const float *delta, ulong delta_offset DROP_ARGS)
{
    uint i = get_global_id(0), bh = get_global_id(1);
    if (i >= lq)
        return;
    ulong start = ((ulong)bh * lq + i) * lk;
    __global float *pr = p + p_offset + start;
    __global float *g = dp + dp_offset + start;
    float d = delta[delta_offset + STAT_AT(bh, lq, i)];
% if DROPOUT:
    for (uint j = 0; j < lk; j += 4) {
        uint4 r = KEEP_DRAW(i, j >> 2);
        for (uint e = 0; e < 4 && j + e < lk; e++) {
            float keep = keep_lane(r, e, drop_threshold, keep_scale);
            g[j + e] = pr[j + e] * (g[j + e] * keep - d) * scale;
            pr[j + e] *= keep;
        }
    }
% else:
    for (uint j = 0; j < lk; j++)
        g[j] = pr[j] * (g[j] - d) * scale;
% endif
}
