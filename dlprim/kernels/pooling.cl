<%include file="common.h"/>
## 2-D max/avg pooling over NCHW planes (see dlprim/core/pool.py).
## MODE "max" | "avg"; KH, KW, SH, SW, PH, PW: window, stride, padding (fixed by the graph);
## COUNT_INCLUDE_PAD: avg divides by the window clipped to the padded input, not the input.
## Shapes that follow the batch (planes, H, W, OH, OW) are arguments. IDX: the index type,
## uint unless a tensor has 2^31 elements or more (64-bit division is slow on GPUs).
#define DT ${dtype}
// elements are read and written through LD / ST (common.h): half storage computes in float
#define LD(p, i) LD_${dtype}(p, i)
#define ST(p, i, v) ST_${dtype}(p, i, v)
% if dtype == "half":
#define ST4(v, p) ST4_half(v, p)
% elif dtype == "bfloat16":
#define ST4(v, p) vstore4(bfloat16_bits4(v), 0, (p))
% else:
#define ST4(v, p) vstore4((v), 0, (p))
% endif

// The window of output (oh, ow): rows [h0, h1), columns [w0, w1) of the input, and the
// divisor of the average (PyTorch's rule: the padded-input window, or the valid part).
#define WINDOW(oh, ow) \
    int hs = (oh) * ${SH} - ${PH}, ws = (ow) * ${SW} - ${PW}; \
    int h0 = max(hs, 0), w0 = max(ws, 0); \
    int h1 = min(hs + ${KH}, H), w1 = min(ws + ${KW}, W);
% if COUNT_INCLUDE_PAD:
#define DIVISOR ((float)((min(hs + ${KH}, H + ${PH}) - hs) * (min(ws + ${KW}, W + ${PW}) - ws)))
% else:
#define DIVISOR ((float)((h1 - h0) * (w1 - w0)))
% endif

% if MODE == "max":
// Index (h*W + w) of the first maximum of the window, scanning rows then columns:
// ties go to the first index, as the backward pass routes the gradient there. A NaN
// beats every number and a later NaN an earlier one, so the window's output is NaN and
// its gradient goes to the last NaN (PyTorch's max_pool2d).
inline int window_argmax(__global const DT *x, int H, int W, int oh, int ow)
{
    WINDOW(oh, ow)
    int best = h0 * W + w0;
    float m = LD(x, best);
    for (int h = h0; h < h1; h++)
        for (int w = w0; w < w1; w++) {
            float v = LD(x, h * W + w);
            const bool take = v > m || isnan(v);  // selects, not a branch on the data
            m = take ? v : m;
            best = take ? h * W + w : best;
        }
    return best;
}
% endif
% if CPU:

// CPU drivers: four neighbouring outputs (ow .. ow + 3) of a row whose windows lie
// wholly inside the input, as float4 lanes (the same scan order and NaN rule per lane)
inline void pool_four(__global const DT *x, int W, int hs, int ow, __global DT *y${", __global int *index" if MODE == "max" else ""})
{
    const int4 base = (int4)(0, ${SW}, ${2 * SW}, ${3 * SW}) + hs * W + ow * ${SW} - ${PW};
    % if MODE == "max":
    float4 m = (float4)(LD(x, base.s0), LD(x, base.s1), LD(x, base.s2), LD(x, base.s3));
    int4 best = base;
    % else:
    float4 m = 0.0f;
    % endif
    % for h in range(KH):
        % for w in range(KW):
            % if MODE != "max" or (h, w) != (0, 0):
    {
        const int4 at = base + ${h} * W + ${w};
        const float4 v = (float4)(LD(x, at.s0), LD(x, at.s1), LD(x, at.s2), LD(x, at.s3));
                % if MODE == "max":
        // (comparisons, not isgreater/isnan/select: PoCL may call those out of line,
        // common.h; a vector comparison is -1 where true, and v != v only for NaN)
        const int4 take = (v > m) | (v != v);
        m = take ? v : m;
        best = take ? at : best;
                % else:
        m += v;
                % endif
    }
            % endif
        % endfor
    % endfor
    % if MODE == "max":
    ST4(m, y);
    if (index)
        vstore4(best, 0, index);
    % else:
    ST4(m / ${float(KH * KW)}f, y);
    % endif
}
% endif

