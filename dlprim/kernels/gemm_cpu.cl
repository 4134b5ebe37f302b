<%include file="common.h"/>
<%
# The GEMM of kernels/gemm.cl shaped for CPU drivers (PoCL), which run a whole
# work-group as a loop on one core: no local memory and no barriers (the caches do the
# staging), each work-item a BLOCK_M x BLOCK_N register block of C held as
# float${VEC} vectors, K walked straight from global memory. Per k: BLOCK_N / VEC wide
# loads of a B row, BLOCK_M broadcasts of A, BLOCK_M * BLOCK_N / VEC vector FMAs.
# A work-group covers TILE_M x TILE_N of C; its items share A rows (along N) and
# B columns (along M) while those are still in cache.
WG_M = TILE_M // BLOCK_M
WG_N = TILE_N // BLOCK_N
NV = BLOCK_N // VEC
FV = "float%d" % VEC

def a_at(i, k):
    return "a_ptr[(ulong)(%s) * lda + a_m[%d]]" % (k, i) if TRANS_A else "a_row[%d][%s]" % (i, k)

def b_at(j, k):
    return "b_col[%d][%s]" % (j, k) if TRANS_B else "b_col[%d][(ulong)(%s) * ldb]" % (j, k)
%>
<%def name="k_loop(wide)">
    // ${"whole block inside N: " + str(VEC) + "-wide loads" if wide else "N edge or B transposed: clamped scalar loads"}
    __attribute__((opencl_unroll_hint(${TILE_K})))
    for (int k = 0; k < K; k++) {
        ${FV} b[${NV}];
    % for v in range(NV):
        % if wide:
        b[${v}] = vload${VEC}(0, b_ptr + (ulong)k * ${BLOCK_N if PACK_B else "ldb"} + ${v * VEC});
        % else:
        b[${v}] = (${FV})(${", ".join(b_at(v * VEC + w, "k") for w in range(VEC))});
        % endif
    % endfor
    % for i in range(BLOCK_M):
        {
            const ${FV} a = (${FV})(${a_at(i, "k")});
        % for v in range(NV):
            acc[${i}][${v}] = mad(a, b[${v}], acc[${i}][${v}]);
        % endfor
        }
    % endfor
    }
</%def>

__kernel __attribute__((reqd_work_group_size(${WG_N}, ${WG_M}, 1)))
void gemm(int M, int N, int K, int k_chunk, int splits,
          __global const float *A, ulong a_offset, int lda, ulong stride_a,
          __global const float *B, ulong b_offset, int ldb, ulong stride_b,
          __global float *C, ulong c_offset, int ldc, ulong stride_c,
          __global const float *bias, ulong bias_offset,
          float alpha, float beta)
{
    const int n0 = get_global_id(0) * ${BLOCK_N}, m0 = get_global_id(1) * ${BLOCK_M};
    // split-K as in kernels/gemm.cl: z = batch * splits + part
    const ulong z = get_global_id(2);
    const ulong batch = z / splits;
    const int k_begin = (int)(z % splits) * k_chunk;

    // rows and columns past the matrix edge read the last one (valid memory, the
    // results are dropped at the store), so the inner loop has no branches
    __global const float *a_ptr = A + a_offset + batch * stride_a
% if TRANS_A:
        + (ulong)k_begin * lda;
    int a_m[${BLOCK_M}];
    % for i in range(BLOCK_M):
    a_m[${i}] = min(m0 + ${i}, M - 1);
    % endfor
% else:
        + k_begin;
    __global const float *a_row[${BLOCK_M}];
    % for i in range(BLOCK_M):
    a_row[${i}] = a_ptr + (ulong)min(m0 + ${i}, M - 1) * lda;
    % endfor
% endif
    ${FV} acc[${BLOCK_M}][${NV}];
    #pragma unroll
    for (int i = 0; i < ${BLOCK_M}; i++) {
        #pragma unroll
        for (int v = 0; v < ${NV}; v++)
            acc[i][v] = 0.0f;
    }
    const int k_all = K;
    K = min(K - k_begin, k_chunk);
% if PACK_B:
    // B packed by gemm_pack_b: this block's columns, K x BLOCK_N, contiguous, zero-padded
    __global const float *b_ptr = B + b_offset + batch * stride_b
        + ((ulong)get_global_id(0) * k_all + k_begin) * ${BLOCK_N};
${k_loop(True)}
% else:
    __global const float *b_ptr = B + b_offset + batch * stride_b
% if TRANS_B:
        + k_begin;
% else:
        + (ulong)k_begin * ldb + n0;
% endif
    __global const float *b_col[${BLOCK_N}];
    #pragma unroll
    for (int j = 0; j < ${BLOCK_N}; j++)
% if TRANS_B:
        b_col[j] = b_ptr + (ulong)min(n0 + j, N - 1) * ldb;
% else:
        b_col[j] = b_ptr + (min(n0 + j, N - 1) - n0);
% endif

% if TRANS_B:
${k_loop(False)}
% else:
    if (n0 + ${BLOCK_N} <= N) {
${k_loop(True)}
    } else {
${k_loop(False)}
    }
% endif
% endif

    // epilogue: alpha * acc + beta * C_old + bias, then the activation
    __global float *c_ptr = C + c_offset + z * stride_c;
    #pragma unroll
    for (int i = 0; i < ${BLOCK_M}; i++) {
        const int m = m0 + i;
        if (m >= M)
            break;
        __global float *c_row = c_ptr + (ulong)m * ldc;
        float row[${BLOCK_N}];
        #pragma unroll
        for (int v = 0; v < ${NV}; v++)
            vstore${VEC}(acc[i][v], v, row);
        #pragma unroll
        for (int j = 0; j < ${BLOCK_N}; j++) {
            const int n = n0 + j;
            if (n >= N)
                break;
            float y = alpha * row[j];
            if (beta != 0.0f)
                y += beta * c_row[n];
% if BIAS == "row":
            y += bias[bias_offset + m];
% elif BIAS == "col":
            y += bias[bias_offset + n];
% endif
            c_row[n] = ACT_${ACTIVATION}(y);
        }
    }
}

% if PACK_B:
// op(B) (K x N) -> strips of BLOCK_N columns, each K x BLOCK_N row-major and zero-padded
// past N: the GEMM then streams one contiguous strip per block instead of striding ldb
// (a new page every row) or gathering a transposed B. One work-item per row of a strip.
__kernel void gemm_pack_b(int N, int K, __global const float *B, ulong b_offset, int ldb,
                          ulong stride_b, __global float *P, ulong p_offset)
{
    const int s = get_global_id(0), k = get_global_id(1);
    const ulong batch = get_global_id(2);
    const int n0 = s * ${BLOCK_N};
    __global const float *b = B + b_offset + batch * stride_b;
    __global float *p = P + p_offset
        + ((batch * get_global_size(0) + s) * K + k) * ${BLOCK_N};
% if not TRANS_B:
    if (n0 + ${BLOCK_N} <= N) {
    % for v in range(NV):
        vstore${VEC}(vload${VEC}(0, b + (ulong)k * ldb + n0 + ${v * VEC}), ${v}, p);
    % endfor
        return;
    }
% endif
    for (int j = 0; j < ${BLOCK_N}; j++) {
        const int n = n0 + j;
% if TRANS_B:
        p[j] = n < N ? b[(ulong)n * ldb + k] : 0.0f;
% else:
        p[j] = n < N ? b[(ulong)k * ldb + n] : 0.0f;
% endif
    }
}
% endif
