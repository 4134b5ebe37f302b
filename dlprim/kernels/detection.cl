<%include file="common.h"/>
// torchvision's detection operators (core/detection.py), its CPU kernels' arithmetic:
// nms (the IoU bitmask of boxes in score order, then one work-group walks it), roi_align
// and roi_pool with their gradients. T: the storage type; A: the compute type (float for
// float and half, double for double); D: the type gradients are summed in with atomics.
// No contraction into fma: the sums and products round as the CPU's do.
#pragma OPENCL FP_CONTRACT OFF
% if D == "double":
#pragma OPENCL EXTENSION cl_khr_int64_base_atomics : enable
<% U, CAS = "ulong", "atom_cmpxchg" %>
% else:
<% U, CAS = "uint", "atomic_cmpxchg" %>
% endif
#define LOAD(p, i) ((A)LD_${T}(p, i))
#define STORE(p, i, v) ST_${T}(p, i, v)
typedef ${A} A;
typedef ${D} D;

// Each try starts from the value the last compare-and-swap saw (a plain read of *p beside
// other work-items' atomics would be a data race).
inline void atomic_add_d(volatile __global D *p, D v)
{
    union { ${U} u; D t; } old, next;
    ${U} seen = 0;
    do {
        old.u = seen;
        next.t = old.t + v;
        seen = ${CAS}((volatile __global ${U} *)p, old.u, next.u);
    } while (seen != old.u);
}

// a / b correctly rounded, as the CPU divides. OpenCL's float division may be 2.5 ulp
// off (NVIDIA's is, and compilers narrow a double division of floats back to it), which
// moves roi_pool's bin edges and nms's IoU at a tie: step to the neighbour while it
// leaves a smaller residual a - q b (exact through fma). Double division is exact.
inline A div(A a, A b)
{
    A q = a / b;
% if A == "float":
    if (!isfinite(q) || b == 0)
        return q;
    for (int k = 0; k < 4; ++k) {
        float r = fma(-q, b, a);
        float next = nextafter(q, (r > 0) == (b > 0) ? INFINITY : -INFINITY);
        if (!(fabs(fma(-next, b, a)) < fabs(r)))
            break;
        q = next;
    }
% endif
    return q;
}

// ----- nms
// box k of the score order: dets[order[k]] (x1, y1, x2, y2)
inline void nms_box(__global const ${T} *dets, __global const long *order, int k, A *b)
{
    long at = order[k] * 4;
    for (int e = 0; e < 4; ++e)
        b[e] = LOAD(dets, at + e);
}

// the overlap of boxes a and b: inter / (area_a + area_b - inter)
inline A nms_iou(const A *a, A area_a, const A *b)
{
    A area_b = (b[2] - b[0]) * (b[3] - b[1]);
    A w = max((A)0, min(a[2], b[2]) - max(a[0], b[0]));
    A h = max((A)0, min(a[3], b[3]) - max(a[1], b[1]));
    A inter = w * h;
    return div(inter, area_a + area_b - inter);
}

// mask[i, b] bit j: box 64 b + j (after i in score order) overlaps box i by more than
// the threshold; only the blocks b >= i / 64 that nms_keep reads are written
__kernel void nms_mask(int n, int blocks, A threshold,
                       __global const ${T} *dets, ulong dets_offset,
                       __global const long *order, ulong order_offset,
                       __global ulong *mask, ulong mask_offset)
{
    int i = get_global_id(0), b = get_global_id(1);
    if (i >= n || b < i / 64)
        return;
    dets += dets_offset; order += order_offset;
    A a[4], c[4];
    nms_box(dets, order, i, a);
    A area_a = (a[2] - a[0]) * (a[3] - a[1]);
    ulong bits = 0;
    int end = min(n, 64 * b + 64);
    for (int j = max(64 * b, i + 1); j < end; ++j) {
        nms_box(dets, order, j, c);
        if (nms_iou(a, area_a, c) > threshold)
            bits |= 1UL << (j - 64 * b);
    }
    mask[mask_offset + (ulong)i * blocks + b] = bits;
}

// One work-group walks the boxes in score order: a box no kept box removed is kept, and
// removes what its mask row marks. Word b of the removed set is final once every box
// before 64 b is decided, so each work-item carries the current word privately and only
// later words are shared (each written by one work-item, read after the block's barrier).
__kernel void nms_keep(int n, int blocks,
                       __global const ulong *mask, ulong mask_offset,
                       __global const long *order, ulong order_offset,
                       __global ulong *removed, ulong removed_offset,
                       __global long *keep, ulong keep_offset,
                       __global int *count, ulong count_offset)
{
    int lid = get_local_id(0), ls = get_local_size(0);
    mask += mask_offset; order += order_offset; removed += removed_offset;
    keep += keep_offset;
    for (int w = lid; w < blocks; w += ls)
        removed[w] = 0;
    int kept = 0;
    for (int b = 0; b < blocks; ++b) {
        barrier(CLK_GLOBAL_MEM_FENCE);
        ulong cur = removed[b];
        int end = min(n, 64 * b + 64);
        for (int i = 64 * b; i < end; ++i) {
            if (cur & (1UL << (i - 64 * b)))
                continue;
            if (lid == 0)
                keep[kept] = order[i];
            ++kept;
            __global const ulong *row = mask + (ulong)i * blocks;
            cur |= row[b];
            for (int w = b + 1 + lid; w < blocks; w += ls)
                removed[w] |= row[w];
        }
    }
    if (lid == 0)
        count[count_offset] = kept;
}

