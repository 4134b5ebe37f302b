<%include file="common.h"/>
## The next token of each row of a decoder's logits, drawn on the device
## (core/sampling.py): one work-group per row, HuggingFace generate's processors in its
## order (repetition penalty, temperature, top-k, top-p), then greedy or a draw.
## T: the logits' storage type; WG: the work-group size (a power of two).
#pragma OPENCL FP_CONTRACT OFF

<%include file="philox.h"/>
<%include file="wg_reduce.h"/>

#define WG ${WG}

// float -> uint whose unsigned order is the float order (-inf lowest, +inf highest)
inline uint order_key(float x)
{
    uint u = as_uint(x);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// row settings, one float4 per row: (temperature, top_p, repetition penalty, top_k)
// the processed score of token v: the penalty on tokens seen before (a negative logit
// times it, a positive one divided by it), then the temperature (0: greedy, none)
inline float score_of(__global const ${T} *row, __global const uchar *seen, ulong v,
                      float4 set)
{
    float x = LD_${T}(row, v);
    if (set.z != 1.0f && seen[v])  // (no penalty: seen is not read)
        x = x < 0.0f ? x * set.z : x / set.z;
    return set.x > 0.0f ? x / set.x : x;
}

// (value, index) of the work-group's largest value, the lowest index among equals
inline void wg_argmax(__local float *vals, __local uint *idx, float *v, uint *i)
{
    int lid = get_local_id(0);
    vals[lid] = *v;
    idx[lid] = *i;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int stride = WG / 2; stride > 0; stride /= 2) {
        if (lid < stride) {
            float a = vals[lid], b = vals[lid + stride];
            uint ia = idx[lid], ib = idx[lid + stride];
            if (b > a || (b == a && ib < ia)) {
                vals[lid] = b;
                idx[lid] = ib;
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    *v = vals[0];
    *i = idx[0];
    barrier(CLK_LOCAL_MEM_FENCE);
}

inline uint wg_reduce_or(__local uint *scratch, uint v)
{
    int lid = get_local_id(0);
    scratch[lid] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int stride = WG / 2; stride > 0; stride /= 2) {
        if (lid < stride)
            scratch[lid] |= scratch[lid + stride];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    v = scratch[0];
    barrier(CLK_LOCAL_MEM_FENCE);
    return v;
}

// the key of the k-th largest score: a radix select, 8 bits a pass from the top
inline uint kth_largest_key(__global const ${T} *row, __global const uchar *seen, ulong vocab,
                            float4 set, uint k, __local uint *hist, __local uint *chosen)
{
    int lid = get_local_id(0);
    uint prefix = 0, mask = 0;
    for (int shift = 24; shift >= 0; shift -= 8) {
        for (int b = lid; b < 256; b += WG)
            hist[b] = 0;
        barrier(CLK_LOCAL_MEM_FENCE);
        for (ulong v = lid; v < vocab; v += WG) {
            uint key = order_key(score_of(row, seen, v, set));
            if ((key & mask) == prefix)
                atomic_inc(&hist[(key >> shift) & 255u]);
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        if (lid == 0) {  // the bin holding the k-th largest, counted from the top
            // (the count still to pass lives in local memory, kept by work item 0: as a
            // private value that one work item changes between barriers, PoCL drew tokens
            // outside the top k where the vocabulary is smaller than the work-group)
            uint left = shift == 24 ? k : chosen[1];
            int b = 255;
            for (; b > 0 && left > hist[b]; b--)
                left -= hist[b];
            chosen[0] = (uint)b;
            chosen[1] = left;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        prefix |= chosen[0] << shift;
        mask |= 255u << shift;
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    return prefix;
}

// sum of exp(score - top) over the tokens whose keys are in [lo, hi]
inline float mass_between(__global const ${T} *row, __global const uchar *seen, ulong vocab,
                          float4 set, float top, uint lo, uint hi, __local float *scratch)
{
    float s = 0.0f;
    for (ulong v = get_local_id(0); v < vocab; v += WG) {
        float x = score_of(row, seen, v, set);
        uint key = order_key(x);
        if (key >= lo && key <= hi)
            s += exp(x - top);
    }
    return wg_reduce_sum(scratch, s);
}

// tokens[n]: the next token of row n of logits (rows, vocab), rows row_stride apart;
// -1 where the row's scores have a NaN or none is finite (the caller reports it).
// seen (rows, vocab): 1 for the tokens the penalty applies to; the drawn token is
// marked there. streams[n] = (seed, lane) and steps[n]: the row's Philox counter is
// (steps[n], lane) under key seed, one uniform per draw; steps[n] moves on by one.
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void sample_next(ulong vocab, __global const ${T} *logits, ulong logits_offset,
                 ulong row_stride, __global uchar *seen, ulong seen_offset,
                 __global const float4 *settings, __global const ulong2 *streams,
                 __global ulong *steps, __global long *tokens, ulong tokens_offset)
{
    __local float scratch[WG];
    __local uint iscratch[WG];
    __local uint hist[256];
    __local uint chosen[2];
    const int lid = get_local_id(0);
    const ulong n = get_group_id(0);
    __global const ${T} *row = logits + logits_offset + n * row_stride;
    __global uchar *row_seen = seen + seen_offset + n * vocab;
    const float4 set = settings[n];

    // the largest score (lowest index among equals), and whether any is NaN
    float best = -INFINITY;
    uint best_at = 0xFFFFFFFFu, nan = 0;
    for (ulong v = lid; v < vocab; v += WG) {
        float x = score_of(row, row_seen, v, set);
        nan |= isnan(x) ? 1u : 0u;
        if (x > best || (x == best && (uint)v < best_at)) {
            best = x;
            best_at = (uint)v;
        }
    }
    nan = wg_reduce_or(iscratch, nan);
    wg_argmax(scratch, iscratch, &best, &best_at);
    long token = best_at;
    if (nan || !(best > -INFINITY)) {
        token = -1;
    } else if (set.x > 0.0f) {
        // top-k: keep the scores at or above the k-th largest (ties kept, as HF does)
        uint k = (uint)set.w;
        uint lo = (k > 0 && k < vocab) ? kth_largest_key(row, row_seen, vocab, set, k,
                                                          hist, chosen) : order_key(-INFINITY);
        uint hi = order_key(best);
        // top-p: keep the tokens above the largest key whose mass (that key and below)
        // is at most 1 - p of the kept total, as HF's cumulative sum over sorted scores
        float total = mass_between(row, row_seen, vocab, set, best, lo, hi, scratch);
        if (set.y > 0.0f && set.y < 1.0f) {
            float limit = (1.0f - set.y) * total;
            uint a = lo, b = hi;  // the smallest key u with mass(lo .. u) > limit
            while (a < b) {
                uint mid = a + (b - a) / 2;
                if (mass_between(row, row_seen, vocab, set, best, lo, mid, scratch) > limit)
                    b = mid;
                else
                    a = mid + 1;
            }
            lo = a;
        }
        // the draw: inverse CDF in token order, each work-item over a run of tokens
        ulong run = (vocab + WG - 1) / WG, first = lid * run;
        ulong last = min(first + run, vocab);
        float mine = 0.0f;
        for (ulong v = first; v < last; v++) {
            float x = score_of(row, row_seen, v, set);
            uint key = order_key(x);
            if (key >= lo && key <= hi)
                mine += exp(x - best);
        }
        // the runs' inclusive prefix sums in scratch (log2 WG steps, each adding the sum
        // `off` runs back); run i claims [scratch[i - 1], scratch[i]), so the claims tile
        // [0, total) exactly
        scratch[lid] = mine;
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int off = 1; off < WG; off <<= 1) {
            const float before = lid >= off ? scratch[lid - off] : 0.0f;
            barrier(CLK_LOCAL_MEM_FENCE);
            scratch[lid] += before;
            barrier(CLK_LOCAL_MEM_FENCE);
        }
        ulong2 stream = streams[n];
        ulong counter = steps[n];
        uint4 r = philox4x32_10((uint4)((uint)counter, (uint)(counter >> 32), (uint)stream.y,
                                        (uint)(stream.y >> 32)),
                                (uint2)((uint)stream.x, (uint)(stream.x >> 32)));
        float u = ((float)(r.x >> 8) + 0.5f) * (1.0f / 16777216.0f);  // (0, 1)
        float target = u * scratch[WG - 1];
        float start = lid ? scratch[lid - 1] : 0.0f;
        uint pick = 0xFFFFFFFFu;
        if (target >= start && target < scratch[lid]) {
            float acc = start;
            for (ulong v = first; v < last; v++) {
                float x = score_of(row, row_seen, v, set);
                uint key = order_key(x);
                if (key >= lo && key <= hi) {
                    acc += exp(x - best);
                    pick = (uint)v;  // the last kept token so far: rounding lands here
                    if (target < acc)
                        break;
                }
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        // the lowest run that claims the target (rounding can leave none: the largest)
        iscratch[lid] = pick;
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int stride = WG / 2; stride > 0; stride /= 2) {
            if (lid < stride)
                iscratch[lid] = min(iscratch[lid], iscratch[lid + stride]);
            barrier(CLK_LOCAL_MEM_FENCE);
        }
        token = iscratch[0] != 0xFFFFFFFFu ? (long)iscratch[0] : (long)best_at;
    }
    // every work-item has read seen and steps before one of them writes them
    barrier(CLK_GLOBAL_MEM_FENCE);
    if (lid == 0) {
        tokens[tokens_offset + n] = token;
        if (token >= 0) {  // (a row a pass left alone, NaN, keeps its stream where it was)
            row_seen[token] = 1;
            steps[n] += 1;
        }
    }
}

// for each row n with reset[n]: seen[n, :] = 0 and steps[n] = 0, then
// seen[n, tokens[n, t]] = 1 for t < lengths[n] (the prompt, which the penalty applies to)
__kernel void start_rows(ulong rows, ulong width, ulong vocab, __global const long *tokens,
                         __global const long *lengths, __global const uchar *reset,
                         __global uchar *seen, ulong seen_offset, __global ulong *steps)
{
    ulong i = get_global_id(0);
    if (i >= rows * vocab)
        return;
    ulong n = i / vocab;
    if (!reset[n])
        return;
    seen[seen_offset + i] = 0;
    if (i % vocab == 0)
        steps[n] = 0;
}

__kernel void mark_seen(ulong rows, ulong width, ulong vocab, __global const long *tokens,
                        __global const long *lengths, __global const uchar *reset,
                        __global uchar *seen, ulong seen_offset, __global ulong *steps)
{
    ulong i = get_global_id(0);
    if (i >= rows * width)
        return;
    ulong n = i / width, t = i % width;
    long tok = tokens[i];
    if (reset[n] && (long)t < lengths[n] && tok >= 0 && (ulong)tok < vocab)
        seen[seen_offset + n * vocab + (ulong)tok] = 1;
}

// a one-token decoder pass's inputs for the pass after it, on the device: row n is fed the
// token it was just given (tokens[n] -> feed[n]) one position on (pos[n] + 1, its rotary
// row positions[n] clamped to the table's last, context - 1)
__kernel void feed_next(ulong rows, ulong context, __global const long *tokens,
                        ulong tokens_offset, __global long *feed, ulong feed_offset,
                        __global long *pos, ulong pos_offset, __global long *positions,
                        ulong positions_offset)
{
    ulong n = get_global_id(0);
    if (n >= rows)
        return;
    feed[feed_offset + n] = tokens[tokens_offset + n];
    long p = pos[pos_offset + n] + 1;
    pos[pos_offset + n] = p;
    positions[positions_offset + n] = min(p, (long)context - 1);
}
