// Shared by the attention kernels (attention.cl, one row per work item, and
// attention_tiles.cl, blocks of rows per work-group): the score mask (causal, additive
// with strides) and the dropout factor recomputed from Philox, both as functions of
// (bh, i, j) so the forward and backward kernels agree without storing them.
// Expects bh, lq and lk in scope where MASK_AT and KEEP are used.
#define NEG_INF (-INFINITY)
// the blocks' softmax in powers of two (attention_tiles.cl, attention_mma.cl): FAST_EXP
// takes the device's native exp2 (core/attention.py's native_exp2_is_accurate)
#define LOG2E 1.4426950408889634f
% if context.get("FAST_EXP", False):
#define EXP2(x) native_exp2(x)
% else:
#define EXP2(x) exp2(x)
% endif

// Where (batch row bh = n * HEADS + h, position l) lives. LAYOUT "nhld": q, k, v, o as
// (N, H, L, D), one head's rows contiguous; "nlhd": (N, L, H, D), the heads of a position
// side by side (a Linear's output split into heads, no transpose); "packed": q, k and v
// interleaved per position as (N, L, 3, H, D) (one Linear's qkv output; the three
// tensors' offsets select the part), o and dO (N, L, H, D). IN_* address q, k, v and
// their gradients, OUT_* o and dO, STAT_AT the per-row statistics and delta, which follow
// o's row order so that delta is a plain row-wise reduction of dO * O.
% if LAYOUT == "nhld":
#define IN_AT(bh, len, width) ((ulong)(bh) * (len) * (width))
#define IN_ROW(width) (width)
#define OUT_AT(bh, len, width) ((ulong)(bh) * (len) * (width))
#define OUT_ROW(width) (width)
#define STAT_AT(bh, len, i) ((ulong)(bh) * (len) + (i))
% else:
<% PARTS = 3 if LAYOUT == "packed" else 1 %>
#define IN_AT(bh, len, width) \
    (((ulong)((bh) / ${HEADS}) * (len) * ${PARTS * HEADS} + (bh) % ${HEADS}) * (width))
#define IN_ROW(width) (${PARTS * HEADS} * (width))
#define OUT_AT(bh, len, width) \
    (((ulong)((bh) / ${HEADS}) * (len) * ${HEADS} + (bh) % ${HEADS}) * (width))
#define OUT_ROW(width) (${HEADS} * (width))
#define STAT_AT(bh, len, i) \
    (((ulong)((bh) / ${HEADS}) * (len) + (i)) * ${HEADS} + (bh) % ${HEADS})
% endif

// four stored values as a float4: vloads, which need only the element's alignment (a row
// of a packed or strided layout starts anywhere)
% if ACT_T == "half":
#define LD4(p) vload_half4(0, p)
% elif ACT_T == "bfloat16":
#define LD4(p) bfloat16_bits4_value(vload4(0, p))
% else:
#define LD4(p) vload4(0, p)
% endif

// the arguments every kernel of a pass takes first (the launcher's order). ACT_T stores
// q, k, v, o, dO and the gradients (float, half or bfloat16: loads widen, stores round to
// nearest even, LD_/ST_ of common.h), so the arithmetic is float whatever it is; stats
// and delta, the kernels' own row statistics, stay float
#define FORWARD_ARGS uint lq, uint lk, float scale, \
    __global const ${ACT_T} *q, ulong q_offset, __global const ${ACT_T} *k, ulong k_offset, \
    __global const ${ACT_T} *v, ulong v_offset
#define BACKWARD_ARGS FORWARD_ARGS, \
    __global const ${ACT_T} *dout, ulong dout_offset, __global const float *stats, \
    ulong stats_offset, __global const float *delta, ulong delta_offset

// The forward pass's statistics of query row i, two floats at STATS_AT: the scores'
// maximum m_i and log l_i, l_i = sum_j exp(s_ij - m_i) (-inf and -inf for a row masked
// whole), so that the backward's p_ij = exp(s_ij - m_i - log l_i) is the forward's
// exp(s_ij - m_i) / l_i. Not one lse_i = m_i + log l_i: where m_i is large, as in a row
// hidden whole by float32's lowest value (exporters' masks), that sum rounds to m_i and
// every p_ij of the row would be 1, not 1 / l_i.
#define STATS_AT(bh, len, i) (2 * STAT_AT(bh, len, i))

% if DROPOUT:
<%include file="philox.h"/>

// one Philox draw serves four weights: keys 4g .. 4g + 3 of a query row (its four words
// in turn), so the mask is a function of (seed, offset, row, key) whatever the tiling:
// group (bh lq + i) ceil(lk / 4) + j / 4 draws counter offset + that group
inline uint4 keep_draw(ulong seed, ulong offset, ulong group)
{
    ulong c = offset + group;
    return philox4x32_10((uint4)((uint)c, (uint)(c >> 32), 0, 0),
                         (uint2)((uint)seed, (uint)(seed >> 32)));
}

