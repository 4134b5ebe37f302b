<%include file="common.h"/>
<%namespace name="loads" file="float8_loads.h"/>
<%namespace name="q4" file="q4_loads.h"/>
## GEMM of a few rows (core/gemm.py, gemv): C (M, N) = act(alpha A B^T + bias + beta C)
## with A (M, K) and B (N, K) rows contiguous (a decoder step's Linear: the weights read
## once, as they stream); one launch, no split-K pass.
## GPUs (``gemv``): a team of TEAM (32) work items per column of C strides over K, each
## keeping its M partial sums, which the team adds in local memory or (SHUFFLE, NVIDIA's
## PTX) by warp shuffles. VEC: values a work item loads a step, 8 (16 bytes of 16-bit
## values, 8 of int8, two float4 loads of float32) or 4 where every row starts aligned to
## them, else 1; UNROLL steps a turn, their loads' bits all asked for before any is widened.
## CPUs (``gemv_cpu``): work-groups of one work item, COLS columns each, rows read as
## float8 vectors into SUMS independent sums.
## ROWS: M rounded up (at most 8). A_T, B_T, C_T: the storages (B_T char: int8 weights,
## each row of B times its scale: SCALE; uchar with Q4: 4-bit weights, core/quantize.py's
## layout, two values a byte and a scale per group of Q4 values of a row, ``scale``
## holding a row's groups one after another). GLU: C = act(the product with B) times the
## product with B2, a second weight of B's shape with its own scale and bias (a SwiGLU
## MLP's gate and up projections in one launch).
## On GPUs only (a CPU work item takes one column, and normalizing the row again for
## each cost 2x there): NORM, A's rows normalized by their RMS on the way, times the
## float32 vector norm_w (an RMSNorm before the product without a launch of its own: 1 /
## sqrt(mean(x^2) + norm_eps), the squares summed beside the product from the same
## loads); LN, a LayerNorm on the way (each row's mean and 1 / std first, two passes;
## weight norm_w, bias norm_b).
## STAGE (GPUs, VEC 8, KS: K rounded up to 8 TEAM values): each work-group first writes
## A's rows, normalized where NORM or LN (the rows' statistics summed once, by the whole
## work-group), into local memory, and its teams read them there: one team a column
## otherwise loads A's rows (and the norm's vectors) again from the caches for each
## column, more load traffic than B's own bytes.
<%
A_T = context.get("A_T", "float")
B_T = context.get("B_T", "float")
C_T = context.get("C_T", "float")
Q4 = context.get("Q4", 0)  # 4-bit B: values a scale (0: B as its storage says)
Q4_GROUPS = context.get("Q4_GROUPS", 0)  # CPUs: 4-bit rows a group of 32 a turn
STAGE = context.get("STAGE", 0)
KS = context.get("KS", 0)
assert not STAGE or (VEC == 8 and KS % (8 * TEAM) == 0)
assert not Q4 or (B_T == "uchar" and not SCALE)
%>
#define TEAM ${TEAM}
#define TEAMS ${TEAMS}

