<%include file="common.h"/>
// The forward pass of fused attention for a few query rows (a decoder's step: one token,
// or a key/value head's G grouped query heads), with the keys split among work-groups.
// The block kernels give each batch row one work-group at such shapes (a few work-groups
// for the whole device, each walking every key alone); here work-group (chunk, bh) takes
// all lq query rows of batch row bh over keys [chunk span, (chunk + 1) span), with the
// online softmax of attention_tiles.cl, and writes its partial result (the rows' maximum
// m, sum l and unnormalised outputs) for attention_split_combine to merge. With one chunk
// the partial kernel writes o and the statistics itself (FINAL). MERGE: no second launch;
// the last work-group of a batch row to write its partials (a count per row in ``done``,
// which it sets back to 0 for the next launch) merges them, its reads of the others'
// partials after a device-wide fence and past the L1 cache.
// A key the mask hides weighs exactly nothing, whatever its key and value hold (a cache's
// positions past a sequence's length), and a block of keys it hides whole is not read at
// all; the block kernels multiply such values by a weight of 0 (NaN there gives NaN, as
// in eager PyTorch). Same layouts, mask and causal semantics, scores
// (fl(fl(scale q . k) + mask)) and statistics (m, log l) as the other families
// (attention.h), so their backward passes take these statistics; no dropout.
// QR: the query rows a work-group holds (lq <= QR), LANES work items per row; BK keys a
// block; D, DV: widths, multiples of 4.
<%include file="attention.h"/>
<%
NT = QR * LANES
DP = D + 4
KW = max(D, DV) + 4
PP = BK + 4
JJ = BK // LANES  # keys of a block per work item
CC = -(-DV // LANES)  # output columns per work item
%>
// (QR x LANES items) rows [first, first + rows) of a global matrix (rows IN_ROW(width)
// apart) into local rows of ``stride``, times ``factor``; zeros from ``limit`` on
<%def name="stage(dst, stride, src, first, limit, rows, width, factor='')">
    for (uint e = t; e < ${rows * (width // 4)}; e += ${NT}) {
        uint rr = e / ${width // 4}, c = (e % ${width // 4}) * 4;
        float4 x4 = (float4)(0.0f);
        if (${first} + rr < ${limit})
            x4 = LD4(${src} + (ulong)(${first} + rr) * IN_ROW(${width}) + c)${factor};
        *(__local float4 *)(${dst} + rr * ${stride} + c) = x4;
    }
</%def>

// the partial results of a chunk: per (bh, chunk, query row), m, l and DV sums
#define PART_AT(bh, chunk, chunks, i) ((((ulong)(bh) * (chunks) + (chunk)) * lq + (i)) * ${DV + 2})

% if not FINAL:
% if MERGE:
<%include file="global_fence.h" args="ptx=PTX"/>
% endif

// value e (row e / DV, column e % DV) of batch row bh's o, and (column 0) the row's
// statistics, from the chunks' partial results: each chunk's sums scaled by
// exp(m_chunk - m), m the row's maximum over the chunks, merged online eight chunks at a
// time with every load of the eight asked for before any is used (volatile loads: in the
// MERGE path other work-groups wrote them in this launch, and one chunk's loads at a time
// made the merge a chain of cache round trips: 17 us for TinyLlama's 8 x 64 values)
inline void merge_chunks(uint lq, uint chunks, uint bh, uint e,
                         volatile __global const float *part, __global ${ACT_T} *o,
                         __global float *stats)
{
    uint i = e / ${DV}, col = e % ${DV};
    part += PART_AT(bh, 0, chunks, i);
    ulong step = (ulong)lq * ${DV + 2};
    float m = NEG_INF, total = 0.0f, sum = 0.0f;
    for (uint c0 = 0; c0 < chunks; c0 += 8) {
        float mc[8], lc[8], vc[8];
        #pragma unroll
        for (uint u = 0; u < 8; u++) {  // (past the last chunk: the last again, unused)
            ulong at = min(c0 + u, chunks - 1) * step;
            mc[u] = part[at];
            lc[u] = part[at + 1];
            vc[u] = part[at + 2 + col];
        }
        float mn = m;
        #pragma unroll
        for (uint u = 0; u < 8; u++)
            mn = c0 + u < chunks ? fmax(mn, mc[u]) : mn;
        float f = mn == NEG_INF ? 1.0f : EXP2((m - mn) * LOG2E);  // (the sums so far, to mn)
        total *= f;
        sum *= f;
        m = mn;
        #pragma unroll
        for (uint u = 0; u < 8; u++) {
            // (a chunk without a live key, or past the last, adds nothing)
            bool adds = c0 + u < chunks && mc[u] != NEG_INF;
            float g = EXP2((mc[u] - m) * LOG2E);
            total = adds ? fma(lc[u], g, total) : total;
            sum = adds ? fma(vc[u], g, sum) : sum;
        }
    }
    o += OUT_AT(bh, lq, ${DV});
    ST_${ACT_T}(o, (ulong)i * OUT_ROW(${DV}) + col, total > 0.0f ? sum / total : 0.0f);
    if (col == 0) {
        ulong at = STATS_AT(bh, lq, i);
        stats[at] = m;
        stats[at + 1] = log(total);
    }
}
% endif
% if MERGE:
#define MERGE_ARGS , __global volatile uint *done, ulong done_offset
% else:
#define MERGE_ARGS
% endif

__kernel __attribute__((reqd_work_group_size(${NT}, 1, 1)))
void attention_split_partial(FORWARD_ARGS, uint span, __global float *part, ulong part_offset,
                             __global ${ACT_T} *o, ulong o_offset,
                             __global float *stats, ulong stats_offset MERGE_ARGS MASK_ARGS)
{
    __local float4 qs4[${QR * DP // 4}], kv4[${BK * KW // 4}], ps4[${QR * PP // 4}];
    __local float red[${NT}];  // per row, one partial maximum (or sum) per lane
    __local volatile int live;
    __local float *qs = (__local float *)qs4, *kv = (__local float *)kv4,
                  *ps = (__local float *)ps4;
    uint t = get_local_id(0), r = t / ${LANES}, x = t % ${LANES};
    uint chunk = get_group_id(0), chunks = get_num_groups(0), bh = get_group_id(1);
    q += q_offset + IN_AT(bh, lq, ${D});
    k += k_offset + IN_AT(bh, lk, ${D});
    v += v_offset + IN_AT(bh, lk, ${DV});
    ${stage("qs", DP, "q", "0", "lq", QR, D, " * scale")}
    uint jfirst = chunk * span, jend = min(lk, jfirst + span);
% if CAUSAL:
    jend = min(jend, lq);  // key j > query i is out, for every row below lq
% endif
    jend = min(jend, KEY_END(0, lq - 1));  // (past the cache's positions)
    float m = NEG_INF, l = 0.0f, acc[${CC}];
    for (int c = 0; c < ${CC}; c++)
        acc[c] = 0.0f;
    for (uint j0 = jfirst; j0 < jend; j0 += ${BK}) {
        float s[${JJ}];
        barrier(CLK_LOCAL_MEM_FENCE);  // the last block's reads of kv, ps and live are done
        if (t == 0)
            live = 0;
        barrier(CLK_LOCAL_MEM_FENCE);
        // the mask's terms first: a block it hides whole is skipped
        bool seen = false;
        for (int jj = 0; jj < ${JJ}; jj++) {
            uint j = j0 + x + ${LANES} * jj;
            s[jj] = (r < lq && j < jend) ? MASK_AT(r, j) : NEG_INF;
            seen |= s[jj] != NEG_INF;
        }
        if (seen)
            atomic_or(&live, 1);
        barrier(CLK_LOCAL_MEM_FENCE);
        if (!live)
            continue;
        ${stage("kv", KW, "k", "j0", "jend", BK, D)}
        barrier(CLK_LOCAL_MEM_FENCE);
        float mx = NEG_INF;
        for (int jj = 0; jj < ${JJ}; jj++) {
            if (s[jj] == NEG_INF)
                continue;
            __local const float4 *a = (__local const float4 *)(qs + r * ${DP});
            __local const float4 *b = (__local const float4 *)(kv + (x + ${LANES} * jj) * ${KW});
            float dot = 0.0f;
            for (int w = 0; w < ${D // 4}; w++) {
                float4 qa = a[w], kb = b[w];
                dot = fma(qa.w, kb.w, fma(qa.z, kb.z, fma(qa.y, kb.y, fma(qa.x, kb.x, dot))));
            }
            s[jj] = dot + s[jj];
            mx = fmax(mx, s[jj]);
        }
        red[t] = mx;
        barrier(CLK_LOCAL_MEM_FENCE);  // every read of the key block is done
        ${stage("kv", KW, "v", "j0", "jend", BK, DV)}
        float mn = m;
        for (int y = 0; y < ${LANES}; y++)
            mn = fmax(mn, red[r * ${LANES} + y]);
        float f = mn == NEG_INF ? 1.0f : EXP2((m - mn) * LOG2E);  // rescale the old sums
        m = mn;
        l *= f;
        for (int c = 0; c < ${CC}; c++)
            acc[c] *= f;
        for (int jj = 0; jj < ${JJ}; jj++) {
            float p = s[jj] == NEG_INF ? 0.0f : EXP2((s[jj] - mn) * LOG2E);
            l += p;
            ps[r * ${PP} + x + ${LANES} * jj] = p;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int c = 0; c < ${CC}; c++) {
            uint col = x + ${LANES} * c;
            if (col < ${DV}) {
                float sum = acc[c];
                for (int j = 0; j < ${BK}; j++) {  // (a hidden key's value is not read)
                    float p = ps[r * ${PP} + j];
                    sum = p != 0.0f ? fma(p, kv[j * ${KW} + col], sum) : sum;
                }
                acc[c] = sum;
            }
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    red[t] = l;
    barrier(CLK_LOCAL_MEM_FENCE);
    float total = 0.0f;
    for (int y = 0; y < ${LANES}; y++)
        total += red[r * ${LANES} + y];
% if FINAL:
    if (r >= lq)
        return;
    float inv = total > 0.0f ? 1.0f / total : 0.0f;
    o += o_offset + OUT_AT(bh, lq, ${DV});
    for (int c = 0; c < ${CC}; c++) {
        uint col = x + ${LANES} * c;
        if (col < ${DV})
            ST_${ACT_T}(o, (ulong)r * OUT_ROW(${DV}) + col, acc[c] * inv);
    }
    if (x == 0) {  // -inf and log 0 = -inf for a row masked whole
        ulong at = stats_offset + STATS_AT(bh, lq, r);
        stats[at] = m;
        stats[at + 1] = log(total);
    }
% else:
    if (r < lq) {
        __global float *mine = part + part_offset + PART_AT(bh, chunk, chunks, r);
        if (x == 0) {
            mine[0] = m;
            mine[1] = total;
        }
        for (int c = 0; c < ${CC}; c++) {
            uint col = x + ${LANES} * c;
            if (col < ${DV})
                mine[2 + col] = acc[c];
        }
    }
% if MERGE:
    __local int last;
    global_fence();  // (this work item's partials, before the count below)
    barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);
    if (t == 0) {
        last = atomic_inc(done + done_offset + bh) == chunks - 1;
        global_fence();  // (the count, before the reads of every chunk's partials)
    }
    barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);
    if (!last)
        return;
    for (uint e = t; e < lq * ${DV}; e += ${NT})
        merge_chunks(lq, chunks, bh, e, part + part_offset, o + o_offset,
                     stats + stats_offset);
    if (t == 0)
        done[done_offset + bh] = 0;  // (for the next launch: every chunk has counted)
% endif
% endif
}

% if not FINAL and not MERGE:
// o and the statistics from the chunks' partial results (merge_chunks); a work item per
// output value
__kernel void attention_split_combine(uint lq, uint chunks, __global const float *part,
                                      ulong part_offset, __global ${ACT_T} *o, ulong o_offset,
                                      __global float *stats, ulong stats_offset)
{
    uint e = get_global_id(0), bh = get_global_id(1);
    if (e < lq * ${DV})
        merge_chunks(lq, chunks, bh, e, part + part_offset, o + o_offset, stats + stats_offset);
}
% endif
