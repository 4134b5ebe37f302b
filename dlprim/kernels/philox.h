// Counter-based Philox-4x32-10 (Salmon et al., "Parallel random numbers: as easy as
// 1, 2, 3", SC'11): one 128-bit counter and a 64-bit key give four random words. Shared
// by random.cl (random tensors) and attention.cl (dropout of the attention weights).
#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

inline uint4 philox4x32_10(uint4 c, uint2 k)
{
    for (int r = 0; r < 10; r++) {
        if (r > 0) {
            k.x += PHILOX_W0;
            k.y += PHILOX_W1;
        }
        uint hi0 = MUL_HI_U32(PHILOX_M0, c.x), lo0 = PHILOX_M0 * c.x;
        uint hi1 = MUL_HI_U32(PHILOX_M1, c.z), lo1 = PHILOX_M1 * c.z;
        c = (uint4)(hi1 ^ c.y ^ k.x, lo1, hi0 ^ c.w ^ k.y, lo0);
    }
    return c;
}
