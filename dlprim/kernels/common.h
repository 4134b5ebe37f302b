<%!
    # the epilogue activations come from the activation table, so the GEMM and
    # convolution epilogues and the pointwise layers cannot drift apart
    from dlprim.core.activation import epilogue_macros
%>\
<%
    # CPU runtimes convert half in software, element by element: a pass over 4M halves
    # took 3.6 ms through vload_half and 5.2 through vstore_half_rte on PoCL (2-core EPYC;
    # a float copy 0.4). There the bits are decoded and rounded in integer arithmetic,
    # which vectorises (0.4 and 1.1 ms); half tensors are __global there.
    INTEGER_HALF = getattr(context.get("facts"), "is_cpu", False)
    IS_POCL = getattr(context.get("facts"), "vendor_id", "") == "pocl"
    # double needs cl_khr_fp64 enabled, and only programs that use it say so: a parameter
    # of the template (a storage type, a code string) names it
    USES_DOUBLE = any("double" in repr(v) for k, v in context.kwargs.items() if k != "facts")
    # the narrow types' codecs (narrow_float.h: float8, float4, int4 ...) only in programs
    # whose parameters (a conversion expression) call them
    USES_NARROW = any("dlp_nf_" in repr(v) for k, v in context.kwargs.items() if k != "facts")