// ----- roi_align (torchvision's roi_align_kernel.cpp / roi_align_common.h)
// sizes: channels, the input's height and width, the pooled height and width
#define SIZES int C, int H, int W, int PH, int PW

// one roi's geometry: its batch index (-1 when out of range), start and bin sizes, and
// the sampling grid of each bin
typedef struct { int batch; A y0, x0, bin_h, bin_w; int grid_h, grid_w; } Roi;

inline Roi align_roi(__global const ${T} *rois, int r, int batches, A scale, int aligned,
                     int sampling_ratio, int PH, int PW)
{
    Roi g;
    __global const ${T} *p = rois + (ulong)r * 5;
    int batch = (int)LOAD(p, 0);
    g.batch = batch >= 0 && batch < batches ? batch : -1;
    A offset = aligned ? (A)0.5 : (A)0;
    g.x0 = LOAD(p, 1) * scale - offset;
    g.y0 = LOAD(p, 2) * scale - offset;
    A roi_w = LOAD(p, 3) * scale - offset - g.x0;
    A roi_h = LOAD(p, 4) * scale - offset - g.y0;
    if (!aligned) {  // the legacy rule: a roi is at least one pixel
        roi_w = max(roi_w, (A)1);
        roi_h = max(roi_h, (A)1);
    }
    g.bin_h = div(roi_h, (A)PH);
    g.bin_w = div(roi_w, (A)PW);
    g.grid_h = sampling_ratio > 0 ? sampling_ratio : (int)ceil(div(roi_h, (A)PH));
    g.grid_w = sampling_ratio > 0 ? sampling_ratio : (int)ceil(div(roi_w, (A)PW));
    return g;
}

// the bilinear taps at (y, x): offsets (-1: none) and weights
inline void align_taps(A y, A x, int H, int W, int *at, A *w)
{
    if (y < (A)-1 || y > (A)H || x < (A)-1 || x > (A)W) {
        for (int k = 0; k < 4; ++k) { at[k] = -1; w[k] = 0; }
        return;
    }
    y = max(y, (A)0);
    x = max(x, (A)0);
    int y_low = (int)y, x_low = (int)x, y_high, x_high;
    if (y_low >= H - 1) { y_high = y_low = H - 1; y = (A)y_low; } else y_high = y_low + 1;
    if (x_low >= W - 1) { x_high = x_low = W - 1; x = (A)x_low; } else x_high = x_low + 1;
    A ly = y - y_low, lx = x - x_low, hy = (A)1 - ly, hx = (A)1 - lx;
    w[0] = hy * hx; w[1] = hy * lx; w[2] = ly * hx; w[3] = ly * lx;
    at[0] = y_low * W + x_low; at[1] = y_low * W + x_high;
    at[2] = y_high * W + x_low; at[3] = y_high * W + x_high;
}

// the sample (iy, ix) of bin (ph, pw)
inline void align_sample(const Roi *g, int ph, int pw, int iy, int ix, int H, int W,
                         int *at, A *w)
{
    A y = g->y0 + ph * g->bin_h + div((A)(iy + 0.5f) * g->bin_h, (A)g->grid_h);
    A x = g->x0 + pw * g->bin_w + div((A)(ix + 0.5f) * g->bin_w, (A)g->grid_w);
    align_taps(y, x, H, W, at, w);
}

// y[r, c, ph, pw]: the mean of the bin's grid_h x grid_w bilinear samples
__kernel void roi_align_forward(ulong total, SIZES, int batches, A scale,
                                int sampling_ratio, int aligned,
                                __global const ${T} *x, ulong x_offset,
                                __global const ${T} *rois, ulong rois_offset,
                                __global ${T} *y, ulong y_offset)
{
    ulong g = get_global_id(0);
    if (g >= total)
        return;
    int pw = g % PW, ph = (g / PW) % PH, c = (g / ((ulong)PW * PH)) % C;
    int r = g / ((ulong)PW * PH * C);
    Roi roi = align_roi(rois + rois_offset, r, batches, scale, aligned, sampling_ratio,
                        PH, PW);
    A sum = 0;
    if (roi.batch >= 0) {
        __global const ${T} *plane = x + x_offset + ((ulong)roi.batch * C + c) * H * W;
        int at[4];
        A w[4];
        for (int iy = 0; iy < roi.grid_h; ++iy)
            for (int ix = 0; ix < roi.grid_w; ++ix) {
                align_sample(&roi, ph, pw, iy, ix, H, W, at, w);
                if (at[0] < 0)
                    continue;
                sum += w[0] * LOAD(plane, at[0]) + w[1] * LOAD(plane, at[1])
                     + w[2] * LOAD(plane, at[2]) + w[3] * LOAD(plane, at[3]);
            }
    }
    int count = max(roi.grid_h * roi.grid_w, 1);
    STORE(y, y_offset + g, div(sum, (A)count));
}

