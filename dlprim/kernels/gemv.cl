<%include file="common.h"/>
## GEMM of a few rows on GPUs (core/gemm.py, gemv): C (M, N) = act(alpha A B^T + bias +
## beta C) with A (M, K) and B (N, K) rows contiguous (a decoder step's Linear: the
## weights read once, as they stream). A team of 32 work-items per column of C strides
## over K, each keeping its M partial sums; the team's sums are added in local memory;
## one launch, no split-K pass. ROWS: M rounded up (at most 8); VEC: 4 where every row
## starts 16-byte aligned (float4 loads), else 1. A_T, B_T, C_T: the storages.
<%
A_T = context.get("A_T", "float")
B_T = context.get("B_T", "float")
C_T = context.get("C_T", "float")
%>
#define TEAM 32
#define TEAMS ${TEAMS}

inline float4 load4_${A_T}(__global const ${A_T} *p, ulong i)
{
% if A_T == "float":
    return vload4(0, p + i);
% else:
    return (float4)(LD_${A_T}(p, i), LD_${A_T}(p, i + 1), LD_${A_T}(p, i + 2),
                    LD_${A_T}(p, i + 3));
% endif
}
% if B_T != A_T:

inline float4 load4_${B_T}(__global const ${B_T} *p, ulong i)
{
% if B_T == "float":
    return vload4(0, p + i);
% else:
    return (float4)(LD_${B_T}(p, i), LD_${B_T}(p, i + 1), LD_${B_T}(p, i + 2),
                    LD_${B_T}(p, i + 3));
% endif
}
% endif

__kernel __attribute__((reqd_work_group_size(TEAM * TEAMS, 1, 1)))
void gemv(int M, int N, int K, __global const ${A_T} *A, ulong a_offset, int lda,
          ulong stride_a, __global const ${B_T} *B, ulong b_offset, int ldb, ulong stride_b,
          __global ${C_T} *C, ulong c_offset, int ldc, ulong stride_c,
          __global const float *bias, ulong bias_offset, float alpha, float beta)
{
    __local float sums[TEAMS * TEAM * ${ROWS}];
    const int lane = get_local_id(0) % TEAM, team = get_local_id(0) / TEAM;
    const int n = get_group_id(0) * TEAMS + team;
    const ulong batch = get_group_id(1);
    const int col = min(n, N - 1);  // (teams past N compute a copy, store nothing)
    __global const ${A_T} *a = A + a_offset + batch * stride_a;
    __global const ${B_T} *b = B + b_offset + batch * stride_b + (ulong)col * ldb;
    float acc[${ROWS}];
    for (int m = 0; m < ${ROWS}; m++)
        acc[m] = 0.0f;
% if VEC == 4:
    for (int k = lane * 4; k < K; k += TEAM * 4) {
        float4 w = load4_${B_T}(b, k);
        for (int m = 0; m < ${ROWS}; m++)
            if (m < M)
                acc[m] += dot(load4_${A_T}(a, (ulong)m * lda + k), w);
    }
% else:
    for (int k = lane; k < K; k += TEAM) {
        float w = LD_${B_T}(b, k);
        for (int m = 0; m < ${ROWS}; m++)
            if (m < M)
                acc[m] += LD_${A_T}(a, (ulong)m * lda + k) * w;
    }
% endif
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
    if (n < N && lane < M) {
        int m = lane;
        float v = alpha * mine[m];
        __global ${C_T} *c = C + c_offset + batch * stride_c + (ulong)m * ldc + n;
        if (beta != 0.0f)
            v += beta * LD_${C_T}(c, 0);
% if BIAS == "row":
        v += bias[bias_offset + m];
% elif BIAS == "col":
        v += bias[bias_offset + n];
% endif
        ST_${C_T}(c, 0, ACT_${ACTIVATION}(v));
    }
}
