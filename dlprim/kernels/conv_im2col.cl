// im2col for the CPU convolution path (core/conv_im2col.py): the images img0.. of x
// (NCHW) unrolled into col[img][(c * KH + i) * KW + j][oy * OW + ox] =
// x[img][c][oy * SH - PT + i * DH][ox * SW - PL + j * DW], zero in the padding, so that
// the convolution is one GEMM per image: y = w (out_c x C*KH*KW) · col.
// One work-item writes one output row (OW contiguous floats) of one col row.
__kernel void conv_im2col(int C, int H, int W, int OH, int OW, int KH, int KW, int SH,
                          int SW, int PT, int PL, int DH, int DW,
                          __global const float *x, ulong x_offset, ulong img0,
                          __global float *col, ulong col_offset)
{
    const int oy = get_global_id(0), r = get_global_id(1);
    const ulong img = get_global_id(2);
    const int j = r % KW, i = (r / KW) % KH, c = r / (KW * KH);
    const int iy = oy * SH - PT + i * DH;
    __global float *out = col + col_offset + (img * get_global_size(1) + r) * OH * OW
        + (ulong)oy * OW;
    if (iy < 0 || iy >= H) {
        for (int ox = 0; ox < OW; ox++)
            out[ox] = 0.0f;
        return;
    }
    __global const float *row = x + x_offset + (((img0 + img) * C + c) * H + iy) * W;
    const int ix0 = j * DW - PL;
    for (int ox = 0; ox < OW; ox++) {
        const int ix = ix0 + ox * SW;
        out[ox] = (ix >= 0 && ix < W) ? row[ix] : 0.0f;
    }
}
