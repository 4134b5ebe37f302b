<%include file="common.h"/>
// Fused scaled dot-product attention, O = softmax(scale Q K^T + mask) V, in the manner of
// FlashAttention: every work item owns one row (a query row forward and for dQ, a key
// row for dK/dV), key or query tiles are staged in local memory, and the softmax runs
// online (a running maximum and sum), so the L x S score matrix is never stored and
// memory grows linearly with the sequence. Rows are (batch*head, row, D) contiguous.
// D: q/k width; DV: v width; T: rows per tile (= the work-group size); ACT_T: the storage
// of q, k, v, o, dO and the gradients (attention.h); MASK: an additive mask (stored as
// MASK_T), read with strides (0 where it broadcasts); CAUSAL: key j > query i is out.
// A row whose keys are all masked gives zeros, as PyTorch's safe softmax, and no gradient.
// DROPOUT: each weight p_ij is dropped with probability p and the rest scaled by
// 1 / (1 - p); the softmax sums stay those of the undropped weights. Whether (bh, i, j) is
// dropped is word j % 4 of Philox counter offset + (bh * L + i) * ceil(S / 4) + j / 4
// (attention.h), so the backward kernels recompute the forward's mask from (seed,
// offset) instead of storing it.

<%include file="attention.h"/>

// copy ``count`` rows of ``width`` (``ld`` apart) from global to a tile in local memory,
// times ``scale``
inline void stage(__local float *tile, __global const ${ACT_T} *rows, uint count, uint width,
                  ulong ld, float scale, uint t)
{
% if ACT_T == "half" and D % 8 == 0 and DV % 8 == 0:
    // (eight values at a time: CPUs decode half one value at a time in software, which
    // took a GPT-2 decode step's attention 14 ms on a 2-core EPYC)
    const uint w8 = width / 8;
    for (uint e = t; e < count * w8; e += ${T}) {
        const uint r = e / w8, c = (e % w8) * 8;
        vstore8(load_half8(rows + r * ld + c) * scale, 0, tile + r * width + c);
    }
% else:
    for (uint e = t; e < count * width; e += ${T})
        tile[e] = LD_${ACT_T}(rows, (e / width) * ld + e % width) * scale;
% endif
}

// a score: the dot product of a private row (q already scaled, or k) and a row staged in
// local memory, rounded, plus the mask's value, as the unfused fl(fl(scale q.k) + mask):
// a large finite mask (float32's lowest, as exporters write it) then absorbs the product
// whole, and a row hidden whole by it has equal scores (uniform weights); -inf where the
// mask drops the key
inline float score(const float *mine, __local const float *staged, float bias)
{
    if (bias == NEG_INF)
        return NEG_INF;
    float s = 0.0f;
    for (int c = 0; c < ${D}; c++)
        s = fma(mine[c], staged[c], s);
    return s + bias;
}

