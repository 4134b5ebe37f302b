<%include file="common.h"/>
<%namespace name="tiles" file="gemm_tiles.h"/>
<%
# The GEMM of kernels/gemm.cl shaped for CPU drivers (PoCL), which run a whole
# work-group as a loop on one core: no local memory and no barriers (the caches do the
# staging), each work-item a BLOCK_M x BLOCK_N register block of C held as
# float${VEC} vectors, K walked straight from global memory. Per k: BLOCK_N / VEC wide
# loads of a B row, BLOCK_M broadcasts of A, BLOCK_M * BLOCK_N / VEC vector FMAs.
# A work-group covers TILE_M x TILE_N of C; its items share A rows (along N) and
# B columns (along M) while those are still in cache.
# VECTOR_EPILOGUE: the activation reads the same on float${VEC} vectors
# (core/pointwise.py's vector_code), so whole blocks apply it to them
VECTOR_EPILOGUE = context.get("VECTOR_EPILOGUE", False)
WG_M = TILE_M // BLOCK_M
WG_N = TILE_N // BLOCK_N
NV = BLOCK_N // VEC
FV = "float%d" % VEC

def a_at(i, k):
    if PACK_A:
        return "a_ptr[(ulong)(%s) * %d + %d]" % (k, BLOCK_M, i)
    return "a_ptr[(ulong)(%s) * lda + a_m[%d]]" % (k, i) if TRANS_A else "a_row[%d][%s]" % (i, k)

def b_at(j, k):
    return "b_col[%d][%s]" % (j, k) if TRANS_B else "b_col[%d][(ulong)(%s) * ldb]" % (j, k)
%>
<%def name="store_c(acc)">
## the epilogue of one element: alpha * acc + beta * C_old (read only where beta != 0),
## + bias, then the activation, into c_row[n] (row m, column n)
{
                    float y = alpha * ${acc};
                    if (beta != 0.0f)
                        y += beta * c_row[n];
% if BIAS == "row":
                    y += bias[bias_offset + m];
% elif BIAS == "col":
                    y += bias[bias_offset + n];
% endif
                    c_row[n] = ACT_${ACTIVATION}(y);
                }</%def>
% if SMALL_M:
<%
# Few rows of C (a fully-connected layer at a small batch): the tiles below would
# compute mostly clamped copies of the last row and gather a transposed B column by
# column. Here a work-item takes SMALL_N columns (transposed B: rows of B, dot products
# along contiguous K; else SMALL_N / 8 float8 slices of a B row) for SMALL_M rows at a
# time, so B streams once per SMALL_M rows and A (a few rows) stays in cache.
SN = SMALL_N
SV = SMALL_N // 8
%>
<%def name="small_fma()">
    % for i in range(SMALL_M):
            {
                const float8 a = (float8)(${"a_ptr[(ulong)k * lda + a_m[%d]]" % i if TRANS_A else "a_ptr[(ulong)a_m[%d] * lda + k]" % i});
        % for v in range(SV):
                acc[${i}][${v}] = FMA(a, b${v}, acc[${i}][${v}]);
        % endfor
            }
    % endfor
