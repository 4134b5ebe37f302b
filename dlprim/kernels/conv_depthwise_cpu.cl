<%include file="common.h"/>
<%namespace name="vectors" file="lanes_sum.h"/>
## Depthwise convolution for CPU drivers (core/conv_depthwise.py picks it where the
## device is a CPU): the three directions of conv_depthwise.cl, shaped for PoCL, which
## runs a work-item as one thread's loop: a pixel per work-item with index divisions and
## bounds checks on every tap ran 10-20x slower. Here a work-item is one of a few dozen
## and computes whole rows (W axis), the taps unrolled with the weights in registers: the
## columns whose taps all fall inside the row VEC (then VEC/2) at a time with unaligned
## vector loads and FMAs, the edge columns one at a time with bounds checks. The stencil
## (kernel, stride, pad, dilation) and the channel multiplier KG are compiled in, sizes
## are arguments. Vector columns need a stride of 1 or 2 (stride 2 loads 2n floats and
## keeps the even ones); wider strides run every column on the checked path.
<%!
    def vload(n, stride, ptr):
        """n floats at ptr, ptr + stride, ...: loads of stride * n floats (no float16,
        whose return changes the ABI without AVX-512)."""
        if stride == 1:
            return "VLOAD_GLOBAL(%d, 0, %s)" % (n, ptr)
        if n <= 4:
            return "VLOAD_GLOBAL(%d, 0, %s).even" % (2 * n, ptr)
        return "(float%d)(VLOAD_GLOBAL(%d, 0, %s).even, VLOAD_GLOBAL(%d, 0, %s + %d).even)" % (n, n, ptr, n, ptr, n)

    def vtype(n):
        return "float%d" % n
