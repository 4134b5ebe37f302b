<%include file="common.h"/>
## Winograd F(2x2, 3x3) (Lavin & Gray, "Fast Algorithms for Convolutional Neural Networks",
## 2015): each 2x2 output tile is A^T [ (G g G^T) .* (B^T d B) ] A over a 4x4 input tile d.
## The 16 elementwise products summed over input channels are 16 GEMMs (a batched GEMM);
## these kernels do the transforms around them. Layouts (T = tiles per image, BT = batch*T,
## column b*T + t, xi = 0..15 the transform element):
##   U[xi][out_c][in_c]   V[xi][in_c][BT]   M[xi][out_c][BT]
## Backward-filter (Lavin & Gray, section 5): dM = A dY A^T per output tile,
## dU[xi] = dM[xi] V[xi]^T summed over tiles, dW = G^T dU G.
<% act = "ACT_" + ACTIVATION %>

// U = G g G^T with G = [1 0 0; 1/2 1/2 1/2; 1/2 -1/2 1/2; 0 0 1]. With flip the filter of
// the transposed problem (backward data) is built: U'[xi][c][k] from g rotated by 180 degrees.
__kernel void winograd_filter(int out_c, int in_c, int flip,
                              __global const float *w, ulong w_offset,
                              __global float *u, ulong u_offset)
{
    const int o = get_global_id(1), i = get_global_id(0);
    if (o >= out_c || i >= in_c)
        return;
    // weight index [k][c]: forward (k, c) = (o, i); flipped (k, c) = (i, o)
    const int k = flip ? i : o, c = flip ? o : i;
    const int cols = flip ? out_c : in_c;
    __global const float *src = w + w_offset + (k * cols + c) * 9;
    float g[3][3];
    for (int r = 0; r < 3; r++)
        for (int s = 0; s < 3; s++)
            g[r][s] = flip ? src[(2 - r) * 3 + (2 - s)] : src[r * 3 + s];
    float t[4][3];
    for (int s = 0; s < 3; s++) {
        t[0][s] = g[0][s];
        t[1][s] = 0.5f * (g[0][s] + g[1][s] + g[2][s]);
        t[2][s] = 0.5f * (g[0][s] - g[1][s] + g[2][s]);
        t[3][s] = g[2][s];
    }
    u += u_offset + o * in_c + i;
    const int xi_step = out_c * in_c;
    for (int r = 0; r < 4; r++) {
        u[(r * 4 + 0) * xi_step] = t[r][0];
        u[(r * 4 + 1) * xi_step] = 0.5f * (t[r][0] + t[r][1] + t[r][2]);
        u[(r * 4 + 2) * xi_step] = 0.5f * (t[r][0] - t[r][1] + t[r][2]);
        u[(r * 4 + 3) * xi_step] = t[r][2];
    }
}

// V = B^T d B with B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1]; d read with zero padding
__kernel void winograd_input(int in_c, int in_h, int in_w, int tiles_w, int tiles, int bt,
                             int pad_h, int pad_w,
                             __global const float *x, ulong x_offset,
                             __global float *v, ulong v_offset)
{
    const int t = get_global_id(0), c = get_global_id(1), b = get_global_id(2);
    if (t >= tiles)
        return;
    const int th = t / tiles_w, tw = t - th * tiles_w;
    const int h0 = th * 2 - pad_h, w0 = tw * 2 - pad_w;
    __global const float *src = x + x_offset + (b * in_c + c) * in_h * in_w;
    float d[4][4];
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++) {
            const int h = h0 + i, ww = w0 + j;
            d[i][j] = (h >= 0 && h < in_h && ww >= 0 && ww < in_w) ? src[h * in_w + ww] : 0.0f;
        }
    float e[4][4];
    for (int j = 0; j < 4; j++) {
        e[0][j] = d[0][j] - d[2][j];
        e[1][j] = d[1][j] + d[2][j];
        e[2][j] = d[2][j] - d[1][j];
        e[3][j] = d[1][j] - d[3][j];
    }
    v += v_offset + c * bt + b * tiles + t;
    const int xi_step = in_c * bt;
    for (int i = 0; i < 4; i++) {
        v[(i * 4 + 0) * xi_step] = e[i][0] - e[i][2];
        v[(i * 4 + 1) * xi_step] = e[i][1] + e[i][2];
        v[(i * 4 + 2) * xi_step] = e[i][2] - e[i][1];
        v[(i * 4 + 3) * xi_step] = e[i][1] - e[i][3];
    }
}