</%def>
__kernel void gemm_small_m(int M, int N, int K,
          __global const float *A, ulong a_offset, int lda, ulong stride_a,
          __global const float *B, ulong b_offset, int ldb, ulong stride_b,
          __global float *C, ulong c_offset, int ldc, ulong stride_c,
          __global const float *bias, ulong bias_offset,
          float alpha, float beta, int batches)
{
    // SUM_BATCH: C = the sum over the batch of op(A_b) op(B_b) (a filter gradient over
    // a batch of images) in one launch; else one C per batch entry, get_global_id(1)
    const int n0 = get_global_id(0) * ${SN};
    const ulong batch = ${"0" if SUM_BATCH else "get_global_id(1)"};
    __global const float *a_ptr = A + a_offset + batch * stride_a;
    __global const float *b_ptr = B + b_offset + batch * stride_b;
    __global float *c_ptr = C + c_offset + batch * stride_c;
    for (int m0 = 0; m0 < M; m0 += ${SMALL_M}) {
        float out[${SMALL_M}][${SN}];
% if TRANS_B:
        float8 acc[${SMALL_M}][${SN}];
    % for i in range(SMALL_M):
        % for j in range(SN):
        acc[${i}][${j}] = 0.0f;
        out[${i}][${j}] = 0.0f;
        % endfor
    % endfor
        for (int bb = 0; bb < ${"batches" if SUM_BATCH else "1"}; bb++) {
            // rows past the edge read the last one (valid memory); their results are dropped
            __global const float *a_row[${SMALL_M}], *b_row[${SN}];
        % for i in range(SMALL_M):
            a_row[${i}] = a_ptr + bb * stride_a + (ulong)min(m0 + ${i}, M - 1)${"" if TRANS_A else " * lda"};
        % endfor
        % for j in range(SN):
            b_row[${j}] = b_ptr + bb * stride_b + (ulong)min(n0 + ${j}, N - 1) * ldb;
        % endfor
            int k = 0;
            for (; k + 8 <= K; k += 8) {
                float8 b[${SN}];
        % for j in range(SN):
                b[${j}] = VLOAD_GLOBAL(8, 0, b_row[${j}] + k);
        % endfor
        % for i in range(SMALL_M):
                {
            % if TRANS_A:
                    const float8 a = (float8)(${", ".join("a_row[%d][(ulong)(k + %d) * lda]" % (i, w) for w in range(8))});
            % else:
                    const float8 a = VLOAD_GLOBAL(8, 0, a_row[${i}] + k);
            % endif
            % for j in range(SN):
                    acc[${i}][${j}] = FMA(a, b[${j}], acc[${i}][${j}]);
            % endfor
                }
        % endfor
            }
            for (; k < K; k++) {
        % for i in range(SMALL_M):
            % for j in range(SN):
                out[${i}][${j}] = FMA(a_row[${i}][${"(ulong)k * lda" if TRANS_A else "k"}], b_row[${j}][k], out[${i}][${j}]);
            % endfor
        % endfor
            }
        }
    % for i in range(SMALL_M):
        % for j in range(SN):
        {
            float8 v = acc[${i}][${j}];
            float4 h = v.lo + v.hi;
            float2 q = h.lo + h.hi;
            out[${i}][${j}] += q.lo + q.hi;
        }
        % endfor
    % endfor
% else:
        // B row-major: a float8 slice of a B row per k, A's entries broadcast
        int a_m[${SMALL_M}];
    % for i in range(SMALL_M):
        a_m[${i}] = min(m0 + ${i}, M - 1);
    % endfor
        float8 acc[${SMALL_M}][${SV}];
    % for i in range(SMALL_M):
        % for v in range(SV):
        acc[${i}][${v}] = 0.0f;
        % endfor
    % endfor
        if (n0 + ${SN} <= N) {
            for (int k = 0; k < K; k++) {
        % for v in range(SV):
                const float8 b${v} = VLOAD_GLOBAL(8, 0, b_ptr + (ulong)k * ldb + n0 + ${v * 8});
        % endfor
                ${small_fma()}
            }
        } else {
            // the N edge: columns past it read the last one
            for (int k = 0; k < K; k++) {
                float bs[${SN}];
                for (int j = 0; j < ${SN}; j++)
                    bs[j] = b_ptr[(ulong)k * ldb + min(n0 + j, N - 1)];
        % for v in range(SV):
                const float8 b${v} = vload8(${v}, bs);
        % endfor
                ${small_fma()}
            }
        }
    % for i in range(SMALL_M):
        % for v in range(SV):
        vstore8(acc[${i}][${v}], ${v}, out[${i}]);
        % endfor
    % endfor
% endif
        // epilogue as in gemm below
        #pragma unroll
        for (int i = 0; i < ${SMALL_M}; i++) {
            const int m = m0 + i;
            if (m >= M)
                break;
            __global float *c_row = c_ptr + (ulong)m * ldc;
            #pragma unroll
            for (int j = 0; j < ${SN}; j++) {
                const int n = n0 + j;
                if (n >= N)
                    break;
                ${store_c("out[i][j]")}
            }
        }
    }
}
% else:
<%def name="k_loop(wide)">
    // ${"whole block inside N: " + str(VEC) + "-wide loads" if wide else "N edge or B transposed: clamped scalar loads"}
    __attribute__((opencl_unroll_hint(${TILE_K})))
    for (int k = 0; k < K; k++) {
        ${FV} b[${NV}];
    % for v in range(NV):
        % if wide:
        b[${v}] = VLOAD_GLOBAL(${VEC}, 0, b_ptr + (ulong)k * ${BLOCK_N if PACK_B else "ldb"} + ${v * VEC});
        % else:
        b[${v}] = (${FV})(${", ".join(b_at(v * VEC + w, "k") for w in range(VEC))});
        % endif
    % endfor
    % for i in range(BLOCK_M):
        {
            const ${FV} a = (${FV})(${a_at(i, "k")});
        % for v in range(NV):
            acc[${i}][${v}] = FMA(a, b[${v}], acc[${i}][${v}]);
        % endfor
        }
    % endfor
    }
