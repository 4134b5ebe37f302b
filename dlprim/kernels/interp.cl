<%include file="common.h"/>
// 2-D resampling of (planes, H, W) into (planes, OH, OW) through per-axis tables built on
// the host (nearest and bilinear alike):
//   idx[o], idx[O + o]   the two source indices of output index o (equal for nearest)
//   w[o],   w[O + o]     their weights (the second is 0 for nearest)
//   idx[2O + i], idx[2O + I + i]   first and one-past-last output index reading source i
// Backward gathers over that range instead of scattering, so no atomics are needed.

__kernel void interp_forward(ulong total, ulong H, ulong W, ulong OH, ulong OW,
                             __global const int *iy, ulong iy_offset,
                             __global const float *wy, ulong wy_offset,
                             __global const int *ix, ulong ix_offset,
                             __global const float *wx, ulong wx_offset,
                             __global const float *x, ulong x_offset,
                             __global float *y, ulong y_offset)
{
    ulong i = get_global_id(0);
    if (i >= total)
        return;
    iy += iy_offset; wy += wy_offset; ix += ix_offset; wx += wx_offset;
    ulong ox = i % OW, t = i / OW;
    ulong oy = t % OH, plane = t / OH;
    __global const float *xp = x + x_offset + plane * H * W;
    int r0 = iy[oy], r1 = iy[OH + oy], c0 = ix[ox], c1 = ix[OW + ox];
    float a0 = wy[oy], a1 = wy[OH + oy], b0 = wx[ox], b1 = wx[OW + ox];
    y[y_offset + i] = a0 * (b0 * xp[r0 * W + c0] + b1 * xp[r0 * W + c1])
                    + a1 * (b0 * xp[r1 * W + c0] + b1 * xp[r1 * W + c1]);
}

// weight of source index s in output index o along one axis
inline float axis_weight(__global const int *idx, __global const float *w, ulong O, ulong o, int s)
{
    return (idx[o] == s ? w[o] : 0.0f) + (idx[O + o] == s ? w[O + o] : 0.0f);
}

// dx[p, r, c] = beta * dx[p, r, c] + sum_{oy, ox} wy(oy, r) * wx(ox, c) * dy[p, oy, ox]
__kernel void interp_backward(ulong total, ulong H, ulong W, ulong OH, ulong OW,
                              __global const int *iy, ulong iy_offset,
                              __global const float *wy, ulong wy_offset,
                              __global const int *ix, ulong ix_offset,
                              __global const float *wx, ulong wx_offset,
                              __global const float *dy, ulong dy_offset,
                              __global float *dx, ulong dx_offset, float beta)
{
    ulong i = get_global_id(0);
    if (i >= total)
        return;
    iy += iy_offset; wy += wy_offset; ix += ix_offset; wx += wx_offset;
    int c = i % W;
    ulong t = i / W;
    int r = t % H;
    ulong plane = t / H;
    __global const float *dyp = dy + dy_offset + plane * OH * OW;
    int y_begin = iy[2 * OH + r], y_end = iy[2 * OH + H + r];
    int x_begin = ix[2 * OW + c], x_end = ix[2 * OW + W + c];
    float g = 0.0f;
    for (int oy = y_begin; oy < y_end; oy++) {
        float a = axis_weight(iy, wy, OH, oy, r);
        float row = 0.0f;
        for (int ox = x_begin; ox < x_end; ox++)
            row += axis_weight(ix, wx, OW, ox, c) * dyp[oy * OW + ox];
        g += a * row;
    }
    dx[dx_offset + i] = (beta == 0.0f) ? g : g + beta * dx[dx_offset + i];
}
