<%include file="common.h"/>
// grid_sampler_2d (F.grid_sample on 4-D inputs), PyTorch's rules (GridSampler.h):
// INTERP "bilinear" or "nearest" (round half to even); padding 0 zeros, 1 border,
// 2 reflection; one work-item per output location, over every channel. The backward
// kernel adds each location's input gradient into dx with float atomics (dx float32,
// zeroed first) and writes the grid's gradient.
// T: the storage type (computed in float).
% if T in ("half", "bfloat16"):
#define LOAD(p, i) LD_${T}(p, i)
#define STORE(p, i, v) ST_${T}(p, i, v)
% else:
#define LOAD(p, i) ((p)[i])
#define STORE(p, i, v) ((p)[i] = (v))
% endif
#define SIZES int C, int H, int W, int HO, int WO, int padding, int align_corners

inline float atomic_add_float(volatile __global float *p, float v)
{
    union { uint u; float f; } old, next;
    uint seen = 0;
    do {   // a compare-and-swap loop: OpenCL 1.2 has no float atomic add
        old.u = seen;
        next.f = old.f + v;
        seen = atomic_cmpxchg((volatile __global uint *)p, old.u, next.u);
    } while (seen != old.u);
    return old.f;
}

// clip to [0, size - 1]; *grad: its derivative
inline float clip_grad(float x, int size, float *grad)
{
    if (x <= 0) { *grad = 0; return 0; }
    if (x >= size - 1) { *grad = 0; return size - 1; }
    *grad = 1;
    return x;
}

// reflect into [low, high] given twice both bounds; *grad: its derivative
inline float reflect_grad(float x, int twice_low, int twice_high, float *grad)
{
    if (twice_low == twice_high) { *grad = 0; return 0; }
    float lo = twice_low / 2.0f, span = (twice_high - twice_low) / 2.0f;
    float sign = 1;
    x -= lo;
    if (x < 0) { sign = -1; x = -x; }
    float extra = fmod(x, span);
    int flips = (int)floor(x / span);
    if (flips % 2 == 0) { *grad = sign; return extra + lo; }
    *grad = -sign;
    return span - extra + lo;
}

// the source position of normalised coordinate x along a dim of size, and d(pos)/dx
inline float source_index(float x, int size, int padding, int align_corners, float *grad)
{
    float scale = align_corners ? (size - 1) / 2.0f : size / 2.0f;
    x = align_corners ? (x + 1) / 2 * (size - 1) : ((x + 1) * size - 1) / 2;
    float g1 = 1, g2 = 1;
    if (padding == 1) {
        x = clip_grad(x, size, &g1);
    } else if (padding == 2) {
        x = align_corners ? reflect_grad(x, 0, 2 * (size - 1), &g2)
                          : reflect_grad(x, -1, 2 * size - 1, &g2);
        x = clip_grad(x, size, &g1);
    }
    *grad = scale * g1 * g2;
    // far outside (or NaN): a position that no tap reads, as PyTorch's int range guard
    if (!(x > -100.0f && x < (float)INT_MAX / 2))
        x = -100.0f;
    return x;
}

#define INSIDE(yy, xx) ((yy) >= 0 && (yy) < H && (xx) >= 0 && (xx) < W)

__kernel void grid_sample_forward(ulong total, SIZES,
                                  __global const ${T} *x, ulong x_offset,
                                  __global const ${T} *grid, ulong grid_offset,
                                  __global ${T} *y, ulong y_offset)
{
    ulong g = get_global_id(0);    // (n, ho, wo)
    if (g >= total)
        return;
    ulong n = g / ((ulong)HO * WO), hw = g % ((ulong)HO * WO);
    float gx, gy;
    float ix = source_index(LOAD(grid + grid_offset, 2 * g), W, padding, align_corners, &gx);
    float iy = source_index(LOAD(grid + grid_offset, 2 * g + 1), H, padding, align_corners, &gy);
    __global const ${T} *xp = x + x_offset + n * C * H * W;
    __global ${T} *yp = y + y_offset + n * C * HO * WO + hw;
% if INTERP == "nearest":
    int cx = (int)rint(ix), cy = (int)rint(iy);
    for (int c = 0; c < C; ++c)
        STORE(yp, (ulong)c * HO * WO, INSIDE(cy, cx) ? LOAD(xp, ((ulong)c * H + cy) * W + cx) : 0.0f);
% else:
    int x0 = (int)floor(ix), y0 = (int)floor(iy), x1 = x0 + 1, y1 = y0 + 1;
    float nw = (x1 - ix) * (y1 - iy), ne = (ix - x0) * (y1 - iy);
    float sw = (x1 - ix) * (iy - y0), se = (ix - x0) * (iy - y0);
    for (int c = 0; c < C; ++c) {
        __global const ${T} *plane = xp + (ulong)c * H * W;
        float v = 0;
        if (INSIDE(y0, x0)) v += LOAD(plane, (ulong)y0 * W + x0) * nw;
        if (INSIDE(y0, x1)) v += LOAD(plane, (ulong)y0 * W + x1) * ne;
        if (INSIDE(y1, x0)) v += LOAD(plane, (ulong)y1 * W + x0) * sw;
        if (INSIDE(y1, x1)) v += LOAD(plane, (ulong)y1 * W + x1) * se;
        STORE(yp, (ulong)c * HO * WO, v);
    }
% endif
}

