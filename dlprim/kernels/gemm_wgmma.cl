<%include file="common.h"/>
<%include file="mma.h"/>
<%include file="wgmma.h"/>
<%namespace name="tiles" file="gemm_tiles.h"/>
<%
# C = act(alpha * op(A) op(B) + beta * C + bias) on Hopper's warpgroup products (wgmma,
# float32 sums): the arguments, transposes, split-K, strided batches and epilogue of
# gemm_mma.cl. MMA "f16" / "bf16": m64nNk16 on 16-bit operands stored as the products take
# them, with 16-byte aligned rows (Gemm decides). MMA "tf32": m64nNk8 on float operands,
# which these products take only K-major and which must be rounded to TF32 first (the
# tensor cores would truncate them): Gemm packs both so in one launch of the
# pack_<A source>_<B source> kernels below.
# A work-group of WARPGROUPS warpgroups computes a TILE_M x TILE_N block of C, warpgroup w
# rows 64 w .. 64 w + 63 of it across all TILE_N columns. cp.async copies each tile of
# TILE_K values of K (K_BYTES: 64 or 128 bytes; 128 gives twice the products between
# barriers, on K-major rows swizzled 128 bytes wide) into one of STAGES local buffers
# (zero-filled past the matrix's edges); the tensor cores read them in place through
# descriptors (wgmma.h's layouts), so no operand passes through registers. One barrier
# per tile; IN_FLIGHT tiles' products (0 or 1) may still run past it, so a stage is
# refilled only once the products of the tile IN_FLIGHT + 1 before have finished in
# every warpgroup. core/tuning.py's wgmma_plan picks the tile, K_BYTES and STAGES.
MMA = context.get("MMA", "f16")
TF32 = MMA == "tf32"
NATIVE = {"f16": "half", "bf16": "bfloat16", "tf32": "float"}[MMA]
V = 4 if TF32 else 8  # values in a 16-byte chunk
KSTEP = 8 if TF32 else 16  # K of one product
A_T, B_T, C_T = context.get("A_T", "float"), context.get("B_T", "float"), context.get("C_T", "float")
TM, TN, TK = TILE_M, TILE_N, TILE_K
K_BYTES = TK * (4 if TF32 else 2)  # a K-major row of a stage
assert TM == 64 * WARPGROUPS and K_BYTES in (64, 128) and TN % 64 == 0 and TN <= 256
THREADS = 128 * WARPGROUPS
A_CK = not TRANS_A  # A's rows of K in global memory: K-major tile, else M-major
B_CK = bool(TRANS_B)
assert A_T == NATIVE and B_T == NATIVE and (not TF32 or (A_CK and B_CK))
SIZE_A, SIZE_B = TM * TK, TN * TK  # values a stage
CHUNKS_A, CHUNKS_B = SIZE_A // V // THREADS, SIZE_B // V // THREADS
assert CHUNKS_A * V * THREADS == SIZE_A and CHUNKS_B * V * THREADS == SIZE_B
def descriptor(ck):
    """(leading, stride byte offsets, swizzle mode) of a tile"""
    if ck:  # K-major: atoms of 8 rows of K_BYTES, swizzled as wide as a row
        return 16, 8 * K_BYTES, 2 if K_BYTES == 64 else 1
    return (TK // 8) * 1024, 1024, 1  # MN-major: atoms along M or N, along K; 128-byte
DESC_A, DESC_B = descriptor(A_CK), descriptor(B_CK)
WG_TYPE = MMA
TRANSPOSES = "" if TF32 else ", %d, %d" % (int(not A_CK), int(not B_CK))
ACC = TN // 2  # accumulators a work-item holds: 64 x TN over 128 items
IN_FLIGHT = context.get("IN_FLIGHT", 0)  # tiles' products left running at a barrier
LOOKAHEAD = STAGES - 1 - IN_FLIGHT  # tiles copied ahead of the one multiplied
# PROMOTE (0: off): the products of every PROMOTE tiles summed into the float32 sums SUM
# by the work-items, not the tensor cores, which add a product to their accumulators
# truncated, not rounded, so that their error grows with K (H200, all-positive 1024 x
# 1024 x 8192: 27 times the float32 kernels'); the tensor cores' sums then cover PROMOTE
# TILE_K values of K, and rounded adds the rest (twice the accumulators' registers: at
# most 128 x 192 tiles; those tiles' products waited for)
PROMOTE = context.get("PROMOTE", 0)
assert not PROMOTE or (TN <= 192 and TM <= 128)
SUM = "total" if PROMOTE else "acc"
# float32 products as three TF32 ones: A's and B's packed parts (see pack below; the
# packing kernels of split_tf32's programs only)
SPLIT_PARTS = context.get("SPLIT_PARTS", ())
# the emulated products (wgmma.h, tests): the kind of wg_operand
EMULATE = context.get("MMA_EMULATE", False)
KIND = {"tf32": 0, "f16": 1, "bf16": 2}[MMA]
STORAGE = "float" if TF32 else "ushort"
assert LOOKAHEAD >= 1
ALIGNED_C = context.get("ALIGNED_C", 0)  # C's rows start at multiples of 4 values
# the epilogue's float tile of C, rows CT_LD apart: 8 more than TN, so that the eight
# rows of a warp's fragment stores fall in different banks
CT_LD = TN + 8
LOCAL_BYTES = max(STAGES * (SIZE_A + SIZE_B) * (4 if TF32 else 2), TM * CT_LD * 4)
%>

## this item's chunks of the tile at x_ptr into stage S (tiles.copy_chunks), in
## wgmma.h's layouts
<%def name="copy_tile(x, S, CK, CHUNKS, D)">
${tiles.copy_chunks(x, S, CK, CHUNKS, D, V, "wg_k_major_at(d, k, %d, %d)" % (V, K_BYTES) if CK else "wg_mn_major_at(d, k, %d)" % TK)}
</%def>

## acc += the products of one K step (descriptors da, db); acc = them where ``keep`` is 0
## (wgmma's scale-d: the accumulators are only ever written by the products, which ptxas
## needs to keep them in flight)
<%def name="product(da, db, keep='1')">
% if EMULATE:
    % if keep != '1':
    if (!(${keep}))
        for (int i = 0; i < ${ACC}; i++)
            acc[i] = 0.0f;
    % endif
    wgmma_emulated(acc, ${TN}, ${KSTEP}, smem, ${da}, ${db}, ${int(A_CK)}, ${int(B_CK)}, ${KIND},
                   lane, warp & 3);
% else:
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %${ACC + 2}, 0;\n"
        "//SM90A wgmma.mma_async.sync.aligned.m64n${TN}k${KSTEP}.f32.${WG_TYPE}.${WG_TYPE} {"
        % for i in range(ACC):
        "%${i}${"," if i < ACC - 1 else "},"}"
        % endfor
        " %${ACC}, %${ACC + 1}, p, 1, 1${TRANSPOSES};\n}"
        : ${", ".join('"+f"(acc[%d])' % i for i in range(ACC))}
        : "l"(${da}), "l"(${db}), "r"(${keep}) : "memory");
