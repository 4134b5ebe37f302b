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
    // (value i of the 8 in nibble i, the low byte's low nibble first.) A nibble n under
    // 2^23's exponent is the float 2^23 + n, so one subtraction, exact, gives n - 8:
    // integer-to-float conversions issue at a quarter of the float rate on NVIDIA GPUs
    const uint8 q = ((uint8)(bits) >> (uint8)(0, 4, 8, 12, 16, 20, 24, 28)) & (uint8)(15);
    return as_float8(q | (uint8)(0x4B000000u)) - 8388616.0f;
}
inline float8 load8_q4(__global const uchar *b, __global const float *s, ulong k)
{
    return q4_widen8(as_uint(vload4(0, b + k / 2))) * s[k / ${GROUP}];
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
</%def>
