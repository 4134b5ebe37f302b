<%include file="common.h"/>
## GEMM of a few rows on GPUs (core/gemm.py, gemv): C (M, N) = act(alpha A B^T + bias +
## beta C) with A (M, K) and B (N, K) rows contiguous (a decoder step's Linear: the
## weights read once, as they stream). A team of TEAM work-items per column of C strides
## over K, each keeping its M partial sums; the team's sums are added in local memory
## (32 on GPUs; on CPUs work-groups of one work-item, whose float4 loads are the
## vectors, each over COLS columns in turn: fewer groups to schedule);
## one launch, no split-K pass. ROWS: M rounded up (at most 8); VEC: 4 where every row
## starts 16-byte aligned (float4 loads), 8 (two a step) for float32 operands on GPUs,
## else 1; SHUFFLE: a team's sums added by warp shuffles (NVIDIA's PTX). A_T, B_T, C_T: the storages (B_T char:
## int8 weights, each row of B times its scale: SCALE).
<%
A_T = context.get("A_T", "float")
B_T = context.get("B_T", "float")
C_T = context.get("C_T", "float")
%>
#define TEAM ${TEAM}
#define TEAMS ${TEAMS}

<%def name="load4(T)">
// four values of a row as float4, whatever their storage
inline float4 load4_${T}(__global const ${T} *p, ulong i)
{
% if T == "float":
    return vload4(0, p + i);
% elif T == "char":
    return convert_float4(vload4(0, p + i));
% else:
    return (float4)(LD_${T}(p, i), LD_${T}(p, i + 1), LD_${T}(p, i + 2), LD_${T}(p, i + 3));
% endif
}
</%def>
${load4(A_T)}
% if B_T != A_T:
${load4(B_T)}
% endif

% if VEC == 8:
// eight float32 values of a row from a 16-byte aligned place: two float4 loads
inline float8 load8a_float(__global const float *p, ulong i)
{
    return (float8)(*(__global const float4 *)(p + i), *(__global const float4 *)(p + i + 4));
}
% endif
% if SHUFFLE:
// the sum over a warp's 32 lanes, in every lane (shfl.sync.bfly: NVIDIA's PTX)
inline float warp_sum(float x)
{
    for (int m = 16; m > 0; m >>= 1) {
        float y;
        asm volatile("shfl.sync.bfly.b32 %0, %1, %2, 0x1f, 0xffffffff;" : "=f"(y) : "f"(x), "r"(m));
        x += y;
    }
    return x;
}
% endif

// C[m, n] = act(alpha sum (times B's row scale) + beta C[m, n] + bias), the epilogue
inline void store_c(float sum, int m, int n, __global ${C_T} *C, int ldc,
                    __global const float *bias, __global const float *scale, float alpha,
                    float beta)
{
    float v = alpha * sum;
% if SCALE:
    v *= scale[n];
% endif
    __global ${C_T} *c = C + (ulong)m * ldc + n;
    if (beta != 0.0f)
        v += beta * LD_${C_T}(c, 0);
% if BIAS == "row":
    v += bias[m];
% elif BIAS == "col":
    v += bias[n];
% endif
    ST_${C_T}(c, 0, ACT_${ACTIVATION}(v));
}

% if TEAM > 1:
__kernel __attribute__((reqd_work_group_size(TEAM * TEAMS, 1, 1)))
void gemv(int M, int N, int K, __global const ${A_T} *A, ulong a_offset, int lda,
          ulong stride_a, __global const ${B_T} *B, ulong b_offset, int ldb, ulong stride_b,
          __global ${C_T} *C, ulong c_offset, int ldc, ulong stride_c,
          __global const float *bias, ulong bias_offset, __global const float *scale,
          ulong scale_offset, float alpha, float beta)
{
% if not SHUFFLE:
    __local float sums[TEAMS * TEAM * ${ROWS}];
% endif
    const int lane = get_local_id(0) % TEAM, team = get_local_id(0) / TEAM;
    const ulong batch = get_group_id(1);
    for (int j = 0; j < ${COLS}; j++) {  // (COLS columns a team, one after the other)
    const int n = (get_group_id(0) * TEAMS + team) * ${COLS} + j;
    const int col = min(n, N - 1);  // (teams past N compute a copy, store nothing)
    __global const ${A_T} *a = A + a_offset + batch * stride_a;
    __global const ${B_T} *b = B + b_offset + batch * stride_b + (ulong)col * ldb;
    float acc[${ROWS}];
% if VEC == 8:
    float8 acc8[${ROWS}];  // (lanes of sums, added at the end: no horizontal add a step)
    for (int m = 0; m < ${ROWS}; m++)
        acc8[m] = (float8)(0.0f);
    for (int k = lane * 8; k < K; k += TEAM * 8) {
        float8 w = load8a_${B_T}(b, k);
        for (int m = 0; m < ${ROWS}; m++)
            if (m < M)
                acc8[m] = fma(load8a_${A_T}(a, (ulong)m * lda + k), w, acc8[m]);
    }
    for (int m = 0; m < ${ROWS}; m++) {
        float4 h = acc8[m].lo + acc8[m].hi;
        acc[m] = (h.x + h.y) + (h.z + h.w);
    }
% elif VEC == 4:
    float4 acc4[${ROWS}];  // (lanes of sums, added at the end: no horizontal add a step)
    for (int m = 0; m < ${ROWS}; m++)
        acc4[m] = (float4)(0.0f);
    for (int k = lane * 4; k < K; k += TEAM * 4) {
        float4 w = load4_${B_T}(b, k);
        for (int m = 0; m < ${ROWS}; m++)
            if (m < M)
                acc4[m] += load4_${A_T}(a, (ulong)m * lda + k) * w;
    }
    for (int m = 0; m < ${ROWS}; m++)
        acc[m] = (acc4[m].x + acc4[m].y) + (acc4[m].z + acc4[m].w);
% else:
    for (int m = 0; m < ${ROWS}; m++)
        acc[m] = 0.0f;
    for (int k = lane; k < K; k += TEAM) {
        float w = (float)LD_${B_T}(b, k);
        for (int m = 0; m < ${ROWS}; m++)
            if (m < M)
                acc[m] += LD_${A_T}(a, (ulong)m * lda + k) * w;
    }
% endif
% if SHUFFLE:
    // (a team is a warp: its sums meet in registers, no local memory, no barrier)
    for (int m = 0; m < ${ROWS}; m++) {
        float total = warp_sum(acc[m]);
        if (lane == m && n < N && m < M)
            store_c(total, m, n, C + c_offset + batch * stride_c, ldc, bias + bias_offset,
                    scale + scale_offset, alpha, beta);
    }
% else:
    __local float *mine = sums + (team * TEAM) * ${ROWS};
    for (int m = 0; m < ${ROWS}; m++)
        mine[lane * ${ROWS} + m] = acc[m];
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int step = TEAM / 2; step > 0; step /= 2) {
        if (lane < step)
            for (int m = 0; m < ${ROWS}; m++)
                mine[lane * ${ROWS} + m] += mine[(lane + step) * ${ROWS} + m];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    for (int m = lane; n < N && m < M; m += TEAM) {  // each row of C's column n
        store_c(mine[m], m, n, C + c_offset + batch * stride_c, ldc, bias + bias_offset,
                scale + scale_offset, alpha, beta);
    }
    barrier(CLK_LOCAL_MEM_FENCE);  // (the sums are written again for the next column)
% endif
    }
}
% endif