</%def>

__kernel __attribute__((reqd_work_group_size(${WG_N}, ${WG_M}, 1)))
${tiles.signature()}{
    const int n0 = get_global_id(0) * ${BLOCK_N}, m0 = get_global_id(1) * ${BLOCK_M};
    // a block wholly past the edge has nothing to store (no barriers here): a work-group
    // of 64 x 64 over a 65 x 65 product (an attention's scores) would otherwise compute
    // 4 times its work, and 520 rows 10% more
    if (m0 >= M || n0 >= N)
        return;
    // split-K as in kernels/gemm.cl: z = batch * splits + part
    const ulong z = get_global_id(2);
    const ulong batch = z / splits;
    const int k_begin = (int)(z % splits) * k_chunk;

    // rows and columns past the matrix edge read the last one (valid memory, the
    // results are dropped at the store), so the inner loop has no branches
    __global const float *a_ptr = A + a_offset + batch * stride_a
% if PACK_A:
        // A packed by gemm_pack_a: this block's rows, K x BLOCK_M, contiguous, zero-padded
        // (a strip for every block that starts inside M: the others returned above)
        + ((ulong)get_global_id(1) * K + k_begin) * ${BLOCK_M};
% elif TRANS_A:
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
    // (a strip for every block that starts inside N: the others returned above)
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
% if VECTOR_EPILOGUE:
    // a block wholly inside N: on the vectors as they are (an activation unrolled element
    // by element, GELU's erf BLOCK_M x BLOCK_N times, bloats the kernel and runs scalar)
    if (n0 + ${BLOCK_N} <= N) {
        #pragma unroll
        for (int i = 0; i < ${BLOCK_M}; i++) {
            const int m = m0 + i;
            if (m >= M)
                break;
            __global float *c_row = c_ptr + (ulong)m * ldc + n0;
            #pragma unroll
            for (int v = 0; v < ${NV}; v++) {
                ${FV} y = alpha * acc[i][v];
                if (beta != 0.0f)
                    y += beta * VLOAD_GLOBAL(${VEC}, v, c_row);
    % if BIAS == "row":
                y += bias[bias_offset + m];
    % elif BIAS == "col":
                y += VLOAD_GLOBAL(${VEC}, v, bias + bias_offset + n0);
    % endif
                VSTORE_GLOBAL(${VEC}, ACT_${ACTIVATION}(y), v, c_row);
            }
        }
        return;
    }
% endif
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
            ${store_c("row[j]")}
        }
    }
}

