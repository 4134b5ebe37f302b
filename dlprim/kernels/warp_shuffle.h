## A warp's lanes exchanging values by shuffles (NVIDIA's PTX `shfl.sync.bfly`; every lane
## of the warp takes part): the tensor-core kernels' fragment rows (mma.h), the few-rows
## products' and the decoder blocks' sums over a warp.
#ifndef DLPRIM_WARP_SHUFFLE_H
#define DLPRIM_WARP_SHUFFLE_H
// the value of lane (lane ^ m) of the warp (m < 32)
inline float lanes_xor(float x, int m)
{
    float y;
    asm volatile("shfl.sync.bfly.b32 %0, %1, %2, 0x1f, 0xffffffff;" : "=f"(y) : "f"(x), "r"(m));
    return y;
}
// the sum and the maximum over the warp's 32 lanes, in every lane
inline float warp_sum(float x)
{
    for (int m = 16; m > 0; m >>= 1)
        x += lanes_xor(x, m);
    return x;
}
inline float warp_max(float x)
{
    for (int m = 16; m > 0; m >>= 1)
        x = fmax(x, lanes_xor(x, m));
    return x;
}
#endif
