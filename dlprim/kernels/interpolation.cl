<%include file="common.h"/>
// 2-D resampling of (planes, H, W) into (planes, OH, OW) through per-axis tables built on
// the host (nearest and bilinear alike):
//   idx[o], idx[O + o]   the two source indices of output index o (equal for nearest)
//   w[o],   w[O + o]     their weights (the second is 0 for nearest)
//   idx[2O + i], idx[2O + I + i]   first and one-past-last output index reading source i
// Backward gathers over that range instead of scattering, so no atomics are needed.
// Work items form a 3-D grid (column, row, plane): no index division; IT is the type of
// plane offsets (uint when they fit). NEAREST: one source per output, weights all 1.

__kernel void interp_forward(int H, int W, int OH, int OW,
                             __global const int *iy, ulong iy_offset,
                             __global const float *wy, ulong wy_offset,
                             __global const int *ix, ulong ix_offset,
                             __global const float *wx, ulong wx_offset,
                             __global const float *x, ulong x_offset,
                             __global float *y, ulong y_offset)
{
    int ox = get_global_id(0), oy = get_global_id(1);
    ${IT} plane = get_global_id(2);
    if (ox >= OW || oy >= OH)
        return;
    iy += iy_offset; wy += wy_offset; ix += ix_offset; wx += wx_offset;
    __global const float *xp = x + x_offset + plane * (${IT})(H * W);
    __global float *yp = y + y_offset + plane * (${IT})(OH * OW) + oy * OW + ox;
% if NEAREST:
    *yp = xp[iy[oy] * W + ix[ox]];
% else:
    int r0 = iy[oy] * W, r1 = iy[OH + oy] * W, c0 = ix[ox], c1 = ix[OW + ox];
    float a0 = wy[oy], a1 = wy[OH + oy], b0 = wx[ox], b1 = wx[OW + ox];
    *yp = a0 * (b0 * xp[r0 + c0] + b1 * xp[r0 + c1]) + a1 * (b0 * xp[r1 + c0] + b1 * xp[r1 + c1]);
% endif
}

// weight of source index s in output index o along one axis
inline float axis_weight(__global const int *idx, __global const float *w, int O, int o, int s)
{
    return (idx[o] == s ? w[o] : 0.0f) + (idx[O + o] == s ? w[O + o] : 0.0f);
}

// dx[p, r, c] = beta * dx[p, r, c] + sum_{oy, ox} wy(oy, r) * wx(ox, c) * dy[p, oy, ox]
__kernel void interp_backward(int H, int W, int OH, int OW,
                              __global const int *iy, ulong iy_offset,
                              __global const float *wy, ulong wy_offset,
                              __global const int *ix, ulong ix_offset,
                              __global const float *wx, ulong wx_offset,
                              __global const float *dy, ulong dy_offset,
                              __global float *dx, ulong dx_offset, float beta)
{
    int c = get_global_id(0), r = get_global_id(1);
    ${IT} plane = get_global_id(2);
    if (c >= W || r >= H)
        return;
    iy += iy_offset; wy += wy_offset; ix += ix_offset; wx += wx_offset;
    __global const float *dyp = dy + dy_offset + plane * (${IT})(OH * OW);
    int y_begin = iy[2 * OH + r], y_end = iy[2 * OH + H + r];
    int x_begin = ix[2 * OW + c], x_end = ix[2 * OW + W + c];
    float g = 0.0f;
    for (int oy = y_begin; oy < y_end; oy++) {
% if NEAREST:
        for (int ox = x_begin; ox < x_end; ox++)
            g += dyp[oy * OW + ox];
% else:
        float a = axis_weight(iy, wy, OH, oy, r);
        float row = 0.0f;
        for (int ox = x_begin; ox < x_end; ox++)
            row += axis_weight(ix, wx, OW, ox, c) * dyp[oy * OW + ox];
        g += a * row;
% endif
    }
    ${IT} i = dx_offset + plane * (${IT})(H * W) + r * W + c;
    dx[i] = (beta == 0.0f) ? g : g + beta * dx[i];
}
