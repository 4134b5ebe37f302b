<%include file="common.h"/>
<%namespace name="tiles" file="gemm_tiles.h"/>
<%
# C = act(alpha * op(A) op(B) + beta * C + bias), op(A): M x K, op(B): K x N, row-major.
# A work-group computes a TILE_M x TILE_N block of C; each thread a BLOCK_M x BLOCK_N
# register block, strided so that its VEC-wide pieces sit WG_M (WG_N) pieces apart:
# neighbouring threads then read neighbouring float4s of local memory (no bank
# conflicts) and write neighbouring columns of C (coalesced).
WG_M = TILE_M // BLOCK_M
WG_N = TILE_N // BLOCK_N
THREADS = WG_M * WG_N
LDS_A = TILE_M + 4   # padded rows keep float4 alignment and spread the transposing stores
LDS_B = TILE_N + 4
KV = TILE_K // 4
# storage of the operands (float, or half widened as it loads; C rounded as it stores)
A_T, B_T, C_T = context.get("A_T", "float"), context.get("B_T", "float"), context.get("C_T", "float")
# A is read along K when not transposed, B along K when transposed
A_CK = not TRANS_A
B_CK = bool(TRANS_B)

def tile_vectors(TD):
    nv = TD * TILE_K // 4
    return nv, (nv + THREADS - 1) // THREADS
NV_A, LOADS_A = tile_vectors(TILE_M)
NV_B, LOADS_B = tile_vectors(TILE_N)
%>
<%def name="store(x, XS, LDS, CK, NV, LOADS, T)">
    // registers -> local tile, stored k-major: ${XS}[k][d] (half widened here)
    % for r in range(LOADS):
        % if NV % THREADS:
    if (lid + ${r * THREADS} < ${NV})
        % endif
    {
        const float4 v = ${tiles.widened4("%s_reg[%d]" % (x, r), T)};
        % if CK:
            % for c in range(4):
        ${XS}[(${x}_k[${r}] + ${c}) * ${LDS} + ${x}_d[${r}]] = v.s${c};
            % endfor
        % else:
        *(__local float4 *)(${XS} + ${x}_k[${r}] * ${LDS} + ${x}_d[${r}]) = v;
        % endif
    }
    % endfor