%>
<%
    KHW = KH * KW
    widths = [n for n in (VEC, VEC // 2) if n > 1] if SW <= 2 else []
    act = "ACT_" + ACTIVATION
    taps = [(r, s) for r in range(KH) for s in range(KW)]
    # backward data: dx[SW*m + p] reads dy[m + off] through the taps s whose
    # p + PW - s*DW divides by SW, off = (p + PW - s*DW) / SW (phase p of the row)
    phases = [[(s, (p + PW - s * DW) // SW) for s in range(KW) if (p + PW - s * DW) % SW == 0]
              for p in range(SW)]
    offs = [o for ph in phases for _, o in ph]

    def weight(t):
        """Tap t of output channel c*KG + j in backward data: in registers when KG is 1."""
        return "w%d" % t if KG == 1 else "wk[j * %d + %d]" % (KHW, t)
%>
#define KG ${KG}
<%def name="epilogue(n, v, ptr, b)">
% if n == 1:
        if (beta != 0.0f)
            ${v} += beta * ${ptr}[0];
% else:
        if (beta != 0.0f)
            ${v} += beta * vload${n}(0, ${ptr});
% endif
% if BIAS:
        ${v} += ${b};
% endif
% if n == 1:
        ${ptr}[0] = ${act}(${v});
% else:
        vstore${n}(${act}(${v}), 0, ${ptr});
% endif
</%def>
## input rows oh*SH - PH + r*DH of one plane: pointer x<r> (the plane start where the
## row is outside, never read then) and ok<r>
<%def name="input_rows()">
% for r in range(KH):
            const int ih${r} = oh * ${SH} + ${r * DH - PH};
            const bool ok${r} = ih${r} >= 0 && ih${r} < in_h;
            __global const float *x${r} = src + (ok${r} ? ih${r} * in_w : 0);
% endfor
</%def>
## columns ow.. whose VEC-wide loads stay inside the row: ow >= ceil(PW / SW) and
## ow * SW - PW + (KW-1)*DW + n*SW - 1 < in_w
<%def name="vector_ends()">
% for n in widths:
    const int vend${n}_num = in_w - ${n * SW} + ${PW - (KW - 1) * DW};
    const int vend${n} = vend${n}_num < 0 ? -1 : vend${n}_num / ${SW};
% endfor
</%def>
<%def name="fits(n)">(ow >= ${-(-PW // SW)} && ow + ${n} <= out_w && ow <= vend${n})</%def>

// y[b,k,oh,ow] = act(sum_(r,s) w[k,r,s] * x[b, k/KG, oh*SH-PH+r*DH, ow*SW-PW+s*DW] + bias[k]
//                    + beta * y); work-item i: the rows [i*chunk, (i+1)*chunk) of y
//                    seen as rows = batch*out_c*out_h rows of out_w
__kernel void depthwise_forward(int in_c, int out_c, int in_h, int in_w, int out_h, int out_w,
                                int rows, int chunk,
                                __global const float *x, ulong x_offset,
                                __global const float *w, ulong w_offset,
                                __global float *y, ulong y_offset,
% if BIAS:
                                __global const float *bias, ulong bias_offset,
% endif
                                float beta)
{
    const int first = get_global_id(0) * chunk, last = min(rows, first + chunk);
    ${vector_ends()}
    // plane by plane (plane = b*out_c + k): divisions and weight loads once per plane
    for (int plane = first / out_h; plane * out_h < last; plane++) {
        const int k = plane % out_c, b = plane / out_c;
        __global const float *src = x + x_offset + (ulong)(b * in_c + k / KG) * in_h * in_w;
        __global const float *wk = w + w_offset + k * ${KHW};
% for t in range(KHW):
        const float w${t} = wk[${t}];
% endfor
% if BIAS:
        const float bk = bias[bias_offset + k];
% endif
        const int oh_end = min(out_h, last - plane * out_h);
        for (int oh = max(0, first - plane * out_h); oh < oh_end; oh++) {
            __global float *out = y + y_offset + ((ulong)plane * out_h + oh) * out_w;
            ${input_rows()}
            for (int ow = 0; ow < out_w;) {
                const int iw = ow * ${SW} - ${PW};
% for n in widths:
                if (${fits(n)}) {
                    ${vtype(n)} v = 0.0f;
%   for r in range(KH):
                    if (ok${r}) {
%     for s in range(KW):
                        v = FMA((${vtype(n)})(w${r * KW + s}), ${vload(n, SW, "x%d + iw + %d" % (r, s * DW))}, v);
%     endfor
                    }
%   endfor
                    ${epilogue(n, "v", "(out + ow)", "bk")}
                    ow += ${n};
                    continue;
                }
% endfor
                float v = 0.0f;
% for r, s in taps:
                if (ok${r} && (uint)(iw + ${s * DW}) < (uint)in_w)
                    v = FMA(w${r * KW + s}, x${r}[iw + ${s * DW}], v);
% endfor
                ${epilogue(1, "v", "(out + ow)", "bk")}
                ow++;
            }
        }
    }
}

// dx[b,c,ih,iw] = act(sum_(j<KG, r, s) w[c*KG+j, r, s] * dy[b, c*KG+j, oh, ow] + bias[c]
//                     + beta * dx), oh = (ih + PH - r*DH) / SH where it divides, likewise
//                     ow: the gather, per row of dx as forward is per row of y
__kernel void depthwise_backward_data(int in_c, int out_c, int in_h, int in_w, int out_h,
                                      int out_w, int rows, int chunk,
                                      __global const float *dy, ulong dy_offset,
                                      __global const float *w, ulong w_offset,
                                      __global float *dx, ulong dx_offset,
% if BIAS:
                                      __global const float *bias, ulong bias_offset,
% endif
                                      float beta)
{
    const int first = get_global_id(0) * chunk, last = min(rows, first + chunk);
% if widths:
    // phase columns m.. (dx columns SW*m..) whose loads stay inside the dy row and whose
    // SW*n outputs inside the dx row
    const int m_lo = ${max(0, -min(offs))};
%   for n in widths:
    const int mend${n} = min(out_w - ${n + max(offs)}, in_w / ${SW} - ${n});
%   endfor
% endif
    const int dy_plane = out_h * out_w;
    for (int plane = first / in_h; plane * in_h < last; plane++) {  // plane = b*in_c + c
        const int c = plane % in_c, b = plane / in_c;
        // output channels c*KG + j: dy planes and weights one after another
        __global const float *g0 = dy + dy_offset + (ulong)(b * out_c + c * KG) * dy_plane;
        __global const float *wk = w + w_offset + c * KG * ${KHW};
% if KG == 1:
%   for t in range(KHW):
        const float w${t} = wk[${t}];
%   endfor
% endif
% if BIAS:
        const float bc = bias[bias_offset + c];
% endif
        const int ih_end = min(in_h, last - plane * in_h);
        for (int ih = max(0, first - plane * in_h); ih < ih_end; ih++) {
            __global float *out = dx + dx_offset + ((ulong)plane * in_h + ih) * in_w;
            // dy rows th / SH for th = ih + PH - r*DH
% for r in range(KH):
            const int th${r} = ih + ${PH - r * DH};
            const bool ok${r} = th${r} >= 0 && th${r} % ${SH} == 0 && th${r} / ${SH} < out_h;
            __global const float *d${r} = g0 + (ok${r} ? th${r} / ${SH} * out_w : 0);
% endfor
            for (int iw = 0; iw < in_w;) {
% for n in widths:
                const int m${n} = iw / ${SW};
                if (iw % ${SW} == 0 && m${n} >= m_lo && m${n} <= mend${n}) {
%   for p in range(SW):
                    ${vtype(n)} v${p} = 0.0f;
%   endfor
                    for (int j = 0; j < KG; j++) {
%   for r in range(KH):
                        if (ok${r}) {
%     for p in range(SW):
%       for s, off in phases[p]:
                            v${p} = FMA((${vtype(n)})(${weight(r * KW + s)}), VLOAD_GLOBAL(${n}, 0, d${r} + j * dy_plane + m${n} + ${off}), v${p});
%       endfor
%     endfor
                        }
%   endfor
                    }
%   if SW == 1:
                    ${epilogue(n, "v0", "(out + iw)", "bc")}
%   else:
                    // the two phases interleaved, n floats at a time
%     for h in range(0, n, n // 2):
                    ${vtype(n)} u${h} = (${vtype(n)})(${", ".join("v0.s%x, v1.s%x" % (i, i) for i in range(h, h + n // 2))});
                    ${epilogue(n, "u%d" % h, "(out + iw + %d)" % (2 * h), "bc")}
%     endfor
%   endif
                    iw += ${SW * n};
                    continue;
                }
% endfor
                // one column: the taps of its phase, each dy column checked
                float v = 0.0f;
                const int m = iw / ${SW}, phase = iw - m * ${SW};
                for (int j = 0; j < KG; j++) {
% for p in range(SW):
                    ${"if (phase == %d) " % p if SW > 1 else ""}{
%   for r in range(KH):
%     for s, off in phases[p]:
                        if (ok${r} && (uint)(m + ${off}) < (uint)out_w)
                            v = FMA(${weight(r * KW + s)}, d${r}[j * dy_plane + m + ${off}], v);
%     endfor
%   endfor
                    }
% endfor
                }
                ${epilogue(1, "v", "(out + iw)", "bc")}
                iw++;
            }
        }
    }
}

${vectors.lanes_sum(VEC)}

// dw[k,r,s] = beta*dw + sum_(b,oh,ow) dy[b,k,oh,ow] * x[b, k/KG, oh*SH-PH+r*DH, ow*SW-PW+s*DW]
// work-item i: channels [(i / splits) * per_item, +per_item), rows [(i % splits) * chunk,
// +chunk) of the batch*out_h rows of each; all taps in vector registers. With one split it
// writes dw (beta == 0 never reads it); with more, part[split][k][tap] for
// depthwise_filter_sum.
__kernel void depthwise_backward_filter(int batch, int in_c, int out_c, int in_h, int in_w,
                                        int out_h, int out_w, int per_item, int splits, int chunk,
                                        __global const float *x, ulong x_offset,
                                        __global const float *dy, ulong dy_offset,
                                        __global float *dw, ulong dw_offset,
                                        __global float *part, ulong part_offset, float beta)
{
    const int item = get_global_id(0), split = item % splits;
    const int k0 = item / splits * per_item, k1 = min(out_c, k0 + per_item);
    const int first = split * chunk, last = min(batch * out_h, first + chunk);
    ${vector_ends()}
    for (int k = k0; k < k1; k++) {
% for t in range(KHW):
        float${VEC} a${t} = 0.0f;
        float e${t} = 0.0f;
% endfor
        for (int b = first / out_h; b * out_h < last; b++) {
            __global const float *src = x + x_offset + (ulong)(b * in_c + k / KG) * in_h * in_w;
            const int oh_end = min(out_h, last - b * out_h);
            for (int oh = max(0, first - b * out_h); oh < oh_end; oh++) {
                __global const float *g = dy + dy_offset + ((ulong)(b * out_c + k) * out_h + oh) * out_w;
                ${input_rows()}
                for (int ow = 0; ow < out_w;) {
                    const int iw = ow * ${SW} - ${PW};
% for n in widths:
                    if (${fits(n)}) {
                        const ${vtype(n)} gv = VLOAD_GLOBAL(${n}, 0, g + ow);
<% lanes = "" if n == VEC else ".lo" %>\
%   for r in range(KH):
                        if (ok${r}) {
%     for s in range(KW):
                            a${r * KW + s}${lanes} = FMA(gv, ${vload(n, SW, "x%d + iw + %d" % (r, s * DW))}, a${r * KW + s}${lanes});
%     endfor
                        }
%   endfor
                        ow += ${n};
                        continue;
                    }
% endfor
                    const float gs = g[ow];
% for r, s in taps:
                    if (ok${r} && (uint)(iw + ${s * DW}) < (uint)in_w)
                        e${r * KW + s} = FMA(gs, x${r}[iw + ${s * DW}], e${r * KW + s});
% endfor
                    ow++;
                }
            }
        }
% for t in range(KHW):
        {
            const float v = e${t} + lanes_sum(a${t});
            if (splits > 1)
                part[part_offset + (split * out_c + k) * ${KHW} + ${t}] = v;
            else
                dw[dw_offset + k * ${KHW} + ${t}] = beta == 0.0f ? v : beta * dw[dw_offset + k * ${KHW} + ${t}] + v;
        }
% endfor
    }
}

<%include file="depthwise_sum.h"/>
