// Device ceilings for dlprim-benchmark flops: multiply-add chains (peak FLOP/s) and
// plain streams (peak memory bandwidth). Rendered with TYPE (float or half), WIDTH (the
// vector width: 1, 2, 4, 8 or 16), CHAINS (independent accumulators, so one add's latency
// hides behind the others) and ITERS (multiply-adds per chain).
<%
    vec = TYPE if WIDTH == 1 else "%s%d" % (TYPE, WIDTH)
    lanes = [""] if WIDTH == 1 else [".s%x" % i for i in range(WIDTH)]
%>\
% if TYPE == "half":
#pragma OPENCL EXTENSION cl_khr_fp16 : enable
% endif
#define VEC ${vec}

// Each chain (a = a * m + c) converges to c / (1 - m): no overflow, no denormals, and the compiler cannot
// fold the loop without reassociating floating point, which OpenCL C does not allow.
// 2 * CHAINS * WIDTH * ITERS FLOP per work-item.
__kernel void flops_mad(__global float *y, ulong y_offset, float m, float c)
{
    ulong i = get_global_id(0);
    VEC mv = (VEC)(m);
    VEC cv = (VEC)(c);
% for k in range(CHAINS):
    VEC a${k} = (VEC)((${TYPE})(${k + 1}) * (${TYPE})(0.01f) + (${TYPE})(i % 7));
% endfor
    for (int it = 0; it < ${ITERS}; it++) {
% for k in range(CHAINS):
        a${k} = a${k} * mv + cv;  // contracted to one fused multiply-add where the device has it
% endfor
    }
    float s = 0.0f;
% for k in range(CHAINS):
%   for lane in lanes:
    s += (float)a${k}${lane};
%   endfor
% endfor
    y[y_offset + i] = s;
}

// Reads every element; the comparison with a value no sum reaches keeps the loads (a
// store the compiler could prove dead would let it drop them).
__kernel void mem_read(__global const float *x, ulong x_offset, __global float *y,
                       ulong y_offset, float never)
{
    ulong i = get_global_id(0);
    VEC v = ((__global const VEC *)(x + x_offset))[i];
    float s = 0.0f;
% for lane in lanes:
    s += v${lane};
% endfor
    if (s == never)
        y[y_offset] = s;
}

__kernel void mem_write(__global float *y, ulong y_offset, float value)
{
    ulong i = get_global_id(0);
    ((__global VEC *)(y + y_offset))[i] = (VEC)(value);
}

__kernel void mem_copy(__global const float *x, ulong x_offset, __global float *y,
                       ulong y_offset)
{
    ulong i = get_global_id(0);
    ((__global VEC *)(y + y_offset))[i] = ((__global const VEC *)(x + x_offset))[i];
}
