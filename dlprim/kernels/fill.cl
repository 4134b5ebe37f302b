<%include file="common.h"/>
// Fill a buffer range with a value: the smallest kernel, also used by the program tests.
__kernel void fill(ulong n, __global ${dtype} *y, ulong y_offset, ${dtype} value)
{
    ulong i = get_global_id(0);
    if (i < n)
        y[y_offset + i] = value;
}
