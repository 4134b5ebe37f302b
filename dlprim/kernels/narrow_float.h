// The narrow storage types (dlprim/dtypes.py, NARROW_TYPES): one code per byte, decoded
// by dlp_nf_<codec>_value(code) and encoded by dlp_nf_<codec>_bits(value, ...), all in
// integer arithmetic on float32 bits (exact on every device; no denormal flushing).
// Included by common.h into programs whose parameters name a dlp_nf_ function.
#ifndef DLPRIM_NARROW_FLOAT_H
#define DLPRIM_NARROW_FLOAT_H
// ----- decoding: a magnitude code of E exponent and M mantissa bits, bias B, as float
inline float dlp_nf_decode(uint c, uint M, int B)
{
    const uint e = c >> M, m = c & ((1u << M) - 1u);
    if (e == 0u)  // subnormal: m * 2^(1 - B - M), a normal float32 for every format here
        return (float)m * as_float((uint)(128 - B - (int)M) << 23);
    return as_float(((e + 127u - (uint)B) << 23) | (m << (23u - M)));
}
inline float dlp_nf_signed(uint sign, float v)
{
    return as_float(as_uint(v) | (sign << 31));
}
#define DLP_NF_NAN(sign) as_float(((uint)(sign) << 31) | 0x7fc00000u)
inline float dlp_nf_e4m3fn_value(uchar b)  // S.EEEE.MMM, bias 7; S.1111.111 is NaN, no inf
{
    const uint s = b >> 7, c = b & 0x7fu;
    return c == 0x7fu ? DLP_NF_NAN(s) : dlp_nf_signed(s, dlp_nf_decode(c, 3u, 7));
}
inline float dlp_nf_e4m3fnuz_value(uchar b)  // bias 8; 0x80 (negative zero) is the NaN
{
    return b == 0x80u ? DLP_NF_NAN(0) : dlp_nf_signed(b >> 7, dlp_nf_decode(b & 0x7fu, 3u, 8));
}
inline float dlp_nf_e5m2_value(uchar b)  // S.EEEEE.MM, bias 15, IEEE: inf and NaNs
{
    const uint s = b >> 7, c = b & 0x7fu;
    if (c >= 0x7cu)
        return c == 0x7cu ? as_float((s << 31) | 0x7f800000u) : DLP_NF_NAN(s);
    return dlp_nf_signed(s, dlp_nf_decode(c, 2u, 15));
}
inline float dlp_nf_e5m2fnuz_value(uchar b)  // bias 16; 0x80 is the NaN
{
    return b == 0x80u ? DLP_NF_NAN(0) : dlp_nf_signed(b >> 7, dlp_nf_decode(b & 0x7fu, 2u, 16));
}
inline float dlp_nf_e2m1_value(uchar b)  // S.EE.M in the low 4 bits, bias 1: 0 .. 6
{
    return dlp_nf_signed((b >> 3) & 1u, dlp_nf_decode(b & 7u, 1u, 1));
}
inline float dlp_nf_e8m0_value(uchar b)  // 2^(b - 127); 0xff is NaN (2^-127 is subnormal)
{
    return b == 0xffu ? DLP_NF_NAN(0) : as_float(b == 0u ? 0x00400000u : (uint)b << 23);
}
// the sub-byte integers: the low bits of the byte, two's complement for the signed ones
inline char dlp_nf_int4_value(uchar b) { return (char)((char)(b << 4) >> 4); }
inline uchar dlp_nf_uint4_value(uchar b) { return b & 15u; }
inline char dlp_nf_int2_value(uchar b) { return (char)((char)(b << 6) >> 6); }
inline uchar dlp_nf_uint2_value(uchar b) { return b & 3u; }