// Y = A^T m A with A^T = [1 1 1 0; 0 1 -1 -1], then y = act(Y + bias + beta * y)
__kernel void winograd_output(int out_c, int out_h, int out_w, int tiles_w, int tiles, int bt,
                              __global const float *m, ulong m_offset,
                              __global float *y, ulong y_offset,
% if BIAS:
                              __global const float *bias, ulong bias_offset,
% endif
                              float beta)
{
    const int t = get_global_id(0), k = get_global_id(1), b = get_global_id(2);
    if (t >= tiles)
        return;
    __global const float *src = m + m_offset + k * bt + b * tiles + t;
    const int xi_step = out_c * bt;
    float p[4][4];
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++)
            p[i][j] = src[(i * 4 + j) * xi_step];
    float q[2][4];
    for (int j = 0; j < 4; j++) {
        q[0][j] = p[0][j] + p[1][j] + p[2][j];
        q[1][j] = p[1][j] - p[2][j] - p[3][j];
    }
    const int th = t / tiles_w, tw = t - th * tiles_w;
    __global float *dst = y + y_offset + (b * out_c + k) * out_h * out_w;
% if BIAS:
    const float bk = bias[bias_offset + k];
% else:
    const float bk = 0.0f;
% endif
    for (int i = 0; i < 2; i++) {
        const int h = th * 2 + i;
        if (h >= out_h)
            continue;
        const float r[2] = {q[i][0] + q[i][1] + q[i][2], q[i][1] - q[i][2] - q[i][3]};
        for (int j = 0; j < 2; j++) {
            const int ww = tw * 2 + j;
            if (ww >= out_w)
                continue;
            float val = r[j] + bk;
            if (beta != 0.0f)
                val += beta * dst[h * out_w + ww];
            dst[h * out_w + ww] = ${act}(val);
        }
    }
}

// dM = A dY A^T with A = [1 0; 1 1; 1 -1; 0 -1]: the adjoint of the output transform
__kernel void winograd_dy(int out_c, int out_h, int out_w, int tiles_w, int tiles, int bt,
                          __global const float *dy, ulong dy_offset,
                          __global float *dm, ulong dm_offset)
{
    const int t = get_global_id(0), k = get_global_id(1), b = get_global_id(2);
    if (t >= tiles)
        return;
    const int th = t / tiles_w, tw = t - th * tiles_w;
    __global const float *src = dy + dy_offset + (b * out_c + k) * out_h * out_w;
    float d[2][2];
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 2; j++) {
            const int h = th * 2 + i, w = tw * 2 + j;
            d[i][j] = (h < out_h && w < out_w) ? src[h * out_w + w] : 0.0f;
        }
    float q[4][2];
    for (int j = 0; j < 2; j++) {
        q[0][j] = d[0][j];
        q[1][j] = d[0][j] + d[1][j];
        q[2][j] = d[0][j] - d[1][j];
        q[3][j] = -d[1][j];
    }
    dm += dm_offset + k * bt + b * tiles + t;
    const int xi_step = out_c * bt;
    for (int i = 0; i < 4; i++) {
        dm[(i * 4 + 0) * xi_step] = q[i][0];
        dm[(i * 4 + 1) * xi_step] = q[i][0] + q[i][1];
        dm[(i * 4 + 2) * xi_step] = q[i][0] - q[i][1];
        dm[(i * 4 + 3) * xi_step] = -q[i][1];
    }
}

// dW[k][c] = beta * dW + G^T dU[:, k, c] G, G^T = [1 1/2 1/2 0; 0 1/2 -1/2 0; 0 1/2 1/2 1]
__kernel void winograd_filter_grad(int out_c, int in_c,
                                   __global const float *du, ulong du_offset,
                                   __global float *dw, ulong dw_offset, float beta)
{
    const int c = get_global_id(0), k = get_global_id(1);
    if (k >= out_c || c >= in_c)
        return;
    __global const float *src = du + du_offset + k * in_c + c;
    const int xi_step = out_c * in_c;
    float u[4][4];
    for (int i = 0; i < 16; i++)
        u[i / 4][i % 4] = src[i * xi_step];
    float t[3][4];
    for (int j = 0; j < 4; j++) {
        t[0][j] = u[0][j] + 0.5f * (u[1][j] + u[2][j]);
        t[1][j] = 0.5f * (u[1][j] - u[2][j]);
        t[2][j] = 0.5f * (u[1][j] + u[2][j]) + u[3][j];
    }
    __global float *dst = dw + dw_offset + (k * in_c + c) * 9;
    for (int r = 0; r < 3; r++) {
        const float g[3] = {t[r][0] + 0.5f * (t[r][1] + t[r][2]), 0.5f * (t[r][1] - t[r][2]),
                            0.5f * (t[r][1] + t[r][2]) + t[r][3]};
        for (int s = 0; s < 3; s++)
            dst[r * 3 + s] = beta == 0.0f ? g[s] : beta * dst[r * 3 + s] + g[s];
    }
}
