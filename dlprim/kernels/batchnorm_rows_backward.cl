<%namespace name="vectors" file="lanes_sum.h"/>
<%
# BatchNorm's backward on CPUs (float32, not PoCL; core/batchnorm.py) row by row, as
# batchnorm_rows.cl's statistics: each work-item (c, n) one (image, channel) row of S
# values, VW a vector, in the generator's order of operations. ACT: the layer's
# activation was folded into it, so dy is the activation's and dz = DZ (an expression
# of dy and y, the activation's output) is taken inline, in both kernels, in place of
# the activation's own pass. BATCH: batch statistics (dx has the sums' terms).
%>
${vectors.lanes_sum(VW)}

## the row's pointers and the channel's constants, at the kernel's start
<%def name="row_start()">
    const uint c = get_global_id(0), n = get_global_id(1);
    const ulong row = ((ulong)n * C + c) * S;
    __global const float *px = x + x_offset + row, *pdy = dy + dy_offset + row;
% if ACT:
    __global const float *py = y + y_offset + row;
% endif
    const float m = mean[mean_offset + c], r = istd[istd_offset + c];
    const uint full = S / ${VW} * ${VW};
</%def>

## dz at value i (T: float, or a vector of VW of them from i on), ``load`` of a pointer
<%def name="dz_at(T, load)">
% if ACT:
        ${T} dz;
        {
            const ${T} dy = ${load("pdy")}, y = ${load("py")};
            dz = ${DZ};
        }
% else:
        const ${T} dz = ${load("pdy")};
% endif
</%def>

#define ROWS_ARGS uint C, uint S, __global const float *x, ulong x_offset, \
    __global const float *dy, ulong dy_offset, ${"__global const float *y, ulong y_offset," if ACT else ""} \
    __global const float *mean, ulong mean_offset, __global const float *istd, ulong istd_offset

// rows[2 (n C + c)]: the row's sum of dz, then of dz (x - mean) istd
__kernel __attribute__((vec_type_hint(float${VW})))
void bn_row_grad_sums(ROWS_ARGS, __global float *rows, ulong rows_offset)
{
${row_start()}
    float${VW} a = 0.0f, b = 0.0f;
    for (uint i = 0; i < full; i += ${VW}) {
${dz_at("float%d" % VW, lambda p: "vload%d(0, %s + i)" % (VW, p))}
        a += dz;
        b += dz * (vload${VW}(0, px + i) - m) * r;
    }
    float sa = lanes_sum(a), sb = lanes_sum(b);
    for (uint i = full; i < S; i++) {
${dz_at("float", lambda p: "%s[i]" % p)}
        sa += dz;
        sb += dz * (px[i] - m) * r;
    }
    rows[rows_offset + 2 * ((ulong)n * C + c)] = sa;
    rows[rows_offset + 2 * ((ulong)n * C + c) + 1] = sb;
}

// the sums of channel c over its N rows: work-item c
__kernel void bn_row_grad_sums_merge(uint N, uint C, __global const float *rows, ulong rows_offset,
                                     __global float *sdy, ulong sdy_offset,
                                     __global float *sdyx, ulong sdyx_offset)
{
    const uint c = get_global_id(0);
    if (c >= C)
        return;
    float sa = 0.0f, sb = 0.0f;
    for (uint n = 0; n < N; n++) {
        sa += rows[rows_offset + 2 * ((ulong)n * C + c)];
        sb += rows[rows_offset + 2 * ((ulong)n * C + c) + 1];
    }
    sdy[sdy_offset + c] = sa;
    sdyx[sdyx_offset + c] = sb;
}

// dx = beta dx + gamma istd (dz - (sum dz + xhat sum dz xhat) / M) (batch statistics) or
// gamma istd dz (fixed ones)
__kernel __attribute__((vec_type_hint(float${VW})))
void bn_row_dx(ROWS_ARGS, __global const float *sdy, ulong sdy_offset,
               __global const float *sdyx, ulong sdyx_offset,
% if AFFINE:
               __global const float *gamma, ulong gamma_offset,
% endif
               __global float *dx, ulong dx_offset, float inv_m, float beta)
{
${row_start()}
    const float g = ${"gamma[gamma_offset + c]" if AFFINE else "1.0f"};
    const float s1 = sdy[sdy_offset + c], s2 = sdyx[sdyx_offset + c];
    __global float *pdx = dx + dx_offset + row;
<%
# dx's gradient term, X standing for the value of x
GRAD = "g * r * (dz - inv_m * (s1 + ((X - m) * r) * s2))" if BATCH else "g * r * dz"
%>
    for (uint i = 0; i < full; i += ${VW}) {
${dz_at("float%d" % VW, lambda p: "vload%d(0, %s + i)" % (VW, p))}
        float${VW} v = ${GRAD.replace("X", "vload%d(0, px + i)" % VW)};
        if (beta != 0.0f)
            v += beta * vload${VW}(0, pdx + i);
        vstore${VW}(v, 0, pdx + i);
    }
    for (uint i = full; i < S; i++) {
${dz_at("float", lambda p: "%s[i]" % p)}
        float v = ${GRAD.replace("X", "px[i]")};
        if (beta != 0.0f)
            v += beta * pdx[i];
        pdx[i] = v;
    }
}