% endif
% if PACK_B:
// op(B) (K x N) -> strips of BLOCK_N columns, each K x BLOCK_N row-major and zero-padded
// past N: the GEMM then streams one contiguous strip per block instead of striding ldb
// (a new page every row) or gathering a transposed B. A work-item packs PACK_K rows:
// of a row-major B, a run of 16 strips' columns of each row (so that a page of B
// yields a kilobyte, not 64 bytes, before the next row's page); of a transposed B (rows
// of B are the strip's columns), one strip, reading each of its rows along K.
__kernel void gemm_pack_b(int N, int K, __global const float *B, ulong b_offset, int ldb,
                          ulong stride_b, __global float *P, ulong p_offset)
{
    const int k0 = get_global_id(1) * ${PACK_K};
    const ulong batch = get_global_id(2);
    const int k_end = min(k0 + ${PACK_K}, K), strips = (N + ${BLOCK_N - 1}) / ${BLOCK_N};
    __global const float *b = B + b_offset + batch * stride_b;
% if TRANS_B:
    const int s = get_global_id(0), n0 = s * ${BLOCK_N};
    __global float *p = P + p_offset + ((batch * strips + s) * K + k0) * ${BLOCK_N};
    // 8 x BLOCK_N transposed in registers: a float8 along K from each of the strip's
    // rows of B, then BLOCK_N-wide rows of the strip
    __global const float *rows[${BLOCK_N}];
    for (int j = 0; j < ${BLOCK_N}; j++)
        rows[j] = b + (ulong)min(n0 + j, N - 1) * ldb;
    int k = k0;
    for (; k + 8 <= k_end; k += 8, p += 8 * ${BLOCK_N}) {
        float8 v[${BLOCK_N}];
    % for j in range(BLOCK_N):
        v[${j}] = n0 + ${j} < N ? VLOAD_GLOBAL(8, 0, rows[${j}] + k) : (float8)(0.0f);
    % endfor
    % for kk in range(8):
        p[${kk * BLOCK_N}] = v[0].s${kk};
        % for j in range(1, BLOCK_N):
        p[${kk * BLOCK_N + j}] = v[${j}].s${kk};
        % endfor
    % endfor
    }
    for (; k < k_end; k++, p += ${BLOCK_N})
        for (int j = 0; j < ${BLOCK_N}; j++)
            p[j] = n0 + j < N ? rows[j][k] : 0.0f;
% else:
    const int s0 = get_global_id(0) * 16, s_end = min(s0 + 16, strips);
    __global float *p = P + p_offset + (batch * strips * K + k0) * ${BLOCK_N};
    for (int k = k0; k < k_end; k++) {
        __global const float *row = b + (ulong)k * ldb;
        for (int s = s0; s < s_end; s++) {
            __global float *out = p + ((ulong)s * K + (k - k0)) * ${BLOCK_N};
            const int n0 = s * ${BLOCK_N};
            if (n0 + ${BLOCK_N} <= N) {
    % for v in range(NV):
                VSTORE_GLOBAL(${VEC}, VLOAD_GLOBAL(${VEC}, 0, row + n0 + ${v * VEC}), ${v}, out);
    % endfor
            } else {
                for (int j = 0; j < ${BLOCK_N}; j++)
                    out[j] = n0 + j < N ? row[n0 + j] : 0.0f;
            }
        }
    }
% endif
}
% endif

% if PACK_A:
// op(A) (M x K) of a transposed A (stored K x M, where a block's BLOCK_M values of one k
// lie in a row a page away from the next k's) -> strips of BLOCK_M rows, each K x BLOCK_M
// row-major and zero-padded past M: the GEMM then reads one contiguous strip per block.
// A work-item moves a tile of PACK_K values of k by 16 strips: its reads are runs of
// 16 * BLOCK_M floats of A's rows, its writes 16 runs of PACK_K * BLOCK_M floats.
__kernel void gemm_pack_a(int M, int K, __global const float *A, ulong a_offset, int lda,
                          ulong stride_a, __global float *P, ulong p_offset)
{
    const int s0 = get_global_id(0) * 16, k0 = get_global_id(1) * ${PACK_K};
    const ulong batch = get_global_id(2);
    const int strips = (M + ${BLOCK_M - 1}) / ${BLOCK_M}, k_end = min(k0 + ${PACK_K}, K);
    const int s_end = min(s0 + 16, strips);
    __global const float *a = A + a_offset + batch * stride_a;
    __global float *p = P + p_offset + (batch * strips * K + k0) * ${BLOCK_M};
    for (int k = k0; k < k_end; k++) {
        __global const float *row = a + (ulong)k * lda;
        for (int s = s0; s < s_end; s++) {
            __global float *out = p + ((ulong)s * K + (k - k0)) * ${BLOCK_M};
            const int m0 = s * ${BLOCK_M};
            if (m0 + ${BLOCK_M} <= M) {
% if BLOCK_M in (2, 4, 8, 16):
                VSTORE_GLOBAL(${BLOCK_M}, VLOAD_GLOBAL(${BLOCK_M}, 0, row + m0), 0, out);
% else:
                for (int i = 0; i < ${BLOCK_M}; i++)
                    out[i] = row[m0 + i];
% endif
            } else {
                for (int i = 0; i < ${BLOCK_M}; i++)
                    out[i] = m0 + i < M ? row[m0 + i] : 0.0f;
            }
        }
    }
}
% endif
