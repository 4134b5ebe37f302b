<%include file="common.h"/>
<%include file="mma.h"/>
<%include file="wgmma.h"/>
<%namespace name="tiles" file="gemm_tiles.h"/>
<%
# C = act(alpha * op(A) op(B) + beta * C + bias) on Hopper's warpgroup products (wgmma
# m64nNk16, FP16 or BF16 operands, float32 sums): the arguments, transposes, split-K,
# strided batches and epilogue of gemm_mma.cl, for 16-bit operands stored as the products
# take them with 16-byte aligned rows (Gemm decides). A work-group of WARPGROUPS
# warpgroups computes a TILE_M x TILE_N block of C, warpgroup w rows 64 w .. 64 w + 63 of
# it across all TILE_N columns. cp.async copies each tile of TILE_K values of K into one
# of STAGES local buffers (zero-filled past the matrix's edges); the tensor cores read
# them in place through descriptors (wgmma.h's layouts), so no operand passes through
# registers. One barrier per tile; the products of a tile are waited for before the next
# barrier lets its buffer be refilled.
MMA = context.get("MMA", "f16")
NATIVE = "half" if MMA == "f16" else "bfloat16"
TM, TN, TK = TILE_M, TILE_N, TILE_K
assert TM == 64 * WARPGROUPS and TK == 32 and TN % 64 == 0 and TN <= 256
THREADS = 128 * WARPGROUPS
A_CK = not TRANS_A  # A's rows of K in global memory: K-major tile, else M-major
B_CK = bool(TRANS_B)
assert A_T == NATIVE and B_T == NATIVE
SIZE_A, SIZE_B = TM * TK, TN * TK  # 16-bit values a stage
CHUNKS_A, CHUNKS_B = SIZE_A // 8 // THREADS, SIZE_B // 8 // THREADS
assert CHUNKS_A * 8 * THREADS == SIZE_A and CHUNKS_B * 8 * THREADS == SIZE_B
# where the descriptors' leading byte offset points in MN-major tiles: along M or N
# ("mn", PTX's definition) or along K
MN_LEAD = context.get("MN_LEAD", "mn")
def descriptor(ck, td):
    """(leading, stride byte offsets, swizzle mode) of a tile of td rows or columns"""
    if ck:
        return 16, 512, 2  # K-major: 8 rows of 64 bytes between atoms; 64-byte swizzle
    mn, k = (TK // 8) * 1024, 1024  # MN-major: atoms along M or N, along K
    return (mn, k, 1) if MN_LEAD == "mn" else (k, mn, 1)
DESC_A, DESC_B = descriptor(A_CK, TM), descriptor(B_CK, TN)
WG_TYPE = "f16" if MMA == "f16" else "bf16"
ACC = TN // 2  # accumulators a work-item holds: 64 x TN over 128 items
%>
<%def name="at(ck)">${"wg_k_major_at(d, k)" if ck else "wg_mn_major_at(d, k, %d)" % TK}</%def>

## this item's chunks of the tile at x_ptr (kc: its K offset) into stage S (16-bit
## values); bytes past the matrix's edge (D rows, K) are zero-filled, not read
<%def name="copy_tile(x, S, CK, CHUNKS, D)">
    % for r in range(CHUNKS):
    {
        const int d = ${x}_d[${r}], k = ${x}_k[${r}];
        % if CK:
        const int left = ${x}_d0 + d < ${D} ? K - (kc + k) : 0;
        % else:
        const int left = kc + k < K ? ${D} - (${x}_d0 + d) : 0;
        % endif
        const int bytes = 2 * clamp(left, 0, 8);
        COPY_ASYNC((${S}) + ${at(CK)}, (__global const ushort *)${x}_ptr + (bytes ? ${x}_off[${r}] : 0), bytes);
    }
    % endfor
</%def>

## acc += the products of one 16 of K (descriptors da, db)
<%def name="product(da, db)">
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %${ACC + 2}, 0;\n"
        "//SM90A wgmma.mma_async.sync.aligned.m64n${TN}k16.f32.${WG_TYPE}.${WG_TYPE} {"
        % for i in range(ACC):
        "%${i}${"," if i < ACC - 1 else "},"}"
        % endfor
        " %${ACC}, %${ACC + 1}, p, 1, 1, ${int(not A_CK)}, ${int(not B_CK)};\n}"
        : ${", ".join('"+f"(acc[%d])' % i for i in range(ACC))}
        : "l"(${da}), "l"(${db}), "r"(1) : "memory");
</%def>

