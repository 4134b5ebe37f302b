<%include file="common.h"/>
## Direct kernels for depthwise convolution: every group has one input channel
## (IN_C == GROUPS) and KG = OUT_C / GROUPS outputs (the channel multiplier). Output
## channel k reads input channel k / KG. Geometry baked in or passed as arguments, as in
## conv_gemm.cl. ACT_T: the storage of x, y and their gradients (float, or half widened
## as it loads); w, bias and the filter gradient are float.
<%
    GEOM = ["IN_C", "OUT_C", "GROUPS", "IN_H", "IN_W", "OUT_H", "OUT_W",
            "KH", "KW", "SH", "SW", "PH", "PW", "DH", "DW"]
    geom_params = "".join("int %s, " % g for g in GEOM) if not GEOM_BAKED else ""
    act = "ACT_" + ACTIVATION
%>
% if GEOM_BAKED:
%   for name in GEOM:
#define ${name} ${GEOM_BAKED[name]}
%   endfor
% endif
#define KG (OUT_C / GROUPS)
#define KHW (KH * KW)

// y[b,k,oh,ow] = act(sum_(r,s) w[k,r,s] * x[b, k/KG, oh*SH-PH+r*DH, ow*SW-PW+s*DW] + bias[k])
__kernel void depthwise_forward(${geom_params}
                                __global const ${ACT_T} *x, ulong x_offset,
                                __global const float *w, ulong w_offset,
                                __global ${ACT_T} *y, ulong y_offset,
% if BIAS:
                                __global const float *bias, ulong bias_offset,
% endif
                                float beta)
{
    const int p = get_global_id(0), k = get_global_id(1), b = get_global_id(2);
    if (p >= OUT_H * OUT_W)
        return;
    const int oh = p / OUT_W, ow = p - oh * OUT_W;
    __global const ${ACT_T} *src = x + x_offset + (b * IN_C + k / KG) * IN_H * IN_W;
    __global const float *wk = w + w_offset + k * KHW;
    float sum = 0.0f;
    for (int r = 0; r < KH; r++) {
        const int ih = oh * SH - PH + r * DH;
        if (ih < 0 || ih >= IN_H)
            continue;
        for (int s = 0; s < KW; s++) {
            const int iw = ow * SW - PW + s * DW;
            if (iw >= 0 && iw < IN_W)
                sum = mad(wk[r * KW + s], LD_${ACT_T}(src, ih * IN_W + iw), sum);
        }
    }
    const ulong idx = y_offset + (b * OUT_C + k) * OUT_H * OUT_W + p;
    if (beta != 0.0f)
        sum += beta * LD_${ACT_T}(y, idx);
% if BIAS:
    sum += bias[bias_offset + k];
% endif
    ST_${ACT_T}(y, idx, ${act}(sum));
}

// dx[b,c,ih,iw] = sum_(j<KG, r, s) w[c*KG+j, r, s] * dy[b, c*KG+j, oh, ow]
//   where oh = (ih + PH - r*DH) / SH divides exactly (the gather form: no atomics);
// with bias and activation it is a transposed depthwise convolution's forward pass
__kernel void depthwise_backward_data(${geom_params}
                                      __global const ${ACT_T} *dy, ulong dy_offset,
                                      __global const float *w, ulong w_offset,
                                      __global ${ACT_T} *dx, ulong dx_offset,
% if BIAS:
                                      __global const float *bias, ulong bias_offset,
% endif
                                      float beta)
{
    const int p = get_global_id(0), c = get_global_id(1), b = get_global_id(2);
    if (p >= IN_H * IN_W)
        return;
    const int ih = p / IN_W, iw = p - ih * IN_W;
    float sum = 0.0f;
    for (int j = 0; j < KG; j++) {
        const int k = c * KG + j;
        __global const ${ACT_T} *src = dy + dy_offset + (b * OUT_C + k) * OUT_H * OUT_W;
        __global const float *wk = w + w_offset + k * KHW;
        for (int r = 0; r < KH; r++) {
            const int th = ih + PH - r * DH;
            if (th < 0 || th % SH)
                continue;
            const int oh = th / SH;
            if (oh >= OUT_H)
                continue;
            for (int s = 0; s < KW; s++) {
                const int tw = iw + PW - s * DW;
                if (tw < 0 || tw % SW)
                    continue;
                const int ow = tw / SW;
                if (ow < OUT_W)
                    sum = mad(wk[r * KW + s], LD_${ACT_T}(src, oh * OUT_W + ow), sum);
            }
        }
    }
    const ulong idx = dx_offset + (b * IN_C + c) * IN_H * IN_W + p;
    if (beta != 0.0f)
        sum += beta * LD_${ACT_T}(dx, idx);
% if BIAS:
    sum += bias[bias_offset + c];
% endif
    ST_${ACT_T}(dx, idx, ${act}(sum));
}

// dw[k,r,s] = beta*dw + sum_(b,oh,ow) dy[b,k,oh,ow] * x[b, k/KG, oh*SH-PH+r*DH, ow*SW-PW+s*DW]
// in two launches: a work-group per (k, chunk of batch*pixels) reads each dy once and
// keeps all KH*KW tap sums in registers, then reduces them in local memory into
// part[chunk][k][tap]; depthwise_filter_sum adds the chunks into dw.
__kernel __attribute__((reqd_work_group_size(${WG}, 1, 1)))
void depthwise_backward_filter(int batch, ${geom_params}int chunk,
                               __global const ${ACT_T} *x, ulong x_offset,
                               __global const ${ACT_T} *dy, ulong dy_offset,
                               __global float *part, ulong part_offset)
{
    __local float red[${WG}];
    const int lid = get_local_id(0), ch = get_group_id(1), k = get_group_id(2);
    const int total = batch * OUT_H * OUT_W;
    const int end = min(total, (ch + 1) * chunk);
    float acc[${TAPS}];
    for (int t = 0; t < ${TAPS}; t++)
        acc[t] = 0.0f;
    for (int i = ch * chunk + lid; i < end; i += ${WG}) {
        const int b = i / (OUT_H * OUT_W), p = i - b * (OUT_H * OUT_W);
        const int oh = p / OUT_W, ow = p - oh * OUT_W;
        const float g = LD_${ACT_T}(dy, dy_offset + (b * OUT_C + k) * OUT_H * OUT_W + p);
        __global const ${ACT_T} *src = x + x_offset + (b * IN_C + k / KG) * IN_H * IN_W;
#pragma unroll
        for (int r = 0; r < ${KH_T}; r++) {
            const int ih = oh * SH - PH + r * DH;
            const bool row_ok = ih >= 0 && ih < IN_H;
#pragma unroll
            for (int s = 0; s < ${KW_T}; s++) {
                const int iw = ow * SW - PW + s * DW;
                if (row_ok && iw >= 0 && iw < IN_W)
                    acc[r * ${KW_T} + s] = mad(g, LD_${ACT_T}(src, ih * IN_W + iw), acc[r * ${KW_T} + s]);
            }
        }
    }
    for (int t = 0; t < ${TAPS}; t++) {
        red[lid] = acc[t];
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int step = ${WG // 2}; step > 0; step >>= 1) {
            if (lid < step)
                red[lid] += red[lid + step];
            barrier(CLK_LOCAL_MEM_FENCE);
        }
        if (lid == 0)
            part[part_offset + (ch * OUT_C + k) * ${TAPS} + t] = red[0];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
}

<%include file="depthwise_sum.h"/>
