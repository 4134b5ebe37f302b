<%include file="common.h"/>
// grid_sampler_2d / _3d (F.grid_sample), PyTorch's rules (GridSampler.h): DIMS 2 or 3
// spatial dims, INTERP "bilinear" (the 2^DIMS corners around the point), "nearest"
// (round half to even) or "bicubic" (2-D); padding 0 zeros, 1 border, 2 reflection; one work-item per
// output location, over every channel. Grid entries are (x, y[, z]): x along the last
// dim. The backward kernel adds each location's input gradient into dx with float
// atomics (dx float32, zeroed first) and writes the grid's gradient.
// T: the storage type (computed in float).
% if T in ("half", "bfloat16"):
#define LOAD(p, i) LD_${T}(p, i)
#define STORE(p, i, v) ST_${T}(p, i, v)
% else:
#define LOAD(p, i) ((p)[i])
#define STORE(p, i, v) ((p)[i] = (v))
% endif
// sizes: C; the input's D, H, W and the output's (D 1 for 2-D)
#define SIZES int C, int D, int H, int W, int DO, int HO, int WO, int padding, int align_corners
#define DIMS ${DIMS}
#define CORNERS (1 << DIMS)

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
// normalised coordinate x (-1 .. 1) as a position along a dim of size; *grad: d(pos)/dx
inline float unnormalize(float x, int size, int align_corners, float *grad)
{
    *grad = align_corners ? (size - 1) / 2.0f : size / 2.0f;
    return align_corners ? (x + 1) / 2 * (size - 1) : ((x + 1) * size - 1) / 2;
}

// position x brought inside by the padding rule; *grad: its derivative
inline float pad_position(float x, int size, int padding, int align_corners, float *grad)
{
    float g1 = 1, g2 = 1;
    if (padding == 1) {
        x = clip_grad(x, size, &g1);
    } else if (padding == 2) {
        x = align_corners ? reflect_grad(x, 0, 2 * (size - 1), &g2)
                          : reflect_grad(x, -1, 2 * size - 1, &g2);
        x = clip_grad(x, size, &g1);
    }
    *grad = g1 * g2;
    // far outside (or NaN): a position that no tap reads, as PyTorch's int range guard
    if (!(x > -100.0f && x < (float)INT_MAX / 2))
        x = -100.0f;
    return x;
}

// the source position of normalised coordinate x, and d(position)/dx
inline float source_index(float x, int size, int padding, int align_corners, float *grad)
{
    float g1, g2;
    x = pad_position(unnormalize(x, size, align_corners, &g1), size, padding, align_corners, &g2);
    *grad = g1 * g2;
    return x;
}

#define INSIDE(p) ((p)[0] >= 0 && (p)[0] < W && (p)[1] >= 0 && (p)[1] < H \
                   && (DIMS == 2 || ((p)[2] >= 0 && (p)[2] < D)))
#define OFFSET(p) ((((ulong)(DIMS == 3 ? (p)[2] : 0) * H + (p)[1]) * W) + (p)[0])

// the source positions of location g (x, y[, z]) and d(position)/d(grid)
inline void positions(__global const ${T} *grid, ulong g, int D, int H, int W, int padding,
                      int align_corners, float *at, float *mult)
{
    const int size[3] = {W, H, D};
    for (int d = 0; d < DIMS; ++d)
        at[d] = source_index(LOAD(grid, DIMS * g + d), size[d], padding, align_corners, mult + d);
}

% if INTERP == "bicubic":
// bicubic (2-D only): the 4 x 4 taps around the unnormalised point (no padding rule for
// the point itself: each tap is brought inside on its own, as PyTorch does), Keys'
// cubic with A = -0.75 as upsample_bicubic2d
inline void cubic_weights(float t, float *w)
{
    const float A = -0.75f;
    float x = t + 1.0f;
    w[0] = ((A * x - 5 * A) * x + 8 * A) * x - 4 * A;
    w[1] = ((A + 2) * t - (A + 3)) * t * t + 1;
    x = 1.0f - t;
    w[2] = ((A + 2) * x - (A + 3)) * x * x + 1;
    x += 1.0f;
    w[3] = ((A * x - 5 * A) * x + 8 * A) * x - 4 * A;
}

