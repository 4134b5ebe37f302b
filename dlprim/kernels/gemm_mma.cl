<%include file="common.h"/>
<%include file="mma.h"/>
<%namespace name="tiles" file="gemm_tiles.h"/>
<%
# C = act(alpha * op(A) op(B) + beta * C + bias) on NVIDIA tensor cores: TF32 products
# (mma.sync m16n8k8, inline PTX), FP32 accumulation. Same arguments, transposes, split-K,
# strided batches and epilogue as gemm.cl, which Gemm swaps it for (precision "tf32").
# A work-group of WARPS_M x WARPS_N warps (32 x WARPS_M x WARPS_N items, one warp per
# local row y) computes a TILE_M x TILE_N block of C, each warp a WTM x WTN block as
# MI x NI fragments of 16 x 8. Operands are rounded to TF32 (cvt.rna) as they are staged
# in local memory, TILE_K values of K at a time, prefetched through registers into one
# (STAGES 1: a second barrier per tile) or two local buffers.
# A dot product does not care in which order its K terms come, so within each 16 of K the
# two mma steps s and fragment slots q of lane column t take k = 4t + 2s + q: a lane's
# four values of a row are then adjacent. Local layout per operand: read along K in
# global ("CK") -> rows of K (stride TK: one 128-bit read gives a lane both steps' values,
# conflict-free); else K-major (stride TILE + 2, odd multiple of 2: the lanes' scalar
# reads of rows 4t + 2s + q fall in distinct banks).
# MMA "f16" (precision "fp16"): FP16 products instead, mma.sync m16n8k16 (f16 operands,
# f32 accumulation). Operands are staged as halves, each float4 of registers as one 8-byte
# local store, in the layout they have in global memory: rows of K ([d][k], stride
# TK + 8) for "CK", else K-major ([k][d], stride TILE + 8). ldmatrix reads the fragments
# (.trans from K-major tiles; mma.h); the 8 rows of 16 bytes each of its matrices fall
# in distinct banks at these strides (an odd multiple of 16 bytes, or 4 words mod 32).
# A_T, B_T, C_T: the operands' storage (float or half).
MMA = context.get("MMA", "tf32")
A_T, B_T, C_T = context.get("A_T", "float"), context.get("B_T", "float"), context.get("C_T", "float")
# "bf16" (precision "bf16"): BF16 operands the same way, m16n8k16 with bf16 operands
F16 = MMA in ("f16", "bf16")
NATIVE = "half" if MMA == "f16" else "bfloat16"  # the 16-bit operands' storage type
PRODUCT = "MMA_BF16" if MMA == "bf16" else "MMA_F16"
def ld16(CK, T):
    return TILE_K + 8 if CK else T + 8
TM, TN, TK = TILE_M, TILE_N, TILE_K
WARPS = WARPS_M * WARPS_N
THREADS = 32 * WARPS
WTM, WTN = TM // WARPS_M, TN // WARPS_N
MI, NI = WTM // 16, WTN // 8
assert not F16 or NI % 2 == 0, "ldmatrix loads B's fragments two blocks of 8 at a time"
A_CK = not TRANS_A
B_CK = bool(TRANS_B)
def lds(CK, T):
    return TK if CK else T + 2
LDA, LDB = lds(A_CK, TM), lds(B_CK, TN)
SIZE_A = TM * LDA if A_CK else TK * LDA
SIZE_B = TN * LDB if B_CK else TK * LDB
LDA16, LDB16 = ld16(A_CK, TM), ld16(B_CK, TN)
if F16:  # halves, in units of uint (two per uint)
    SIZE_A = (TM * LDA16 if A_CK else TK * LDA16) // 2
    SIZE_B = (TN * LDB16 if B_CK else TK * LDB16) // 2
# the emulated products (mma.h, tests) exchange fragments through barriers: unrolled,
# they multiply the barrier regions a CPU runtime's compiler must handle
EMULATE = context.get("MMA_EMULATE", False)
UNROLL = "#pragma unroll 1" if EMULATE else "#pragma unroll"
LOADS_A = TM * TK // 4 // THREADS
LOADS_B = TN * TK // 4 // THREADS
# ASYNC (16-bit operands stored as the products take them, every row 16-byte aligned;
# core/gemm.py decides): no registers between global and local memory. Each work-item
# copies 16-byte chunks (8 values) of the tiles with cp.async, zero-filled past the
# matrix; STAGES tiles are in flight (the one being multiplied and STAGES - 1 ahead of
# it), with one barrier per tile.
ASYNC = bool(context.get("ASYNC", 0))
assert not ASYNC or (F16 and A_T == NATIVE and B_T == NATIVE and STAGES >= 2)
CHUNKS_A, CHUNKS_B = TM * TK // 8 // THREADS, TN * TK // 8 // THREADS
assert not ASYNC or (CHUNKS_A * 8 * THREADS == TM * TK and CHUNKS_B * 8 * THREADS == TN * TK)
%>
// the element (row d, k) of a staged operand (K-major ones)
#define A_AT(s, m, k) s[(k) * ${LDA} + (m)]
#define B_AT(s, n, k) s[(k) * ${LDB} + (n)]

