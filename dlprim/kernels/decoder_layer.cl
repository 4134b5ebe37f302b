<%include file="common.h"/>
<%namespace name="q4" file="q4_loads.h"/>
## The blocks of a Llama-family or GPT-2-family decoder at one token, in one launch
## (core/decoder_layer.py); each block: the norm and the q/k/v product with the rotary
## embedding and the cache write in its epilogue, attention over the cache in chunks with
## each head's chunks merged by the team that finishes its last, the output product added
## onto the residual, the norm and the MLP's products (SwiGLU's gate and up pair, or one
## product and its activation), the down product added onto the residual. P work-groups
## (one a compute unit) meet at a grid barrier between those four phases and between the
## blocks: a decoder's step is then one launch instead of six a block, where each launch
## costs NVIDIA's driver 5-9 us of host time and 4-5 us of device time whatever it does,
## and a block's launch its slowest work-group's tail (5 us of a TinyLlama block's 52 on
## an H200).
## The blocks' tensors lie in one buffer each (the Net's parameters): the kernel takes the
## first block's and a table of each block's elements past them (``deltas``, BLOCK_TENSORS
## in order a block), and each block's attention scale.
##
## The residual stream x is float32 (H values) between the launches; each product's vector
## operand is staged in local memory by every work-group (volatile loads: values another
## work-group wrote in this launch are read past the L1 cache), and a team of TEAM (32)
## work-items streams a weight row at a time (the q/k/v product: a head's rows e and
## e + D/2 together, the rotary embedding's pair), 8 values a load, UNROLL loads of each
## weight (a product of one weight: SINGLE_UNROLL) asked for before any is used. A phase's tasks are dealt team-major (task base + team P + group):
## each work-group, and so each compute unit, takes an equal share, where dealing them
## work-group by work-group left a quarter of the compute units with all of attention.
## Attention: a team a (query head, chunk of TEAM positions) pair, a position a work-item;
## each chunk's max, sum of exp and weighted values go to `part`, and the team that counts
## a head's last chunk done (`count`) merges the head (online softmax over the chunks).
##
## Template: H, I (hidden and MLP widths), QH, KVH (query and key/value heads), D (head
## width), W_T (the Linears' weights: float, half, bfloat16, char with a float32 scale a
## row: SCALE, or uchar: 4-bit values with a float32 scale a group of Q4 values of a row,
## core/quantize.py's layout), C_T (the caches), T_T (the rotary tables), E_T (the token
## table, read by the first block: EMBED; char with a scale a row: E_SCALE), B_T (biases: QKV_BIAS,
## O_BIAS, MLP_BIAS: the MLP's products), CONTEXT (the cache's positions), WINDOW (0, or
## the keys a query sees, ending at its own), TEAMS (teams a work-group), MULTI (more than
## one work-group: grid barriers), SHUFFLE (NVIDIA: teams add by warp shuffles), VL
## (floats of the staged vectors). The family: NORM ("rms", or "layer": LayerNorm with a
## bias), ROTARY (0: no rotary embedding), GATED (SwiGLU-style gate and up pair, else one
## product), ACT (the MLP's activation), POS_EMBED (the first block adds the position's
## row of a learned table of P_T); PREFETCH (NVIDIA: each work-group asks the L2 cache for its
## share of the output, MLP and down products' weights as it ends attention);
## BLOCK_TENSORS (the names of a block's tensors, comma-separated), MAX_BLOCKS (blocks a
## launch at most: its local table's size).
<%
NQKV = (QH + 2 * KVH) * D
G = QH // KVH
CMAX = (CONTEXT + TEAM - 1) // TEAM
DR = (D + TEAM - 1) // TEAM   # head dimensions a work-item keeps in the merge and PV
VB = max(8, min(TEAM, 64 // DR))  # values rows a work-item loads at once in attention
NVIDIA = getattr(facts, "vendor_id", "") == "nvidia"
def q4_groups(k):  # (Q4: the scales of a row of k values)
    return "((%s + %d) / %d)" % (k, Q4 - 1, Q4)
%>
% if MULTI:
#pragma OPENCL EXTENSION cl_khr_int64_base_atomics : enable
% endif
#define TEAM ${TEAM}
#define TEAMS ${TEAMS}
#define NT (TEAM * TEAMS)
#define CMAX ${CMAX}
#define H ${H}
#define D ${D}
#define QH ${QH}
#define KVH ${KVH}
#define CONTEXT ${CONTEXT}
<%include file="staged_vector.h"/>

// raw8_T holds the bits of 8 values of storage T, rawload8_T loads them (vrawload8_T past
// the L1 cache: values another work-group wrote in this launch), widen8_T makes floats of
// them; raw1_T and the rest likewise for one value. The loops ask for all their loads'
// bits before they widen any: NVIDIA's driver widens half through an inline-asm block that
// holds the next load back until its value arrives (a block took 67 us with the loads
// widened as they came).
<%def name="raw_type(T)">
% if T == "float":
typedef float8 raw8_float;
typedef float raw1_float;
inline raw8_float rawload8_float(__global const float *p, ulong i)
{
    return (float8)(*(__global const float4 *)(p + i), *(__global const float4 *)(p + i + 4));
}
inline raw8_float vrawload8_float(volatile __global const float *p, ulong i)
{
    return (float8)(*(volatile __global const float4 *)(p + i),
                    *(volatile __global const float4 *)(p + i + 4));
}
inline raw1_float vrawload1_float(volatile __global const float *p, ulong i)
{
    return p[i];
}
#define widen8_float(r) (r)
#define widen1_float(r) (r)
% elif T in ("half", "bfloat16"):
typedef uint4 raw8_${T};
typedef ushort raw1_${T};
inline raw8_${T} rawload8_${T}(__global const ${T} *p, ulong i)
{
    return *(__global const uint4 *)(p + i);
}
inline raw8_${T} vrawload8_${T}(volatile __global const ${T} *p, ulong i)
{
    return *(volatile __global const uint4 *)(p + i);
}
inline raw1_${T} vrawload1_${T}(volatile __global const ${T} *p, ulong i)
{
    return ((volatile __global const ushort *)p)[i];
}
% if T == "half":
inline float8 widen8_half(uint4 r)
{
    return vload_half8(0, (const __private half *)&r);
}
inline float widen1_half(ushort r)
{
    return vload_half(0, (const __private half *)&r);
}
% else:
#define widen8_bfloat16(r) as_float8(convert_uint8(as_ushort8(r)) << 16)
#define widen1_bfloat16(r) as_float((uint)(r) << 16)
% endif
% elif T == "char":
typedef char8 raw8_char;
inline raw8_char rawload8_char(__global const char *p, ulong i)
{
    return *(__global const char8 *)(p + i);
}
#define widen8_char(r) convert_float8(r)
% elif T == "uchar":
// (4-bit weights: unscaled here; the products multiply by their group's scale)
typedef uint raw8_uchar;
#define rawload8_uchar(p, i) q4_bits8(p, i)
#define widen8_uchar(r) q4_widen8(r)
% endif
</%def>
% if Q4:
${q4.loads(Q4)}
% endif
${raw_type(W_T)}
% if C_T != W_T:
${raw_type(C_T)}
% endif
inline float hsum8(float8 v)
{
    float4 h = v.lo + v.hi;
    return (h.x + h.y) + (h.z + h.w);
}

% if TIMING:
// TIMING: the first work-item of each work-group writes the device's nanosecond clock at
// each phase's end (benchmarks/decode_block_phases.py)
inline ulong now_ns(void)
{
    ulong t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
#define STAMP(k) if (lid == 0) clock[((ulong)blk * groups + group) * 16 + (k)] = now_ns()
% else:
#define STAMP(k)
% endif

<%include file="global_fence.h" args="ptx=NVIDIA"/>

// Every work-group's writes so far visible to all after it. The counter only grows: a
// barrier waits for the next multiple of P arrivals (a launch needs no reset of it). A
// work-group that waits longer than ``spins`` reads (work-groups not all resident) marks
// the launch failed in sync[1]; the block's output is then NaN.
inline int grid_sync(volatile __global ulong *sync, __local int *failed, uint spins)
{
    barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);
% if MULTI:
    if (get_local_id(0) == 0) {
        const ulong P = get_num_groups(0);
        global_fence();
        const ulong target = (atom_inc(sync) / P + 1) * P;
        uint n = 0;
        while (sync[0] < target && !*failed) {
            if (++n > spins || sync[1]) {
                atom_or(sync + 1, 1ul);
                *failed = 1;
            }
        }
        global_fence();
    }
    barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);
% endif
    return *failed;
}

% if PREFETCH:
// Work-item ``who`` of ``among`` asks the L2 cache for its share of [p, p + bytes), a line
// (128 bytes) at a time
inline void l2_prefetch(__global const char *p, ulong bytes, uint who, uint among)
{
    for (ulong o = (ulong)who * 128; o < bytes; o += (ulong)among * 128)
        asm volatile("prefetch.global.L2 [%0];" :: "l"(p + o));
}
% endif

% if SHUFFLE:
<%include file="warp_shuffle.h"/>
// (a team is a warp)
#define team_sum(x, red) warp_sum(x)
#define team_max(x, red) warp_max(x)
% else:
// (every work-item of the work-group calls these alike: they hold work-group barriers;
// ``red``: the team's TEAM floats)
inline float team_sum(float x, __local float *red)
{
    const int lane = get_local_id(0) % TEAM;
    barrier(CLK_LOCAL_MEM_FENCE);
    red[lane] = x;
    barrier(CLK_LOCAL_MEM_FENCE);
    float s = 0.0f;
    for (int i = 0; i < TEAM; i++)
        s += red[i];
    return s;
}
inline float team_max(float x, __local float *red)
{
    const int lane = get_local_id(0) % TEAM;
    barrier(CLK_LOCAL_MEM_FENCE);
    red[lane] = x;
    barrier(CLK_LOCAL_MEM_FENCE);
    float s = -INFINITY;
    for (int i = 0; i < TEAM; i++)
        s = fmax(s, red[i]);
    return s;
}
% endif

<%include file="wg_reduce.h"/>
% if SHUFFLE:
// the work-group's sum: each team's by shuffles, then the TEAMS partials (every work-item
// reads them in the same order: the same sum for all), where wg_reduce_sum's tree takes
// log2(NT) barriers; ``red``: NT floats, free again on return
inline float group_sum(__local float *red, float x)
{
    const int lid = get_local_id(0);
    x = team_sum(x, red);
    if (lid % TEAM == 0)
        red[lid / TEAM] = x;
    barrier(CLK_LOCAL_MEM_FENCE);
    float s = 0.0f;
    for (int i = 0; i < TEAMS; i++)
        s += red[i];
    barrier(CLK_LOCAL_MEM_FENCE);
    return s;
}
% else:
#define group_sum(red, x) wg_reduce_sum(red, x)
% endif

inline float mlp_act(float g)
{
% if ACT == "silu":
    return g / (1.0f + exp(-g));
% elif ACT == "gelu":
    return 0.5f * g * (1.0f + erf(g * 0.70710678118654752f));
% elif ACT == "gelu_tanh":
    return 0.5f * g * (1.0f + tanh(0.79788456080286536f * fma(0.044715f * g, g * g, g)));
% elif ACT == "relu":
    return fmax(g, 0.0f);
% elif ACT == "tanh":
    return tanh(g);
% elif ACT == "sigmoid":
    return 1.0f / (1.0f + exp(-g));
% endif
}

<%def name="stage_norm(weight, bias, value)">
    // vec = the norm of the residual times ${weight}: RMSNorm's 1 / RMS goes onto the
    // products' sums (rs), LayerNorm's mean and 1 / deviation (two passes) into vec
% if NORM == "layer":
    {
        float s = 0.0f;
        for (int i = lid; i < H; i += NT)
            s += ${value};
        const float mean = group_sum(red, s) / (float)H;
        s = 0.0f;
        for (int i = lid; i < H; i += NT) {
            const float d = ${value} - mean;
            s = fma(d, d, s);
        }
        const float rstd = rsqrt(group_sum(red, s) / (float)H + eps);
        for (int i = lid; i < H; i += NT)
            vec[PERM(i)] = fma((${value} - mean) * rstd, ${weight}[i], ${bias}[i]);
        barrier(CLK_LOCAL_MEM_FENCE);  // (the RMS branch's group_sum holds this one)
        rs = 1.0f;
    }
% else:
    {
        float ss = 0.0f;
        for (int i = lid; i < H; i += NT) {
            const float v = ${value};
            ss = fma(v, v, ss);
            vec[PERM(i)] = v * ${weight}[i];
        }
        rs = rsqrt(group_sum(red, ss) / (float)H + eps);
    }
% endif
</%def>

<%def name="product(W, N, K, epilogue, second=None, row='c', row2='r')">
<%
U = UNROLL if second else SINGLE_UNROLL
def row_at(r):  # (where row r of a weight starts, and with Q4 its scales)
    return "(ulong)(%s) * (%s / 2)" % (r, K) if Q4 else "(ulong)(%s) * %s" % (r, K)
def scales(w, r):
    return "s_%s + (ulong)(%s) * %s" % (w[2:], r, q4_groups(K))
def widened(raw, u):
    return "widen8_%s(%s%d)%s" % (W_T, raw, u, " * g%s%d" % (raw, u) if Q4 else "")
%>
    // for each of the ${N} tasks c, row r = ${row} of ${W} (${K} values a row): the sum of
    // the row times vec${" and of %s's row %s" % (second, row2) if second else ""}, then the
    // epilogue (its first work-item)
    for (int c0 = 0; c0 < ${N}; c0 += groups * TEAMS) {
        const int ci = c0 + team * groups + group;
        const int c = min(ci, ${N} - 1);  // (teams past N load nothing, store nothing)
        const int r = ${row};
        __global const ${W_T} *w = ${W} + ${row_at("r")};
% if Q4:
        __global const float *sw = ${scales(W, "r")};
% endif
% if second:
        const int r2 = ${row2};
        __global const ${W_T} *w2 = ${second} + ${row_at("r2")};
% if Q4:
        __global const float *sw2 = ${scales(second, "r2")};
% endif
        float8 part2 = (float8)(0.0f);
% endif
        float8 part = (float8)(0.0f);
        for (int k = lane * 8; ci < ${N} && k < ${K}; k += ${U} * TEAM * 8) {
% for u in range(U):
            const int k${u} = min(k + ${u * 8} * TEAM, ${K} - 8);
            const raw8_${W_T} r${u} = rawload8_${W_T}(w, k${u});
% if Q4:
            const float gr${u} = sw[k${u} / ${Q4}];
% endif
% if second:
            const raw8_${W_T} s${u} = rawload8_${W_T}(w2, k${u});
% if Q4:
            const float gs${u} = sw2[k${u} / ${Q4}];
% endif
% endif
% endfor
% for u in range(U):
            if (k + ${u * 8} * TEAM < ${K}) {
                const float8 v = vstaged(vec + PERM(k${u}));
                part = fma(${widened("r", u)}, v, part);
% if second:
                part2 = fma(${widened("s", u)}, v, part2);
% endif
            }
% endfor
        }
        const float sum = team_sum(hsum8(part), red + team * TEAM);
% if second:
        const float sum2 = team_sum(hsum8(part2), red + team * TEAM);
% endif
        if (lane == 0 && ci < ${N}) {
            ${epilogue}
        }
    }
</%def>

<%
def block_type(name):  # (the pointer type of a block's tensor, by its name: caches written)
    if name in ("keys", "values"):
        return C_T
    return "const " + {"w": W_T, "b": B_T}.get(name.split("_")[0], "float")
BT = BLOCK_TENSORS.split(",")
NB = len(BT)
%>
__kernel __attribute__((reqd_work_group_size(NT, 1, 1)))
void decoder_layer(__global const long *tokens, ulong tokens_offset,
                   __global const long *pos, ulong pos_offset,
                   __global float *x,
                   __global const ${E_T} *table, ulong table_offset,
                   __global const float *table_scale, ulong table_scale_offset,
                   __global const ${P_T} *pos_table, ulong pos_table_offset,
% for name in BT:
                   __global ${block_type(name)} *${name}_0, ulong ${name}_0_offset,
% endfor
                   __global const long *deltas, __global const float *scales, uint blocks,
                   __global const ${T_T} *cosines, ulong cos_offset,
                   __global const ${T_T} *sines, ulong sin_offset,
                   __global float *qkv, __global float *part, volatile __global uint *count,
                   __global float *att,
                   __global float *mlp, volatile __global ulong *sync, uint spins,
                   float eps
% if TIMING:
                   , __global ulong *clock
% endif
                   )
{
    __local float vec[${VL}];   // the staged vector of a product (attention: q and weights)
    __local float red[NT];      // sums
    __local int failed;
    __local int merging[TEAMS];  // (whether each team merges its task's head)
    // each block's tensors: elements past the first block's (deltas), its attention scale
    __local long block_at[${MAX_BLOCKS * NB}];
    __local float block_scale[${MAX_BLOCKS}];
    const int lid = get_local_id(0), lane = lid % TEAM, team = lid / TEAM;
    const int group = get_group_id(0), groups = get_num_groups(0);
    if (lid == 0)
        failed = 0;
    for (uint i = lid; i < blocks * ${NB}; i += NT)
        block_at[i] = deltas[i];
    for (uint i = lid; i < blocks; i += NT)
        block_scale[i] = scales[i];
    const long p = pos[pos_offset];
    const int bad = p < 0 || p >= CONTEXT;  // (the cache would overflow: NaN, nothing written)
    const long row = bad ? 0 : p;
% if ROTARY:
    cosines += cos_offset + (ulong)row * D; sines += sin_offset + (ulong)row * D;
% endif
    // (every block checks the token: Intel's CPU compiler crashed on the kernel without
    // the read)
    const long token = tokens[tokens_offset];
    const int bad_token = token < 0 || token >= ${VOCAB};
    // (x is read past the L1 cache: the blocks before, in this launch, wrote it)
    volatile __global float *xv = x;
% if EMBED:
    // the first block's residual: the token's row of the table
    __global const ${E_T} *x_in = table + table_offset + (ulong)(bad_token ? 0 : token) * H;
% if E_SCALE:
    const float x_in_scale = table_scale[table_scale_offset + (bad_token ? 0 : token)];
% else:
    const float x_in_scale = 1.0f;
% endif
% if POS_EMBED:
    // (and the position's row of the learned position table)
    __global const ${P_T} *x_at = pos_table + pos_table_offset + (ulong)row * H;
#define X_IN(i) (blk ? xv[i] \
                     : fma((float)LD_${E_T}(x_in, i), x_in_scale, (float)LD_${P_T}(x_at, i)))
% else:
#define X_IN(i) (blk ? xv[i] : (float)LD_${E_T}(x_in, i) * x_in_scale)
% endif
% else:
#define X_IN(i) (xv[i])
% endif
    barrier(CLK_LOCAL_MEM_FENCE);

    // the launch's blocks in turn, a grid barrier between them
    for (uint blk = 0; blk < blocks; blk++) {
% for k, name in enumerate(BT):
    __global ${block_type(name)} *${name} =
        ${name}_0 + ${name}_0_offset + block_at[blk * ${NB} + ${k}];
% endfor
    const float scale = block_scale[blk];

    STAMP(0);
    // 1. q, k and v of the norm of x: a team a pair of a head's rows (e, e + D/2), whose
    // rotary embedding its first work-item applies (the sine's first half is negated in
    // the table); the queries into qkv, the new key and value into the cache
    float rs;
    ${stage_norm("norm1", "norm1_b", "X_IN(i)")}
<%
def qkv_value(at, sum_):
    return "%s * rs%s%s" % (sum_, " * s_qkv[%s]" % at if SCALE else "",
                            " + (float)LD_%s(b_qkv, %s)" % (B_T, at) if QKV_BIAS else "")
rotate = """
            if (hd < QH + KVH) {
                const float ra = ya * (float)LD_%(T)s(cosines, e) + yb * (float)LD_%(T)s(sines, e);
                yb = yb * (float)LD_%(T)s(cosines, e + D / 2)
                     + ya * (float)LD_%(T)s(sines, e + D / 2);
                ya = ra;
            }""" % {"T": T_T}
qkv_epilogue = """const int hd = r / D, e = r %% D;
            float ya = %(a)s, yb = %(b)s;%(rotate)s
            if (hd < QH) {
                qkv[r] = ya;
                qkv[r + D / 2] = yb;
            } else if (!bad) {
                const ulong at = ((ulong)((hd - QH) %% KVH) * CONTEXT + row) * D + e;
                __global %(C)s *cache = hd < QH + KVH ? keys : values;
                ST_%(C)s(cache, at, ya);
                ST_%(C)s(cache, at + D / 2, yb);
            }""" % {"a": qkv_value("r", "sum"), "b": qkv_value("r + D / 2", "sum2"),
                    "rotate": rotate if ROTARY else "", "C": C_T}
%>
    ${product("w_qkv", NQKV // 2, "H", qkv_epilogue, second="w_qkv",
              row="(c / (D / 2)) * D + c % (D / 2)", row2="r + D / 2")}
    STAMP(1);
    grid_sync(sync, &failed, spins);
    STAMP(2);

    // 2. attention over the cache: a team a (query head, chunk of TEAM positions), a
    // work-item a position; the chunk's max, sum of exp and weighted values into `part`;
    // the team that counts its head's last chunk done merges the head's chunks into att:
    // att = sum_c exp(m_c - M) o_c / sum_c exp(m_c - M) l_c
    const long last = row;  // (the new token's own position is its last key)
% if WINDOW:
    const long first = max(0L, last - ${WINDOW} + 1);
% else:
    const long first = 0;
% endif
    const int chunks = (int)((last - first) / TEAM) + 1;
    {
        __local float *q_all = vec, *w_all = vec + TEAMS * D;
        for (int t0 = 0; t0 < QH * chunks; t0 += groups * TEAMS) {
            const int ti = t0 + team * groups + group;
            // (teams past the tasks load nothing: all of them reading the last task's
            // rows took the phase from 7 to 34 us)
            const int live = ti < QH * chunks, t = min(ti, QH * chunks - 1);
            const int h = t / chunks, chunk = t % chunks, kv = h / ${G};
            __local float *q = q_all + team * D, *w = w_all + team * TEAM;
            const long j0 = first + (long)chunk * TEAM, j = j0 + lane;
            const int n = (int)min((long)TEAM, last - j0 + 1);
            // every load of the task asked for before any is used: the query, this work-
            // item's key row, and its dimensions of the first VB values rows (past the
            // chunk: the last row again, weight 0); the softmax then waits one latency
            float qv[${DR}];
            for (int r = 0; r < ${DR}; r++)
                qv[r] = live ? ((volatile __global float *)qkv)[h * D
                                                               + min(lane + r * TEAM, D - 1)]
                             : 0.0f;
            volatile __global const ${C_T} *k_row = keys + ((ulong)kv * CONTEXT + min(j, last)) * D;
            raw8_${C_T} kr[D / 8];
            for (int e = 0; e < D / 8; e++)
                kr[e] = live ? vrawload8_${C_T}(k_row, e * 8) : (raw8_${C_T})(0);
            volatile __global const ${C_T} *v_rows = values + ((ulong)kv * CONTEXT + j0) * D;
            raw1_${C_T} v[${VB}][${DR}];
            for (int u = 0; u < ${VB}; u++)
                for (int r = 0; r < ${DR}; r++)
                    v[u][r] = live ? vrawload1_${C_T}(v_rows, (ulong)min(u, n - 1) * D
                                                      + min(lane + r * TEAM, D - 1))
                                   : (raw1_${C_T})0;
            barrier(CLK_LOCAL_MEM_FENCE);
            for (int r = 0; r < ${DR}; r++)
                if (lane + r * TEAM < D)
                    q[lane + r * TEAM] = qv[r];
            barrier(CLK_LOCAL_MEM_FENCE);
            float8 acc = (float8)(0.0f);
            for (int e = 0; e < D / 8; e++)
                acc = fma(widen8_${C_T}(kr[e]), vload8(0, q + e * 8), acc);
            const float s = j <= last ? hsum8(acc) * scale : -INFINITY;
            const float m = team_max(s, red + team * TEAM);
            const float e_s = j <= last ? exp(s - m) : 0.0f;
            const float l = team_sum(e_s, red + team * TEAM);
            w[lane] = e_s;
            barrier(CLK_LOCAL_MEM_FENCE);
            float o[${DR}];
            for (int r = 0; r < ${DR}; r++)
                o[r] = 0.0f;
            for (int u = 0; u < ${VB}; u++)
                for (int r = 0; r < ${DR}; r++)
                    o[r] = fma(u < n ? w[u] : 0.0f, widen1_${C_T}(v[u][r]), o[r]);
            for (int i0 = ${VB}; live && i0 < n; i0 += ${VB}) {  // (the rest, VB at a time)
                for (int u = 0; u < ${VB}; u++)
                    for (int r = 0; r < ${DR}; r++)
                        v[u][r] = vrawload1_${C_T}(v_rows, (ulong)min(i0 + u, n - 1) * D
                                                   + min(lane + r * TEAM, D - 1));
                for (int u = 0; u < ${VB}; u++)
                    for (int r = 0; r < ${DR}; r++)
                        o[r] = fma(i0 + u < n ? w[i0 + u] : 0.0f, widen1_${C_T}(v[u][r]), o[r]);
            }
            if (live) {
                __global float *out = part + ((ulong)h * CMAX + chunk) * (D + 2);
                if (lane == 0) {
                    out[0] = m;
                    out[1] = l;
                }
                for (int r = 0; r < ${DR}; r++) {
                    const int e = lane + r * TEAM;
                    if (e < D)
                        out[2 + e] = o[r];
                }
            }
            // the chunk counted done; the team that counts a head's last merges it. Every
            // team of the work-group runs the merge's steps alike, those with no head to
            // merge loading nothing: they hold work-group barriers (PoCL miscompiled them
            // under a branch on whether any team merges)
            global_fence();  // (this work-item's partials, before the count)
            barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);
            if (lane == 0) {
                const int last_chunk = live && atomic_inc(count + h) == (uint)chunks - 1;
                if (last_chunk) {
                    atomic_xchg(count + h, 0u);  // (all counted: ready for the next block)
                    global_fence();  // (the count, before the reads of the partials)
                }
                merging[team] = last_chunk;
            }
            barrier(CLK_LOCAL_MEM_FENCE);
            const int mine = merging[team];
            volatile __global const float *in = part + (ulong)h * CMAX * (D + 2);
            float mx = -INFINITY;
            for (int c = lane; mine && c < chunks; c += TEAM)
                mx = fmax(mx, in[(ulong)c * (D + 2)]);
            mx = team_max(mx, red + team * TEAM);
            // TEAM chunks at a time: a work-item a chunk's factor exp(m_c - M) into local
            // memory, then each its dimensions' sums, 16 chunks' loads asked for at once
            float acc_o[${DR}], acc_l = 0.0f;
            for (int r = 0; r < ${DR}; r++)
                acc_o[r] = 0.0f;
            for (int c0 = 0; c0 < chunks; c0 += TEAM) {
                // (the block's first 16 chunks' values asked for with its maxima and sums)
                const int c = c0 + lane, nc = min(TEAM, chunks - c0);
                volatile __global const float *pc = in + (ulong)min(c, chunks - 1) * (D + 2);
                const float mc = mine ? pc[0] : 0.0f, lc = mine ? pc[1] : 0.0f;
                float pv[16][${DR}];
                for (int u = 0; u < 16; u++)
                    for (int r = 0; r < ${DR}; r++)
                        pv[u][r] = mine ? in[(ulong)(c0 + min(u, nc - 1)) * (D + 2) + 2
                                             + min(lane + r * TEAM, D - 1)] : 0.0f;
                const float fc = mine && c < chunks ? exp(mc - mx) : 0.0f;
                acc_l = fma(fc, lc, acc_l);
                barrier(CLK_LOCAL_MEM_FENCE);
                w[lane] = fc;
                barrier(CLK_LOCAL_MEM_FENCE);
                for (int i0 = 0; i0 < nc; i0 += 16) {
                    if (i0)
                        for (int u = 0; u < 16; u++)
                            for (int r = 0; r < ${DR}; r++)
                                pv[u][r] = mine ? in[(ulong)(c0 + min(i0 + u, nc - 1)) * (D + 2)
                                                     + 2 + min(lane + r * TEAM, D - 1)] : 0.0f;
                    for (int u = 0; u < 16; u++)
                        for (int r = 0; r < ${DR}; r++)
                            acc_o[r] = fma(i0 + u < nc ? w[i0 + u] : 0.0f, pv[u][r], acc_o[r]);
                }
            }
            acc_l = team_sum(acc_l, red + team * TEAM);
            if (mine)
                for (int r = 0; r < ${DR}; r++) {
                    const int e = lane + r * TEAM;
                    if (e < D)
                        att[h * D + e] = acc_o[r] / acc_l;
                }
        }
    }
% if PREFETCH:
    // the rest of the block's weights asked of the L2 cache while the slowest work-groups
    // finish attention: its loads wait on latency and leave the memory idle
    {
        const uint who = (uint)(team * groups + group) * TEAM + lane;
        const uint among = (uint)(groups * TEAMS * TEAM);
<%
mats = [("o", "H", QH * D)] + ([("gate", I, "H")] if GATED else []) + \
    [("up", I, "H"), ("down", "H", I)]
%>
% for name, n, k in mats:
        l2_prefetch((__global const char *)w_${name},
                    (ulong)${n} * ${"(%s / 2)" % k if Q4 else "%s * sizeof(%s)" % (k, W_T)},
                    who, among);
% if Q4:
        l2_prefetch((__global const char *)s_${name},
                    (ulong)${n} * ${q4_groups(k)} * sizeof(float), who, among);
% endif
% endfor
    }
% endif
    STAMP(3);
    grid_sync(sync, &failed, spins);
    STAMP(4);

    // 3. x = x + o_proj(att)
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int i = lid; i < QH * D; i += NT)
        vec[PERM(i)] = ((volatile __global float *)att)[i];
    barrier(CLK_LOCAL_MEM_FENCE);
    ${product("w_o", "H", QH * D, "x[c] = X_IN(c) + sum%s%s;" % (" * s_o[c]" if SCALE else "", " + (float)LD_%s(b_o, c)" % B_T if O_BIAS else ""))}
    STAMP(5);
    grid_sync(sync, &failed, spins);
    STAMP(6);

    // 4. mlp = act(gate(norm(x))) * up(norm(x)), or act(up(norm(x)))
    ${stage_norm("norm2", "norm2_b", "xv[i]")}