<%def name="raw_loads(T, vw)">
// vw values of a row of ${T} at p + i (i a multiple of vw, rows aligned to vw values):
// rawload${vw}_${T} loads their bits (raw${vw}_${T}), widen${vw}_${T} makes floats of them.
// The loop loads all the bits of a turn before widening any: NVIDIA's driver widens half
// through an inline-asm block that holds the next load back until the value arrives.
% if T == "float":
typedef float${vw if vw > 1 else ""} raw${vw}_float;
inline raw${vw}_float rawload${vw}_float(__global const float *p, ulong i)
{
% if vw == 8:
    return (float8)(*(__global const float4 *)(p + i), *(__global const float4 *)(p + i + 4));
% elif vw == 4:
    return *(__global const float4 *)(p + i);
% else:
    return p[i];
% endif
}
#define widen${vw}_float(r) (r)
% elif T in ("half", "bfloat16", "char"):
<%
bits = {"half": 2, "bfloat16": 2, "char": 1}[T] * vw  # bytes of vw values
RT = {16: "uint4", 8: "uint2", 4: "uint", 2: "ushort", 1: "uchar"}[bits]
%>typedef ${RT} raw${vw}_${T};
inline ${RT} rawload${vw}_${T}(__global const ${T} *p, ulong i)
{
    return *(__global const ${RT} *)(p + i);
}
% if T == "half" and vw > 1:
inline float${vw} widen${vw}_half(${RT} r)
{
    return vload_half${vw}(0, (const __private half *)&r);
}
% elif T == "half":
#define widen1_half(r) half_bits(r)
% elif T == "bfloat16" and vw > 1:
#define widen${vw}_bfloat16(r) as_float${vw}(convert_uint${vw}(as_ushort${vw}(r)) << 16)
% elif T == "bfloat16":
#define widen1_bfloat16(r) WIDEN_bfloat16(r)
% elif vw > 1:
#define widen${vw}_char(r) convert_float${vw}(as_char${vw}(r))
% else:
#define widen1_char(r) ((float)as_char(r))
% endif
% else:
## (any other storage: value by value through its LD_ macro, widened as loaded)
typedef float${vw if vw > 1 else ""} raw${vw}_${T};
inline raw${vw}_${T} rawload${vw}_${T}(__global const ${T} *p, ulong i)
{
% if vw > 1:
    return (float${vw})(${", ".join("(float)LD_%s(p, i + %d)" % (T, k) for k in range(vw))});
% else:
    return (float)LD_${T}(p, i);
% endif
}
#define widen${vw}_${T}(r) (r)
% endif
</%def>
% if TEAM > 1:
${raw_loads(A_T, VEC)}
% if B_T != A_T and not Q4:
${raw_loads(B_T, VEC)}
% endif
% endif
% if Q4:
${q4.loads(Q4)}
% endif
<%
def load_b(ptr, scales, idx, vw):
    """4-bit B: the vw values of the row ``ptr`` (its scales ``scales``) from ``idx``, as
    floats; None for the other storages (their own loads)."""
    if Q4:
        return {8: "load8_q4", 4: "load4_q4"}.get(vw, "q4_at") + "(%s, %s, %s)" % (ptr, scales, idx)
    return None
%>

% if SHUFFLE:
<%include file="warp_shuffle.h"/>
% endif

% if STAGE:
<%include file="staged_vector.h"/>
<%include file="wg_reduce.h"/>
% endif
% if LN and not SHUFFLE and TEAM > 1:
// the sum over a team's TEAM work items, in every one (``mine``: TEAM floats of local
// memory of its own; every work item of the group calls it alike)
inline float team_sum(float v, __local float *mine, int lane)
{
    barrier(CLK_LOCAL_MEM_FENCE);  // (the last call's reads are done)
    mine[lane] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int step = TEAM / 2; step > 0; step /= 2) {
        if (lane < step)
            mine[lane] += mine[lane + step];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    return mine[0];
}
% endif
// alpha sum, times B's row scale (SCALE) and A's row's 1 / RMS (NORM)
inline float scaled(float sum, int n, __global const float *scale, float alpha, float rs)
{
    float v = alpha * sum;
% if NORM:
    v *= rs;
% endif
% if SCALE:
    v *= scale[n];
% endif
    return v;
}

// v + the bias of C[m, n]
inline float biased(float v, int m, int n, __global const float *bias)
{
% if BIAS == "row":
    v += bias[m];
% elif BIAS == "col":
    v += bias[n];
% endif
    return v;
}

