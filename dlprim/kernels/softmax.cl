<%include file="common.h"/>
<%include file="wg_reduce.h"/>
// Softmax along axis 1 of a tensor viewed as (outer, C, inner).
// *_rows kernels (inner == 1): one work-group per row, reducing over C in local memory.
// *_cols kernels (inner > 1): one work item per (outer, inner) position looping over C,
// so neighbouring items read neighbouring addresses.
// LOG selects log-softmax.

// y = softmax(x) = exp(x - m) / sum exp(x - m), or log-softmax y = x - m - log(sum exp(x - m))
// m = fmax over the row leaves out a NaN, which comes back through exp(NaN - m) into the
// sum: a NaN anywhere in a row makes the whole row NaN, as in PyTorch (so does +inf, by
// inf - inf, and a row of -inf only)
__kernel void softmax_forward_rows(ulong C, __global const float *x, ulong x_offset,
                                   __global float *y, ulong y_offset, __local float *scratch)
{
    ulong row = get_group_id(0);
    int lid = get_local_id(0), wg = get_local_size(0);
    x += x_offset + row * C;
    y += y_offset + row * C;
    float2 ms = wg_row_max_sumexp(scratch, x, C);
    float m = ms.x, s = ms.y;
% if LOG:
    float lse = m + log(s);
    for (ulong c = lid; c < C; c += wg)
        y[c] = x[c] - lse;
% else:
    float inv = 1.0f / s;
    for (ulong c = lid; c < C; c += wg)
        y[c] = exp(x[c] - m) * inv;
% endif
}

__kernel void softmax_forward_cols(ulong positions, ulong C, ulong inner,
                                   __global const float *x, ulong x_offset,
                                   __global float *y, ulong y_offset)
{
    ulong pos = get_global_id(0);
    if (pos >= positions)
        return;
    ulong base = (pos / inner) * C * inner + pos % inner;
    x += x_offset + base;
    y += y_offset + base;
    float m = -INFINITY;
    for (ulong c = 0; c < C; c++)
        m = fmax(m, x[c * inner]);
    float s = 0.0f;
    for (ulong c = 0; c < C; c++)
        s += exp(x[c * inner] - m);
% if LOG:
    float lse = m + log(s);
    for (ulong c = 0; c < C; c++)
        y[c * inner] = x[c * inner] - lse;
% else:
    float inv = 1.0f / s;
    for (ulong c = 0; c < C; c++)
        y[c * inner] = exp(x[c * inner] - m) * inv;
% endif
}

// dx = beta * dx + grad, dx is not read when beta == 0 (it may hold garbage).
// softmax:      grad_c = y_c * (dy_c - sum_k dy_k * y_k)
// log-softmax:  grad_c = dy_c - exp(y_c) * sum_k dy_k
#define STORE_DX(i, g) dx[i] = (beta == 0.0f) ? (g) : (g) + beta * dx[i]
% if LOG:
#define TERM(yv, dyv) (dyv)
#define GRAD(yv, dyv, s) ((dyv) - exp(yv) * (s))
% else:
#define TERM(yv, dyv) ((dyv) * (yv))
#define GRAD(yv, dyv, s) ((yv) * ((dyv) - (s)))
% endif

__kernel void softmax_backward_rows(ulong C, __global const float *y, ulong y_offset,
                                    __global const float *dy, ulong dy_offset,
                                    __global float *dx, ulong dx_offset, float beta,
                                    __local float *scratch)
{
    ulong row = get_group_id(0);
    int lid = get_local_id(0), wg = get_local_size(0);
    y += y_offset + row * C;
    dy += dy_offset + row * C;
    dx += dx_offset + row * C;
    float s = 0.0f;
    for (ulong c = lid; c < C; c += wg)
        s += TERM(y[c], dy[c]);
    s = wg_reduce_sum(scratch, s);
    for (ulong c = lid; c < C; c += wg) {
        float g = GRAD(y[c], dy[c], s);
        STORE_DX(c, g);
    }
}

__kernel void softmax_backward_cols(ulong positions, ulong C, ulong inner,
                                    __global const float *y, ulong y_offset,
                                    __global const float *dy, ulong dy_offset,
                                    __global float *dx, ulong dx_offset, float beta)
{
    ulong pos = get_global_id(0);
    if (pos >= positions)
        return;
    ulong base = (pos / inner) * C * inner + pos % inner;
    y += y_offset + base;
    dy += dy_offset + base;
    dx += dx_offset + base;
    float s = 0.0f;
    for (ulong c = 0; c < C; c++)
        s += TERM(y[c * inner], dy[c * inner]);
    for (ulong c = 0; c < C; c++) {
        float g = GRAD(y[c * inner], dy[c * inner], s);
        STORE_DX(c * inner, g);
    }
}