<%def name="store(x, S, LD, CK, LOADS)">
<% T = A_T if x == "a" else B_T %>\
    % if F16:
    // registers -> local tile as halves: four to a register, one 8-byte store of bits
    // already half; float rounded by vstore_half straight into the tile (its bits read
    // back from a private copy as another type could be reordered before the store)
    % for r in range(LOADS):
    {
        % if CK:
        const int at = ${x}_d[${r}] * ${LDA16 if x == "a" else LDB16} + ${x}_k[${r}];
        % else:
        const int at = ${x}_k[${r}] * ${LDA16 if x == "a" else LDB16} + ${x}_d[${r}];
        % endif
        % if T == NATIVE:
        *(__local ushort4 *)((__local ushort *)${S} + at) = ${x}_reg[${r}];
        % elif NATIVE == "half":
        vstore_half4_rte(${tiles.widened4("%s_reg[%d]" % (x, r), T)}, 0, (__local half *)${S} + at);
        % else:
        *(__local ushort4 *)((__local ushort *)${S} + at) =
            bfloat16_bits4(${tiles.widened4("%s_reg[%d]" % (x, r), T)});
        % endif
    }
    % endfor
    % else:
    // registers -> local tile, rounded to TF32
    % for r in range(LOADS):
    {
        const float4 w = ${tiles.widened4("%s_reg[%d]" % (x, r), T)};
        uint4 v = (uint4)(tf32(w.s0), tf32(w.s1), tf32(w.s2), tf32(w.s3));
        % if CK:
        *(__local uint4 *)(${S} + ${x}_d[${r}] * ${LD} + ${x}_k[${r}]) = v;
        % else:
        __local uint *p = ${S} + ${x}_k[${r}] * ${LD} + ${x}_d[${r}];
        p[0] = v.s0; p[1] = v.s1; p[2] = v.s2; p[3] = v.s3;
        % endif
    }
    % endfor
    % endif
</%def>

## ASYNC: this item's chunks of the tile at x_ptr into stage S (tiles.copy_chunks), in
## the layout they have in global memory
<%def name="copy_tile(x, S, CK, CHUNKS, D, LD16)">
${tiles.copy_chunks(x, "(__local ushort *)(%s)" % S, CK, CHUNKS, D, 8, "d * %d + k" % LD16 if CK else "k * %d + d" % LD16)}
</%def>

## the products of one staged tile (as, bs) into acc
<%def name="products()">
% if F16:
        ${UNROLL}
        for (int k16 = 0; k16 < ${TK}; k16 += 16) {
            // the fragments through ldmatrix (.trans from K-major tiles)
            uint af[${MI}][4], bf[${NI}][2];
            ${UNROLL}
            for (int i = 0; i < ${MI}; i++)
                A_FRAGMENTS(af[i], (__local const ushort *)as, wm + i * 16, k16, ${LDA16},
                            ${int(not A_CK)});
            ${UNROLL}
            for (int j = 0; j < ${NI}; j += 2) {
                uint v[4];
                B_FRAGMENTS(v, (__local const ushort *)bs, wn + j * 8, k16, ${LDB16},
                            ${int(not B_CK)});
                bf[j][0] = v[0]; bf[j][1] = v[1]; bf[j + 1][0] = v[2]; bf[j + 1][1] = v[3];
            }
            ${UNROLL}
            for (int i = 0; i < ${MI}; i++) {
                ${UNROLL}
                for (int j = 0; j < ${NI}; j++) {
                    ${PRODUCT}(acc[i][j], af[i][0], af[i][1], af[i][2], af[i][3], bf[j][0], bf[j][1]);
                }
            }
        }
