<%include file="common.h"/>
<%namespace name="loads" file="float8_loads.h"/>
<%namespace name="vectors" file="lanes_sum.h"/>
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
% if context.get("CACHED", False):
<% CD, CV = context.get("D") // 8, context.get("DV") // 8 %>

${loads.load8(ACT_T)}
${vectors.lanes_sum(8)}

// A cache's few query rows (POSITIONS; a decoder's step on CPUs): o and the statistics of
// query row i of batch row bh in one pass over the keys it sees (KEY_END: only the
// sequence's cached positions are read, where the products above would read the whole
// cache), the softmax online (a running maximum rescales the sums); q, k, v and o as
// float8 vectors along D and DV; one work item per row. The statistics are the softmax
// kernel's, so the family's backward reads them alike.
__kernel void attention_gemm_cached(uint lq, uint lk, float scale,
                                    __global const ${ACT_T} *q, ulong q_offset,
                                    __global const ${ACT_T} *k, ulong k_offset,
                                    __global const ${ACT_T} *v, ulong v_offset,
                                    __global ${ACT_T} *o, ulong o_offset,
                                    __global float *stats, ulong stats_offset MASK_ARGS)
{
    uint i = get_global_id(0), bh = get_global_id(1);
    if (i >= lq)
        return;
    __global const ${ACT_T} *qi = q + q_offset + IN_AT(bh, lq, ${8 * CD}) + (ulong)i * IN_ROW(${8 * CD});
    __global const ${ACT_T} *kr = k + k_offset + IN_AT(bh, lk, ${8 * CD});
    __global const ${ACT_T} *vr = v + v_offset + IN_AT(bh, lk, ${8 * CV});
    float8 qv[${CD}], acc[${CV}];
    for (int c = 0; c < ${CD}; c++)
        qv[c] = load8_${ACT_T}(qi, 8 * c) * scale;
    for (int c = 0; c < ${CV}; c++)
        acc[c] = (float8)(0.0f);
    float m = NEG_INF, l = 0.0f;
    const uint end = KEY_END(i, i);
    for (uint j = 0; j < end; j++) {
        float8 dot = (float8)(0.0f);
        for (int c = 0; c < ${CD}; c++)
            dot = FMA(qv[c], load8_${ACT_T}(kr, (ulong)j * IN_ROW(${8 * CD}) + 8 * c), dot);
        const float s = lanes_sum(dot) + MASK_AT(i, j);
        if (s == NEG_INF)
            continue;  // (a hidden key weighs nothing, whatever its value holds)
        if (s > m || isnan(s)) {  // the new maximum rescales what was summed
            const float r = m == NEG_INF ? 0.0f : exp(m - s);
            l *= r;
            for (int c = 0; c < ${CV}; c++)
                acc[c] *= r;
            m = s;
        }
        const float p = exp(s - m);
        l += p;
        for (int c = 0; c < ${CV}; c++)
            acc[c] = FMA((float8)(p), load8_${ACT_T}(vr, (ulong)j * IN_ROW(${8 * CV}) + 8 * c), acc[c]);
    }
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    __global ${ACT_T} *oi = o + o_offset + OUT_AT(bh, lq, ${8 * CV}) + (ulong)i * OUT_ROW(${8 * CV});
    for (int c = 0; c < ${CV}; c++) {
        float y[8];
        vstore8(acc[c] * inv, 0, y);
        for (int e = 0; e < 8; e++)
            ST_${ACT_T}(oi, 8 * c + e, y[e]);
    }
    ulong at = stats_offset + STATS_AT(bh, lq, i);
    stats[at] = m;
    stats[at + 1] = log(l);
}
% endif
