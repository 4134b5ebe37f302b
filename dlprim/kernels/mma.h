## NVIDIA tensor-core products through inline PTX, shared by gemm_mma.cl and conv_gemm.cl.
## A warp multiplies fragments held in registers: lane = 4 g + t owns rows g and g + 8 of
## A, column g of B, and of C rows g, g + 8 and columns 2t, 2t + 1 (c[0..3]: (g, 2t),
## (g, 2t + 1), (g + 8, 2t), (g + 8, 2t + 1)); c, a float[4], is added to in place.
## MMA_EMULATE (tests): the products in OpenCL C, from the layouts below, so that a
## kernel's fragment logic runs and is checked on any device. The warp's lanes exchange
## their fragments through local memory (mma_scratch, 6 words a lane, declared by the
## kernel), so every work-item must reach every product, as mma.sync requires anyway.
// Where lane l points ldmatrix (offsets in 16-bit values) to load the fragments of one
// FP16/BF16 product from a tile of stride ld: rows of K ([d][k]) load plain, K-major tiles
// ([k][d]) with .trans. A: rows m0 .. m0 + 15 by k0 .. k0 + 15, into a0 .. a3 (matrices:
// rows 0-7 / 8-15 by k 0-7, then by k 8-15).
inline int a_fragment_at(int lane, int m0, int k0, int ld, int k_major)
{
    const int d = m0 + 8 * ((lane >> 3) & 1), k = k0 + 8 * (lane >> 4);
    return k_major ? (k + (lane & 7)) * ld + d : (d + (lane & 7)) * ld + k;
}
// B: columns n0 .. n0 + 15 by k0 .. k0 + 15, into b0, b1 of the block of 8 from n0, then
// b0, b1 of the block from n0 + 8
inline int b_fragment_at(int lane, int n0, int k0, int ld, int k_major)
{
    const int d = n0 + 8 * (lane >> 4), k = k0 + 8 * ((lane >> 3) & 1);
    return k_major ? (k + (lane & 7)) * ld + d : (d + (lane & 7)) * ld + k;
}

% if context.get("MMA_EMULATE", False):
// the value of half bits h, decoded exactly in integers
inline float half_value(uint h)
{
    const int e = (h >> 10) & 31, m = h & 1023;
    const float v = e == 0 ? ldexp((float)m, -24)
                  : e == 31 ? (m ? NAN : INFINITY) : ldexp((float)(m | 1024), e - 25);
    return (h & 0x8000u) ? -v : v;
}