// o[i] = sum_j p_ij v_j, and the row's m_i and log l_i (attention.h)
__kernel __attribute__((reqd_work_group_size(${T}, 1, 1)))
void attention_forward(FORWARD_ARGS, __global ${ACT_T} *o, ulong o_offset,
                       __global float *stats, ulong stats_offset MASK_ARGS DROP_ARGS)
{
    __local float kt[${T}][${D}];
    __local float vt[${T}][${DV}];
    uint bh = get_global_id(1), i = get_global_id(0), t = get_local_id(0);
    bool live = i < lq;
    q += q_offset + IN_AT(bh, lq, ${D}) + (ulong)i * IN_ROW(${D});
    k += k_offset + IN_AT(bh, lk, ${D});
    v += v_offset + IN_AT(bh, lk, ${DV});
    float qi[${D}], acc[${DV}];
    for (int c = 0; c < ${D}; c++)
        qi[c] = live ? LD_${ACT_T}(q, c) * scale : 0.0f;
    for (int c = 0; c < ${DV}; c++)
        acc[c] = 0.0f;
    float m = NEG_INF, l = 0.0f;
    for (uint j0 = 0; j0 < lk; j0 += ${T}) {
        uint jn = min((uint)${T}, lk - j0);
        barrier(CLK_LOCAL_MEM_FENCE);
        stage(&kt[0][0], k + (ulong)j0 * IN_ROW(${D}), jn, ${D}, IN_ROW(${D}), 1.0f, t);
        stage(&vt[0][0], v + (ulong)j0 * IN_ROW(${DV}), jn, ${DV}, IN_ROW(${DV}), 1.0f, t);
        barrier(CLK_LOCAL_MEM_FENCE);
        if (!live)
            continue;
        for (uint jj = 0; jj < jn; jj++) {
            float s = score(qi, kt[jj], MASK_AT(i, j0 + jj));
            if (s == NEG_INF)
                continue;
            if (s > m) {  // rescale what was summed under the old maximum
                float r = exp(m - s);
                l *= r;
                for (int c = 0; c < ${DV}; c++)
                    acc[c] *= r;
                m = s;
            }
            float p = exp(s - m);
            l += p;
            p *= KEEP(i, j0 + jj);
            for (int c = 0; c < ${DV}; c++)
                acc[c] = fma(p, vt[jj][c], acc[c]);
        }
    }
    if (!live)
        return;
    float inv = l > 0.0f ? 1.0f / l : 0.0f;
    o += o_offset + OUT_AT(bh, lq, ${DV}) + (ulong)i * OUT_ROW(${DV});
    for (int c = 0; c < ${DV}; c++)
        ST_${ACT_T}(o, c, acc[c] * inv);
    stats += stats_offset + STATS_AT(bh, lq, i);
    stats[0] = m;  // -inf and log 0 = -inf for a row masked whole
    stats[1] = log(l);
}

// p_ij = exp(s_ij - m_i - log l_i), ds_ij = p_ij (k_ij dO_i . v_j - delta_i),
// delta_i = dO_i . O_i, k_ij the dropout factor (1 without dropout): sum_j p_ij k_ij
// dO_i . v_j is dO_i . O_i still, so delta needs no mask

// dq_i = scale sum_j ds_ij k_j: one work item per query row, key tiles in local memory
__kernel __attribute__((reqd_work_group_size(${T}, 1, 1)))
void attention_dq(BACKWARD_ARGS,
    __global ${ACT_T} *dq, ulong dq_offset MASK_ARGS DROP_ARGS)
{
    __local float kt[${T}][${D}];
    __local float vt[${T}][${DV}];
    uint bh = get_global_id(1), i = get_global_id(0), t = get_local_id(0);
    bool live = i < lq;
    ulong qrow = IN_AT(bh, lq, ${D}) + (ulong)i * IN_ROW(${D}),
          grow = OUT_AT(bh, lq, ${DV}) + (ulong)i * OUT_ROW(${DV}), stat = STAT_AT(bh, lq, i),
          at = stats_offset + STATS_AT(bh, lq, i);
    k += k_offset + IN_AT(bh, lk, ${D});
    v += v_offset + IN_AT(bh, lk, ${DV});
    float qi[${D}], gi[${DV}], acc[${D}];
    for (int c = 0; c < ${D}; c++) {
        qi[c] = live ? LD_${ACT_T}(q, q_offset + qrow + c) * scale : 0.0f;
        acc[c] = 0.0f;
    }
    for (int c = 0; c < ${DV}; c++)
        gi[c] = live ? LD_${ACT_T}(dout, dout_offset + grow + c) : 0.0f;
    for (uint j0 = 0; j0 < lk; j0 += ${T}) {
        uint jn = min((uint)${T}, lk - j0);
        barrier(CLK_LOCAL_MEM_FENCE);
        stage(&kt[0][0], k + (ulong)j0 * IN_ROW(${D}), jn, ${D}, IN_ROW(${D}), 1.0f, t);
        stage(&vt[0][0], v + (ulong)j0 * IN_ROW(${DV}), jn, ${DV}, IN_ROW(${DV}), 1.0f, t);
        barrier(CLK_LOCAL_MEM_FENCE);
        if (!live)
            continue;
        // stats and delta read again for every tile, after its barriers: Intel's CPU
        // compiler (2026.2) with dropout on gives every row but the last of each 8-wide
        // vector of work items wrong values when they are read once before this loop
        float m_i = stats[at], log_l = stats[at + 1], delta_i = delta[delta_offset + stat];
        for (uint jj = 0; jj < jn; jj++) {
            float s = score(qi, kt[jj], MASK_AT(i, j0 + jj));
            if (s == NEG_INF)
                continue;
            float p = prob(s, m_i, log_l);
            float dp = 0.0f;
            for (int c = 0; c < ${DV}; c++)
                dp = fma(gi[c], vt[jj][c], dp);
            float ds = p * (dp * KEEP(i, j0 + jj) - delta_i) * scale;
            for (int c = 0; c < ${D}; c++)
                acc[c] = fma(ds, kt[jj][c], acc[c]);
        }
    }
    if (!live)
        return;
    for (int c = 0; c < ${D}; c++)
        ST_${ACT_T}(dq, dq_offset + qrow + c, acc[c]);
}