// C[m, n] = act(the scaled sum + beta C[m, n] + bias), the epilogue
inline void store_c(float sum, int m, int n, __global ${C_T} *C, int ldc,
                    __global const float *bias, __global const float *scale, float alpha,
                    float beta, float rs)
{
    float v = scaled(sum, n, scale, alpha, rs);
    __global ${C_T} *c = C + (ulong)m * ldc + n;
    if (beta != 0.0f)
        v += beta * LD_${C_T}(c, 0);
    ST_${C_T}(c, 0, ACT_${ACTIVATION}(biased(v, m, n, bias)));
}
% if GLU:
// GLU: C[m, n] = act(the product with B, as store_c's without beta) times the product
// with B2 (its own scale and bias), + beta C[m, n]
inline float glu_part(float sum, int m, int n, __global const float *bias,
                      __global const float *scale, float alpha, float rs)
{
    return biased(scaled(sum, n, scale, alpha, rs), m, n, bias);
}
inline void store_glu(float sum, float sum2, int m, int n, __global ${C_T} *C, int ldc,
                      __global const float *bias, __global const float *scale,
                      __global const float *bias2, __global const float *scale2, float alpha,
                      float beta, float rs)
{
    float v = ACT_${ACTIVATION}(glu_part(sum, m, n, bias, scale, alpha, rs))
              * glu_part(sum2, m, n, bias2, scale2, alpha, rs);
    __global ${C_T} *c = C + (ulong)m * ldc + n;
    if (beta != 0.0f)
        v += beta * LD_${C_T}(c, 0);
    ST_${C_T}(c, 0, v);
}
// a column's result: with GLU its two products (B's row n, B2's row n)
#define STORE(sum, sum2, m, n, rs) store_glu(sum, sum2, m, n, C + c_offset + batch * stride_c, \
    ldc, bias + bias_offset, scale + scale_offset, bias2 + bias2_offset, scale2 + scale2_offset, \
    alpha, beta, rs)
#define GLU_ARGS , __global const ${B_T} *B2, ulong b2_offset, __global const float *bias2, \
    ulong bias2_offset, __global const float *scale2, ulong scale2_offset
% else:
#define STORE(sum, sum2, m, n, rs) store_c(sum, m, n, C + c_offset + batch * stride_c, ldc, \
    bias + bias_offset, scale + scale_offset, alpha, beta, rs)
#define GLU_ARGS
% endif
% if LN:
#define LN_ARGS , __global const float *norm_b, ulong norm_b_offset
% else:
#define LN_ARGS
% endif
% if NORM and not STAGE:
// 1 / RMS of a row of K values whose squares sum to ss: 1 / sqrt(mean(x^2) + eps)
#define ROW_RS(ss) rsqrt((ss) / (float)K + norm_eps)
% else:
#define ROW_RS(ss) 1.0f
% endif

% if TEAM > 1:
<%
# the loop's vectors: VW values a work item a step, their bits loaded by
# rawload<VW>_<storage> and widened by widen<VW>_<storage> (raw_loads above)
VW = {8: 8, 4: 4}.get(VEC, 1)
VT = "float%d" % VW if VW > 1 else "float"
# B's bits a step and their widening: 4-bit weights widen as they load (load_b)
RAW_B = VT if Q4 else "raw%d_%s" % (VW, B_T)
WIDEN_B = "%s" if Q4 else "widen%d_%s(%%s)" % (VW, B_T)
def raw_b(ptr, scales, idx):
    return load_b(ptr, scales, idx, VW) or "rawload%d_%s(%s, %s)" % (VW, B_T, ptr, idx)
LOADG = {8: "vload8(0, %s + %s)", 4: "vload4(0, %s + %s)"}.get(VEC, "%s[%s]")
NORM_ON_WAY, LN_ON_WAY = NORM and not STAGE, LN and not STAGE  # (STAGE: normalized staged)
NS = 1 + GLU + NORM_ON_WAY  # sums a row: the product's, B2's (GLU), the squares' (NORM)
Q = ROWS * (1 + GLU)  # where the squares' sums start

def loads_of_step(u, kk):
    """The bits of step u's loads from k = kk: B's row (and B2's) and A's rows (the last
    row where M is fewer than ROWS: a load of memory that exists, its sums not kept)."""
    lines = ["%s rb%d = %s;" % (RAW_B, u, raw_b("b", "b_s", kk))]
    if GLU:
        lines.append("%s rc%d = %s;" % (RAW_B, u, raw_b("b2", "b2_s", kk)))
    for m in range(0 if STAGE else ROWS):
        row = "min(%d, M - 1)" % m if m else "0"
        lines.append("raw%d_%s ra%d_%d = rawload%d_%s(a, (ulong)%s * lda + %s);"
                     % (VW, A_T, u, m, VW, A_T, row, kk))
    return "\n        ".join(lines)

def staged(m, kk):
    """STAGE: row m's 8 values from k = kk, read from local memory."""
    return "vstaged(avec + %d + PERM(%s))" % (m * KS, kk)

