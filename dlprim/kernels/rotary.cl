<%include file="common.h"/>
## The rotary position embedding (core/rotary.py): y = x cos + swap(x) sin over the last
## axis, swap exchanging its two halves; the sine's first half is negated in the table.
## X: the storage of x and y; C: of the tables. SEQ_FIRST: x is (N, T, H, D) and y is
## written (N, H, T, D) (the heads' transpose fused in), else both are (N, H, T, D).

// y[n, h, t, d] over every (n, h, t, d); cos and sin (N or 1, T, D), one row per token
__kernel void rotary(ulong total, uint heads, uint tokens, uint width, uint table_rows,
                     __global const ${X} *x, ulong x_offset, __global const ${C} *cosines,
                     ulong cos_offset, __global const ${C} *sines, ulong sin_offset,
                     __global ${X} *y, ulong y_offset)
{
    ulong i = get_global_id(0);
    if (i >= total)
        return;
    ulong d = i % width, row = i / width;  // row: (n, h, t) of y
    ulong t = row % tokens, nh = row / tokens;
    ulong h = nh % heads, n = nh / heads;
    uint halfway = width / 2;
    ulong partner = d < halfway ? d + halfway : d - halfway;
% if SEQ_FIRST:
    ulong src = ((n * tokens + t) * heads + h) * width;
% else:
    ulong src = row * width;
% endif
    ulong table = ((table_rows > 1 ? n : 0) * tokens + t) * width;
    float a = LD_${X}(x, x_offset + src + d), b = LD_${X}(x, x_offset + src + partner);
    float v = a * LD_${C}(cosines, cos_offset + table + d) +
              b * LD_${C}(sines, sin_offset + table + d);
    ST_${X}(y, y_offset + i, v);
}