% endif
</%def>

__kernel __attribute__((reqd_work_group_size(32, ${THREADS // 32}, 1)))
${tiles.signature(A_T, B_T, C_T)}{
    // the stages of A, then B's, 1024-byte aligned for the swizzle (wgmma.h)
    __local uchar smem[${LOCAL_BYTES}] __attribute__((aligned(1024)));
    __local ${STORAGE} *a_local = (__local ${STORAGE} *)smem;
    __local ${STORAGE} *b_local = a_local + ${STAGES * SIZE_A};
    const int lane = get_local_id(0), warp = get_local_id(1);
    const int lid = warp * 32 + lane;
    const int wg = warp >> 2;  // this item's warpgroup
${tiles.tile_origin(GROUP, TM, TN, A_CK, B_CK, A_T, B_T)}
    float acc[${ACC}];
    #pragma unroll
    for (int i = 0; i < ${ACC}; i++)
        acc[i] = 0.0f;
    % if PROMOTE:
    float total[${ACC}];
    #pragma unroll
    for (int i = 0; i < ${ACC}; i++)
        total[i] = 0.0f;
    % endif

    const int tiles_k = (K + ${TK - 1}) / ${TK};
${tiles.positions("a", TM, TK, A_CK, CHUNKS_A, THREADS, "lda", V)}
${tiles.positions("b", TN, TK, B_CK, CHUNKS_B, THREADS, "ldb", V)}
    // this warpgroup's rows of A: 64 rows on in a K-major tile, one atom column on in an
    // M-major one
    const uint a_rows = ${"wg * %d" % (64 * K_BYTES) if A_CK else "wg * %d" % (TK // 8 * 1024)};
    int kc = 0;  // K offset of the next tile to copy
    % for s in range(LOOKAHEAD):
    if (${s} < tiles_k) {
${copy_tile("a", "a_local + %d" % (s * SIZE_A), A_CK, CHUNKS_A, "M")}
${copy_tile("b", "b_local + %d" % (s * SIZE_B), B_CK, CHUNKS_B, "N")}
        kc += ${TK};
${tiles.advance(A_CK, B_CK, TK)}
    }
    COPY_ASYNC_COMMIT();
    % endfor
    COPY_ASYNC_WAIT(${LOOKAHEAD - 1});  // this item's chunks of tile 0 have landed
    for (int kt = 0; kt < tiles_k; kt++) {
        WG_FENCE_PROXY();
        // all of tile kt landed; tile kt - 1 - IN_FLIGHT's products done in every warpgroup
        barrier(CLK_LOCAL_MEM_FENCE);
        if (kt + ${LOOKAHEAD} < tiles_k) {  // so tile kt + LOOKAHEAD may take its stage
            const int stage = (kt + ${LOOKAHEAD}) % ${STAGES};
${copy_tile("a", "a_local + stage * %d" % SIZE_A, A_CK, CHUNKS_A, "M")}
${copy_tile("b", "b_local + stage * %d" % SIZE_B, B_CK, CHUNKS_B, "N")}
            kc += ${TK};
${tiles.advance(A_CK, B_CK, TK)}
        }
        COPY_ASYNC_COMMIT();
        const uint as = WG_ADDRESS(a_local + (kt % ${STAGES}) * ${SIZE_A}) + a_rows;
        const uint bs = WG_ADDRESS(b_local + (kt % ${STAGES}) * ${SIZE_B});
    % if PROMOTE:
        const int keep = kt % ${PROMOTE};  // 0: the first tile after the sums took acc
    % endif
        WG_FENCE();
        % for step in range(TK // KSTEP):
        {
            // K-major: one product's K is 32 bytes on along the swizzled row; MN-major:
            // two atoms of 8 rows of K on
            const ulong da = wg_descriptor(as + ${32 * step if A_CK else 2048 * step}, ${DESC_A[0]}, ${DESC_A[1]}, ${DESC_A[2]});
            const ulong db = wg_descriptor(bs + ${32 * step if B_CK else 2048 * step}, ${DESC_B[0]}, ${DESC_B[1]}, ${DESC_B[2]});
${product("da", "db", "keep" if PROMOTE and step == 0 else "1")}
        }
        % endfor
        WG_COMMIT();
        // while the tensor cores multiply tile kt: this item's chunks of tile kt + 1
        // landed (up to LOOKAHEAD - 1 tiles after it may still be in flight)
        COPY_ASYNC_WAIT(${LOOKAHEAD - 1});
    % if PROMOTE:
        if (kt % ${PROMOTE} == ${PROMOTE - 1} || kt == tiles_k - 1) {
            WG_WAIT(0);
            #pragma unroll
            for (int i = 0; i < ${ACC}; i++)
                total[i] += acc[i];
        } else {
            WG_WAIT(${IN_FLIGHT});
        }
    % else:
        WG_WAIT(${IN_FLIGHT});
    % endif
    }
    WG_WAIT(0);

    // epilogue, through local memory so that C is written along its rows, four values a
    // store (written straight from the fragments, a warp's stores hit eight rows of 16
    // bytes each: on 8192 x 8192 x 768 that took as long as the products). Accumulator
    // 4 j + e is row 16 (warp % 4) + g (+8 for e >= 2) of this warpgroup's 64, column
    // 8 j + 2t (+1 for odd e).
    barrier(CLK_LOCAL_MEM_FENCE);  // every warpgroup's products have read their stages
    __local float *c_tile = (__local float *)smem;
    {
        const int g = lane >> 2, t = lane & 3;
        #pragma unroll
        for (int h = 0; h < 2; h++) {
            __local float *row = c_tile + (64 * wg + 16 * (warp & 3) + g + 8 * h) * ${CT_LD};
            #pragma unroll
            for (int j = 0; j < ${TN // 8}; j++)
                vstore2((float2)(${SUM}[4 * j + 2 * h], ${SUM}[4 * j + 2 * h + 1]), 0, row + 8 * j + 2 * t);
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    __global ${C_T} *c_ptr = C + c_offset + z * stride_c;
    for (int i = lid; i < ${TM * TN // 4}; i += ${THREADS}) {
        const int r = i / ${TN // 4}, c = i % ${TN // 4} * 4;
        const int m = a_d0 + r, n = b_d0 + c;
        if (m >= M || n >= N)
            continue;
${tiles.row_of_c("m", BIAS, C_T)}
        const float4 sums = vload4(0, c_tile + r * ${CT_LD} + c);
        % if ALIGNED_C:
        if (n + 3 < N && beta == 0.0f) {
${tiles.store_c4("sums", "n", BIAS, ACTIVATION, C_T)}
            continue;
        }
        % endif
        const float s4[4] = {sums.x, sums.y, sums.z, sums.w};
        for (int w = 0; w < 4 && n + w < N; w++) {
${tiles.store_c("s4[w]", "n + w", BIAS, ACTIVATION, C_T)}
        }
    }
}

% if TF32:
// x = hi + lo + (at most 2^-22 |x|): hi x rounded to TF32, lo the rest rounded to TF32 (0
// where x is not finite; hi truncated where rounding would carry a finite x past float's
// range)
inline float2 tf32_parts(float x)
{
    uint hi = tf32(x);
    if (isinf(as_float(hi)) && !isinf(x))
        hi = as_uint(x) & 0xffffe000u;
    return (float2)(as_float(hi), isfinite(x) ? as_float(tf32(x - as_float(hi))) : 0.0f);
}
## op(X) (D rows or columns by K, read along K where K_MAJOR) -> Y rounded to TF32, D rows
## of K (ldy, 16-byte aligned, zeros past K), batch entry z (stride 0: one X for all): the
## 32 x 32 block (k block kx, d block dy) through a local tile so that both sides read and
## write along their rows. PARTS (float32 products as three TF32 ones, core/gemm.py's
## split_tf32): each row of Y is len(PARTS) segments of ldy / len(PARTS) values, "h" the
## TF32 parts hi of tf32_parts, "l" the parts lo, "c" hi where it meets the other
## operand's lo, 0 for an inf or NaN there (inf times a lo of 0 would be NaN; the "h"
## segment carries it), so that A's "lch" against B's "clh" sums lo hi + hi lo + hi hi
## over the segments (the small products first)
<%def name="pack_block(name, K_MAJOR, PARTS='')">
inline void ${name}(int D, int K, __global const float *X, ulong x_offset, int ldx,
                    ulong stride_x, __global float *Y, ulong y_offset, int ldy,
                    ulong stride_y, int kx, int dy, int z, __local float (*tile)[33])
{
    const int tx = get_local_id(0), ty = get_local_id(1);
    const int d0 = dy * 32, k0 = kx * 32;
    X += x_offset + z * stride_x;
    Y += y_offset + z * stride_y;
    for (int i = ty; i < 32; i += 8) {
    % if K_MAJOR:
        const int d = d0 + i, k = k0 + tx;  // tile[d][k]
        tile[i][tx] = d < D && k < K ? X[(ulong)d * ldx + k] : 0.0f;
    % else:
        const int k = k0 + i, d = d0 + tx;  // tile[d][k], read along d
        tile[tx][i] = d < D && k < K ? X[(ulong)k * ldx + d] : 0.0f;
    % endif
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int i = ty; i < 32; i += 8) {
        const int d = d0 + i, k = k0 + tx;
    % if PARTS:
        const int width = ldy / ${len(PARTS)};
        if (d < D && k < width) {
            const float x = tile[i][tx];
            const float2 parts = tf32_parts(x);
        % for p, part in enumerate(PARTS):
            Y[(ulong)d * ldy + ${p} * width + k] = ${dict(h="parts.x", l="parts.y", c="isfinite(x) ? parts.x : 0.0f")[part]};
        % endfor
        }
    % else:
        if (d < D && k < ldy)
            Y[(ulong)d * ldy + k] = as_float(tf32(tile[i][tx]));
    % endif
    }
}
</%def>
<%
# the layouts of A and B a pair kernel packs: (name, K_MAJOR, A's PARTS, B's PARTS)
SOURCES = (("rows", True), ("columns", False))
A_PARTS, B_PARTS = SPLIT_PARTS if SPLIT_PARTS else ("", "")
%>
% for src, k_major in SOURCES:
${pack_block("pack_a_from_" + src, k_major, A_PARTS)}
${pack_block("pack_b_from_" + src, k_major, B_PARTS)}
% endfor
## A and B packed in one launch (a launch costs NVIDIA's driver about as much device time
## as packing a 768 x 768 operand): work-groups 0 .. tiles_a - 1 pack A's 32 x 32 blocks,
## the rest B's (kx of them along K, which both share); batch entry get_group_id(2) of each
## operand that has it (copies_a, copies_b: 1 for an operand shared by the batch)
% for a_src, _ in SOURCES:
% for b_src, _ in SOURCES:
__kernel __attribute__((reqd_work_group_size(32, 8, 1)))
void pack_${a_src}_${b_src}(
        int Da, int Ka, __global const float *XA, ulong xa_offset, int ldxa, ulong stride_xa,
        __global float *YA, ulong ya_offset, int ldya, ulong stride_ya,
        int Db, int Kb, __global const float *XB, ulong xb_offset, int ldxb, ulong stride_xb,
        __global float *YB, ulong yb_offset, int ldyb, ulong stride_yb,
        int kx, int tiles_a, int copies_a, int copies_b)
{
    __local float tile[32][33];
    const int g = get_group_id(0), z = get_group_id(2);
    if (g < tiles_a) {
        if (z < copies_a)
            pack_a_from_${a_src}(Da, Ka, XA, xa_offset, ldxa, stride_xa, YA, ya_offset, ldya,
                                 stride_ya, g % kx, g / kx, z, tile);
    } else if (z < copies_b) {
        const int h = g - tiles_a;
        pack_b_from_${b_src}(Db, Kb, XB, xb_offset, ldxb, stride_xb, YB, yb_offset, ldyb,
                             stride_yb, h % kx, h / kx, z, tile);
    }
}
% endfor
% endfor
% endif