% if TEAM == 1:
<%def name="load8(T)">
// eight values of a row as float8, whatever their storage (16-bit ones as vectors: see
// common.h's load_half8)
inline float8 load8_${T}(__global const ${T} *p, ulong i)
{
% if T == "float":
    return vload8(0, p + i);
% elif T == "char":
    return convert_float8(vload8(0, p + i));
% elif T == "half":
    return load_half8(p + i);
% elif T == "bfloat16":
    return as_float8(convert_uint8(vload8(0, p + i)) << 16);
% else:
    return (float8)(load4_${T}(p, i), load4_${T}(p, i + 4));
% endif
}
</%def>
${load8(A_T)}
% if B_T != A_T:
${load8(B_T)}
% endif

// CPUs: COLS columns a work-item, rows of B read as float8 vectors, fma into float8
// sums (no local memory, no barrier: what their compilers keep in registers)
__kernel void gemv_cpu(int M, int N, int K, __global const ${A_T} *A, ulong a_offset,
                       int lda, ulong stride_a, __global const ${B_T} *B, ulong b_offset,
                       int ldb, ulong stride_b, __global ${C_T} *C, ulong c_offset, int ldc,
                       ulong stride_c, __global const float *bias, ulong bias_offset,
                       __global const float *scale, ulong scale_offset, float alpha,
                       float beta)
{
    const int n0 = get_global_id(0) * ${COLS};
    const ulong batch = get_global_id(1);
    __global const ${A_T} *a = A + a_offset + batch * stride_a;
    for (int m = 0; m < M; m++) {
        __global const ${A_T} *a_row = a + (ulong)m * lda;
        float8 acc[${COLS}];
        float tail[${COLS}];
        __global const ${B_T} *b_row[${COLS}];
    % for j in range(COLS):
        tail[${j}] = 0.0f;
        b_row[${j}] = B + b_offset + batch * stride_b + (ulong)min(n0 + ${j}, N - 1) * ldb;
    % endfor
        int k = 0;
        // SUMS sums a column, 8 SUMS values a turn: each fma waits on the one before it
        float8 part[${SUMS}][${COLS}];
    % for u in range(SUMS):
        % for j in range(COLS):
        part[${u}][${j}] = (float8)(0.0f);
        % endfor
    % endfor
        for (; k + ${8 * SUMS} <= K; k += ${8 * SUMS}) {
    % for u in range(SUMS):
            const float8 x${u} = load8_${A_T}(a_row, k + ${8 * u});
        % for j in range(COLS):
            part[${u}][${j}] = fma(x${u}, load8_${B_T}(b_row[${j}], k + ${8 * u}), part[${u}][${j}]);
        % endfor
    % endfor
        }
    % for j in range(COLS):
        acc[${j}] = ${" + ".join("part[%d][%d]" % (u, j) for u in range(SUMS))};
    % endfor
        for (; k + 8 <= K; k += 8) {
            const float8 x = load8_${A_T}(a_row, k);
    % for j in range(COLS):
            acc[${j}] = fma(x, load8_${B_T}(b_row[${j}], k), acc[${j}]);
    % endfor
        }
        for (; k < K; k++) {
            const float x = (float)LD_${A_T}(a_row, k);
    % for j in range(COLS):
            tail[${j}] = fma(x, (float)LD_${B_T}(b_row[${j}], k), tail[${j}]);
    % endfor
        }
    % for j in range(COLS):
        if (n0 + ${j} < N) {
            const int n = n0 + ${j};
            float8 s = acc[${j}];
            float4 h = s.lo + s.hi;
            store_c((h.x + h.y) + (h.z + h.w) + tail[${j}], m, n,
                    C + c_offset + batch * stride_c, ldc, bias + bias_offset,
                    scale + scale_offset, alpha, beta);
        }
    % endfor
    }
}
% endif