</%def>
<%def name="fetch(v, XS, LDS, BLOCK, WG, t)">
    % for i in range(BLOCK // VEC):
        % if VEC == 4:
    {
        float4 q = *(__local const float4 *)(${XS} + kk * ${LDS} + ${(i * WG) * 4} + ${t} * 4);
        ${v}[${i * 4}] = q.s0; ${v}[${i * 4 + 1}] = q.s1; ${v}[${i * 4 + 2}] = q.s2; ${v}[${i * 4 + 3}] = q.s3;
    }
        % else:
    ${v}[${i}] = ${XS}[kk * ${LDS} + ${i * WG} + ${t}];
        % endif
    % endfor
</%def>

__kernel __attribute__((reqd_work_group_size(${WG_N}, ${WG_M}, 1)))
${tiles.signature(A_T, B_T, C_T)}{
    __local float4 a_local4[${2 * TILE_K * LDS_A // 4}];
    __local float4 b_local4[${2 * TILE_K * LDS_B // 4}];
    __local float *a_local = (__local float *)a_local4;
    __local float *b_local = (__local float *)b_local4;

    const int tx = get_local_id(0), ty = get_local_id(1);
    const int lid = ty * ${WG_N} + tx;
${tiles.tile_origin(GROUP, TILE_M, TILE_N, A_CK, B_CK, A_T, B_T)}
${tiles.positions("a", TILE_M, TILE_K, A_CK, LOADS_A, THREADS, "lda")}
${tiles.positions("b", TILE_N, TILE_K, B_CK, LOADS_B, THREADS, "ldb")}
    ${tiles.reg4(A_T)} a_reg[${LOADS_A}];
    ${tiles.reg4(B_T)} b_reg[${LOADS_B}];
    float acc[${BLOCK_M}][${BLOCK_N}];
    #pragma unroll
    for (int i = 0; i < ${BLOCK_M}; i++) {
        #pragma unroll
        for (int j = 0; j < ${BLOCK_N}; j++)
            acc[i][j] = 0.0f;
    }

    const int tiles_k = (K + ${TILE_K - 1}) / ${TILE_K};
    const bool inner_a = a_d0 + ${TILE_M} <= M, inner_b = b_d0 + ${TILE_N} <= N;
    int k0 = 0;
    bool full_a = inner_a && ${TILE_K} <= K, full_b = inner_b && ${TILE_K} <= K;
    if (tiles_k > 0) {
${tiles.load("a", "a_ptr", A_CK, NV_A, LOADS_A, THREADS, "M", ALIGNED_A, A_T)}
${tiles.load("b", "b_ptr", B_CK, NV_B, LOADS_B, THREADS, "N", ALIGNED_B, B_T)}
${store("a", "a_local", LDS_A, A_CK, NV_A, LOADS_A, A_T)}
${store("b", "b_local", LDS_B, B_CK, NV_B, LOADS_B, B_T)}
    }
    barrier(CLK_LOCAL_MEM_FENCE);

    // double-buffered: the next tile travels global -> registers while this one is used
    for (int t = 0; t < tiles_k; t++) {
        __local const float *a_s = a_local + (t & 1) * ${TILE_K * LDS_A};
        __local const float *b_s = b_local + (t & 1) * ${TILE_K * LDS_B};
        const bool more = t + 1 < tiles_k;
        if (more) {
            k0 += ${TILE_K};
            full_a = inner_a && k0 + ${TILE_K} <= K;
            full_b = inner_b && k0 + ${TILE_K} <= K;
${tiles.advance(A_CK, B_CK, TILE_K)}
${tiles.load("a", "a_ptr", A_CK, NV_A, LOADS_A, THREADS, "M", ALIGNED_A, A_T)}
${tiles.load("b", "b_ptr", B_CK, NV_B, LOADS_B, THREADS, "N", ALIGNED_B, B_T)}
        }
        #pragma unroll
        for (int kk = 0; kk < ${TILE_K}; kk++) {
            float a[${BLOCK_M}], b[${BLOCK_N}];
${fetch("a", "a_s", LDS_A, BLOCK_M, WG_M, "ty")}
${fetch("b", "b_s", LDS_B, BLOCK_N, WG_N, "tx")}
            #pragma unroll
            for (int i = 0; i < ${BLOCK_M}; i++) {
                #pragma unroll
                for (int j = 0; j < ${BLOCK_N}; j++)
                    acc[i][j] = mad(a[i], b[j], acc[i][j]);
            }
        }
        if (more) {
            __local float *a_next = a_local + ((t + 1) & 1) * ${TILE_K * LDS_A};
            __local float *b_next = b_local + ((t + 1) & 1) * ${TILE_K * LDS_B};
${store("a", "a_next", LDS_A, A_CK, NV_A, LOADS_A, A_T)}
${store("b", "b_next", LDS_B, B_CK, NV_B, LOADS_B, B_T)}
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }

    // epilogue: alpha * acc + beta * C_old + bias, then the activation
    __global ${C_T} *c_ptr = C + c_offset + z * stride_c;
    #pragma unroll
    for (int i = 0; i < ${BLOCK_M}; i++) {
        const int m = a_d0 + (i / ${VEC} * ${WG_M} + ty) * ${VEC} + i % ${VEC};
        if (m >= M)
            continue;
${tiles.row_of_c("m", BIAS, C_T)}
        #pragma unroll
        for (int jv = 0; jv < ${BLOCK_N // VEC}; jv++) {
            const int n = b_d0 + (jv * ${WG_N} + tx) * ${VEC};
% if VEC == 4 and ALIGNED_C:
            if (n + 3 < N) {  // whole float4: one 16-byte load/store
                float4 v = alpha * (float4)(acc[i][jv * 4], acc[i][jv * 4 + 1],
                                            acc[i][jv * 4 + 2], acc[i][jv * 4 + 3]);
                if (beta != 0.0f)
    % if C_T == "half":
                    v += beta * load_half4_aligned(c_row + n);
    % elif C_T == "bfloat16":
                    v += beta * bfloat16_bits4_value(*(__global const ushort4 *)(c_row + n));
    % else:
                    v += beta * *(__global const float4 *)(c_row + n);
    % endif
    % if BIAS == "row":
                v += bias_m;
    % elif BIAS == "col":
                v += vload4(0, bias + bias_offset + n);
    % endif
    % if C_T == "half":
                store_half4_aligned(ACT_${ACTIVATION}(v), c_row + n);
    % elif C_T == "bfloat16":
                *(__global ushort4 *)(c_row + n) = bfloat16_bits4(ACT_${ACTIVATION}(v));
    % else:
                *(__global float4 *)(c_row + n) = ACT_${ACTIVATION}(v);
    % endif
                continue;
            }
% endif
            #pragma unroll
            for (int w = 0; w < ${VEC}; w++) {
                if (n + w < N) {
${tiles.store_c("acc[i][jv * %d + w]" % VEC, "n + w", BIAS, ACTIVATION, C_T)}
                }
            }
        }
    }
}