def step(u, kk):
    """Step u: its loads widened and multiplied into the sums."""
    lines = ["%s w = %s;" % (VT, WIDEN_B % ("rb%d" % u))]
    if GLU:
        lines.append("%s w2 = %s;" % (VT, WIDEN_B % ("rc%d" % u)))
    if NORM_ON_WAY or LN_ON_WAY:
        lines.append("%s gk = %s;" % (VT, LOADG % ("g", kk)))
    if LN_ON_WAY:
        lines.append("%s bk = %s;" % (VT, LOADG % ("gb", kk)))
    for m in range(ROWS):
        body = ["%s x = %s;" % (VT, staged(m, kk) if STAGE else
                                  "widen%d_%s(ra%d_%d)" % (VW, A_T, u, m))]
        if NORM_ON_WAY:
            body += ["sq[%d] = fma(x, x, sq[%d]);" % (m, m), "x *= gk;"]
        elif LN_ON_WAY:
            body.append("x = fma((x - mean[%d]) * rstd[%d], gk, bk);" % (m, m))
        body.append("part[%d] = fma(x, w, part[%d]);" % (m, m))
        if GLU:
            body.append("part2[%d] = fma(x, w2, part2[%d]);" % (m, m))
        lines.append(("if (%d < M) {" % m if m else "{") + "\n                "
                     + "\n                ".join(body) + "\n            }")
    return "{\n            " + "\n            ".join(lines) + "\n        }"
