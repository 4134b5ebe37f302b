<%include file="common.h"/>
// Negative log-likelihood over log-probabilities x of shape (N, C) with labels of type
// ${LABEL}; a label outside [0, C) contributes nothing (no loss, no gradient).

// per-row loss: rows[n] = -x[n, label[n]]
__kernel void nll_forward(ulong N, ulong C, __global const float *x, ulong x_offset,
                          __global const ${LABEL} *label, ulong label_offset,
                          __global float *rows, ulong rows_offset)
{
    ulong n = get_global_id(0);
    if (n >= N)
        return;
    long k = (long)label[label_offset + n];
    rows[rows_offset + n] = (k >= 0 && k < (long)C) ? -x[x_offset + n * C + k] : 0.0f;
}

// dx[n, c] = beta * dx[n, c] - scale * dy[n * dy_stride] * [c == label[n]]
// (dy_stride 0: one loss value for the batch; dx is not read when beta == 0)
__kernel void nll_backward(ulong N, ulong C, __global const ${LABEL} *label, ulong label_offset,
                           __global const float *dy, ulong dy_offset, ulong dy_stride,
                           __global float *dx, ulong dx_offset, float scale, float beta)
{
    ulong i = get_global_id(0);
    if (i >= N * C)
        return;
    ulong n = i / C;
    long k = (long)label[label_offset + n];
    float g = ((long)(i % C) == k) ? -scale * dy[dy_offset + n * dy_stride] : 0.0f;
    dx[dx_offset + i] = (beta == 0.0f) ? g : g + beta * dx[dx_offset + i];
}
