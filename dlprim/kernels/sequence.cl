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