% else:
        ${UNROLL}
        for (int k16 = 0; k16 < ${TK}; k16 += 16) {
            // af[i][s]: mma step s's A fragment of row block i (rows g, g + 8; slots q)
            uint af[${MI}][2][4], bf[${NI}][2][2];
            ${UNROLL}
            for (int i = 0; i < ${MI}; i++) {
                const int m = wm + i * 16 + g;
% if A_CK:
                const uint4 lo = *(__local const uint4 *)(as + m * ${LDA} + k16 + 4 * t);
                const uint4 hi = *(__local const uint4 *)(as + (m + 8) * ${LDA} + k16 + 4 * t);
                af[i][0][0] = lo.s0; af[i][0][1] = hi.s0; af[i][0][2] = lo.s1; af[i][0][3] = hi.s1;
                af[i][1][0] = lo.s2; af[i][1][1] = hi.s2; af[i][1][2] = lo.s3; af[i][1][3] = hi.s3;
% else:
                ${UNROLL}
                for (int st = 0; st < 2; st++) {
                    const int k = k16 + 4 * t + 2 * st;
                    af[i][st][0] = A_AT(as, m, k);
                    af[i][st][1] = A_AT(as, m + 8, k);
                    af[i][st][2] = A_AT(as, m, k + 1);
                    af[i][st][3] = A_AT(as, m + 8, k + 1);
                }
% endif
            }
            ${UNROLL}
            for (int j = 0; j < ${NI}; j++) {
                const int n = wn + j * 8 + g;
% if B_CK:
                const uint4 v = *(__local const uint4 *)(bs + n * ${LDB} + k16 + 4 * t);
                bf[j][0][0] = v.s0; bf[j][0][1] = v.s1; bf[j][1][0] = v.s2; bf[j][1][1] = v.s3;
% else:
                ${UNROLL}
                for (int st = 0; st < 2; st++) {
                    const int k = k16 + 4 * t + 2 * st;
                    bf[j][st][0] = B_AT(bs, n, k);
                    bf[j][st][1] = B_AT(bs, n, k + 1);
                }
% endif
            }
            ${UNROLL}
            for (int st = 0; st < 2; st++) {
                ${UNROLL}
                for (int i = 0; i < ${MI}; i++) {
                    ${UNROLL}
                    for (int j = 0; j < ${NI}; j++) {
                        MMA_TF32(acc[i][j], af[i][st][0], af[i][st][1], af[i][st][2], af[i][st][3],
                                 bf[j][st][0], bf[j][st][1]);
                    }
                }
            }
        }
% endif
</%def>