__kernel __attribute__((reqd_work_group_size(32, ${THREADS // 32}, 1)))
${tiles.signature(A_T, B_T, C_T)}{
    // the stages, 1024-byte aligned for the swizzle (wgmma.h)
    __local ushort a_local[${STAGES * SIZE_A}] __attribute__((aligned(1024)));
    __local ushort b_local[${STAGES * SIZE_B}] __attribute__((aligned(1024)));
    const int lane = get_local_id(0), warp = get_local_id(1);
    const int lid = warp * 32 + lane;
    const int wg = warp >> 2;  // this item's warpgroup
${tiles.tile_origin(GROUP, TM, TN, A_CK, B_CK, A_T, B_T)}
    float acc[${ACC}];
    #pragma unroll
    for (int i = 0; i < ${ACC}; i++)
        acc[i] = 0.0f;

    const int tiles_k = (K + ${TK - 1}) / ${TK};
${tiles.positions("a", TM, TK, A_CK, CHUNKS_A, THREADS, "lda", 8)}
${tiles.positions("b", TN, TK, B_CK, CHUNKS_B, THREADS, "ldb", 8)}
    // this warpgroup's rows of A: 64 rows on in a K-major tile, one atom column on in an
    // M-major one
    const uint a_rows = ${"wg * %d" % (64 * 64) if A_CK else "wg * %d" % (TK // 8 * 1024)};
    int kc = 0;  // K offset of the next tile to copy
    % for s in range(STAGES - 1):
    if (${s} < tiles_k) {
${copy_tile("a", "a_local + %d" % (s * SIZE_A), A_CK, CHUNKS_A, "M")}
${copy_tile("b", "b_local + %d" % (s * SIZE_B), B_CK, CHUNKS_B, "N")}
        kc += ${TK};
${tiles.advance(A_CK, B_CK, TK)}
    }
    COPY_ASYNC_COMMIT();
    % endfor
    for (int kt = 0; kt < tiles_k; kt++) {
        COPY_ASYNC_WAIT(${STAGES - 2});  // this item's chunks of tile kt have landed
        WG_FENCE_PROXY();
        barrier(CLK_LOCAL_MEM_FENCE);  // everyone's have; tile kt - 1's products are done
        if (kt + ${STAGES - 1} < tiles_k) {  // so tile kt + STAGES - 1 may take its stage
            const int stage = (kt + ${STAGES - 1}) % ${STAGES};
${copy_tile("a", "a_local + stage * %d" % SIZE_A, A_CK, CHUNKS_A, "M")}
${copy_tile("b", "b_local + stage * %d" % SIZE_B, B_CK, CHUNKS_B, "N")}
            kc += ${TK};
${tiles.advance(A_CK, B_CK, TK)}
        }
        COPY_ASYNC_COMMIT();
        const uint as = (uint)(ulong)(a_local + (kt % ${STAGES}) * ${SIZE_A}) + a_rows;
        const uint bs = (uint)(ulong)(b_local + (kt % ${STAGES}) * ${SIZE_B});
        WG_FENCE();
        % for k16 in range(0, TK, 16):
        {
            // K-major: 16 values are 32 bytes on along the swizzled row; MN-major: two
            // atoms of 8 rows of K on
            const ulong da = wg_descriptor(as + ${32 * (k16 // 16) if A_CK else 2048 * (k16 // 16)}, ${DESC_A[0]}, ${DESC_A[1]}, ${DESC_A[2]});
            const ulong db = wg_descriptor(bs + ${32 * (k16 // 16) if B_CK else 2048 * (k16 // 16)}, ${DESC_B[0]}, ${DESC_B[1]}, ${DESC_B[2]});
${product("da", "db")}
        }
        % endfor
        WG_COMMIT();
        WG_WAIT(0);
    }

    // epilogue: accumulator 4 j + e is row 16 (warp % 4) + g (+8 for e >= 2) of this
    // warpgroup's 64, column 8 j + 2t (+1 for odd e)
    const int g = lane >> 2, t = lane & 3;
    __global ${C_T} *c_ptr = C + c_offset + z * stride_c;
    #pragma unroll
    for (int h = 0; h < 2; h++) {
        const int m = a_d0 + 64 * wg + 16 * (warp & 3) + g + 8 * h;
        if (m >= M)
            continue;
        __global ${C_T} *c_row = c_ptr + (ulong)m * ldc;
% if BIAS == "row":
        const float bias_m = bias[bias_offset + m];
% endif
        #pragma unroll
        for (int j = 0; j < ${TN // 8}; j++) {
            #pragma unroll
            for (int w = 0; w < 2; w++) {
                const int n = b_d0 + 8 * j + 2 * t + w;
                if (n < N) {
${tiles.store_c("acc[4 * j + 2 * h + w]", "n", BIAS, ACTIVATION, C_T)}
                }
            }
        }
    }
}
