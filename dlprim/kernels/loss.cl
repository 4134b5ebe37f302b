<%include file="common.h"/>
<% X_T = context.get("X_T", "float") %>
<%include file="wg_reduce.h"/>
// Losses over rows of (N, C) with labels of type ${LABEL}: negative log-likelihood of
// log-probabilities, and cross entropy of logits (one work-group per row). A row counts
// when its label k is in [0, C) and is not IGNORE (PyTorch's ignore_index); any other row
// contributes nothing (no loss, no gradient). The host refuses out-of-range labels before
// they reach the device; this rule keeps labels written straight into a tensor harmless.
#define COUNTS(k) ((k) >= 0 && (k) < (long)C && (k) != ignore)

// Backward of a mean reads its factor from norm[0], which the forward pass wrote
// (1/N, or 1/count when rows were ignored); sum and none take a fixed scale.
<%def name="scale_arg(mean)">\
% if mean:
__global const float *norm, ulong norm_offset\
% else:
float scale\
% endif
</%def>
<%def name="scale_load(mean)">\
% if mean:
    float scale = norm[norm_offset];
% endif
</%def>

// per-row loss: rows[n] = -x[n, label[n]]
__kernel void nll_forward(ulong N, ulong C, long ignore, __global const float *x, ulong x_offset,
                          __global const ${LABEL} *label, ulong label_offset,
                          __global float *rows, ulong rows_offset)
{
    ulong n = get_global_id(0);
    if (n >= N)
        return;
    long k = (long)label[label_offset + n];
    rows[rows_offset + n] = COUNTS(k) ? -x[x_offset + n * C + k] : 0.0f;
}

% for mean in (False, True):
// dx[n, c] = beta * dx[n, c] - scale * dy[n * dy_stride] * [c == label[n]]
// (dy_stride 0: one loss value for the batch; dx is not read when beta == 0)
__kernel void nll_backward${"_mean" if mean else ""}(
        ulong N, ulong C, long ignore, __global const ${LABEL} *label, ulong label_offset,
        __global const float *dy, ulong dy_offset, ulong dy_stride,
        __global float *dx, ulong dx_offset, ${scale_arg(mean)}, float beta)
{
    ulong i = get_global_id(0);
    if (i >= N * C)
        return;
${scale_load(mean)}\
    ulong n = i / C;
    long k = (long)label[label_offset + n];
    float g = (COUNTS(k) && (long)(i % C) == k) ? -scale * dy[dy_offset + n * dy_stride] : 0.0f;
    dx[dx_offset + i] = (beta == 0.0f) ? g : g + beta * dx[dx_offset + i];
}

% endfor
// dx is not read when beta == 0
#define STORE_DX(i, g) ST_${X_T}(dx, i, (beta == 0.0f) ? (g) : (g) + beta * LD_${X_T}(dx, i))

// Cross entropy from logits, one work-group per row of (N, C), stored as X_T (float, or
// the 16-bit type of an fp16 or bf16 net: widened as they load, the gradient rounded as
// it stores, so the same values as converting them to float32 around the loss):
// loss_n = log sum_c exp(x_nc) - x_n,label_n for a row that counts, else 0.
// A NaN logit makes its row's loss and gradient NaN through the sum (softmax.cl says why
// fmax, which drops it from the maximum, is enough).
% for keep in (False, True):
## keep: also each row's log sum exp (lse), which the backward pass then reads instead of
## finding the row's maximum and sum again (a pass over the logits fewer)
__kernel void xent_forward_rows${"_lse" if keep else ""}(
        ulong C, long ignore, __global const ${X_T} *x, ulong x_offset,
        __global const ${LABEL} *label, ulong label_offset,
        __global float *loss, ulong loss_offset,
% if keep:
        __global float *lse, ulong lse_offset,
% endif
        __local float *scratch)
{
    ulong row = get_group_id(0);
    x += x_offset + row * C;
    long k = (long)label[label_offset + row];
    float2 ms = wg_row_max_sumexp(scratch, x, C);
    if (get_local_id(0) == 0) {
        const float row_lse = ms.x + log(ms.y);
        loss[loss_offset + row] = COUNTS(k) ? row_lse - LD_${X_T}(x, k) : 0.0f;
% if keep:
        lse[lse_offset + row] = row_lse;
% endif
    }
}

% endfor
// d loss / d x_nc = dy * scale * (softmax(x_n)_c - [c == label_n]) for a row that counts,
// 0 for the others; scale = norm[0] (the mean over the rows that count). The _lse kernel
// takes softmax(x_n)_c = exp(x_nc - lse_n) from the forward pass's lse.
% for keep in (False, True):
__kernel void xent_backward_rows${"_lse" if keep else ""}(
        ulong C, long ignore, __global const ${X_T} *x, ulong x_offset,
        __global const ${LABEL} *label, ulong label_offset,
        __global const float *dy, ulong dy_offset,
        __global ${X_T} *dx, ulong dx_offset, ${scale_arg(True)}, float beta,
% if keep:
        __global const float *lse, ulong lse_offset)
% else:
        __local float *scratch)
% endif
{
    ulong row = get_group_id(0);
    int lid = get_local_id(0), wg = get_local_size(0);
${scale_load(True)}\
    x += x_offset + row * C;
    dx += dx_offset + row * C;
    long k = (long)label[label_offset + row];
    float w = COUNTS(k) ? dy[dy_offset] * scale : 0.0f;
% if keep:
    const float row_lse = lse[lse_offset + row];
    for (ulong c = lid; c < C; c += wg) {
        float g = w * (exp(LD_${X_T}(x, c) - row_lse) - ((long)c == k ? 1.0f : 0.0f));
        STORE_DX(c, g);
    }
% else:
    float2 ms = wg_row_max_sumexp(scratch, x, C);
    float m = ms.x, s = ms.y;
    float inv = 1.0f / s;
    for (ulong c = lid; c < C; c += wg) {
        float g = w * (exp(LD_${X_T}(x, c) - m) * inv - ((long)c == k ? 1.0f : 0.0f));
        STORE_DX(c, g);
    }
% endif
}
% endfor