%>\
% if USES_DOUBLE and not getattr(context.get("facts"), "fp64", True):
#error "float64 is not supported on ${context.get("facts").name} (no cl_khr_fp64); use float32"
% elif USES_DOUBLE:
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
% endif
// Shared by every template (Mako include of common.h).
// dtype is the element type the template was rendered for (float unless stated)
#ifndef DLPRIM_COMMON_H
#define DLPRIM_COMMON_H
${epilogue_macros()}
// Loads and stores by storage type T (LD_<T>(p, i), ST_<T>(p, i, v)): half storage is read
// and written through vload_half / vstore_half_rte (OpenCL 1.2 core, no cl_khr_fp16) and
// computed in float, so every device stores half and none needs half arithmetic
#define LD_float(p, i) ((p)[i])
#define ST_float(p, i, v) ((p)[i] = (v))
// the other storage types load and store plainly (templates may use LD_<T> for any T)
#define LD_double LD_float
#define ST_double ST_float
#define LD_long LD_float
#define ST_long ST_float
#define LD_int LD_float
#define ST_int ST_float
#define LD_short LD_float
#define ST_short ST_float
#define LD_char LD_float
#define ST_char ST_float
#define LD_uchar LD_float
#define ST_uchar ST_float
#define LD_ushort LD_float
#define ST_ushort ST_float
#define LD_uint LD_float
#define ST_uint ST_float
#define LD_ulong LD_float
#define ST_ulong ST_float
// (ST4_half(v, p): four values at p, 2-byte aligned); on CPUs the bits are decoded and
// rounded in integer arithmetic instead (INTEGER_HALF above)
% if INTEGER_HALF:
#define LD_half(p, i) half_bits_value(((__global const ushort *)(p))[i])
#define ST_half(p, i, v) (((__global ushort *)(p))[i] = half_bits_rte(v))
#define ST4_half(v, p) vstore4(half_bits4_rte(v), 0, (__global ushort *)(p))
% else:
#define LD_half(p, i) vload_half((i), (p))
#define ST_half(p, i, v) vstore_half_rte((float)(v), (i), (p))
#define ST4_half(v, p) vstore_half4_rte((v), 0, (p))
% endif
// The CPU kernels' inner loops multiply-add with FMA(a, b, c) (a * b + c, one rounding
// where the hardware fuses) and move float vectors of global memory with
// VLOAD_GLOBAL(n, i, p) and VSTORE_GLOBAL(n, v, i, p) (vloadn / vstoren; other element
// types through VLOAD_GLOBAL_OF(T, n, i, p): char and ushort). PoCL links its
// builtins from a library built for one CPU variant, and LLVM inlines none of them into
// kernels built for a CPU that lacks one of the variant's features (pip's PoCL 3.0 on an
// Emerald Rapids Xeon: kernels for icelake-client, the library for skylake-avx512 with
// CLWB): each fma() and vload8() is then a call that saves every vector register around
// it. There the expression, which the compiler contracts into an inline fused
// multiply-add, and a vector read through a pointer aligned as floats are (any address,
// one load): the CPU GEMM 15 -> 180+ GFLOP/s, the few-rows product 17-23 -> 25-29 GB/s
// (docs/benchmarks.md, "PoCL's builtins out of line").
// MUL_HI_U32(a, b): the high 32 bits of uint a * b (mul_hi), the same way; and
// DLP_DIV_U32(x, n): x / n for uint x < 2^31 by n's precomputed multiplier n_m and shift
// n_l (Granlund-Montgomery, core/pointwise.py's divisor arguments), the index arithmetic
// of the pointwise, copy and batch-norm kernels: a call an element through PoCL before.
#define DLP_DIV_U32(x, n) ((MUL_HI_U32((x), n##_m) + (x)) >> n##_l)
% if IS_POCL:
#define MUL_HI_U32(a, b) ((uint)(((ulong)(uint)(a) * (ulong)(uint)(b)) >> 32))
% for t, size in (("float", 4), ("char", 1), ("ushort", 2)):
%   for n in (2, 4, 8, 16):
typedef ${t}${n} __attribute__((aligned(${size}))) ${t}${n}_any;
%   endfor
% endfor
#define FMA(a, b, c) ((a) * (b) + (c))
#define VLOAD_GLOBAL_OF(T, n, i, p) (*(__global const T##n##_any *)((p) + (ulong)(i) * n))
#define VSTORE_GLOBAL(n, v, i, p) (*(__global float##n##_any *)((p) + (ulong)(i) * n) = (v))
% else:
#define MUL_HI_U32(a, b) mul_hi((uint)(a), (uint)(b))
#define FMA(a, b, c) fma(a, b, c)
#define VLOAD_GLOBAL_OF(T, n, i, p) vload##n(i, p)
#define VSTORE_GLOBAL(n, v, i, p) vstore##n(v, i, p)
% endif
#define VLOAD_GLOBAL(n, i, p) VLOAD_GLOBAL_OF(float, n, i, p)
// Prefetching kernels (the GEMM and convolution tiles) keep what they load as raw bits
// (REG_<T>: float, or ushort for half) and widen it only where they use it (WIDEN_<T>):
// some drivers convert half through an inline-asm block right after each load, which
// holds the next load back until the value arrives; loading bits first keeps every load
// of a tile in flight together (the half filter gradient of a convolution ran 2x slower
// than float32 before).
#define REG_float float
#define REG_half ushort
#define RAW_float(p, i) ((p)[i])
#define RAW_half(p, i) (((__global const ushort *)(p))[i])
#define WIDEN_float(x) (x)
#define WIDEN_half(x) half_bits(x)
// bfloat16: float32's top 16 bits, so widening is a shift and storing rounds the low 16
// bits off (to nearest even; a NaN stays a NaN); any device, no extension
typedef ushort bfloat16;
#define REG_bfloat16 ushort
#define RAW_bfloat16(p, i) ((p)[i])
#define WIDEN_bfloat16(x) as_float((uint)(x) << 16)
#define LD_bfloat16(p, i) WIDEN_bfloat16((p)[i])
#define ST_bfloat16(p, i, v) ((p)[i] = bfloat16_bits(v))
#define ST4_bfloat16(v, p) vstore4((ushort4)(bfloat16_bits((v).x), bfloat16_bits((v).y), \
                                             bfloat16_bits((v).z), bfloat16_bits((v).w)), 0, (p))
