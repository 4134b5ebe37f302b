<%!
    # the epilogue activations come from the activation table, so the GEMM and
    # convolution epilogues and the pointwise layers cannot drift apart
    from dlprim.core.activation import epilogue_macros
%>\
// Shared by every template (Mako include of common.h).
// dtype is the element type the template was rendered for (float unless stated)
#ifndef DLPRIM_COMMON_H
#define DLPRIM_COMMON_H
${epilogue_macros()}
// Loads and stores by storage type T (LD_<T>(p, i), ST_<T>(p, i, v)): half storage is read
// as bits widened by half_to_float and written through vstore_half_rte (OpenCL 1.2 core,
// no cl_khr_fp16) and computed in float, so every device stores half and none needs half
// arithmetic
#define LD_float(p, i) ((p)[i])
#define ST_float(p, i, v) ((p)[i] = (v))
#define LD_half(p, i) half_to_float(((__global const ushort *)(p))[i])
#define ST_half(p, i, v) vstore_half_rte((v), (i), (p))
// A half's bits widened to float with integer operations, exactly (subnormals, infinities
// and NaN payloads included). vload_half does the same, but some drivers convert through
// an inline-asm block that holds every later load back until this one's value arrives;
// this leaves the loads of a loop free to overlap.
inline float half_to_float(ushort h)
{
    const uint em = h & 0x7fffu;
    const float f = em < 0x0400u ? (float)em * 0x1p-24f                      // 0, subnormal
                  : em < 0x7c00u ? as_float((em << 13) + (112u << 23))        // normal
                  : as_float((em << 13) | 0x7f800000u);                       // inf, NaN
    return as_float(as_uint(f) | ((uint)(h & 0x8000u) << 16));
}
// Prefetching kernels (the GEMM and convolution tiles) keep what they load as raw bits
// (REG_<T>: float, or ushort for half) and widen them only where they use them
// (WIDEN_<T>), so that every load of a tile is in flight together (with vload_half
// right after each load, the half filter gradient of a convolution ran 2x slower than
// float32).
#define REG_float float
#define REG_half ushort
#define RAW_float(p, i) ((p)[i])
#define RAW_half(p, i) (((__global const ushort *)(p))[i])
#define WIDEN_float(x) (x)
#define WIDEN_half(x) half_to_float(x)
inline float4 half_bits4(ushort4 u)
{
    return (float4)(half_to_float(u.s0), half_to_float(u.s1), half_to_float(u.s2),
                    half_to_float(u.s3));
}
// four halves at p (8-byte aligned) as a float4 in one load: vloada_half4 compiles to four
// 2-byte loads on some drivers, so the bits travel as a ushort4 and widen from registers
inline float4 load_half4_aligned(__global const half *p)
{
    return half_bits4(*(__global const ushort4 *)p);
}
inline void store_half4_aligned(float4 v, __global half *p)
{
    ushort4 bits;
    vstore_half4_rte(v, 0, (__private half *)&bits);
    *(__global ushort4 *)p = bits;
}
#endif