// dk_j = scale sum_i ds_ij q_i, dv_j = sum_i p_ij dO_i: one work item per key row, query
// tiles (q, dO, the rows' statistics and delta) in local memory
__kernel __attribute__((reqd_work_group_size(${T}, 1, 1)))
void attention_dkdv(BACKWARD_ARGS,
    __global ${ACT_T} *dk, ulong dk_offset, __global ${ACT_T} *dv, ulong dv_offset
    MASK_ARGS DROP_ARGS)
{
    __local float qt[${T}][${D}];
    __local float gt[${T}][${DV}];
    __local float mt[${T}], lt[${T}], dt[${T}];
    uint bh = get_global_id(1), j = get_global_id(0), t = get_local_id(0);
    bool live = j < lk;
    ulong krow = IN_AT(bh, lk, ${D}) + (ulong)j * IN_ROW(${D}),
          vrow = IN_AT(bh, lk, ${DV}) + (ulong)j * IN_ROW(${DV});
    q += q_offset + IN_AT(bh, lq, ${D});
    dout += dout_offset + OUT_AT(bh, lq, ${DV});
    float kj[${D}], vj[${DV}], ak[${D}], av[${DV}];
    for (int c = 0; c < ${D}; c++) {
        kj[c] = live ? LD_${ACT_T}(k, k_offset + krow + c) : 0.0f;
        ak[c] = 0.0f;
    }
    for (int c = 0; c < ${DV}; c++) {
        vj[c] = live ? LD_${ACT_T}(v, v_offset + vrow + c) : 0.0f;
        av[c] = 0.0f;
    }
    for (uint i0 = 0; i0 < lq; i0 += ${T}) {
        uint in = min((uint)${T}, lq - i0);
        barrier(CLK_LOCAL_MEM_FENCE);
        stage(&qt[0][0], q + (ulong)i0 * IN_ROW(${D}), in, ${D}, IN_ROW(${D}), scale, t);
        stage(&gt[0][0], dout + (ulong)i0 * OUT_ROW(${DV}), in, ${DV}, OUT_ROW(${DV}), 1.0f, t);
        if (t < in) {
            mt[t] = stats[stats_offset + STATS_AT(bh, lq, i0 + t)];
            lt[t] = stats[stats_offset + STATS_AT(bh, lq, i0 + t) + 1];
            dt[t] = delta[delta_offset + STAT_AT(bh, lq, i0 + t)];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        if (!live)
            continue;
        for (uint ii = 0; ii < in; ii++) {
            float s = score(kj, qt[ii], MASK_AT(i0 + ii, j));
            if (s == NEG_INF)
                continue;
            float p = prob(s, mt[ii], lt[ii]);
            float keep = KEEP(i0 + ii, j), pk = p * keep;
            float dp = 0.0f;
            for (int c = 0; c < ${DV}; c++) {
                dp = fma(gt[ii][c], vj[c], dp);
                av[c] = fma(pk, gt[ii][c], av[c]);
            }
            float ds = p * (dp * keep - dt[ii]);
            for (int c = 0; c < ${D}; c++)
                ak[c] = fma(ds, qt[ii][c], ak[c]);  // qt holds scale * q
        }
    }
    if (!live)
        return;
    for (int c = 0; c < ${D}; c++)
        ST_${ACT_T}(dk, dk_offset + krow + c, ak[c]);
    for (int c = 0; c < ${DV}; c++)
        ST_${ACT_T}(dv, dv_offset + vrow + c, av[c]);
}
