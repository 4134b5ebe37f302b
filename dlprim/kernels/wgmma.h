## Hopper's warpgroup products (wgmma, sm_90a) through inline PTX, for gemm_wgmma.cl and
## attention_mma.cl. A warpgroup (4 warps, 128 work-items) multiplies a 64 x N block of A
## by an N-wide block of B, read by the tensor cores straight from local memory through
## 64-bit matrix descriptors (A may come from registers instead: each warp its 16 rows as
## mma.sync's A fragment), into float accumulators held across the warpgroup's registers.
## NVIDIA's OpenCL compiler targets sm_90, whose assembler refuses wgmma: every sm_90a
## instruction is written behind the comment marker SM90A ("//SM90A "), which the first
## build carries as a comment; program.py then takes the PTX, removes the marker, retargets
## it to sm_90a and builds that (program.SM90A).

// Local-memory layouts the descriptors name (offsets in 16-bit values). The tensor cores
// read 16-byte chunks; each layout XORs a chunk's index with address bits of its row, as
// the descriptor's swizzle mode says, so that the 8 rows of one read fall in distinct
// banks. This is a function of the absolute address: each stage starts 1024-byte aligned.
// K-major (rows of K, ROW = 64 or 128 bytes each, V values a 16-byte chunk; swizzled
// as wide as a row): row d of the tile at byte ROW d; chunk c = k / V of it XOR the
// address bits 7 and up of the row (64 bytes: (d / 2) % 4; 128 bytes: d % 8). Eight rows
// form an atom.
inline int wg_k_major_at(int d, int k, int V, int ROW)
{
    const int chunks = ROW / 16;
    return chunks * V * d + ((((k / V) ^ ((d * ROW) >> 7)) & (chunks - 1)) * V) + k % V;
}
// MN-major (rows of M or N, 16-bit values only, 128-byte swizzle): atoms of 8 rows of K by 64 values of M or
// N, 1024 bytes, row k % 8 at byte 128 (k % 8), chunk c = (d % 64) / 8 XOR k % 8; the
// atoms of one 64 run along K first (tk / 8 of them), then along M or N.
inline int wg_mn_major_at(int d, int k, int tk)
{
    return ((d >> 6) * (tk >> 3) + (k >> 3)) * 512 + (k & 7) * 64
           + (((((d >> 3) & 7) ^ (k & 7))) << 3) + (d & 7);
}

// the descriptor of a tile at local address p (bytes): leading and stride byte offsets,
// swizzle mode (1: 128-byte, 2: 64-byte)
inline ulong wg_descriptor(uint p, uint lead, uint stride, uint swizzle)
{
    return (ulong)((p >> 4) & 0x3fff) | ((ulong)((lead >> 4) & 0x3fff) << 16)
           | ((ulong)((stride >> 4) & 0x3fff) << 32) | ((ulong)swizzle << 62);
}