<%def name="forward_kernel(name, save_index)">
__kernel void ${name}(ulong total, int H, int W, int OH, int OW,
                      __global const DT *x, ulong x_offset,
                      __global DT *y, ulong y_offset${", __global int *index, ulong index_offset" if save_index else ""})
{
% if CPU:
    // CPU drivers: a work-item per output row (no index division per element)
    const int oh = get_global_id(0);
    const ${IDX} plane = get_global_id(1);
    x += x_offset + plane * H * W;
    const int hs = oh * ${SH} - ${PH};
    const bool rows_inside = hs >= 0 && hs + ${KH} <= H;
    for (int ow = 0; ow < OW; ow++) {
    ${IDX} i = (plane * OH + oh) * OW + ow;
    if (rows_inside && ow + 4 <= OW && ow * ${SW} - ${PW} >= 0
            && (ow + 3) * ${SW} - ${PW} + ${KW} <= W) {
        pool_four(x, W, hs, ow, y + y_offset + i${(", index + index_offset + i" if save_index else ", 0") if MODE == "max" else ""});
        ow += 3;
        continue;
    }
% else:
    ${IDX} i = get_global_id(0);
    if (i >= total)
        return;
    ${IDX} q = i / OW, plane = q / OH;
    int ow = i - q * OW, oh = q - plane * OH;
    x += x_offset + plane * H * W;
% endif
% if MODE == "max":
    int best = window_argmax(x, H, W, oh, ow);
    ST(y, y_offset + i, LD(x, best));
    % if save_index:
    index[index_offset + i] = best;
    % endif
% else:
    WINDOW(oh, ow)
    float s = 0;
    for (int h = h0; h < h1; h++)
        for (int w = w0; w < w1; w++)
            s += LD(x, h * W + w);
    ST(y, y_offset + i, s / DIVISOR);
% endif
% if CPU:
    }
% endif
}
</%def>
${forward_kernel("pooling_forward", False)}
% if MODE == "max":
// training: also keep each window's argmax (plane-local h*W + w) for backward
${forward_kernel("pooling_forward_index", True)}
% endif

// dx gathered per input element from the windows that contain it (no atomics, same
// result on every run): avg adds dy / divisor, max adds dy where the element is the
// window's saved argmax. dx = beta * dx + gradient; beta == 0 never reads dx.
__kernel void pooling_backward(ulong total, int H, int W, int OH, int OW,
% if MODE == "max":
                               __global const int *index, ulong index_offset,
% endif
                               __global const DT *dy, ulong dy_offset,
                               __global DT *dx, ulong dx_offset, float beta)
{
% if CPU:
    // CPU drivers: a work-item per plane adds each window's gradient into dx (a scatter
    // without races: the plane is its own); every dx element still receives its windows'
    // terms in (oh, ow) order, as the gather below adds them
    const ${IDX} plane = get_global_id(0);
    dy += dy_offset + plane * OH * OW;
    dx += dx_offset + plane * H * W;
    for (int k = 0; k < H * W; k++)
        ST(dx, k, beta == 0 ? 0.0f : beta * LD(dx, k));
    % if MODE == "max":
    index += index_offset + plane * OH * OW;
    for (int k = 0; k < OH * OW; k++)
        ST(dx, index[k], LD(dx, index[k]) + LD(dy, k));
    % else:
    for (int oh = 0; oh < OH; oh++)
        for (int ow = 0; ow < OW; ow++) {
            WINDOW(oh, ow)
            const float g = LD(dy, oh * OW + ow) / DIVISOR;
            for (int h = h0; h < h1; h++)
                for (int w = w0; w < w1; w++)
                    ST(dx, h * W + w, LD(dx, h * W + w) + g);
        }
    % endif
}
% else:
    ${IDX} i = get_global_id(0);
    if (i >= total)
        return;
    ${IDX} q = i / W, plane = q / H;
    int w = i - q * W, h = q - plane * H;
    dy += dy_offset + plane * OH * OW;
% if MODE == "max":
    index += index_offset + plane * OH * OW;
    int me = h * W + w;
% endif
    // windows oh with oh*SH - PH <= h < oh*SH - PH + KH
    int th = h + ${PH} - ${KH} + 1, tw = w + ${PW} - ${KW} + 1;
    int oh_lo = th <= 0 ? 0 : (th + ${SH} - 1) / ${SH};
    int ow_lo = tw <= 0 ? 0 : (tw + ${SW} - 1) / ${SW};
    int oh_hi = min(OH - 1, (h + ${PH}) / ${SH});
    int ow_hi = min(OW - 1, (w + ${PW}) / ${SW});
    float g = 0;
    for (int oh = oh_lo; oh <= oh_hi; oh++)
        for (int ow = ow_lo; ow <= ow_hi; ow++) {
% if MODE == "max":
            if (index[oh * OW + ow] == me)
                g += LD(dy, oh * OW + ow);
% else:
            WINDOW(oh, ow)
            g += LD(dy, oh * OW + ow) / DIVISOR;
% endif
        }
    dx += dx_offset + i;
    ST(dx, 0, beta == 0 ? g : beta * LD(dx, 0) + g);
}
% endif

// Global max backward: one work-item per plane finds the first maximum (the last NaN,
// if any, as window_argmax) and routes dy there.
__kernel void global_max_backward(ulong planes, ulong HW,
                                  __global const DT *x, ulong x_offset,
                                  __global const DT *dy, ulong dy_offset,
                                  __global DT *dx, ulong dx_offset, float beta)
{
    ulong p = get_global_id(0);
    if (p >= planes)
        return;
    x += x_offset + p * HW;
    dx += dx_offset + p * HW;
    ulong best = 0;
    float m = LD(x, 0);
    for (ulong k = 1; k < HW; k++) {
        const float v = LD(x, k);
        if (v > m || isnan(v)) {
            m = v;
            best = k;
        }
    }
    float g = LD(dy, dy_offset + p);
    for (ulong k = 0; k < HW; k++) {
        float v = k == best ? g : 0.0f;
        ST(dx, k, beta == 0 ? v : beta * LD(dx, k) + v);
    }
}