#define ST4_float(v, p) vstore4((v), 0, (p))
inline ushort bfloat16_bits(float v)
{
    const uint u = as_uint(v);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (ushort)((u >> 16) | 0x40u);  // NaN: quiet, and kept NaN by the truncation
    return (ushort)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
inline float4 bfloat16_bits4_value(ushort4 u)
{
    return (float4)(WIDEN_bfloat16(u.s0), WIDEN_bfloat16(u.s1), WIDEN_bfloat16(u.s2),
                    WIDEN_bfloat16(u.s3));
}
inline ushort4 bfloat16_bits4(float4 v)
{
    return (ushort4)(bfloat16_bits(v.s0), bfloat16_bits(v.s1), bfloat16_bits(v.s2),
                     bfloat16_bits(v.s3));
}
// eight half values at p (as stored, 2-byte aligned): vload_half8 is faster than any
// integer decode on vectors here, Intel's CPU runtime converting in vector instructions
// (a GPT-2 decode step's float16 GEMVs 28.1 -> 20.2 ms against element by element on the
// 2-core EPYC) and pip's PoCL 3.0 (LLVM 14) in its library code at twice the speed of
// the integer decode on vectors (the same step 54-56 -> 26-31 ms)
inline float8 load_half8(__global const half *p)
{
    return vload_half8(0, p);
}
// the value of half bits u, decoded in integer arithmetic (exact; NaN stays NaN)
inline float half_bits_value(ushort u)
{
    const uint sign = (uint)(u & 0x8000u) << 16, e = (u >> 10) & 31u, m = u & 1023u;
    const uint bits = e == 0u ? as_uint((float)m * 5.9604644775390625e-8f)  // m * 2^-24
                    : e == 31u ? 0x7f800000u | (m << 13)                      // inf, NaN
                    : ((e + 112u) << 23) | (m << 13);                         // rebiased
    return as_float(bits | sign);
}
inline float half_bits(ushort u)
{
% if INTEGER_HALF:
    return half_bits_value(u);
% else:
    return vload_half(0, (const __private half *)&u);
% endif
}
inline float4 half_bits4(ushort4 u)
{
% if INTEGER_HALF:
    return (float4)(half_bits_value(u.s0), half_bits_value(u.s1), half_bits_value(u.s2),
                    half_bits_value(u.s3));
% else:
    return vload_half4(0, (const __private half *)&u);
% endif
}
// four halves at p (8-byte aligned) as a float4 in one load: vloada_half4 compiles to four
// 2-byte loads on some drivers, so the bits travel as a ushort4 and widen from registers
inline float4 load_half4_aligned(__global const half *p)
{
    return half_bits4(*(__global const ushort4 *)p);
}
// float -> half bits rounded to nearest even (overflow to infinity, NaN stays NaN) in
// integer arithmetic: vstore_half into a private variable read back as ushort puns types,
// which PoCL's compiler reordered (the stores wrote zeros)
inline ushort half_bits_rte(float f)
{
    const uint u = as_uint(f), a = u & 0x7fffffffu;
    const ushort sign = (ushort)((u >> 16) & 0x8000u);
    if (a > 0x7f800000u)
        return sign | (ushort)0x7e00u;                 // NaN, quiet
    if (a >= 0x477ff000u)
        return sign | (ushort)0x7c00u;                 // 65520 and up round to infinity
    if (a >= 0x38800000u) {                            // a normal half: rebias the exponent,
        const uint r = a - 0x38000000u;                // round off 13 mantissa bits
        return sign | (ushort)((r + 0x0fffu + ((r >> 13) & 1u)) >> 13);
    }
    // a subnormal half or zero: f / 2^-24 = m >> s, m the 24-bit significand
    const uint s = 126u - (a >> 23), m = (a & 0x7fffffu) | 0x800000u;
    if (s > 24u)
        return sign;
    return sign | (ushort)((m + (1u << (s - 1u)) - 1u + ((m >> s) & 1u)) >> s);
}
inline ushort4 half_bits4_rte(float4 v)
{
    return (ushort4)(half_bits_rte(v.s0), half_bits_rte(v.s1), half_bits_rte(v.s2),
                     half_bits_rte(v.s3));
}
inline void store_half4_aligned(float4 v, __global half *p)
{
    *(__global ushort4 *)p = half_bits4_rte(v);
}
% if USES_NARROW:
<%include file="narrow_float.h"/>
% endif
#endif
