## 4-bit weights as core/quantize.py lays them out: value k of a row in byte k / 2, the
## low nibble first, stored as q + 8 for q in [-8, 7], times the float32 scale of its
## group of GROUP values (a row's scales one after another). loads(GROUP) writes
## q4_at(row, scales, k), one value, and load4_q4 / load8_q4(row, scales, k), four or
## eight from k, a multiple of them (GROUP a multiple of 8: one scale), as floats; and,
## for kernels that ask for all their loads before widening any, q4_bits8(row, k) (the 4
## bytes of the 8 values from k, a multiple of 8, in a row that starts 4-byte aligned) and
## q4_widen8(bits) (those values, unscaled).
<%def name="loads(GROUP)">
inline uint q4_bits8(__global const uchar *b, ulong k)
{
    return *(__global const uint *)(b + k / 2);
}
inline float8 q4_widen8(uint bits)
{
    // (value i of the 8 in nibble i, the low byte's low nibble first)
    const uint8 q = ((uint8)(bits) >> (uint8)(0, 4, 8, 12, 16, 20, 24, 28)) & (uint8)(15);
    return convert_float8(q) - 8.0f;
}
inline float q4_at(__global const uchar *b, __global const float *s, ulong k)
{
    const uchar byte = b[k / 2];
    return (float)((int)((k & 1) ? byte >> 4 : byte & 15) - 8) * s[k / ${GROUP}];
}
inline float4 load4_q4(__global const uchar *b, __global const float *s, ulong k)
{
    const uchar2 v = vload2(0, b + k / 2);
    return ((float4)((float)(v.x & 15), (float)(v.x >> 4), (float)(v.y & 15),
                     (float)(v.y >> 4)) - 8.0f) * s[k / ${GROUP}];
}
inline float8 load8_q4(__global const uchar *b, __global const float *s, ulong k)
{
    const uchar4 v = vload4(0, b + k / 2);
    const float4 lo = convert_float4(v & (uchar4)(15)), hi = convert_float4(v >> (uchar4)(4));
    return ((float8)(lo.s0, hi.s0, lo.s1, hi.s1, lo.s2, hi.s2, lo.s3, hi.s3) - 8.0f)
           * s[k / ${GROUP}];
}
</%def>