% if context.get("MMA_EMULATE", False):
// The products in OpenCL C (tests), reading local memory as the descriptors say, so that
// the kernel's layouts, descriptors and stages are checked on any device. A descriptor's
// address is then an offset into the work-group's one local array smem (a CPU runtime's
// local addresses do not fit its 18 bits).
#define WG_ADDRESS(p) ((uint)((__local const uchar *)(p) - (__local const uchar *)smem))
// the value of element (d, k) of an operand (d: its row of M or N) at descriptor desc,
// K-major or not, of kind 0 TF32 (float storage), 1 FP16, 2 BF16
inline float wg_operand(__local const uchar *smem, ulong desc, int d, int k, int k_major,
                        int kind)
{
    const uint start = (uint)(desc & 0x3fff) << 4, lead = (uint)((desc >> 16) & 0x3fff) << 4;
    const uint stride = (uint)((desc >> 32) & 0x3fff) << 4;
    const int swizzle = (int)(desc >> 62), size = kind ? 2 : 4;
    const uint width = swizzle == 1 ? 128 : swizzle == 2 ? 64 : swizzle == 3 ? 32 : 16;
    uint at;
    if (k_major)  // atoms of 8 rows of width bytes of K, stride apart along d
        at = start + (d / 8) * stride + (d % 8) * width + k * size;
    else  // atoms of 8 rows of K, each width bytes of d: lead apart along d, stride along K
        at = start + (d / (width / size)) * lead + (k / 8) * stride + (k % 8) * width
             + (d % (width / size)) * size;
    if (swizzle)  // the 16-byte chunk within width bytes XOR the row within 8 of them
        at ^= ((at >> 7) & (width / 16 - 1)) << 4;
    if (kind == 0)  // the tensor cores read the top 19 bits
        return as_float(*(__local const uint *)(smem + at) & 0xffffe000u);
    const uint h = *(__local const ushort *)(smem + at);
    return kind == 1 ? half_value(h) : as_float(h << 16);
}
// acc (n / 2 floats: wgmma's fragment layout) += A (64 x kstep at da) B (n x kstep at db)
// for the work-item at lane of warp w of its warpgroup
inline void wgmma_emulated(float *acc, int n, int kstep, __local const uchar *smem, ulong da,
                           ulong db, int a_k_major, int b_k_major, int kind, int lane, int w)
{
    const int g = lane >> 2, t = lane & 3;
    for (int i = 0; i < n / 2; i++) {
        const int m = 16 * w + g + 8 * ((i >> 1) & 1), c = 8 * (i >> 2) + 2 * t + (i & 1);
        float sum = 0.0f;
        for (int k = 0; k < kstep; k++)
            sum = mad(wg_operand(smem, da, m, k, a_k_major, kind),
                      wg_operand(smem, db, c, k, b_k_major, kind), sum);
        acc[i] += sum;
    }
}
// the same with A from registers (a0..a3: the warp's 16 rows by 16 of K as mma.sync's A
// fragment, mma.h), exchanged through the warp's scratch s (4 words a lane), so every
// work-item must reach it
inline void wgmma_emulated_a(float *acc, int n, uint a0, uint a1, uint a2, uint a3,
                             __local const uchar *smem, ulong db, int b_k_major, int kind,
                             __local uint *s, int lane)
{
    __local uint *mine = s + 4 * lane;
    mine[0] = a0; mine[1] = a1; mine[2] = a2; mine[3] = a3;
    barrier(CLK_LOCAL_MEM_FENCE);
    const int g = lane >> 2, t = lane & 3;
    for (int i = 0; i < n / 2; i++) {
        const int m = g + 8 * ((i >> 1) & 1), c = 8 * (i >> 2) + 2 * t + (i & 1);
        float sum = 0.0f;
        for (int k = 0; k < 16; k++) {
            const uint w = s[4 * (4 * (m % 8) + (k % 8) / 2) + (m >= 8) + 2 * (k >= 8)];
            const uint h = (w >> (16 * (k % 2))) & 0xffffu;
            sum = mad(kind == 1 ? half_value(h) : as_float(h << 16),
                      wg_operand(smem, db, c, k, b_k_major, kind), sum);
        }
        acc[i] += sum;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
}
#define WG_FENCE_PROXY()
#define WG_FENCE()
#define WG_COMMIT()
#define WG_WAIT(N)
% else:
#define WG_ADDRESS(p) ((uint)(ulong)(p))  // a __local pointer's integer value: its .shared address
// local stores of this work-item (its cp.async copies included) made visible to the
// tensor cores' reads, which go through the async proxy; a barrier must follow
#define WG_FENCE_PROXY() asm volatile("//SM90A fence.proxy.async.shared::cta;" ::: "memory")
// orders the accumulators' registers before the warpgroup's next products
#define WG_FENCE() asm volatile("//SM90A wgmma.fence.sync.aligned;" ::: "memory")
#define WG_COMMIT() asm volatile("//SM90A wgmma.commit_group.sync.aligned;" ::: "memory")
#define WG_WAIT_(N) asm volatile("//SM90A wgmma.wait_group.sync.aligned " #N ";" ::: "memory")
#define WG_WAIT(N) WG_WAIT_(N)
% endif