inline void cubic_weight_grads(float t, float *g)
{
    const float A = -0.75f;
    float x = -1 - t;
    g[0] = (-3 * A * x - 10 * A) * x - 8 * A;
    x = -t;
    g[1] = (-3 * (A + 2) * x - 2 * (A + 3)) * x;
    x = 1 - t;
    g[2] = (3 * (A + 2) * x - 2 * (A + 3)) * x;
    x = 2 - t;
    g[3] = (3 * A * x - 10 * A) * x + 8 * A;
}

// the 4 taps along a dim from base: positions after the padding rule, -1 where outside
inline void cubic_taps(float base, int size, int padding, int align_corners, int *tap)
{
    float unused;
    for (int k = 0; k < 4; ++k) {
        int p = (int)pad_position(base - 1 + k, size, padding, align_corners, &unused);
        tap[k] = p >= 0 && p < size ? p : -1;
    }
}

#define CUBIC_SETUP \
    float mx, my; \
    float ix = unnormalize(LOAD(grid + grid_offset, 2 * g), W, align_corners, &mx); \
    float iy = unnormalize(LOAD(grid + grid_offset, 2 * g + 1), H, align_corners, &my); \
    float bx = floor(ix), by = floor(iy); \
    float wx[4], wy[4]; \
    int tx[4], ty[4]; \
    cubic_weights(ix - bx, wx); \
    cubic_weights(iy - by, wy); \
    cubic_taps(bx, W, padding, align_corners, tx); \
    cubic_taps(by, H, padding, align_corners, ty);
% endif

% if INTERP == "bilinear":
// corner k (bit d: the upper neighbour along d) of the cell at lo: its position and
// weight, and d(weight)/d(position d) in dw
inline float corner(int k, const float *at, const int *lo, int *p, float *dw)
{
    float part[DIMS], w = 1.0f;
    for (int d = 0; d < DIMS; ++d) {
        int up = (k >> d) & 1;
        p[d] = lo[d] + up;
        part[d] = up ? at[d] - lo[d] : lo[d] + 1 - at[d];
        w *= part[d];
    }
    for (int d = 0; d < DIMS; ++d) {
        float rest = ((k >> d) & 1) ? 1.0f : -1.0f;
        for (int e = 0; e < DIMS; ++e)
            if (e != d)
                rest *= part[e];
        dw[d] = rest;
    }
    return w;
}
% endif

__kernel void grid_sample_forward(ulong total, SIZES,
                                  __global const ${T} *x, ulong x_offset,
                                  __global const ${T} *grid, ulong grid_offset,
                                  __global ${T} *y, ulong y_offset)
{
    ulong g = get_global_id(0);    // (n, location)
    if (g >= total)
        return;
    const ulong out_plane = (ulong)DO * HO * WO, in_plane = (ulong)D * H * W;
    ulong n = g / out_plane, loc = g % out_plane;
    float at[DIMS], mult[DIMS];
% if INTERP != "bicubic":
    positions(grid + grid_offset, g, D, H, W, padding, align_corners, at, mult);
% endif
    __global const ${T} *xp = x + x_offset + n * C * in_plane;
    __global ${T} *yp = y + y_offset + n * C * out_plane + loc;
% if INTERP == "bicubic":
    CUBIC_SETUP
    for (int c = 0; c < C; ++c) {
        __global const ${T} *plane = xp + c * in_plane;
        float v = 0;
        for (int j = 0; j < 4; ++j) {
            float row = 0;
            for (int i = 0; i < 4; ++i)
                row += (tx[i] >= 0 && ty[j] >= 0 ? LOAD(plane, (ulong)ty[j] * W + tx[i]) : 0.0f)
                       * wx[i];
            v += row * wy[j];
        }
        STORE(yp, c * out_plane, v);
    }
% elif INTERP == "nearest":
    int p[3] = {0, 0, 0};
    for (int d = 0; d < DIMS; ++d)
        p[d] = (int)rint(at[d]);
    for (int c = 0; c < C; ++c)
        STORE(yp, c * out_plane, INSIDE(p) ? LOAD(xp, c * in_plane + OFFSET(p)) : 0.0f);
% else:
    int lo[3] = {0, 0, 0}, p[3] = {0, 0, 0};
    float w[CORNERS], dw[DIMS];
    for (int d = 0; d < DIMS; ++d)
        lo[d] = (int)floor(at[d]);
    for (int k = 0; k < CORNERS; ++k)
        w[k] = corner(k, at, lo, p, dw);
    for (int c = 0; c < C; ++c) {
        float v = 0;
        for (int k = 0; k < CORNERS; ++k) {
            corner(k, at, lo, p, dw);
            if (INSIDE(p))
                v += LOAD(xp, c * in_plane + OFFSET(p)) * w[k];
        }
        STORE(yp, c * out_plane, v);
    }
% endif
}

