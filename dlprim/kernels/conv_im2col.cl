<%include file="common.h"/>
// im2col for the CPU convolution path (core/conv_im2col.py): the images img0.. of x
// (NCHW) unrolled into col[img][(c * KH + i) * KW + j][oy * OW + ox] =
// x[img][c][oy * SH - PT + i * DH][ox * SW - PL + j * DW], zero in the padding, so that
// the convolution is one GEMM per image: y = w (out_c x C*KH*KW) · col.
// One work-item writes one col row (OH * OW contiguous floats): CPU drivers pay for
// every work-item, so each gets a whole row rather than one output row of it.
// ACT_T: the storage of x and dx (float, half or bfloat16); the columns are float.

// o[0, n) = a run of one input row, src[t * SW] for t in [lo, hi), zero elsewhere (the
// padding): three plain loops, which the compiler vectorises, instead of a check per
// element
inline void copy_run(__global float *o, __global const ${ACT_T} *src, int lo, int hi, int n,
                     int SW)
{
    for (int t = 0; t < lo; t++)
        o[t] = 0.0f;
    if (SW == 1) {
        for (int t = lo; t < hi; t++)
            o[t] = LD_${ACT_T}(src, t);
    } else {
        for (int t = lo; t < hi; t++)
            o[t] = LD_${ACT_T}(src, t * SW);
    }
    for (int t = hi; t < n; t++)
        o[t] = 0.0f;
}

__kernel void conv_im2col(int C, int H, int W, int OH, int OW, int KH, int KW, int SH,
                          int SW, int PT, int PL, int DH, int DW,
                          __global const ${ACT_T} *x, ulong x_offset, ulong img0,
                          __global float *col, ulong col_offset)
{
    const int r = get_global_id(0);
    const ulong img = get_global_id(1);
    const int j = r % KW, i = (r / KW) % KH, c = r / (KW * KH);
    const int ix0 = j * DW - PL;
    // the columns whose tap lands inside the row: ix0 + ox * SW in [0, W)
    const int ox_lo = ix0 >= 0 ? 0 : min(OW, (-ix0 + SW - 1) / SW);
    const int ox_hi = W - 1 - ix0 >= 0 ? max(ox_lo, min(OW, (W - 1 - ix0) / SW + 1)) : ox_lo;
    __global float *out = col + col_offset + (img * get_global_size(0) + r) * OH * OW;
    __global const ${ACT_T} *plane = x + x_offset + ((img0 + img) * C + c) * (ulong)H * W;
    for (int oy = 0; oy < OH; oy++, out += OW) {
        const int iy = oy * SH - PT + i * DH;
        if (iy < 0 || iy >= H) {  // the whole output row is padding
            for (int ox = 0; ox < OW; ox++)
                out[ox] = 0.0f;
            continue;
        }
        copy_run(out, plane + (ulong)iy * W + ix0, ox_lo, ox_hi, OW, SW);
    }
}

% if STRIP:
// im2col straight into the CPU GEMM's packed B (gemm_pack_b in gemm_cpu.cl): strips of
// ${STRIP} columns (pixels), each K x ${STRIP} row-major, zero past the last pixel, so
// that the columns are written once and never packed. A work-item fills PACK_K rows of
// 16 strips: for each row, ${STRIP} * 16 pixels in order (whole cache lines written,
// rows of x read along their length).
__kernel void conv_im2col_strips(int C, int H, int W, int OH, int OW, int KH, int KW,
                                 int SH, int SW, int PT, int PL, int DH, int DW,
                                 __global const ${ACT_T} *x, ulong x_offset, ulong img0,
                                 __global float *col, ulong col_offset, int K)
{
    const int s0 = get_global_id(0) * 16, r0 = get_global_id(1) * ${PACK_K};
    const ulong img = get_global_id(2);
    const int P = OH * OW, strips = (P + ${STRIP - 1}) / ${STRIP};
    const int s_end = min(s0 + 16, strips), r_end = min(r0 + ${PACK_K}, K);
    __global float *base = col + col_offset + img * (ulong)strips * K * ${STRIP};
    const int p0 = s0 * ${STRIP}, p1 = min(s_end * ${STRIP}, P);
    for (int r = r0; r < r_end; r++) {
        const int j = r % KW, i = (r / KW) % KH, c = r / (KW * KH);
        __global const ${ACT_T} *plane = x + x_offset + ((img0 + img) * C + c) * (ulong)H * W;
        __global float *out = base + (ulong)r * ${STRIP};
        const int ix0 = j * DW - PL;
        // the columns whose tap lands inside the row: ix0 + ox * SW in [0, W)
        const int ox_lo = ix0 >= 0 ? 0 : min(OW, (-ix0 + SW - 1) / SW);
        const int ox_hi = W - 1 - ix0 >= 0 ? max(ox_lo, min(OW, (W - 1 - ix0) / SW + 1)) : ox_lo;
        // pixel p goes to strip p / ${STRIP}, lane p % ${STRIP}: whole output rows in
        // order, as segments that stay inside one output row and one strip (contiguous
        // in both x and the strip), each a zero run, a copy and a zero run
        for (int p = p0; p < p1; ) {
            const int oy = p / OW, ox_first = p - oy * OW;
            const int n = min(min(OW - ox_first, p1 - p), ${STRIP} - p % ${STRIP});
            const int iy = oy * SH - PT + i * DH;
            __global float *o = out + (ulong)(p / ${STRIP}) * K * ${STRIP} + p % ${STRIP};
            int lo = n, hi = n;  // [lo, hi): the segment's taps inside the row
            if (iy >= 0 && iy < H) {
                lo = clamp(ox_lo - ox_first, 0, n);
                hi = clamp(ox_hi - ox_first, lo, n);
            }
            copy_run(o, plane + (ulong)max(iy, 0) * W + ix0 + ox_first * SW, lo, hi, n, SW);
            p += n;
        }
        // the last strip's lanes past the last pixel
        for (int p = p1; p < s_end * ${STRIP}; p++)
            out[(ulong)(p / ${STRIP}) * K * ${STRIP} + p % ${STRIP}] = 0.0f;
    }
}
% endif