// word ``lane`` of a draw as the factor: 0 when dropped, else 1 / (1 - p)
inline float keep_lane(uint4 r, uint lane, uint threshold, float keep_scale)
{
    uint x = lane == 0 ? r.x : lane == 1 ? r.y : lane == 2 ? r.z : r.w;
    return x < threshold ? 0.0f : keep_scale;
}
#define KEEP_DRAW(i, g) keep_draw(drop_seed, drop_offset, \
                                  ((ulong)bh * lq + (i)) * ((lk + 3) / 4) + (g))
#define DROP_ARGS , uint drop_threshold, float keep_scale, ulong drop_seed, ulong drop_offset
// the factor on weight (i, j) alone (the row kernels; the tiled ones draw a block at once)
#define KEEP(i, j) keep_lane(KEEP_DRAW(i, (j) >> 2), (j) & 3, drop_threshold, keep_scale)
% else:
#define DROP_ARGS
#define KEEP(i, j) 1.0f
% endif

<% POSITIONS = context.get("POSITIONS", False); WINDOW = context.get("WINDOW", 0) %>
% if POSITIONS:
// POSITIONS: a key/value cache's (KVCache): batch entry n = bh / pos_heads holds pos[n *
// pos_step] tokens before this pass, and query row i is the pass's token i % pos_rows
// (grouped-query heads: G x pos_rows rows of one key/value head), at position pos[n] +
// i % pos_rows, which sees the cached keys j at or before it. A count the cache could not
// take (below 0, or pos_rows more overflow the lk positions: KVCache writes nothing)
// makes the sample's scores NaN, as the cache's mask would: -1 here
#define POS_ARGS , __global const ${POS_T} *pos, ulong pos_offset, uint pos_heads, \
    uint pos_step, uint pos_rows
inline long cache_position(__global const ${POS_T} *pos, ulong pos_offset, uint pos_heads,
                           uint pos_step, uint pos_rows, uint bh, uint i, uint lk)
{
    const long p = (long)pos[pos_offset + (ulong)(bh / pos_heads) * pos_step];
    return p < 0 || p + (long)pos_rows > (long)lk ? -1 : p + (long)(i % pos_rows);
}
#define POSITION(i) cache_position(pos, pos_offset, pos_heads, pos_step, pos_rows, bh, i, lk)
// the keys that query rows i0 .. i1 may see end before KEY_END(i0, i1) (a walk's
// bound: the last row's position where the rows are one group's, else the group's end;
// every key where the count overflows, each score NaN)
inline uint key_end(__global const ${POS_T} *pos, ulong pos_offset, uint pos_heads,
                    uint pos_step, uint pos_rows, uint bh, uint i0, uint i1, uint lk)
{
    const uint last = i0 / pos_rows == i1 / pos_rows ? i1 : i0 / pos_rows * pos_rows + pos_rows - 1;
    const long p = cache_position(pos, pos_offset, pos_heads, pos_step, pos_rows, bh, last, lk);
    return p < 0 ? lk : min(lk, (uint)p + 1);
}
#define KEY_END(i0, i1) key_end(pos, pos_offset, pos_heads, pos_step, pos_rows, bh, i0, i1, lk)
% else:
#define POS_ARGS
#define KEY_END(i0, i1) lk
% endif

// the score's additive term at (bh, i, j): the mask (stored as MASK_T), -inf past causal
// and past the cache position, and with WINDOW before the WINDOW keys that end there (a
// sliding window: the walks still start at key 0, and mask what lies before it)
inline float score_mask(
% if MASK:
    __global const ${MASK_T} *mask, ulong mask_offset, ulong ms_n, ulong ms_h, ulong ms_q,
    ulong ms_k, uint heads,
% endif
% if POSITIONS:
    long position,
% endif
    uint bh, uint i, uint j)
{
% if CAUSAL:
    if (j > i)
        return NEG_INF;
% endif
% if POSITIONS:
    if (position < 0)
        return NAN;
    if ((long)j > position)
        return NEG_INF;
% if WINDOW:
    if ((long)j <= position - ${WINDOW})
        return NEG_INF;
% endif
% endif
% if MASK:
    return LD_${MASK_T}(mask, mask_offset + (bh / heads) * ms_n + (bh % heads) * ms_h
                                  + i * ms_q + j * ms_k);
% else:
    return 0.0f;
% endif
}

<% POSITION_ARG = "POSITION(i), " if POSITIONS else "" %>
% if MASK:
#define MASK_ARGS , __global const ${MASK_T} *mask, ulong mask_offset, ulong ms_n, \
    ulong ms_h, ulong ms_q, ulong ms_k, uint heads POS_ARGS
#define MASK_AT(i, j) score_mask(mask, mask_offset, ms_n, ms_h, ms_q, ms_k, heads, \
                                 ${POSITION_ARG}bh, i, j)
% else:
#define MASK_ARGS POS_ARGS
#define MASK_AT(i, j) score_mask(${POSITION_ARG}bh, i, j)
% endif

// p_ij = exp(s_ij - m_i - log l_i), 0 where the key is masked or the row is masked whole
inline float prob(float s, float m_i, float log_l)
{
    return (s == NEG_INF || m_i == NEG_INF) ? 0.0f : exp((s - m_i) - log_l);
}