// ----- encoding: |x| (float32 bits a, finite) rounded to nearest even onto M mantissa
// bits, bias B: the magnitude code, which may pass the largest finite one (the caller
// saturates or overflows)
inline uint dlp_nf_round(uint a, uint M, int B)
{
    const int e = (int)(a >> 23);
    if (e >= 128 - B) {  // a normal of the format: rebias, round off 23 - M bits
        const uint r = a - ((uint)(127 - B) << 23), s = 23u - M;
        return (r + (1u << (s - 1u)) - 1u + ((r >> s) & 1u)) >> s;
    }
    // a subnormal or zero: |x| / 2^(1 - B - M) = m >> s, m the 24-bit significand
    const int s = 151 - B - (int)M - e;
    if (s > 24)
        return 0u;
    const uint m = (a & 0x7fffffu) | 0x800000u;
    return (m + (1u << (s - 1)) - 1u + ((m >> s) & 1u)) >> s;
}
// a double's nearest float toward zero, its last bit set where that dropped anything (round
// to odd): rounding it on to a format of at most 22 mantissa bits rounds as the double
// would itself, where rounding to the nearest float first could land on a tie and round
// twice. A macro, so that programs without doubles never name one.
inline float dlp_nf_sticky(float toward_zero, int inexact)
{
    return inexact ? as_float(as_uint(toward_zero) | 1u) : toward_zero;
}
#define DLP_NF_FROM_DOUBLE(x) \
    dlp_nf_sticky(convert_float_rtz(x), (double)convert_float_rtz(x) != (x))
// ONNX's Cast tables: saturate maps inf and what rounds past the largest finite value
// to that value (NaN stays NaN); without it they give inf (E5M2) or NaN
inline uchar dlp_nf_e4m3fn_bits(float x, int saturate)
{
    const uint u = as_uint(x), a = u & 0x7fffffffu, s = (u >> 24) & 0x80u;
    if (a > 0x7f800000u)
        return (uchar)(s | 0x7fu);
    const uint c = a == 0x7f800000u ? 0x7fu : dlp_nf_round(a, 3u, 7);
    return (uchar)(s | (c > 0x7eu ? (saturate ? 0x7eu : 0x7fu) : c));
}
inline uchar dlp_nf_e4m3fnuz_bits(float x, int saturate)  // no negative zero
{
    const uint u = as_uint(x), a = u & 0x7fffffffu, s = (u >> 24) & 0x80u;
    if (a > 0x7f800000u)
        return 0x80u;
    const uint c = a == 0x7f800000u ? 0x80u : dlp_nf_round(a, 3u, 8);
    if (c > 0x7fu)
        return saturate ? (uchar)(s | 0x7fu) : 0x80u;
    return c == 0u ? 0u : (uchar)(s | c);
}
inline uchar dlp_nf_e5m2_bits(float x, int saturate)
{
    const uint u = as_uint(x), a = u & 0x7fffffffu, s = (u >> 24) & 0x80u;
    if (a > 0x7f800000u)
        return (uchar)(s | 0x7eu);
    const uint c = a == 0x7f800000u ? 0x7cu : dlp_nf_round(a, 2u, 15);
    return (uchar)(s | (c > 0x7bu ? (saturate ? 0x7bu : 0x7cu) : c));
}
inline uchar dlp_nf_e5m2fnuz_bits(float x, int saturate)
{
    const uint u = as_uint(x), a = u & 0x7fffffffu, s = (u >> 24) & 0x80u;
    if (a > 0x7f800000u)
        return 0x80u;
    const uint c = a == 0x7f800000u ? 0x80u : dlp_nf_round(a, 2u, 16);
    if (c > 0x7fu)
        return saturate ? (uchar)(s | 0x7fu) : 0x80u;
    return c == 0u ? 0u : (uchar)(s | c);
}
// float4 has no inf or NaN: it always saturates (to 6), and NaN gives the zero of the
// other sign, as onnx's reference (ml_dtypes) converts
inline uchar dlp_nf_e2m1_bits(float x)
{
    const uint u = as_uint(x), a = u & 0x7fffffffu, s = (u >> 28) & 8u;
    if (a > 0x7f800000u)
        return (uchar)(s ^ 8u);
    const uint c = a == 0x7f800000u ? 7u : dlp_nf_round(a, 1u, 1);
    return (uchar)(s | min(c, 7u));
}
// float8e8m0: the float32 exponent field, rounded by mode (0 up, 1 down, 2 nearest) as
// onnx.numpy_helper.to_float8e8m0 does (the sign is ignored; NaN and inf give 0xff)
inline uchar dlp_nf_e8m0_bits(float x, int saturate, int mode)
{
    const uint u = as_uint(x), e = (u >> 23) & 0xffu;
    if (e == 0xffu)
        return 0xffu;
    uint up = 0u;
    if (mode == 0)
        up = (u & 0x7fffffu) != 0u;
    else if (mode == 2)
        up = (u & 0x400000u) != 0u && ((u & 0x200000u) != 0u || (u & 0x1fffffu) != 0u || e > 0u);
    if (saturate && e == 0xfeu)
        up = 0u;
    return (uchar)(e + up);
}
#endif
