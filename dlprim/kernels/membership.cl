<%include file="common.h"/>
// isin (core/indexing.py): out[g] = (x[g] equals some t[j]) != invert, by a scan of t per
// element, so its cost is numel(x) * numel(t); == is the comparison, so a NaN is in
// nothing and -0.0 is 0.0, as in PyTorch. T: the common type of x and t (16-bit floats
// arrive widened to float).
__kernel void isin(ulong total, ulong m, uchar invert,
                   __global const ${T} *x, ulong x_offset,
                   __global const ${T} *t, ulong t_offset,
                   __global uchar *out, ulong out_offset)
{
    ulong g = get_global_id(0);
    if (g >= total)
        return;
    ${T} v = x[x_offset + g];
    uchar found = 0;
    for (ulong j = 0; j < m && !found; j++)
        found = t[t_offset + j] == v;
    out[out_offset + g] = found != invert;
}
