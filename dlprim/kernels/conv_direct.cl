<%include file="common.h"/>
<%
# Direct convolution for CPU drivers (core/conv_direct.py), for layers of few output
# channels, where im2col + GEMM spends as long writing and packing columns as the GEMM
# takes (the MNIST net's 16 -> 32 5x5 layer). A work-item computes PX neighbouring
# pixels of one output row for OCB output channels: PX x OCB / VW vector accumulators,
# and for every input channel and tap OCB / VW vectors of packed weights and PX broadcast
# input values, each feeding OCB / VW vector FMAs. The stencil (KH, KW, strides,
# dilations), OCB and PX are compiled in, so the taps of a row are straight-line code.
# VW: the vector width of the accumulators (8, or 16 where the CPU's native vectors hold
# 16 floats)
VW = context.get("VW", 8)
NV = OCB // VW  # vector accumulators per pixel (per tap in the filter gradient)
assert NV * VW == OCB
# ACT_T: the storage of x, y, dx and dy (float, half or bfloat16), read and written through
# LD_/ST_ (common.h); weights, bias, the packed weights, dy's rows and sums stay float
T = context.get("ACT_T", "float")
%>
% if not FILTER:
// w (OC x C x KH x KW) -> wp[ocb][c][kh][kw][OCB]: the OCB output channels of block ocb side
// by side for each tap, zero past OC. FLIP: the weights of the backward-data pass of the
// layer w belongs to, as a forward convolution of dy: input and output channels swapped
// (w is C x OC x KH x KW) and the taps turned by 180 degrees.
__kernel void conv_direct_pack(int OC, int C, int flip, __global const float *w, ulong w_offset,
                               __global float *wp, ulong wp_offset)
{
    const int i = get_global_id(0);
    const int q = i % ${OCB}, t = i / ${OCB};
    const int kw = t % ${KW}, kh = (t / ${KW}) % ${KH}, c = (t / (${KW * KH})) % C;
    const int oc = (t / (${KW * KH}) / C) * ${OCB} + q;
    float v = 0.0f;
    if (oc < OC)
        v = flip ? w[w_offset + ((ulong)(c * OC + oc) * ${KH} + ${KH - 1} - kh) * ${KW} + ${KW - 1} - kw]
                 : w[w_offset + ((ulong)(oc * C + c) * ${KH} + kh) * ${KW} + kw];
    wp[wp_offset + i] = v;
}

