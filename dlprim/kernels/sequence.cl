<%include file="common.h"/>
% if COMPUTE == "double":
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
% endif
// The value sequences of the creation operators, computed as PyTorch's CPU kernels do
// (so that rounding agrees): ARANGE (0) start + i * step; LINSPACE (1) start + i * step
// below the halfway point and end - (n - 1 - i) * step from there on (both ends exact);
// LOGSPACE (2) base ** linspace. COMPUTE: long for integer aranges, else double where the
// device has it (PyTorch steps in double), float otherwise.
__kernel void sequence(ulong n, ${COMPUTE} start, ${COMPUTE} step, ${COMPUTE} end, ulong halfway,
                       int mode, ${COMPUTE} base, __global ${STORE} *y, ulong y_offset)
{
    ulong i = get_global_id(0);
    if (i >= n)
        return;
    ${COMPUTE} v;
    if (mode == 0 || i < halfway)
        v = start + (${COMPUTE})i * step;
    else
        v = end - (${COMPUTE})(n - 1 - i) * step;
% if COMPUTE != "long":
    if (mode == 2)
        v = pow(base, v);
% endif
% if STORE in ("half", "bfloat16"):
    ST_${STORE}(y + y_offset, i, (float)v);
% else:
    y[y_offset + i] = (${STORE})v;
% endif
}
% if COMPUTE == "long":

// sum over rows i < r of clamp(i + c, 0, cols): zero rows, then a ramp, then full rows
inline long clamped_sum(long r, long c, long cols)
{
    long z = clamp(-c, 0L, r);
    long u = clamp(cols - c, z, r);
    return (u - z) * c + (u - 1 + z) * (u - z) / 2 + cols * (r - u);
}

// the elements before row r of a triangle whose row i holds columns
// [clamp(i + a, 0, cols), clamp(i + b, 0, cols))
inline long before_row(long r, long a, long b, long cols)
{
    return clamped_sum(r, b, cols) - clamped_sum(r, a, cols);
}

// tril_indices / triu_indices: element k of the triangle (row-major) found by a binary
// search over rows; y holds the rows, then the columns (2 x n)
__kernel void triangle_indices(ulong n, long rows, long cols, long a, long b,
                               __global ${STORE} *y, ulong y_offset)
{
    ulong k = get_global_id(0);
    if (k >= n)
        return;
    long lo = 0, hi = rows;  // the last row r with before_row(r) <= k
    while (lo < hi) {
        long mid = (lo + hi + 1) / 2;
        if (before_row(mid, a, b, cols) <= (long)k)
            lo = mid;
        else
            hi = mid - 1;
    }
    y[y_offset + k] = (${STORE})lo;
    long first = clamp(lo + a, 0L, cols);  // the row's first column
    y[y_offset + n + k] = (${STORE})(first + (long)k - before_row(lo, a, b, cols));
}
% endif
