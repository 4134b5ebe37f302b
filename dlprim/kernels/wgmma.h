## Hopper's warpgroup products (wgmma, sm_90a) through inline PTX, for gemm_wgmma.cl.
## A warpgroup (4 warps, 128 work-items) multiplies a 64 x N block of A by an N-wide block
## of B, both read by the tensor cores straight from local memory through 64-bit matrix
## descriptors, into float accumulators held across the warpgroup's registers.
## NVIDIA's OpenCL compiler targets sm_90, whose assembler refuses wgmma: every sm_90a
## instruction is written behind the comment marker SM90A ("//SM90A "), which the first
## build carries as a comment; program.py then takes the PTX, removes the marker, retargets
## it to sm_90a and builds that (program.SM90A).

// Local-memory layouts the descriptors name (offsets in 16-bit values). The tensor cores
// read 16-byte chunks; each layout XORs a chunk's index with address bits of its row, as
// the descriptor's swizzle mode says, so that the 8 rows of one read fall in distinct
// banks. This is a function of the absolute address: each stage starts 1024-byte aligned.
// K-major (rows of K, 64 bytes each: 32 16-bit values or 16 floats, V values a chunk;
// 64-byte swizzle): row d of the tile at byte 64 d; chunk c = k / V of it XOR (d / 2) % 4.
// Eight rows (512 bytes) form an atom.
inline int wg_k_major_at(int d, int k, int V)
{
    return 4 * V * d + ((((k / V) ^ (d >> 1)) & 3) * V) + k % V;
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

// local stores of this work-item (its cp.async copies included) made visible to the
// tensor cores' reads, which go through the async proxy; a barrier must follow
#define WG_FENCE_PROXY() asm volatile("//SM90A fence.proxy.async.shared::cta;" ::: "memory")
// orders the accumulators' registers before the warpgroup's next products
#define WG_FENCE() asm volatile("//SM90A wgmma.fence.sync.aligned;" ::: "memory")
#define WG_COMMIT() asm volatile("//SM90A wgmma.commit_group.sync.aligned;" ::: "memory")
#define WG_WAIT_(N) asm volatile("//SM90A wgmma.wait_group.sync.aligned " #N ";" ::: "memory")
#define WG_WAIT(N) WG_WAIT_(N)