// one product of the warp whose lanes' fragments start at s (6 words a lane); kind 0:
// TF32 m16n8k8, 1: FP16 m16n8k16, 2: BF16 m16n8k16
inline void mma_emulated(float *c, uint a0, uint a1, uint a2, uint a3, uint b0, uint b1,
                         __local uint *s, int lane, int kind)
{
    __local uint *mine = s + 6 * lane;
    mine[0] = a0; mine[1] = a1; mine[2] = a2; mine[3] = a3; mine[4] = b0; mine[5] = b1;
    barrier(CLK_LOCAL_MEM_FENCE);
    const int g = lane >> 2, t = lane & 3;
    for (int e = 0; e < 4; e++) {
        const int row = g + 8 * (e >> 1), col = 2 * t + (e & 1);
        float sum = 0.0f;
        for (int k = 0; k < (kind ? 16 : 8); k++) {
            float x, y;
            if (kind) {  // a pair of 16-bit values per word, the lower k in the low bits
                const uint wa = s[6 * (4 * (row % 8) + (k % 8) / 2) + (row >= 8) + 2 * (k >= 8)];
                const uint wb = s[6 * (4 * col + (k % 8) / 2) + 4 + (k >= 8)];
                const uint ha = (wa >> (16 * (k % 2))) & 0xffffu, hb = (wb >> (16 * (k % 2))) & 0xffffu;
                x = kind == 1 ? half_value(ha) : as_float(ha << 16);
                y = kind == 1 ? half_value(hb) : as_float(hb << 16);
            } else {
                x = as_float(s[6 * (4 * (row % 8) + k % 4) + (row >= 8) + 2 * (k >= 4)]);
                y = as_float(s[6 * (4 * col + k % 4) + 4 + (k >= 4)]);
            }
            sum = mad(x, y, sum);
        }
        c[e] += sum;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
}
#define MMA_TF32(c, ...) mma_emulated(c, __VA_ARGS__, mma_scratch + 192 * warp, lane, 0)
#define MMA_F16(c, ...) mma_emulated(c, __VA_ARGS__, mma_scratch + 192 * warp, lane, 1)
#define MMA_BF16(c, ...) mma_emulated(c, __VA_ARGS__, mma_scratch + 192 * warp, lane, 2)

// ldmatrix .x4 as the warp runs it, for the fragments of one product (a_fragment_at,
// b_fragment_at above: lane l points at row l % 8 of matrix l / 8): lane 4 g + t receives
// in r[m] values 2t, 2t + 1 of row g of matrix m (trans: value g of rows 2t and 2t + 1),
// the lower one in the low bits. Each lane finds the rows the others point at from the
// same address functions, so the emulation needs no exchange and no barriers (which: 0
// A, 1 B).
#define FRAGMENT_AT(which, l, d0, k0, ld, k_major) \
    ((which) ? b_fragment_at(l, d0, k0, ld, k_major) : a_fragment_at(l, d0, k0, ld, k_major))
inline void fragments_emulated(uint *r, __local const ushort *base, int which, int lane,
                               int d0, int k0, int ld, int k_major)
{
    const int g = lane >> 2, t = lane & 3;
    for (int m = 0; m < 4; m++) {
        uint lo, hi;
        if (k_major) {
            lo = base[FRAGMENT_AT(which, 8 * m + 2 * t, d0, k0, ld, 1) + g];
            hi = base[FRAGMENT_AT(which, 8 * m + 2 * t + 1, d0, k0, ld, 1) + g];
        } else {
            const int at = FRAGMENT_AT(which, 8 * m + g, d0, k0, ld, 0);
            lo = base[at + 2 * t];
            hi = base[at + 2 * t + 1];
        }
        r[m] = lo | (hi << 16);
    }
}
#define A_FRAGMENTS(r, base, m0, k0, ld, K_MAJOR) \
    fragments_emulated(r, base, 0, lane, m0, k0, ld, K_MAJOR)
#define B_FRAGMENTS(r, base, n0, k0, ld, K_MAJOR) \
    fragments_emulated(r, base, 1, lane, n0, k0, ld, K_MAJOR)
// cp.async as one work-item runs it: the copy done at once, so committing and waiting are
// nothing (the barrier that publishes a tile orders it as it orders any local store)
inline void copy_async_emulated(__local ushort *dst, __global const ushort *src, int bytes)
{
    for (int i = 0; i < 8; i++)
        dst[i] = 2 * i < bytes ? src[i] : 0;
}
#define COPY_ASYNC(dst, src, bytes) copy_async_emulated(dst, src, bytes)
#define COPY_ASYNC_COMMIT()
#define COPY_ASYNC_WAIT(N)
// TF32: the bits of x with its last 13 of mantissa rounded off (to nearest, ties away)
inline uint tf32(float x)
{
    return (as_uint(x) + 0x1000u) & 0xffffe000u;
}
// the value of lane (lane ^ m) of the warp (m < 32), for the attention kernels' row
// reductions across the four lanes of a fragment row: through the warp's scratch, so
// every work-item must reach it
inline float lanes_xor_emulated(float x, int m, __local uint *s, int lane)
{
    s[lane] = as_uint(x);
    barrier(CLK_LOCAL_MEM_FENCE);
    const float y = as_float(s[lane ^ m]);
    barrier(CLK_LOCAL_MEM_FENCE);
    return y;
}
#define LANES_XOR(x, m) lanes_xor_emulated(x, m, mma_scratch + 192 * warp, lane)
// two floats as one word of 16-bit operands, lo in the low half, rounded to nearest even
#define PACK_F16(lo, hi) ((uint)half_bits_rte(lo) | ((uint)half_bits_rte(hi) << 16))
#define PACK_BF16(lo, hi) ((uint)bfloat16_bits(lo) | ((uint)bfloat16_bits(hi) << 16))
% else:
// the three products' operand lists: D = c (4 floats), A = a0..a3, B = b0, b1, C = c
#define MMA_REGISTERS "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};"
#define MMA_OPERANDS(c, a0, a1, a2, a3, b0, b1) \
    : "=f"((c)[0]), "=f"((c)[1]), "=f"((c)[2]), "=f"((c)[3]) \
    : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1), \
      "f"((c)[0]), "f"((c)[1]), "f"((c)[2]), "f"((c)[3])
