<%include file="common.h"/>
## Winograd F(MxM, RxR), M = 2 or 4, R = 3 or 5 (Lavin & Gray, "Fast Algorithms for
## Convolutional Neural Networks", 2015): each MxM output tile is A^T [ (G g G^T) .* (B^T d B) ] A
## over an AxA input tile d, A = M + R - 1. The elementwise products summed over input
## channels are A^2 GEMMs (a batched GEMM); these kernels do the transforms around them,
## spelled out at render time from core/winograd_transforms.py's matrices (zeros dropped,
## +-1 without a multiply).
## Layouts (T = tiles per image, BT = batch*T, column b*T + t, xi the transform element):
##   U[xi][out_c][in_c]   V[xi][in_c][BT]   M[xi][out_c][BT]
## Backward-filter (ibid., section 5): dM = A dY A^T per output tile,
## dU[xi] = dM[xi] V[xi]^T summed over tiles, dW = G^T dU G.
## ACT_T: the storage of x, y and dy (float, or half widened as it loads); U, V, M float.
<%!
    from dlprim.core.winograd_transforms import matrices

    def lin(coefs, terms):
        """sum_j coefs[j] * terms[j] as a C expression."""
        out = ""
        for c, t in zip(coefs, terms):
            if c == 0:
                continue
            if c == 1 or c == -1:
                out += ("+" if c > 0 else "-") + t
            else:
                out += "%+.10ef*%s" % (float(c), t)
        if not out:
            return "0.0f"
        return out[1:] if out[0] == "+" else out

    def col(mat, j):
        return [row[j] for row in mat]
%>
<%
    M, R = TILE, KERNEL
    A = M + R - 1
    mats = matrices(M, R)
    BT, G, AT = mats["BT"], mats["G"], mats["AT"]
    act = "ACT_" + ACTIVATION
%>

// U = G g G^T. With flip the filter of the transposed problem (backward data) is built:
// U'[xi][c][k] from g rotated by 180 degrees.
__kernel void winograd_filter(int out_c, int in_c, int flip,
                              __global const float *w, ulong w_offset,
                              __global float *u, ulong u_offset)
{
    const int i = get_global_id(0), o = get_global_id(1);
    if (o >= out_c || i >= in_c)
        return;
    // weight index [k][c]: forward (k, c) = (o, i); flipped (k, c) = (i, o)
    const int k = flip ? i : o, c = flip ? o : i;
    const int cols = flip ? out_c : in_c;
    __global const float *src = w + w_offset + (k * cols + c) * ${R * R};
    float g[${R}][${R}];
    for (int r = 0; r < ${R}; r++)
        for (int s = 0; s < ${R}; s++)
            g[r][s] = flip ? src[(${R - 1} - r) * ${R} + (${R - 1} - s)] : src[r * ${R} + s];
% for a in range(A):
%   for s in range(R):
    const float t${a}_${s} = ${lin(G[a], ["g[%d][%d]" % (r, s) for r in range(R)])};
%   endfor
% endfor
    u += u_offset + o * in_c + i;
    const int xi_step = out_c * in_c;
% for a in range(A):
%   for b in range(A):
    u[${a * A + b} * xi_step] = ${lin(G[b], ["t%d_%d" % (a, s) for s in range(R)])};
%   endfor
% endfor
}

// V = B^T d B; d read with zero padding
__kernel void winograd_input(int in_c, int in_h, int in_w, int tiles_w, int tiles, int bt,
                             int pad_h, int pad_w,
                             __global const ${ACT_T} *x, ulong x_offset,
                             __global float *v, ulong v_offset)
{
% if CPU:
    // CPU drivers: a work-item per (channel, image) walks every tile of the plane
    const int c = get_global_id(1), b = get_global_id(2);
    for (int t = 0; t < tiles; t++) {
% else:
    const int t = get_global_id(0), c = get_global_id(1), b = get_global_id(2);
    if (t >= tiles || c >= in_c)
        return;
% endif
    const int th = t / tiles_w, tw = t - th * tiles_w;
    const int h0 = th * ${M} - pad_h, w0 = tw * ${M} - pad_w;
    __global const ${ACT_T} *src = x + x_offset + (b * in_c + c) * in_h * in_w;
    float d[${A}][${A}];
    if (h0 >= 0 && h0 + ${A} <= in_h && w0 >= 0 && w0 + ${A} <= in_w) {
        // inside the plane (most tiles): no bounds checks
        for (int i = 0; i < ${A}; i++)
            for (int j = 0; j < ${A}; j++)
                d[i][j] = LD_${ACT_T}(src, (h0 + i) * in_w + w0 + j);
    } else {
        for (int i = 0; i < ${A}; i++)
            for (int j = 0; j < ${A}; j++) {
                const int h = h0 + i, ww = w0 + j;
                d[i][j] = (h >= 0 && h < in_h && ww >= 0 && ww < in_w) ? LD_${ACT_T}(src, h * in_w + ww) : 0.0f;
            }
    }
% for a in range(A):
%   for j in range(A):
    const float e${a}_${j} = ${lin(BT[a], ["d[%d][%d]" % (k, j) for k in range(A)])};
%   endfor
% endfor
    __global float *vt = v + v_offset + c * bt + b * tiles + t;
    const int xi_step = in_c * bt;
% for a in range(A):
%   for b in range(A):
    vt[${a * A + b} * xi_step] = ${lin(BT[b], ["e%d_%d" % (a, k) for k in range(A)])};
%   endfor
% endfor
% if CPU:
    }
% endif
}

