<%include file="common.h"/>
// Fused scaled dot-product attention on blocks of rows, as FlashAttention-2: a work-group
// takes BQ query rows (forward, dQ) or BK key rows (dK/dV) and walks the other side in
// blocks, so every product is a small GEMM between blocks staged in local memory, and
// each work item keeps a register tile of it (rows ty + TY r, columns tx + TX c): a value
// read from local memory feeds several FMAs, where attention.cl's one row per work item
// feeds one. The softmax runs online per query row (the row maximum is reduced across
// the TX work items sharing the row once per key block; the row sums stay partial per
// work item until the end), so the L x S scores are never stored and memory grows
// linearly with the sequence. Same layouts, mask, causal and dropout semantics as
// attention.cl (attention.h holds what the two share).
// Scores are natural, fl(fl(scale q.k) + mask) as in attention.cl, and each probability
// is exp2((s - m) log2(e)): the difference is taken before the scaling by log2(e), as a
// score of float32's lowest value (a row hidden whole by an exporter's mask) times
// log2(e) would overflow to -inf and drop the row. FAST_EXP takes the device's native
// exp2 (on GPUs a hardware instruction, relative error near 2^-22). The row statistics
// (m and log l, attention.h) are natural too.
// PASS: "forward" (o, stats), "dq" or "dkdv". D, DV: widths, multiples of TX;
// BQ, BK: rows per query / key block, multiples of TY, TX and 4; TX x TY work items;
// ACT_T, MASK_T: storage types (attention.h). The blocks in local memory are float
// whatever ACT_T is, so 16-bit storage only changes the loads and stores.
<%include file="attention.h"/>

// exp(s - m - log l) = 2^((s - m) log2(e) - log2 l), given nl2 = -log2 l; 0 where the key
// is masked or the row is masked whole
inline float prob2(float s, float m, float nl2)
{
    return (s == NEG_INF || m == NEG_INF) ? 0.0f : EXP2(fma(s - m, LOG2E, nl2));
}
<%
NT = TX * TY
DP, VP = D + 4, DV + 4  # local row strides: float4-aligned, padded off the banks' period
PP, PQ = BK + 4, BQ + 4
CD, CV = D // TX, DV // TX
%>