// c += A (16x8, TF32: a0 (g, t), a1 (g + 8, t), a2 (g, t + 4), a3 (g + 8, t + 4))
//      * B (8x8: b0 (t, g), b1 (t + 4, g)), FP32 accumulation
#define MMA_TF32(c, a0, a1, a2, a3, b0, b1) \
    asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 " MMA_REGISTERS \
        MMA_OPERANDS(c, a0, a1, a2, a3, b0, b1))
// c += A (16x16, FP16 pairs: a0 row g, a1 row g + 8 at slots 2t, 2t + 1; a2, a3 the same
//      rows at slots 2t + 8, 2t + 9) * B (16x8: b0 slots 2t, 2t + 1, b1 slots 2t + 8,
//      2t + 9 of column g), FP32 accumulation
#define MMA_F16(c, a0, a1, a2, a3, b0, b1) \
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 " MMA_REGISTERS \
        MMA_OPERANDS(c, a0, a1, a2, a3, b0, b1))
// the same with BF16 operands (bfloat16 bits in the same places)
#define MMA_BF16(c, a0, a1, a2, a3, b0, b1) \
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 " MMA_REGISTERS \
        MMA_OPERANDS(c, a0, a1, a2, a3, b0, b1))

// r[0..3] = four 8x8 matrices of 16-bit values from local memory (ldmatrix .x4; the
// layout of fragments_emulated above): lane l gives the address base + at of row l % 8 of
// matrix l / 8, 16-byte aligned. The "memory" clobber keeps it after the barrier that
// publishes the tile; a __local pointer's integer value is its .shared address.
#define LDMATRIX(r, base, at, SUFFIX) \
    asm volatile("ldmatrix.sync.aligned.m8n8.x4" SUFFIX ".shared.b16 {%0, %1, %2, %3}, [%4];" \
                 : "=r"((r)[0]), "=r"((r)[1]), "=r"((r)[2]), "=r"((r)[3]) \
                 : "r"((uint)(ulong)((base) + (at))) : "memory")
// the fragments of one product (a_fragment_at, b_fragment_at), K_MAJOR a literal 0 or
// 1: K-major tiles load with .trans
#define LDMATRIX_SUFFIX_0 ""
#define LDMATRIX_SUFFIX_1 ".trans"
#define A_FRAGMENTS(r, base, m0, k0, ld, K_MAJOR) \
    LDMATRIX(r, base, a_fragment_at(lane, m0, k0, ld, K_MAJOR), LDMATRIX_SUFFIX_##K_MAJOR)
#define B_FRAGMENTS(r, base, n0, k0, ld, K_MAJOR) \
    LDMATRIX(r, base, b_fragment_at(lane, n0, k0, ld, K_MAJOR), LDMATRIX_SUFFIX_##K_MAJOR)

// 16 bytes global -> local without registers (cp.async, sm_80 on; .cg: through L2 only,
// as each tile is read once per work-group), the last 16 - bytes of them zero-filled so
// that a tile's copies pad the matrix's edges with zeros; src must stay a valid address
// even where bytes is 0. The copies issued since the last COMMIT form a group;
// WAIT(N) waits until at most N of this work-item's groups are still in flight.
#define COPY_ASYNC(dst, src, bytes) \
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" \
                 :: "r"((uint)(ulong)(dst)), "l"(src), "r"(bytes) : "memory")
#define COPY_ASYNC_COMMIT() asm volatile("cp.async.commit_group;" ::: "memory")
#define COPY_ASYNC_WAIT_(N) asm volatile("cp.async.wait_group " #N ";" ::: "memory")
#define COPY_ASYNC_WAIT(N) COPY_ASYNC_WAIT_(N)

// x rounded to TF32 (to nearest, ties away), as the products' operands
inline uint tf32(float x)
{
    uint r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
    return r;
}
<%include file="warp_shuffle.h"/>
#define LANES_XOR(x, m) lanes_xor(x, m)
// two floats as one word of 16-bit operands, lo in the low half, rounded to nearest even
// (cvt.rn.f16x2 puts its first source in the upper half)
inline uint pack_f16(float lo, float hi)
{
    uint r;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}
inline uint pack_bf16(float lo, float hi)
{
    uint r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}
#define PACK_F16(lo, hi) pack_f16(lo, hi)
#define PACK_BF16(lo, hi) pack_bf16(lo, hi)
% endif