// dx[batch, c] += dy[r, c, ph, pw] * w / count at each sample's taps (dx zeroed first)
__kernel void roi_align_backward(ulong total, SIZES, int batches, A scale,
                                 int sampling_ratio, int aligned,
                                 __global const ${T} *dy, ulong dy_offset,
                                 __global const ${T} *rois, ulong rois_offset,
                                 __global D *dx, ulong dx_offset)
{
    ulong g = get_global_id(0);
    if (g >= total)
        return;
    int pw = g % PW, ph = (g / PW) % PH, c = (g / ((ulong)PW * PH)) % C;
    int r = g / ((ulong)PW * PH * C);
    Roi roi = align_roi(rois + rois_offset, r, batches, scale, aligned, sampling_ratio,
                        PH, PW);
    if (roi.batch < 0)
        return;
    __global D *plane = dx + dx_offset + ((ulong)roi.batch * C + c) * H * W;
    A d = LOAD(dy, dy_offset + g);
    A count = (A)max(roi.grid_h * roi.grid_w, 1);
    int at[4];
    A w[4];
    for (int iy = 0; iy < roi.grid_h; ++iy)
        for (int ix = 0; ix < roi.grid_w; ++ix) {
            align_sample(&roi, ph, pw, iy, ix, H, W, at, w);
            if (at[0] < 0)
                continue;
            for (int k = 0; k < 4; ++k)
                atomic_add_d(plane + at[k], (D)div(d * w[k], count));
        }
}

// ----- roi_pool (torchvision's roi_pool_kernel.cpp): the max over each bin of a roi
// rounded to whole pixels, and the flat h * W + w offset where it was (-1: empty bin)
__kernel void roi_pool_forward(ulong total, SIZES, int batches, A scale,
                               __global const ${T} *x, ulong x_offset,
                               __global const ${T} *rois, ulong rois_offset,
                               __global ${T} *y, ulong y_offset,
                               __global int *argmax, ulong argmax_offset)
{
    ulong g = get_global_id(0);
    if (g >= total)
        return;
    int pw = g % PW, ph = (g / PW) % PH, c = (g / ((ulong)PW * PH)) % C;
    int r = g / ((ulong)PW * PH * C);
    __global const ${T} *p = rois + rois_offset + (ulong)r * 5;
    int batch = (int)LOAD(p, 0);
    int x0 = (int)round(LOAD(p, 1) * scale), y0 = (int)round(LOAD(p, 2) * scale);
    int x1 = (int)round(LOAD(p, 3) * scale), y1 = (int)round(LOAD(p, 4) * scale);
    A bin_h = div((A)max(y1 - y0 + 1, 1), (A)PH);
    A bin_w = div((A)max(x1 - x0 + 1, 1), (A)PW);
    int hs = clamp((int)floor(ph * bin_h) + y0, 0, H);
    int he = clamp((int)ceil((ph + 1) * bin_h) + y0, 0, H);
    int ws = clamp((int)floor(pw * bin_w) + x0, 0, W);
    int we = clamp((int)ceil((pw + 1) * bin_w) + x0, 0, W);
    bool empty = he <= hs || we <= ws || batch < 0 || batch >= batches;
    A best = empty ? (A)0 : (A)-FLT_MAX;
    int where = -1;
    if (!empty) {
        __global const ${T} *plane = x + x_offset + ((ulong)batch * C + c) * H * W;
        for (int h = hs; h < he; ++h)
            for (int w = ws; w < we; ++w) {
                A v = LOAD(plane, h * W + w);
                if (v > best) { best = v; where = h * W + w; }  // (NaN: never taken)
            }
    }
    STORE(y, y_offset + g, best);
    argmax[argmax_offset + g] = where;
}

// dx[batch, c, argmax] += dy[r, c, ph, pw] (dx zeroed first)
__kernel void roi_pool_backward(ulong total, SIZES, int batches,
                                __global const ${T} *dy, ulong dy_offset,
                                __global const ${T} *rois, ulong rois_offset,
                                __global const int *argmax, ulong argmax_offset,
                                __global D *dx, ulong dx_offset)
{
    ulong g = get_global_id(0);
    if (g >= total)
        return;
    int c = (g / ((ulong)PW * PH)) % C, r = g / ((ulong)PW * PH * C);
    int batch = (int)LOAD(rois + rois_offset + (ulong)r * 5, 0);
    int where = argmax[argmax_offset + g];
    if (where < 0 || where >= H * W || batch < 0 || batch >= batches)
        return;
    atomic_add_d(dx + dx_offset + ((ulong)batch * C + c) * H * W + where,
                 (D)LOAD(dy, dy_offset + g));
}