__kernel __attribute__((reqd_work_group_size(32, ${WARPS}, 1)))
${tiles.signature(A_T, B_T, C_T)}{
    // declared as uint4 for the 16-byte alignment of the vector stores
    __local uint4 a_local4[${STAGES * SIZE_A // 4}], b_local4[${STAGES * SIZE_B // 4}];
    __local uint *a_local = (__local uint *)a_local4, *b_local = (__local uint *)b_local4;
% if EMULATE:
    __local uint mma_scratch[${WARPS * 192}];  // mma.h's emulated products
% endif
    const int lane = get_local_id(0), warp = get_local_id(1);
    const int lid = warp * 32 + lane;
    const int g = lane >> 2, t = lane & 3;  // the fragments' row group and column
    const int wm = (warp / ${WARPS_N}) * ${WTM}, wn = (warp % ${WARPS_N}) * ${WTN};
${tiles.tile_origin(GROUP, TM, TN, A_CK, B_CK, A_T, B_T)}
    float acc[${MI}][${NI}][4];
    #pragma unroll
    for (int i = 0; i < ${MI}; i++) {
        #pragma unroll
        for (int j = 0; j < ${NI}; j++)
            acc[i][j][0] = acc[i][j][1] = acc[i][j][2] = acc[i][j][3] = 0.0f;
    }

    const int tiles_k = (K + ${TK - 1}) / ${TK};
% if ASYNC:
${tiles.positions("a", TM, TK, A_CK, CHUNKS_A, THREADS, "lda", 8)}
${tiles.positions("b", TN, TK, B_CK, CHUNKS_B, THREADS, "ldb", 8)}
    int kc = 0;  // K offset of the next tile to copy
    // the first STAGES - 1 tiles in flight, one group each (empty past the last tile, so
    // that the group count stays what the waits below expect)
    % for s in range(STAGES - 1):
    if (${s} < tiles_k) {
${copy_tile("a", "a_local + %d" % (s * SIZE_A), A_CK, CHUNKS_A, "M", LDA16)}
${copy_tile("b", "b_local + %d" % (s * SIZE_B), B_CK, CHUNKS_B, "N", LDB16)}
        kc += ${TK};
${tiles.advance(A_CK, B_CK, TK)}
    }
    COPY_ASYNC_COMMIT();
    % endfor
    for (int kt = 0; kt < tiles_k; kt++) {
        COPY_ASYNC_WAIT(${STAGES - 2});  // this item's chunks of tile kt have landed
        barrier(CLK_LOCAL_MEM_FENCE);  // everyone's have, and every read of tile kt - 1 is done
        if (kt + ${STAGES - 1} < tiles_k) {  // so tile kt + STAGES - 1 may take its stage
            const int stage = (kt + ${STAGES - 1}) % ${STAGES};
${copy_tile("a", "a_local + stage * %d" % SIZE_A, A_CK, CHUNKS_A, "M", LDA16)}
${copy_tile("b", "b_local + stage * %d" % SIZE_B, B_CK, CHUNKS_B, "N", LDB16)}
            kc += ${TK};
${tiles.advance(A_CK, B_CK, TK)}
        }
        COPY_ASYNC_COMMIT();
        __local const uint *as = a_local + (kt % ${STAGES}) * ${SIZE_A};
        __local const uint *bs = b_local + (kt % ${STAGES}) * ${SIZE_B};
${products()}
    }
% else:
${tiles.positions("a", TM, TK, A_CK, LOADS_A, THREADS, "lda")}
${tiles.positions("b", TN, TK, B_CK, LOADS_B, THREADS, "ldb")}
    ${tiles.reg4(A_T)} a_reg[${LOADS_A}];
    ${tiles.reg4(B_T)} b_reg[${LOADS_B}];
    const bool inner_a = a_d0 + ${TM} <= M, inner_b = b_d0 + ${TN} <= N;
    int k0 = 0;
    bool full_a = inner_a && ${TK} <= K, full_b = inner_b && ${TK} <= K;
    if (tiles_k > 0) {
${tiles.load("a", "a_ptr", A_CK, LOADS_A * THREADS, LOADS_A, THREADS, "M", ALIGNED_A, A_T)}
${tiles.load("b", "b_ptr", B_CK, LOADS_B * THREADS, LOADS_B, THREADS, "N", ALIGNED_B, B_T)}
${store("a", "a_local", LDA, A_CK, LOADS_A)}
${store("b", "b_local", LDB, B_CK, LOADS_B)}
    }
    barrier(CLK_LOCAL_MEM_FENCE);

    for (int kt = 0; kt < tiles_k; kt++) {
        __local const uint *as = a_local + (kt % ${STAGES}) * ${SIZE_A};
        __local const uint *bs = b_local + (kt % ${STAGES}) * ${SIZE_B};
        const bool more = kt + 1 < tiles_k;
        if (more) {
            k0 += ${TK};
            full_a = inner_a && k0 + ${TK} <= K;
            full_b = inner_b && k0 + ${TK} <= K;
${tiles.advance(A_CK, B_CK, TK)}
${tiles.load("a", "a_ptr", A_CK, LOADS_A * THREADS, LOADS_A, THREADS, "M", ALIGNED_A, A_T)}
${tiles.load("b", "b_ptr", B_CK, LOADS_B * THREADS, LOADS_B, THREADS, "N", ALIGNED_B, B_T)}
        }
${products()}
        if (more) {
% if STAGES == 1:
            barrier(CLK_LOCAL_MEM_FENCE);  // one buffer: every read of this tile is done
% endif
            __local uint *a_next = a_local + ((kt + 1) % ${STAGES}) * ${SIZE_A};
            __local uint *b_next = b_local + ((kt + 1) % ${STAGES}) * ${SIZE_B};
${store("a", "a_next", LDA, A_CK, LOADS_A)}
${store("b", "b_next", LDB, B_CK, LOADS_B)}
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }

% endif

    // epilogue: alpha * acc + beta * C_old + bias, then the activation; fragment value
    // e of (i, j) is row g (+8 for e >= 2), column 2t (+1 for odd e)
    __global ${C_T} *c_ptr = C + c_offset + z * stride_c;
    #pragma unroll
    for (int i = 0; i < ${MI}; i++) {
        #pragma unroll
        for (int h = 0; h < 2; h++) {
            const int m = a_d0 + wm + i * 16 + g + 8 * h;
            if (m >= M)
                continue;
${tiles.row_of_c("m", BIAS, C_T)}
            #pragma unroll
            for (int j = 0; j < ${NI}; j++) {
                #pragma unroll
                for (int w = 0; w < 2; w++) {
                    const int n = b_d0 + wn + j * 8 + 2 * t + w;
                    if (n < N) {
${tiles.store_c("acc[i][j][2 * h + w]", "n", BIAS, ACTIVATION, C_T)}
                    }
                }
            }
        }
    }
}