// y[img][oc][oy][ox] = act(sum over c, kh, kw of wp * x + bias[oc] + beta * y): work-item
// (pixel block, oy, img * ocblocks + ocb)
__kernel void conv_direct(int C, int H, int W, int OC, int OH, int OW, int PT, int PL,
                          int ocblocks,
                          __global const ${T} *x, ulong x_offset,
                          __global const float *wp, ulong wp_offset,
                          __global ${T} *y, ulong y_offset,
                          __global const float *bias, ulong bias_offset, float beta)
{
    const int ox0 = get_global_id(0) * ${PX}, oy = get_global_id(1);
    const int ocb = get_global_id(2) % ocblocks;
    const ulong img = get_global_id(2) / ocblocks;
    float${VW} acc[${PX}][${NV}];
% for p in range(PX):
    % for v in range(NV):
    acc[${p}][${v}] = 0.0f;
    % endfor
% endfor
    const int ix0 = ox0 * ${SW} - PL;
    // every tap of the block inside the row: no bounds checks per load
    const bool inside = ix0 >= 0 && ix0 + ${(PX - 1) * SW + (KW - 1) * DW} < W;
    __global const ${T} *plane = x + x_offset + img * C * H * W;
    __global const float *wc = wp + wp_offset + (ulong)ocb * C * ${KH * KW * OCB};
    for (int c = 0; c < C; c++, plane += H * W, wc += ${KH * KW * OCB}) {
% for kh in range(KH):
        {
            const int iy = oy * ${SH} - PT + ${kh * DH};
            if (iy >= 0 && iy < H) {
                __global const ${T} *row = plane + iy * W;
                __global const ${T} *run = row + ix0;  // constant offsets from here
                if (inside) {
    % for kw in range(KW):
                    {
        % for v in range(NV):
                        const float${VW} w${v} = VLOAD_GLOBAL(${VW}, ${(kh * KW + kw) * NV + v}, wc);
        % endfor
        % for p in range(PX):
                        {
                            const float${VW} xv = (float${VW})(LD_${T}(run, ${p * SW + kw * DW}));
            % for v in range(NV):
                            acc[${p}][${v}] = FMA(xv, w${v}, acc[${p}][${v}]);
            % endfor
                        }
        % endfor
                    }
    % endfor
                } else {
    % for kw in range(KW):
                    {
        % for v in range(NV):
                        const float${VW} w${v} = VLOAD_GLOBAL(${VW}, ${(kh * KW + kw) * NV + v}, wc);
        % endfor
        % for p in range(PX):
                        {
                            const int ix = ix0 + ${p * SW + kw * DW};
                            const float${VW} xv = (float${VW})(ix >= 0 && ix < W ? LD_${T}(row, ix) : 0.0f);
            % for v in range(NV):
                            acc[${p}][${v}] = FMA(xv, w${v}, acc[${p}][${v}]);
            % endfor
                        }
        % endfor
                    }
    % endfor
                }
            }
        }
% endfor
    }
    // epilogue: the block's pixels inside the row, its channels below OC
    __global ${T} *out = y + y_offset + (img * OC + ocb * ${OCB}) * OH * OW + (ulong)oy * OW;
% for p in range(PX):
    if (ox0 + ${p} < OW) {
        float r[${OCB}];
    % for v in range(NV):
        vstore${VW}(acc[${p}][${v}], ${v}, r);
    % endfor
        for (int q = 0; q < ${OCB} && ocb * ${OCB} + q < OC; q++) {
            __global ${T} *o = out + (ulong)q * OH * OW + ox0 + ${p};
            float v = r[q];
    % if BIAS:
            v += bias[bias_offset + ocb * ${OCB} + q];
    % endif
            if (beta != 0.0f)
                v += beta * LD_${T}(o, 0);
            ST_${T}(o, 0, ACT_${ACTIVATION}(v));
        }
    }
% endfor
}
% endif

% if FILTER:
<%
# Backward-filter: dw[oc][c][kh][kw] = beta * dw + the sum over images and output pixels
# of dy[oc] x[c] at the tap. dy is first laid out pixel-major (conv_direct_dy_rows), so
# that a pixel's OCB channels are OCB / VW vector loads; a work-item takes the KW taps of
# one (channel block, CB input channels, kh) for a chunk of the batch: per output pixel
# OCB / VW loads of dy, CB KW broadcast values of x, CB KW OCB / VW vector FMAs. CB > 1
# shares each load of dy between CB channels: the work-items of a layer stream dy from
# the caches CB times less often.
CB = context.get("CB", 1)
%>
// dy (img, OC, P pixels) -> rows (img, P, OCP channels, zero past OC): work-item (oc, img)
__kernel void conv_direct_dy_rows(int OC, int P, int OCP, __global const ${T} *dy,
                                  ulong dy_offset, __global float *rows, ulong rows_offset)
{
    const int oc = get_global_id(0);
    const ulong img = get_global_id(1);
    __global const ${T} *src = dy + dy_offset + (img * OC + oc) * P;
    __global float *dst = rows + rows_offset + img * P * OCP + oc;
    for (int p = 0; p < P; p++)
        dst[(ulong)p * OCP] = oc < OC ? LD_${T}(src, p) : 0.0f;
}

<%def name="filter_taps(checked)">
                {
                    float${VW} d[${NV}];
    % for v in range(NV):
                    d[${v}] = VLOAD_GLOBAL(${VW}, ${v}, drow + (ulong)ox * OCP);
    % endfor
    % for j in range(CB):
    % for kw in range(KW):
                    {
        % if checked:
                        const int ix = ox * ${SW} - PL + ${kw * DW};
                        const float${VW} xv = (float${VW})(ix >= 0 && ix < W ? LD_${T}(xrow[${j}], ix) : 0.0f);
        % else:
                        const float${VW} xv = (float${VW})(LD_${T}(xrow[${j}], ox * ${SW} - PL + ${kw * DW}));
        % endif
        % for v in range(NV):
                        acc[${j}][${kw}][${v}] = FMA(d[${v}], xv, acc[${j}][${kw}][${v}]);
        % endfor
                    }
    % endfor
    % endfor
                }
