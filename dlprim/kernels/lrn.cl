<%include file="common.h"/>
// Local response normalisation across channels (Krizhevsky et al. 2012; ONNX's LRN) of
// x viewed as (N, C, P), P = the product of the spatial sizes:
//   s[c] = k + alpha/size * sum_{i = c - LO}^{c + HI} x[i]^2   (i clipped to [0, C))
//   y[c] = x[c] * s[c]^-beta
// LO = floor((size - 1) / 2) channels before, HI = ceil((size - 1) / 2) after.
// Work items (p, c, n): consecutive p are consecutive addresses.

inline float lrn_scale(__global const float *xp, int c, int C, ulong P, float alpha_n, float k)
{
    float sum = 0.0f;
    int lo = max(c - ${LO}, 0), hi = min(c + ${HI}, C - 1);
    for (int i = lo; i <= hi; i++) {
        float v = xp[i * P];
        sum += v * v;
    }
    return k + alpha_n * sum;
}

__kernel void lrn_forward(int C, ulong P, float alpha_n, float beta, float k,
                          __global const float *x, ulong x_offset,
                          __global float *y, ulong y_offset)
{
    ulong p = get_global_id(0);
    int c = get_global_id(1);
    ulong n = get_global_id(2);
    if (p >= P)
        return;
    __global const float *xp = x + x_offset + n * C * P + p;
    float s = lrn_scale(xp, c, C, P, alpha_n, k);
    y[y_offset + n * C * P + c * P + p] = xp[c * P] * pow(s, -beta);
}

// dx[i] = acc * dx[i] + dy[i] s[i]^-beta
//         - 2 alpha/size beta x[i] sum_{c = i - HI}^{i + LO} dy[c] x[c] s[c]^(-beta - 1)
// (channel i lies in the window of channel c exactly when c is in [i - HI, i + LO])
__kernel void lrn_backward(int C, ulong P, float alpha_n, float beta, float k,
                           __global const float *x, ulong x_offset,
                           __global const float *dy, ulong dy_offset,
                           __global float *dx, ulong dx_offset, float acc)
{
    ulong p = get_global_id(0);
    int i = get_global_id(1);
    ulong n = get_global_id(2);
    if (p >= P)
        return;
    ulong base = n * C * P + p;
    __global const float *xp = x + x_offset + base;
    __global const float *dyp = dy + dy_offset + base;
    float sum = 0.0f;
    int lo = max(i - ${HI}, 0), hi = min(i + ${LO}, C - 1);
    for (int c = lo; c <= hi; c++) {
        float s = lrn_scale(xp, c, C, P, alpha_n, k);
        sum += dyp[c * P] * xp[c * P] * pow(s, -beta - 1.0f);
    }
    float s = lrn_scale(xp, i, C, P, alpha_n, k);
    float g = dyp[i * P] * pow(s, -beta) - 2.0f * alpha_n * beta * xp[i * P] * sum;
    __global float *d = dx + dx_offset + base + i * P;
    *d = (acc != 0.0f ? acc * *d : 0.0f) + g;
}