// dx (float32, zeroed; not written where want_dx is 0) += the adjoint; dgrid written
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
    const ulong out_plane = (ulong)DO * HO * WO, in_plane = (ulong)D * H * W;
    ulong n = g / out_plane, loc = g % out_plane;
    float at[DIMS], mult[DIMS], gat[DIMS];
% if INTERP != "bicubic":
    positions(grid + grid_offset, g, D, H, W, padding, align_corners, at, mult);
% endif
    __global const ${T} *xp = x + x_offset + n * C * in_plane;
    __global const ${T} *dyp = dy + dy_offset + n * C * out_plane + loc;
    __global float *dxp = dx + dx_offset + n * C * in_plane;
    for (int d = 0; d < DIMS; ++d)
        gat[d] = 0.0f;
% if INTERP == "bicubic":
    CUBIC_SETUP
    float gx[4], gy[4];
    cubic_weight_grads(ix - bx, gx);
    cubic_weight_grads(iy - by, gy);
    mult[0] = mx;
    mult[1] = my;
    for (int c = 0; c < C; ++c) {
        float d = LOAD(dyp, c * out_plane);
        __global const ${T} *plane = xp + c * in_plane;
        for (int i = 0; i < 4; ++i)
            for (int j = 0; j < 4; ++j) {
                if (tx[i] < 0 || ty[j] < 0)
                    continue;
                ulong at_ij = (ulong)ty[j] * W + tx[i];
                if (want_dx)
                    atomic_add_float(dxp + c * in_plane + at_ij, d * wx[i] * wy[j]);
                float v = LOAD(plane, at_ij);
                gat[0] -= v * gx[i] * wy[j] * d;
                gat[1] -= v * gy[j] * wx[i] * d;
            }
    }
% elif INTERP == "nearest":
    int p[3] = {0, 0, 0};
    for (int d = 0; d < DIMS; ++d)
        p[d] = (int)rint(at[d]);
    if (want_dx && INSIDE(p))
        for (int c = 0; c < C; ++c)
            atomic_add_float(dxp + c * in_plane + OFFSET(p), LOAD(dyp, c * out_plane));
% else:
    int lo[3] = {0, 0, 0}, p[3] = {0, 0, 0};
    float dw[DIMS];
    for (int d = 0; d < DIMS; ++d)
        lo[d] = (int)floor(at[d]);
    for (int k = 0; k < CORNERS; ++k) {
        float w = corner(k, at, lo, p, dw);
        if (!INSIDE(p))
            continue;
        ulong at_k = OFFSET(p);
        float gsum = 0.0f;   // sum over channels of value * dy
        for (int c = 0; c < C; ++c) {
            float d = LOAD(dyp, c * out_plane);
            if (want_dx)
                atomic_add_float(dxp + c * in_plane + at_k, w * d);
            gsum += LOAD(xp, c * in_plane + at_k) * d;
        }
        for (int d = 0; d < DIMS; ++d)
            gat[d] += dw[d] * gsum;
    }
% endif
    for (int d = 0; d < DIMS; ++d)
        STORE(dgrid + dgrid_offset, DIMS * g + d, mult[d] * gat[d]);
}