%>
__kernel __attribute__((reqd_work_group_size(TEAM * TEAMS, 1, 1)))
void gemv(int M, int N, int K, __global const ${A_T} *A, ulong a_offset, int lda,
          ulong stride_a, __global const ${B_T} *B, ulong b_offset, int ldb, ulong stride_b,
          __global ${C_T} *C, ulong c_offset, int ldc, ulong stride_c,
          __global const float *bias, ulong bias_offset, __global const float *scale,
          ulong scale_offset, float alpha, float beta, __global const float *norm_w,
          ulong norm_w_offset, float norm_eps GLU_ARGS LN_ARGS)
{
% if not SHUFFLE:
    __local float sums[TEAMS * TEAM * ${ROWS * NS}];
% endif
    const int lane = get_local_id(0) % TEAM, team = get_local_id(0) / TEAM;
    const ulong batch = get_group_id(1);
% if STAGE:
    // A's rows (normalized: NORM, LN) into local memory once, for every column of the group
    __local float avec[${ROWS * KS}];
    __local float red[TEAM * TEAMS];
    {
        const int lid = get_local_id(0);
        __global const ${A_T} *a0 = A + a_offset + batch * stride_a;
% if LN:
        __global const float *g = norm_w + norm_w_offset, *gb = norm_b + norm_b_offset;
% elif NORM:
        __global const float *g = norm_w + norm_w_offset;
% endif
        for (int m = 0; m < ${ROWS}; m++) {
            __global const ${A_T} *ar = a0 + (ulong)min(m, M - 1) * lda;
% if LN:
            float s = 0.0f;
            for (int i = lid; i < K; i += TEAM * TEAMS)
                s += (float)LD_${A_T}(ar, i);
            const float mean = wg_reduce_sum(red, s) / (float)K;
            s = 0.0f;
            for (int i = lid; i < K; i += TEAM * TEAMS) {
                const float d = (float)LD_${A_T}(ar, i) - mean;
                s = fma(d, d, s);
            }
            const float rstd = rsqrt(wg_reduce_sum(red, s) / (float)K + norm_eps);
% elif NORM:
            float s = 0.0f;
            for (int i = lid; i < K; i += TEAM * TEAMS) {
                const float v = (float)LD_${A_T}(ar, i);
                s = fma(v, v, s);
            }
            const float rs = rsqrt(wg_reduce_sum(red, s) / (float)K + norm_eps);
% endif
            for (int i = lid; i < ${KS}; i += TEAM * TEAMS) {
                float v = 0.0f;  // (past K: the padding the last block multiplies by)
                if (i < K) {
                    v = (float)LD_${A_T}(ar, i);
% if LN:
                    v = fma((v - mean) * rstd, g[i], gb[i]);
% elif NORM:
                    v = v * rs * g[i];
% endif
                }
                avec[${"m * %d + " % KS if ROWS > 1 else ""}PERM(i)] = v;
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
% elif LN:
    // LN: A's rows' mean and 1 / std first, two passes over each row (LayerNorm's own
    // statistics), shared by the team's columns; the loop then takes (x - mean) / std *
    // norm_w + norm_b on the way
% if SHUFFLE:
#define TEAM_SUM(v) warp_sum(v)
% else:
#define TEAM_SUM(v) team_sum(v, sums + team * TEAM, lane)
% endif
    float mean[${ROWS}], rstd[${ROWS}];
    {
        __global const ${A_T} *a0 = A + a_offset + batch * stride_a;
        for (int m = 0; m < ${ROWS}; m++) {
            float v = 0.0f;
            for (int k = lane; m < M && k < K; k += TEAM)
                v += (float)LD_${A_T}(a0, (ulong)m * lda + k);
            mean[m] = TEAM_SUM(v) / (float)K;
        }
        for (int m = 0; m < ${ROWS}; m++) {
            float v = 0.0f;
            for (int k = lane; m < M && k < K; k += TEAM) {
                float d = (float)LD_${A_T}(a0, (ulong)m * lda + k) - mean[m];
                v = fma(d, d, v);
            }
            rstd[m] = rsqrt(TEAM_SUM(v) / (float)K + norm_eps);
        }
    }
% if not SHUFFLE:
    barrier(CLK_LOCAL_MEM_FENCE);  // (every team has read its sums before they are reused)
% endif
% endif
    for (int j = 0; j < ${COLS}; j++) {  // (COLS columns a team, one after the other)
    const int n = (get_group_id(0) * TEAMS + team) * ${COLS} + j;
    const int col = min(n, N - 1);  // (teams past N compute a copy, store nothing)
    __global const ${A_T} *a = A + a_offset + batch * stride_a;
    __global const ${B_T} *b = B + b_offset + batch * stride_b + (ulong)col * ldb;
% if Q4:
    const int groups = (K + ${Q4 - 1}) / ${Q4};
    __global const float *b_s = scale + scale_offset + (ulong)col * groups;
% endif
% if GLU:
    __global const ${B_T} *b2 = B2 + b2_offset + batch * stride_b + (ulong)col * ldb;
% if Q4:
    __global const float *b2_s = scale2 + scale2_offset + (ulong)col * groups;
% endif
    ${VT} part2[${ROWS}];
% endif
% if NORM_ON_WAY:
    // A's rows normalized on the way: x / RMS(x) * norm_w, the RMS from the squares
    // summed beside the product (the row is read anyway)
    __global const float *g = norm_w + norm_w_offset;
    ${VT} sq[${ROWS}];
% elif LN_ON_WAY:
    __global const float *g = norm_w + norm_w_offset, *gb = norm_b + norm_b_offset;
% endif
    ${VT} part[${ROWS}];  // (lanes of sums, added at the end: no horizontal add a step)
    for (int m = 0; m < ${ROWS}; m++) {
        part[m] = (${VT})(0.0f);
% if GLU:
        part2[m] = (${VT})(0.0f);
% endif
% if NORM_ON_WAY:
        sq[m] = (${VT})(0.0f);
% endif
    }
    // UNROLL steps a turn, the bits of all their loads (B's, B2's, A's rows') asked for
    // before any is widened: each work item keeps UNROLL of B's loads in flight, where a
    // decoder's narrow products (a few thousand columns: a team each) otherwise leave the
    // memory idle between one load and the next
    int k = lane * ${VW};
    for (; k + ${(UNROLL - 1) * VW} * TEAM < K; k += ${UNROLL * VW} * TEAM) {
% for u in range(UNROLL):
        ${loads_of_step(u, "k + %d * TEAM" % (u * VW) if u else "k")}
% endfor
% for u in range(UNROLL):
        ${step(u, "k + %d * TEAM" % (u * VW) if u else "k")}
% endfor
    }
    for (; k < K; k += ${VW} * TEAM) {  // (the last steps, one at a time)
        ${loads_of_step(0, "k")}
        ${step(0, "k")}
    }
    float acc[${ROWS * NS}];  // the product's sums, then B2's (GLU), the squares' (NORM)
<%
def hsum(v):  # a vector's values added pairwise
    if VW == 1:
        return v
    if VW == 8:
        v = "(%s.lo + %s.hi)" % (v, v)
    return "((%s.x + %s.y) + (%s.z + %s.w))" % (v, v, v, v)
%>
    for (int m = 0; m < ${ROWS}; m++) {
        ${VT} p = part[m];
        acc[m] = ${hsum("p")};
% if GLU:
        ${VT} p2 = part2[m];
        acc[${ROWS} + m] = ${hsum("p2")};
% endif
% if NORM_ON_WAY:
        ${VT} q = sq[m];
        acc[${Q} + m] = ${hsum("q")};
% endif
    }
% if SHUFFLE:
    // (a team is a warp: its sums meet in registers, no local memory, no barrier)
    for (int m = 0; m < ${ROWS}; m++) {
        float total = warp_sum(acc[m]);
% if GLU:
        float total2 = warp_sum(acc[${ROWS} + m]);
% else:
        float total2 = 0.0f;
% endif
        float rs = ROW_RS(warp_sum(acc[${Q} + m]));  // (1 without NORM: not summed)
        if (lane == m && n < N && m < M)
            STORE(total, total2, m, n, rs);
    }
% else:
<% R = ROWS * NS %>
    __local float *mine = sums + (team * TEAM) * ${R};
    for (int m = 0; m < ${R}; m++)
        mine[lane * ${R} + m] = acc[m];
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int step = TEAM / 2; step > 0; step /= 2) {
        if (lane < step)
            for (int m = 0; m < ${R}; m++)
                mine[lane * ${R} + m] += mine[(lane + step) * ${R} + m];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    for (int m = lane; n < N && m < M; m += TEAM) {  // each row of C's column n
        float rs = ROW_RS(mine[${Q} + m]);
        STORE(mine[m], ${"mine[%d + m]" % ROWS if GLU else "0.0f"}, m, n, rs);
    }
    barrier(CLK_LOCAL_MEM_FENCE);  // (the sums are written again for the next column)
% endif
    }
}
% endif

% if TEAM == 1:
${loads.load8(A_T)}
% if B_T != A_T and not Q4:
${loads.load8(B_T)}
% endif

// CPUs: COLS columns a work-item, rows of B read as float8 vectors, fma into float8
// sums (no local memory, no barrier: what their compilers keep in registers)
__kernel void gemv_cpu(int M, int N, int K, __global const ${A_T} *A, ulong a_offset,
                       int lda, ulong stride_a, __global const ${B_T} *B, ulong b_offset,
                       int ldb, ulong stride_b, __global ${C_T} *C, ulong c_offset, int ldc,
                       ulong stride_c, __global const float *bias, ulong bias_offset,
                       __global const float *scale, ulong scale_offset, float alpha,
                       float beta, __global const float *norm_w, ulong norm_w_offset,
                       float norm_eps GLU_ARGS LN_ARGS)
{
    const int n0 = get_global_id(0) * ${COLS};
    const ulong batch = get_global_id(1);
    __global const ${A_T} *a = A + a_offset + batch * stride_a;
## rows of B a work item streams: COLS, then (GLU) the same rows of B2
<% NST = COLS * (1 + GLU) %>
    for (int m = 0; m < M; m++) {
        __global const ${A_T} *a_row = a + (ulong)m * lda;
        float8 acc[${NST}];
        float tail[${NST}];
        __global const ${B_T} *b_row[${NST}];
    % if Q4:
        __global const float *b_row_s[${NST}];
        const int groups = (K + ${Q4 - 1}) / ${Q4};
    % endif
    % for j in range(NST):
        tail[${j}] = 0.0f;
        b_row[${j}] = ${"B + b_offset" if j < COLS else "B2 + b2_offset"} + batch * stride_b
                      + (ulong)min(n0 + ${j % COLS}, N - 1) * ldb;
        % if Q4:
        b_row_s[${j}] = ${"scale + scale_offset" if j < COLS else "scale2 + scale2_offset"}
                        + (ulong)min(n0 + ${j % COLS}, N - 1) * groups;
        % endif
    % endfor
        int k = 0;
    % if Q4 == 32 and Q4_GROUPS:
        // 4-bit rows a group a turn (32 values, one scale): its 16 bytes' low nibbles are
        // the group's even values and the high ones its odd values, so A's values are
        // split by parity instead (once for every row the work item streams) and the
        // nibbles widen in place as 16-wide vectors, the scale taken once a group
        float16 groups_sum[${NST}];
        % for j in range(NST):
        groups_sum[${j}] = (float16)(0.0f);
        % endfor
        for (; k + 32 <= K; k += 32) {
            const float8 x0 = load8_${A_T}(a_row, k), x1 = load8_${A_T}(a_row, k + 8),
                         x2 = load8_${A_T}(a_row, k + 16), x3 = load8_${A_T}(a_row, k + 24);
            const float16 xe = (float16)(x0.even, x1.even, x2.even, x3.even),
                          xo = (float16)(x0.odd, x1.odd, x2.odd, x3.odd);
        % for j in range(NST):
            {
                const uchar16 v = vload16(0, b_row[${j}] + k / 2);
                const float16 lo = convert_float16(as_char16(v & (uchar16)(15)) - (char16)(8)),
                              hi = convert_float16(as_char16(v >> (uchar16)(4)) - (char16)(8));
                groups_sum[${j}] = FMA(FMA(xo, hi, xe * lo), (float16)(b_row_s[${j}][k / 32]),
                                       groups_sum[${j}]);
            }
        % endfor
        }
    % endif
        // SUMS sums a column, 8 SUMS values a turn: each fma waits on the one before it
        float8 part[${SUMS}][${NST}];
    % for u in range(SUMS):
        % for j in range(NST):
        part[${u}][${j}] = (float8)(0.0f);
        % endfor
    % endfor
        for (; k + ${8 * SUMS} <= K; k += ${8 * SUMS}) {
    % for u in range(SUMS):
            float8 x${u} = load8_${A_T}(a_row, k + ${8 * u});
        % for j in range(NST):
            part[${u}][${j}] = FMA(x${u}, ${load_b("b_row[%d]" % j, "b_row_s[%d]" % j, "k + %d" % (8 * u), 8) or "load8_%s(b_row[%d], k + %d)" % (B_T, j, 8 * u)}, part[${u}][${j}]);
        % endfor
    % endfor
        }
    % for j in range(NST):
        acc[${j}] = ${" + ".join("part[%d][%d]" % (u, j) for u in range(SUMS))};
        % if Q4 == 32 and Q4_GROUPS:
        acc[${j}] += groups_sum[${j}].lo + groups_sum[${j}].hi;
        % endif
    % endfor
        for (; k + 8 <= K; k += 8) {
            float8 x = load8_${A_T}(a_row, k);
    % for j in range(NST):
            acc[${j}] = FMA(x, ${load_b("b_row[%d]" % j, "b_row_s[%d]" % j, "k", 8) or "load8_%s(b_row[%d], k)" % (B_T, j)}, acc[${j}]);
    % endfor
        }
        for (; k < K; k++) {
            float x = (float)LD_${A_T}(a_row, k);
    % for j in range(NST):
            tail[${j}] = FMA(x, ${load_b("b_row[%d]" % j, "b_row_s[%d]" % j, "k", 1) or "(float)LD_%s(b_row[%d], k)" % (B_T, j)}, tail[${j}]);
    % endfor
        }
    % for j in range(NST):
        float8 s${j} = acc[${j}];
        float4 h${j} = s${j}.lo + s${j}.hi;
        const float sum${j} = (h${j}.x + h${j}.y) + (h${j}.z + h${j}.w) + tail[${j}];
    % endfor
    % for j in range(COLS):
        if (n0 + ${j} < N) {
            const int n = n0 + ${j};
            STORE(sum${j}, ${"sum%d" % (j + COLS) if GLU else "0.0f"}, m, n, 1.0f);
        }
    % endfor
    }
}
% endif