// col2im for backward-data (a transposed convolution's forward): col as conv_im2col lays
// it out, now holding wᵀ · dy; dx[img0 + img][c][iy][ix] = act(beta * dx + the sum of the
// col entries whose tap lands on (iy, ix) + bias[c]). A gather (no atomics): one
// work-item per plane of dx; each row adds each tap's col row (a contiguous run of ox)
// into it in place: no division or branch per pixel, and the runs vectorise. A 16-bit dx
// (ACT_T) sums in float32 in ``sums`` (a plane per work-item) and is stored once at the
// end of each row, rounded once.
__kernel void conv_col2im(int C, int H, int W, int OH, int OW, int KH, int KW, int SH,
                          int SW, int PT, int PL, int DH, int DW,
                          __global const float *col, ulong col_offset,
                          __global ${ACT_T} *dx, ulong dx_offset, ulong img0,
                          __global const float *bias, ulong bias_offset, float beta
% if ACT_T != "float":
                          , __global float *sums, ulong sums_offset
% endif
                          )
{
    const int c = get_global_id(0);
    const ulong img = get_global_id(1);
    __global const float *src = col + col_offset + (img * C + c) * KH * KW * OH * OW;
    for (int iy = 0; iy < H; iy++) {
        __global ${ACT_T} *dx_row = dx + dx_offset + (((img0 + img) * C + c) * H + iy) * W;
% if ACT_T == "float":
        __global float *out = dx_row;
        if (beta != 0.0f) {
            for (int ix = 0; ix < W; ix++)
                out[ix] *= beta;
        } else {
            for (int ix = 0; ix < W; ix++)
                out[ix] = 0.0f;
        }
% else:
        __global float *out = sums + sums_offset + ((img * C + c) * H + iy) * W;
        for (int ix = 0; ix < W; ix++)
            out[ix] = beta != 0.0f ? beta * LD_${ACT_T}(dx_row, ix) : 0.0f;
% endif
        for (int i = 0; i < KH; i++) {
            const int ty = iy + PT - i * DH;
            if (ty < 0 || ty % SH)
                continue;
            const int oy = ty / SH;
            if (oy >= OH)
                continue;
            for (int j = 0; j < KW; j++) {
                // pixel ix = ox * SW + shift takes col[.., oy, ox]; the ox whose ix is in the row
                const int shift = j * DW - PL;
                const int ox_lo = shift >= 0 ? 0 : (-shift + SW - 1) / SW;
                const int ox_hi = min(OW, W - 1 - shift >= 0 ? (W - 1 - shift) / SW + 1 : 0);
                __global const float *run = src + ((ulong)(i * KW + j) * OH + oy) * OW;
                if (SW == 1) {
                    __global float *o = out + shift;
                    for (int ox = ox_lo; ox < ox_hi; ox++)
                        o[ox] += run[ox];
                } else {
                    for (int ox = ox_lo; ox < ox_hi; ox++)
                        out[ox * SW + shift] += run[ox];
                }
            }
        }
        for (int ix = 0; ix < W; ix++) {
% if BIAS:
            ST_${ACT_T}(dx_row, ix, ACT_${ACTIVATION}(out[ix] + bias[bias_offset + c]));
% else:
            ST_${ACT_T}(dx_row, ix, ACT_${ACTIVATION}(out[ix]));
% endif
        }
    }
}
