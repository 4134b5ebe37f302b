<%include file="common.h"/>
<%include file="subgroup_mma.h"/>
<%namespace name="tiles" file="gemm_tiles.h"/>
<%
# C = act(alpha * op(A) op(B) + beta * C + bias) on Intel's subgroup matrix products
# (subgroup_mma.h; FP16 or BF16 operands stored as the products take them, float sums):
# the arguments, transposes, split-K, strided batches and epilogue of gemm.cl. A
# work-group of 4 subgroups of SUBGROUP items computes 128 rows of C by 2 SUBGROUP
# columns, each subgroup 32 rows as 4 blocks of 8 by 2 of SUBGROUP columns; each step of
# 16 values of K, every item reads its share of A's rows and its two columns of B
# straight from global memory (neighbouring items read neighbouring values along the
# rows that are stored along K or along M/N as it happens), with no local memory.
SG = SUBGROUP
MB, NB = 4, 2
TM, TN = 4 * 8 * MB, SG * NB
assert TILE_M == TM and TILE_N == TN and SG in (8, 16)
A_CK = not TRANS_A
B_CK = bool(TRANS_B)
A_T, B_T, C_T = context.get("A_T", "half"), context.get("B_T", "half"), context.get("C_T", "float")
NATIVE = "half" if KIND == "f16" else "bfloat16"
assert A_T == NATIVE and B_T == NATIVE
PER = 16 // SG  # K values of a row each item gives
EMULATE = context.get("SUBGROUP_MMA_EMULATE", False)
def a_at(m, k):
    return "(%s) * lda + (%s)" % (m, k) if A_CK else "(%s) * lda + (%s)" % (k, m)
def b_at(k, n):
    return "(%s) * ldb + (%s)" % (n, k) if B_CK else "(%s) * ldb + (%s)" % (k, n)
%>
__kernel __attribute__((reqd_work_group_size(${SG}, 4, 1)))
% if not EMULATE:
__attribute__((intel_reqd_sub_group_size(${SG})))
% endif
${tiles.signature(A_T, B_T, C_T)}{
% if EMULATE:
    __local uint sg_scratch[4 * ${SG} * 16];  // subgroup_mma.h's emulated products
% endif
    const int lane = get_local_id(0), sg = get_local_id(1);
${tiles.tile_origin(GROUP, TM, TN, A_CK, B_CK, A_T, B_T)}
    float8 acc[${MB}][${NB}];
    #pragma unroll
    for (int i = 0; i < ${MB}; i++) {
        #pragma unroll
        for (int j = 0; j < ${NB}; j++)
            acc[i][j] = (float8)(0.0f);
    }
    const int m0 = 32 * sg;  // this subgroup's first row of the tile
    for (int k0 = 0; k0 < K; k0 += 16) {
        SG_A_TYPE a[${MB}];
        #pragma unroll
        for (int i = 0; i < ${MB}; i++) {
            ushort v[8][${PER}];
            #pragma unroll
            for (int r = 0; r < 8; r++) {
                const int m = m0 + 8 * i + r;
                #pragma unroll
                for (int p = 0; p < ${PER}; p++) {
                    const int k = k0 + ${PER} * lane + p;
                    v[r][p] = a_d0 + m < M && k < K ? RAW_${A_T}(a_ptr, ${a_at("m", "k")}) : 0;
                }
            }
% if PER == 2:
            a[i] = (uint8)(${", ".join("v[%d][0] | ((uint)v[%d][1] << 16)" % (r, r) for r in range(8))});
% else:
            a[i] = (ushort8)(${", ".join("v[%d][0]" % r for r in range(8))});
% endif
        }
        #pragma unroll
        for (int j = 0; j < ${NB}; j++) {
            const int n = ${SG} * j + lane;
            uint w[8];
            #pragma unroll
            for (int q = 0; q < 8; q++) {
                const int k = k0 + 2 * q;
                const uint lo = b_d0 + n < N && k < K ? RAW_${B_T}(b_ptr, ${b_at("k", "n")}) : 0;
                const uint hi = b_d0 + n < N && k + 1 < K ? RAW_${B_T}(b_ptr, ${b_at("k + 1", "n")}) : 0;
                w[q] = lo | (hi << 16);
            }
            const uint8 b = vload8(0, w);
            #pragma unroll
            for (int i = 0; i < ${MB}; i++)
                acc[i][j] = SG_MAD(a[i], b, acc[i][j]);
        }
    }

    // epilogue: component r of acc[i][j] is row m0 + 8 i + r, column SG j + lane
    __global ${C_T} *c_ptr = C + c_offset + z * stride_c;
    #pragma unroll
    for (int i = 0; i < ${MB}; i++) {
        float rows[8];
        #pragma unroll
        for (int j = 0; j < ${NB}; j++) {
            vstore8(acc[i][j], 0, rows);
            const int n = b_d0 + ${SG} * j + lane;
            #pragma unroll
            for (int r = 0; r < 8; r++) {
                const int m = a_d0 + m0 + 8 * i + r;
                if (m < M && n < N) {
${tiles.row_of_c("m", BIAS, C_T)}
${tiles.store_c("rows[r]", "n", BIAS, ACTIVATION, C_T)}
                }
            }
        }
    }
}