// Y = A^T m A, then y = act(Y + bias + beta * y)
__kernel void winograd_output(int out_c, int out_h, int out_w, int tiles_w, int tiles, int bt,
                              __global const float *m, ulong m_offset,
                              __global ${ACT_T} *y, ulong y_offset,
% if BIAS:
                              __global const float *bias, ulong bias_offset,
% endif
                              float beta)
{
% if CPU:
    // CPU drivers: a work-item per (channel, image) walks every tile of the plane
    const int k = get_global_id(1), b = get_global_id(2);
    for (int t = 0; t < tiles; t++) {
% else:
    const int t = get_global_id(0), k = get_global_id(1), b = get_global_id(2);
    if (t >= tiles || k >= out_c)
        return;
% endif
    __global const float *src = m + m_offset + k * bt + b * tiles + t;
    const int xi_step = out_c * bt;
    float p[${A}][${A}];
    for (int i = 0; i < ${A * A}; i++)
        p[i / ${A}][i % ${A}] = src[i * xi_step];
% for a in range(M):
%   for j in range(A):
    const float q${a}_${j} = ${lin(AT[a], ["p[%d][%d]" % (k, j) for k in range(A)])};
%   endfor
% endfor
    float r[${M}][${M}];
% for a in range(M):
%   for j in range(M):
    r[${a}][${j}] = ${lin(AT[j], ["q%d_%d" % (a, k) for k in range(A)])};
%   endfor
% endfor
    const int th = t / tiles_w, tw = t - th * tiles_w;
    __global ${ACT_T} *dst = y + y_offset + (b * out_c + k) * out_h * out_w;
% if BIAS:
    const float bk = bias[bias_offset + k];
% else:
    const float bk = 0.0f;
% endif
    // the tile's rows and columns inside the plane (all of them but at the edges)
    const int rows = min(${M}, out_h - th * ${M}), cols = min(${M}, out_w - tw * ${M});
    for (int i = 0; i < rows; i++) {
        __global ${ACT_T} *out = dst + (th * ${M} + i) * out_w + tw * ${M};
        for (int j = 0; j < cols; j++) {
            float val = r[i][j] + bk;
            if (beta != 0.0f)
                val += beta * LD_${ACT_T}(out, j);
            ST_${ACT_T}(out, j, ${act}(val));
        }
    }
% if CPU:
    }
% endif
}

// dM = A dY A^T: the adjoint of the output transform
__kernel void winograd_dy(int out_c, int out_h, int out_w, int tiles_w, int tiles, int bt,
                          __global const ${ACT_T} *dy, ulong dy_offset,
                          __global float *dm, ulong dm_offset)
{
% if CPU:
    // CPU drivers: a work-item per (channel, image) walks every tile of the plane
    const int k = get_global_id(1), b = get_global_id(2);
    for (int t = 0; t < tiles; t++) {
% else:
    const int t = get_global_id(0), k = get_global_id(1), b = get_global_id(2);
    if (t >= tiles || k >= out_c)
        return;
% endif
    const int th = t / tiles_w, tw = t - th * tiles_w;
    __global const ${ACT_T} *src = dy + dy_offset + (b * out_c + k) * out_h * out_w;
    float d[${M}][${M}];
    for (int i = 0; i < ${M}; i++)
        for (int j = 0; j < ${M}; j++) {
            const int h = th * ${M} + i, w = tw * ${M} + j;
            d[i][j] = (h < out_h && w < out_w) ? LD_${ACT_T}(src, h * out_w + w) : 0.0f;
        }
% for a in range(A):
%   for j in range(M):
    const float q${a}_${j} = ${lin(col(AT, a), ["d[%d][%d]" % (k, j) for k in range(M)])};
%   endfor
% endfor
    __global float *dmt = dm + dm_offset + k * bt + b * tiles + t;
    const int xi_step = out_c * bt;
% for a in range(A):
%   for b in range(A):
    dmt[${a * A + b} * xi_step] = ${lin(col(AT, b), ["q%d_%d" % (a, l) for l in range(M)])};
%   endfor
% endfor
% if CPU:
    }
% endif
}

// dW[k][c] = beta * dW + G^T dU[:, k, c] G
__kernel void winograd_filter_grad(int out_c, int in_c,
                                   __global const float *du, ulong du_offset,
                                   __global float *dw, ulong dw_offset, float beta)
{
    const int c = get_global_id(0), k = get_global_id(1);
    if (k >= out_c || c >= in_c)
        return;
    __global const float *src = du + du_offset + k * in_c + c;
    const int xi_step = out_c * in_c;
    float u[${A}][${A}];
    for (int i = 0; i < ${A * A}; i++)
        u[i / ${A}][i % ${A}] = src[i * xi_step];
% for r in range(R):
%   for j in range(A):
    const float t${r}_${j} = ${lin(col(G, r), ["u[%d][%d]" % (k, j) for k in range(A)])};
%   endfor
% endfor
    __global float *dst = dw + dw_offset + (k * in_c + c) * ${R * R};
    float g;
% for r in range(R):
%   for s in range(R):
    g = ${lin(col(G, s), ["t%d_%d" % (r, l) for l in range(A)])};
    dst[${r * R + s}] = beta == 0.0f ? g : beta * dst[${r * R + s}] + g;
%   endfor
% endfor
}