## rows [first, first + rows) of a global matrix (rows of ``width``, IN_ROW / OUT_ROW
## apart) into local rows of ``stride``, times ``factor``; zeros past ``limit``
<%def name="stage(dst, stride, src, first, limit, rows, width, factor='')">
<% ld = ("OUT_ROW(%d)" if src == "dout" else "IN_ROW(%d)") % width %>
    for (uint e = t; e < ${rows * (width // 4)}; e += ${NT}) {
        uint r = e / ${width // 4}, c = (e % ${width // 4}) * 4;
        float4 x = (float4)(0.0f);
        if (${first} + r < ${limit})
            x = LD4(${src} + (ulong)(${first} + r) * ${ld} + c)${factor};
        *(__local float4 *)(${dst} + r * ${stride} + c) = x;
    }
</%def>

## acc[r][c] += sum_w a[arow(r)][w] b[brow(c)][w]: the product of two blocks whose inner
## dimension is contiguous (Q K^T, dO V^T)
<%def name="dots(acc, a, astride, arow, b, bstride, brow, R, C, W)">
    for (int w = 0; w < ${W}; w += 4) {
% for r in range(R):
        float4 a${r} = *(__local const float4 *)(${a} + (${arow(r)}) * ${astride} + w);
% endfor
% for c in range(C):
        float4 b${c} = *(__local const float4 *)(${b} + (${brow(c)}) * ${bstride} + w);
% endfor
% for r in range(R):
%  for c in range(C):
        ${acc}[${r}][${c}] = fma(a${r}.w, b${c}.w, fma(a${r}.z, b${c}.z,
            fma(a${r}.y, b${c}.y, fma(a${r}.x, b${c}.x, ${acc}[${r}][${c}]))));
%  endfor
% endfor
    }
</%def>

## acc[r][c] += sum_j a[arow(r)][j] b[j][bcol(c)]: a block of weights (rows contiguous)
## times a block of rows (P V, dS K, P^T dO, dS^T Q)
<%def name="axpy(acc, a, astride, arow, b, bstride, bcol, R, C, W)">
    for (int j = 0; j < ${W}; j += 4) {
% for r in range(R):
        float4 a${r} = *(__local const float4 *)(${a} + (${arow(r)}) * ${astride} + j);
% endfor
% for jj, lane in enumerate("xyzw"):
%  for c in range(C):
        {
            float b = ${b}[(j + ${jj}) * ${bstride} + ${bcol(c)}];
%   for r in range(R):
            ${acc}[${r}][${c}] = fma(a${r}.${lane}, b, ${acc}[${r}][${c}]);
%   endfor
        }
%  endfor
% endfor
    }
</%def>

## the dropout factors of queries [i0, i0 + BQ) by keys [j0, j0 + BK) into the local
## weights' array ``buf`` (rows of ``stride``; query-major, or key-major where
## ``by_key``), each item drawing whole groups of four keys (one Philox draw, attention.h):
## each weight's work item then reads its factor there and writes the weight over it
<%def name="draw_keeps(buf, stride, i0, j0, by_key=False)">
% if DROPOUT:
    for (uint e = t; e < ${BQ * BK // 4}; e += ${NT}) {
        uint ii = e / ${BK // 4}, jj = e % ${BK // 4} * 4;
        uint4 r = KEEP_DRAW(${i0} + ii, (${j0} + jj) >> 2);
        float4 f = (float4)(r.x < drop_threshold ? 0.0f : keep_scale,
                            r.y < drop_threshold ? 0.0f : keep_scale,
                            r.z < drop_threshold ? 0.0f : keep_scale,
                            r.w < drop_threshold ? 0.0f : keep_scale);
%  if by_key:
        ${buf}[jj * ${stride} + ii] = f.x;
        ${buf}[(jj + 1) * ${stride} + ii] = f.y;
        ${buf}[(jj + 2) * ${stride} + ii] = f.z;
        ${buf}[(jj + 3) * ${stride} + ii] = f.w;
%  else:
        *(__local float4 *)(${buf} + ii * ${stride} + jj) = f;
%  endif
    }
% endif
</%def>
% if DROPOUT:
#define KEPT(x) (x)
% else:
#define KEPT(x) 1.0f
% endif

<%def name="zeros(name, R, C)">
    float ${name}[${R}][${C}];
% for r in range(R):
%  for c in range(C):
    ${name}[${r}][${c}] = 0.0f;
%  endfor
% endfor
</%def>

% if PASS == "forward":
<%
RQ, CK = BQ // TY, BK // TX
KW = max(DP, VP)  # the key block's rows, then the value block's
row = lambda r: "ty + %d" % (TY * r)
col = lambda c: "tx + %d" % (TX * c)
%>
// o = softmax(s) v and the statistics per query row, for the block of BQ query rows of
// group 0
__kernel __attribute__((reqd_work_group_size(${TX}, ${TY}, 1)))
void attention_tiles_forward(FORWARD_ARGS, __global ${ACT_T} *o, ulong o_offset,
                             __global float *stats, ulong stats_offset MASK_ARGS DROP_ARGS)
{
    __local float4 qs4[${BQ * DP // 4}], kv4[${BK * KW // 4}], ps4[${BQ * PP // 4}];
    __local float red[${BQ * TX}];  // per row, one partial maximum (or sum) per tx
    __local float *qs = (__local float *)qs4, *kv = (__local float *)kv4,
                  *ps = (__local float *)ps4;
    uint tx = get_local_id(0), ty = get_local_id(1), t = ty * ${TX} + tx;
    uint bh = get_group_id(2), i0 = get_group_id(0) * ${BQ};
    q += q_offset + IN_AT(bh, lq, ${D});
    k += k_offset + IN_AT(bh, lk, ${D});
    v += v_offset + IN_AT(bh, lk, ${DV});
    ${stage("qs", DP, "q", "i0", "lq", BQ, D, " * scale")}
    ${zeros("acc", RQ, CV)}
    float m[${RQ}], l[${RQ}];
    for (int r = 0; r < ${RQ}; r++) {
        m[r] = NEG_INF;
        l[r] = 0.0f;
    }
% if CAUSAL:
    uint jend = min(lk, i0 + ${BQ});  // key j > query i is out
% else:
    uint jend = lk;
% endif
    jend = min(jend, KEY_END(i0, min(i0 + ${BQ}, lq) - 1));  // (past the cache's positions)
    for (uint j0 = 0; j0 < jend; j0 += ${BK}) {
        barrier(CLK_LOCAL_MEM_FENCE);
        ${stage("kv", KW, "k", "j0", "lk", BK, D)}
        ${draw_keeps("ps", PP, "i0", "j0")}
        barrier(CLK_LOCAL_MEM_FENCE);
        ${zeros("s", RQ, CK)}
        ${dots("s", "qs", DP, row, "kv", KW, col, RQ, CK, D)}
% for r in range(RQ):
        {
            uint i = i0 + ${row(r)};
            float mx = NEG_INF;
%  for c in range(CK):
            {
                uint j = j0 + ${col(c)};
                s[${r}][${c}] = (i < lq && j < lk) ? s[${r}][${c}] + MASK_AT(i, j) : NEG_INF;
                mx = fmax(mx, s[${r}][${c}]);
            }
%  endfor
            red[(${row(r)}) * ${TX} + tx] = mx;
        }
% endfor
        barrier(CLK_LOCAL_MEM_FENCE);  // every read of the key block is done
        ${stage("kv", KW, "v", "j0", "lk", BK, DV)}
% for r in range(RQ):
        {
            uint i = i0 + ${row(r)};
            float mn = m[${r}];
            for (int x = 0; x < ${TX}; x++)
                mn = fmax(mn, red[(${row(r)}) * ${TX} + x]);
            // rescale the old sums
            float f = mn == NEG_INF ? 1.0f : EXP2((m[${r}] - mn) * LOG2E);
            m[${r}] = mn;
            l[${r}] *= f;
%  for c in range(CV):
            acc[${r}][${c}] *= f;
%  endfor
%  for c in range(CK):
            {
                uint j = j0 + ${col(c)};
                float p = s[${r}][${c}] == NEG_INF ? 0.0f : EXP2((s[${r}][${c}] - mn) * LOG2E);
                l[${r}] += p;
                uint at = (${row(r)}) * ${PP} + ${col(c)};
                ps[at] = p * KEPT(ps[at]);
            }
%  endfor
        }
% endfor
        barrier(CLK_LOCAL_MEM_FENCE);
        ${axpy("acc", "ps", PP, row, "kv", KW, col, RQ, CV, BK)}
    }
    barrier(CLK_LOCAL_MEM_FENCE);
% for r in range(RQ):
    red[(${row(r)}) * ${TX} + tx] = l[${r}];
% endfor
    barrier(CLK_LOCAL_MEM_FENCE);
    o += o_offset + OUT_AT(bh, lq, ${DV});
% for r in range(RQ):
    {
        uint i = i0 + ${row(r)};
        float total = 0.0f;
        for (int x = 0; x < ${TX}; x++)
            total += red[(${row(r)}) * ${TX} + x];
        float inv = total > 0.0f ? 1.0f / total : 0.0f;
        if (i < lq) {
%  for c in range(CV):
            ST_${ACT_T}(o, (ulong)i * OUT_ROW(${DV}) + ${col(c)}, acc[${r}][${c}] * inv);
%  endfor
            if (tx == 0) {  // -inf and log 0 = -inf for a row masked whole
                ulong at = stats_offset + STATS_AT(bh, lq, i);
                stats[at] = m[${r}];
                stats[at + 1] = log(total);
            }
        }
    }
% endfor
}
% endif

<%
row = lambda r: "ty + %d" % (TY * r)
col = lambda c: "tx + %d" % (TX * c)
%>
// backward: ds_ij = p_ij (k_ij dO_i . v_j - delta_i), delta_i = dO_i . O_i, k_ij the
// dropout factor
% if PASS == "dq":
## a work item's tile: query rows by key columns
<% RQ, CK = BQ // TY, BK // TX %>
// dq_i = scale sum_j ds_ij k_j for the block of BQ query rows of group 0
__kernel __attribute__((reqd_work_group_size(${TX}, ${TY}, 1)))
void attention_tiles_dq(BACKWARD_ARGS,
    __global ${ACT_T} *dq, ulong dq_offset MASK_ARGS DROP_ARGS)
{
    __local float4 qs4[${BQ * DP // 4}], gs4[${BQ * VP // 4}], ks4[${BK * DP // 4}],
                   vs4[${BK * VP // 4}], ps4[${BQ * PP // 4}];
    __local float *qs = (__local float *)qs4, *gs = (__local float *)gs4,
                  *ks = (__local float *)ks4, *vs = (__local float *)vs4,
                  *ps = (__local float *)ps4;
    uint tx = get_local_id(0), ty = get_local_id(1), t = ty * ${TX} + tx;
    uint bh = get_group_id(2), i0 = get_group_id(0) * ${BQ};
    q += q_offset + IN_AT(bh, lq, ${D});
    dout += dout_offset + OUT_AT(bh, lq, ${DV});
    k += k_offset + IN_AT(bh, lk, ${D});
    v += v_offset + IN_AT(bh, lk, ${DV});
    ${stage("qs", DP, "q", "i0", "lq", BQ, D, " * scale")}
    ${stage("gs", VP, "dout", "i0", "lq", BQ, DV)}
    ${zeros("acc", RQ, CD)}
% if CAUSAL:
    uint jend = min(lk, i0 + ${BQ});
% else:
    uint jend = lk;
% endif
    jend = min(jend, KEY_END(i0, min(i0 + ${BQ}, lq) - 1));
    for (uint j0 = 0; j0 < jend; j0 += ${BK}) {
        barrier(CLK_LOCAL_MEM_FENCE);
        ${stage("ks", DP, "k", "j0", "lk", BK, D)}
        ${stage("vs", VP, "v", "j0", "lk", BK, DV)}
        ${draw_keeps("ps", PP, "i0", "j0")}
        barrier(CLK_LOCAL_MEM_FENCE);
        // stats and delta read for every key block, after its barriers: Intel's CPU
        // compiler (2026.2) with dropout on computes every row but i = 7 (mod 8) wrong when
        // they are read once before this loop (right with -cl-opt-disable)
        float m_r[${RQ}], nl2_r[${RQ}], delta_r[${RQ}];
% for r in range(RQ):
        {
            uint i = i0 + ${row(r)};
            ulong at = stats_offset + STATS_AT(bh, lq, i);
            m_r[${r}] = i < lq ? stats[at] : NEG_INF;
            nl2_r[${r}] = i < lq ? -stats[at + 1] * LOG2E : 0.0f;
            delta_r[${r}] = i < lq ? delta[delta_offset + STAT_AT(bh, lq, i)] : 0.0f;
        }
% endfor
        ${zeros("s", RQ, CK)}
        ${zeros("dp", RQ, CK)}
        ${dots("s", "qs", DP, row, "ks", DP, col, RQ, CK, D)}
        ${dots("dp", "gs", VP, row, "vs", VP, col, RQ, CK, DV)}
% for r in range(RQ):
%  for c in range(CK):
        {
            uint i = i0 + ${row(r)}, j = j0 + ${col(c)};
            float p = prob2((i < lq && j < lk) ? s[${r}][${c}] + MASK_AT(i, j) : NEG_INF,
                            m_r[${r}], nl2_r[${r}]);
            uint at = (${row(r)}) * ${PP} + ${col(c)};
            ps[at] = p * (dp[${r}][${c}] * KEPT(ps[at]) - delta_r[${r}]) * scale;
        }
%  endfor
% endfor
        barrier(CLK_LOCAL_MEM_FENCE);
        ${axpy("acc", "ps", PP, row, "ks", DP, col, RQ, CD, BK)}
    }
    dq += dq_offset + IN_AT(bh, lq, ${D});
% for r in range(RQ):
    if (i0 + ${row(r)} < lq) {
%  for c in range(CD):
        ST_${ACT_T}(dq, (ulong)(i0 + ${row(r)}) * IN_ROW(${D}) + ${col(c)}, acc[${r}][${c}]);
%  endfor
    }
% endfor
}

% endif
% if PASS == "dkdv":
## a work item's tile: key rows by query columns
<% RK, CQ = BK // TY, BQ // TX %>
// dk_j = scale sum_i ds_ij q_i, dv_j = sum_i p_ij k_ij dO_i for the block of BK key rows
// of group 0 (the statistics and delta of the query block staged beside it)
__kernel __attribute__((reqd_work_group_size(${TX}, ${TY}, 1)))
void attention_tiles_dkdv(BACKWARD_ARGS,
    __global ${ACT_T} *dk, ulong dk_offset, __global ${ACT_T} *dv, ulong dv_offset
    MASK_ARGS DROP_ARGS)
{
    __local float4 ks4[${BK * DP // 4}], vs4[${BK * VP // 4}], qs4[${BQ * DP // 4}],
                   gs4[${BQ * VP // 4}], pt4[${BK * PQ // 4}], dst4[${BK * PQ // 4}];
    __local float ms[${BQ}], nls[${BQ}], dls[${BQ}];
    __local float *ks = (__local float *)ks4, *vs = (__local float *)vs4,
                  *qs = (__local float *)qs4, *gs = (__local float *)gs4,
                  *pt = (__local float *)pt4, *dst = (__local float *)dst4;
    uint tx = get_local_id(0), ty = get_local_id(1), t = ty * ${TX} + tx;
    uint bh = get_group_id(2), j0 = get_group_id(0) * ${BK};
    q += q_offset + IN_AT(bh, lq, ${D});
    dout += dout_offset + OUT_AT(bh, lq, ${DV});
    k += k_offset + IN_AT(bh, lk, ${D});
    v += v_offset + IN_AT(bh, lk, ${DV});
    ${stage("ks", DP, "k", "j0", "lk", BK, D)}
    ${stage("vs", VP, "v", "j0", "lk", BK, DV)}
    ${zeros("ak", RK, CD)}
    ${zeros("av", RK, CV)}
% if CAUSAL:
    uint istart = j0 / ${BQ} * ${BQ};  // query i < key j is out
% else:
    uint istart = 0;
% endif
    for (uint i0 = istart; i0 < lq; i0 += ${BQ}) {
        barrier(CLK_LOCAL_MEM_FENCE);
        ${stage("qs", DP, "q", "i0", "lq", BQ, D, " * scale")}
        ${stage("gs", VP, "dout", "i0", "lq", BQ, DV)}
        for (uint e = t; e < ${BQ}; e += ${NT}) {
            bool live = i0 + e < lq;
            ulong at = stats_offset + STATS_AT(bh, lq, i0 + e);
            ms[e] = live ? stats[at] : NEG_INF;
            nls[e] = live ? -stats[at + 1] * LOG2E : 0.0f;
            dls[e] = live ? delta[delta_offset + STAT_AT(bh, lq, i0 + e)] : 0.0f;
        }
        ${draw_keeps("pt", PQ, "i0", "j0", by_key=True)}
        barrier(CLK_LOCAL_MEM_FENCE);
        ${zeros("s", RK, CQ)}
        ${zeros("dp", RK, CQ)}
        ${dots("s", "ks", DP, row, "qs", DP, col, RK, CQ, D)}
        ${dots("dp", "vs", VP, row, "gs", VP, col, RK, CQ, DV)}
% for r in range(RK):
%  for c in range(CQ):
        {
            uint j = j0 + ${row(r)}, i = i0 + ${col(c)};
            float p = prob2((i < lq && j < lk) ? s[${r}][${c}] + MASK_AT(i, j) : NEG_INF,
                            ms[${col(c)}], nls[${col(c)}]);
            uint at = (${row(r)}) * ${PQ} + ${col(c)};
            float keep = KEPT(pt[at]);
            pt[at] = p * keep;
            dst[(${row(r)}) * ${PQ} + ${col(c)}] = p * (dp[${r}][${c}] * keep - dls[${col(c)}]);
        }
%  endfor
% endfor
        barrier(CLK_LOCAL_MEM_FENCE);
        ${axpy("av", "pt", PQ, row, "gs", VP, col, RK, CV, BQ)}
        ${axpy("ak", "dst", PQ, row, "qs", DP, col, RK, CD, BQ)}  // qs: scale q
    }
    dk += dk_offset + IN_AT(bh, lk, ${D});
    dv += dv_offset + IN_AT(bh, lk, ${DV});
% for r in range(RK):
    if (j0 + ${row(r)} < lk) {
%  for c in range(CD):
        ST_${ACT_T}(dk, (ulong)(j0 + ${row(r)}) * IN_ROW(${D}) + ${col(c)}, ak[${r}][${c}]);
%  endfor
%  for c in range(CV):
        ST_${ACT_T}(dv, (ulong)(j0 + ${row(r)}) * IN_ROW(${DV}) + ${col(c)}, av[${r}][${c}]);
%  endfor
    }
% endfor
}
% endif