<%
def mlp_value(name, sum_):
    return "%s * rs%s%s" % (sum_, " * s_%s[c]" % name if SCALE else "",
                            " + (float)LD_%s(b_%s, c)" % (B_T, name) if MLP_BIAS else "")
%>
% if GATED:
    ${product("w_gate", I, "H", "const float g = %s, u = %s; mlp[c] = mlp_act(g) * u;" % (mlp_value("gate", "sum"), mlp_value("up", "sum2")), second="w_up")}
% else:
    ${product("w_up", I, "H", "mlp[c] = mlp_act(%s);" % mlp_value("up", "sum"))}
% endif
    STAMP(7);
    grid_sync(sync, &failed, spins);
    STAMP(8);

    // 5. x = x + down(mlp); NaN where a position, a token or the launch went wrong
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int i = lid; i < ${I}; i += NT)
        vec[PERM(i)] = ((volatile __global float *)mlp)[i];
    barrier(CLK_LOCAL_MEM_FENCE);
    const int wrong = bad || bad_token || failed;
    ${product("w_down", "H", I, "x[c] = wrong ? NAN : xv[c] + sum%s%s;" % (" * s_down[c]" if SCALE else "", " + (float)LD_%s(b_down, c)" % B_T if MLP_BIAS else ""))}
    STAMP(9);
    if (blk + 1 < blocks)
        grid_sync(sync, &failed, spins);
    }
}