// dx (float32, zeroed; null: not wanted) += the adjoint; dgrid written
__kernel void grid_sample_backward(ulong total, SIZES, int want_dx,
                                   __global const ${T} *dy, ulong dy_offset,
                                   __global const ${T} *x, ulong x_offset,
                                   __global const ${T} *grid, ulong grid_offset,
                                   __global float *dx, ulong dx_offset,
                                   __global ${T} *dgrid, ulong dgrid_offset)
{
    ulong g = get_global_id(0);
    if (g >= total)
        return;
    ulong n = g / ((ulong)HO * WO), hw = g % ((ulong)HO * WO);
    float mx, my;
    float ix = source_index(LOAD(grid + grid_offset, 2 * g), W, padding, align_corners, &mx);
    float iy = source_index(LOAD(grid + grid_offset, 2 * g + 1), H, padding, align_corners, &my);
    __global const ${T} *xp = x + x_offset + n * C * H * W;
    __global const ${T} *dyp = dy + dy_offset + n * C * HO * WO + hw;
    __global float *dxp = dx + dx_offset + n * C * H * W;
    float gix = 0, giy = 0;
% if INTERP == "nearest":
    int cx = (int)rint(ix), cy = (int)rint(iy);
    if (want_dx && INSIDE(cy, cx))
        for (int c = 0; c < C; ++c)
            atomic_add_float(dxp + ((ulong)c * H + cy) * W + cx, LOAD(dyp, (ulong)c * HO * WO));
% else:
    int x0 = (int)floor(ix), y0 = (int)floor(iy), x1 = x0 + 1, y1 = y0 + 1;
    float nw = (x1 - ix) * (y1 - iy), ne = (ix - x0) * (y1 - iy);
    float sw = (x1 - ix) * (iy - y0), se = (ix - x0) * (iy - y0);
    for (int c = 0; c < C; ++c) {
        float d = LOAD(dyp, (ulong)c * HO * WO);
        __global const ${T} *plane = xp + (ulong)c * H * W;
        __global float *dplane = dxp + (ulong)c * H * W;
        if (INSIDE(y0, x0)) {
            float v = LOAD(plane, (ulong)y0 * W + x0);
            if (want_dx) atomic_add_float(dplane + (ulong)y0 * W + x0, nw * d);
            gix -= v * (y1 - iy) * d;
            giy -= v * (x1 - ix) * d;
        }
        if (INSIDE(y0, x1)) {
            float v = LOAD(plane, (ulong)y0 * W + x1);
            if (want_dx) atomic_add_float(dplane + (ulong)y0 * W + x1, ne * d);
            gix += v * (y1 - iy) * d;
            giy -= v * (ix - x0) * d;
        }
        if (INSIDE(y1, x0)) {
            float v = LOAD(plane, (ulong)y1 * W + x0);
            if (want_dx) atomic_add_float(dplane + (ulong)y1 * W + x0, sw * d);
            gix -= v * (iy - y0) * d;
            giy += v * (x1 - ix) * d;
        }
        if (INSIDE(y1, x1)) {
            float v = LOAD(plane, (ulong)y1 * W + x1);
            if (want_dx) atomic_add_float(dplane + (ulong)y1 * W + x1, se * d);
            gix += v * (iy - y0) * d;
            giy += v * (ix - x0) * d;
        }
    }
% endif
    STORE(dgrid + dgrid_offset, 2 * g, mx * gix);
    STORE(dgrid + dgrid_offset, 2 * g + 1, my * giy);
}