</%def>
// work-item ((part * ocblocks + ocb) * cblocks + cb) * KH + kh over images [part * chunk,
// ..), cblocks = ceil(C / CB), channels c0 = cb CB .. c0 + CB - 1 (those past C read
// channel C - 1 and store nothing): with one part it writes dw (beta * dw + sum), else
// its partial sums into out[part]
__kernel void conv_direct_filter(int C, int H, int W, int OC, int OH, int OW, int PT, int PL,
                                 int OCP, int batch, int chunk, int ocblocks,
                                 __global const ${T} *x, ulong x_offset,
                                 __global const float *rows, ulong rows_offset,
                                 __global float *out, ulong out_offset, float beta, int parts)
{
    const int item = get_global_id(0), cblocks = (C + ${CB - 1}) / ${CB};
    const int kh = item % ${KH}, c0 = (item / ${KH}) % cblocks * ${CB};
    const int ocb = (item / (${KH} * cblocks)) % ocblocks;
    const int part = item / (${KH} * cblocks * ocblocks);
    float${VW} acc[${CB}][${KW}][${NV}];
% for j in range(CB):
% for kw in range(KW):
    % for v in range(NV):
    acc[${j}][${kw}][${v}] = 0.0f;
    % endfor
% endfor
% endfor
    // the output pixels whose KW taps all land inside the row: no checks there
    const int ox_a = min(OW, (PL + ${SW - 1}) / ${SW});
    const int right = W - 1 - ${(KW - 1) * DW} + PL;
    const int ox_b = max(ox_a, right >= 0 ? min(OW, right / ${SW} + 1) : 0);
    const int img_end = min(batch, (part + 1) * chunk);
    for (int img = part * chunk; img < img_end; img++) {
        for (int oy = 0; oy < OH; oy++) {
            const int iy = oy * ${SH} - PT + kh * ${DH};
            if (iy < 0 || iy >= H)
                continue;
            __global const ${T} *xrow[${CB}];
% for j in range(CB):
            xrow[${j}] = x + x_offset + (((ulong)img * C + min(c0 + ${j}, C - 1)) * H + iy) * W;
% endfor
            __global const float *drow = rows + rows_offset + ((ulong)img * OH + oy) * OW * OCP
                                         + ocb * ${OCB};
            for (int ox = 0; ox < ox_a; ox++)
${filter_taps(True)}
            for (int ox = ox_a; ox < ox_b; ox++)
${filter_taps(False)}
            for (int ox = ox_b; ox < OW; ox++)
${filter_taps(True)}
        }
    }
% for j in range(CB):
% for kw in range(KW):
    % for v in range(NV):
    if (c0 + ${j} < C) {
        const int c = c0 + ${j};
        float r[${VW}];
        vstore${VW}(acc[${j}][${kw}][${v}], 0, r);
        for (int lane = 0; lane < ${VW}; lane++) {
            const int oc = ocb * ${OCB} + ${v * VW} + lane;
            if (oc >= OC)
                break;
            const ulong at = (((ulong)oc * C + c) * ${KH} + kh) * ${KW} + ${kw};
            if (parts == 1)
                out[out_offset + at] = (beta != 0.0f ? beta * out[out_offset + at] : 0.0f) + r[lane];
            else
                out[out_offset + part * (ulong)OC * C * ${KH * KW} + at] = r[lane];
        }
    }
    % endfor
% endfor
% endfor
}

// dw = beta * dw + the sum of the parts' partial sums: work-item per element of dw
__kernel void conv_direct_filter_sum(int n, int parts, __global const float *partial,
                                     ulong partial_offset, __global float *dw, ulong dw_offset,
                                     float beta)
{
    const int i = get_global_id(0);
    float s = 0.0f;
    for (int p = 0; p < parts; p++)
        s += partial[partial_offset + (ulong)p * n + i];
    dw[dw_offset + i] = (beta != 0.0f ? beta * dw[dw_offset + i] : 0.0f) + s;
}
% endif
