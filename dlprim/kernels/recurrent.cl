<%include file="common.h"/>
// The gates of one time step of an LSTM or a GRU, PyTorch's formulas and gate order, over
// a batch of N rows of H hidden units. Work item (j, n): unit j of row n.
//
// The GEMMs of the step are done before: xg = x W_ih^T + b_ih (every step at once, row n
// of step t at xg_offset + n * xg_row) and hg = h_prev W_hh^T + b_hh (this step, N x G*H
// contiguous). Sequences are strided (time-major or batch-first rows: the launcher gives
// each step's offset and the stride between batch rows); c, dh, dc and saved gates are
// N x H (N x 4H) contiguous per step.
//
// CELL "lstm": i, f, g, o = sig, sig, tanh, sig of (xg + hg) blocks 0..3
//              c = f c_prev + i g,  h = o tanh(c); saved: i, f, g, o
// CELL "gru":  r, z = sig(xg + hg) blocks 0, 1;  n = tanh(xg_n + r hg_n)
//              h = (1 - z) n + z h_prev; saved: r, z, n, hg_n

inline float rnn_sigmoid(float x)
{
    return 1.0f / (1.0f + exp(-x));
}

% if CELL == "lstm":
__kernel void lstm_forward(int N, int H,
                           __global const float *xg, ulong xg_offset, ulong xg_row,
                           __global const float *hg, ulong hg_offset,
                           __global const float *c_prev, ulong c_prev_offset,
                           __global float *c, ulong c_offset,
                           __global float *h, ulong h_offset, ulong h_row
% if SAVE:
                           , __global float *gates, ulong gates_offset
% endif
                           )
{
    int j = get_global_id(0), n = get_global_id(1);
    if (j >= H || n >= N)
        return;
    __global const float *x = xg + xg_offset + n * xg_row + j;
    __global const float *r = hg + hg_offset + (ulong)n * 4 * H + j;
    float i = rnn_sigmoid(x[0] + r[0]);
    float f = rnn_sigmoid(x[H] + r[H]);
    float g = tanh(x[2 * H] + r[2 * H]);
    float o = rnn_sigmoid(x[3 * H] + r[3 * H]);
    ulong k = (ulong)n * H + j;
    float cell = f * c_prev[c_prev_offset + k] + i * g;
    c[c_offset + k] = cell;
    h[h_offset + n * h_row + j] = o * tanh(cell);
% if SAVE:
    __global float *s = gates + gates_offset + (ulong)n * 4 * H + j;
    s[0] = i;
    s[H] = f;
    s[2 * H] = g;
    s[3 * H] = o;
% endif
}

// dh = dy + dh_next (from the step after), dc = dc_next + dh o (1 - tanh(c)^2);
// gradients of the pre-activations into dg (N x 4H), dc_prev = dc f into dc.
__kernel void lstm_backward(int N, int H,
% if DY:
                            __global const float *dy, ulong dy_offset, ulong dy_row,
% endif
                            __global const float *dh, ulong dh_offset,
                            __global float *dc, ulong dc_offset,
                            __global const float *gates, ulong gates_offset,
                            __global const float *c, ulong c_offset,
                            __global const float *c_prev, ulong c_prev_offset,
                            __global float *dg, ulong dg_offset)
{
    int j = get_global_id(0), n = get_global_id(1);
    if (j >= H || n >= N)
        return;
    ulong k = (ulong)n * H + j;
    float dh_t = dh[dh_offset + k];
% if DY:
    dh_t += dy[dy_offset + n * dy_row + j];
% endif
    __global const float *s = gates + gates_offset + (ulong)n * 4 * H + j;
    float i = s[0], f = s[H], g = s[2 * H], o = s[3 * H];
    float tc = tanh(c[c_offset + k]);
    float dc_t = dc[dc_offset + k] + dh_t * o * (1.0f - tc * tc);
    __global float *d = dg + dg_offset + (ulong)n * 4 * H + j;
    d[0] = dc_t * g * i * (1.0f - i);
    d[H] = dc_t * c_prev[c_prev_offset + k] * f * (1.0f - f);
    d[2 * H] = dc_t * i * (1.0f - g * g);
    d[3 * H] = dh_t * tc * o * (1.0f - o);
    dc[dc_offset + k] = dc_t * f;
}
% else:
__kernel void gru_forward(int N, int H,
                          __global const float *xg, ulong xg_offset, ulong xg_row,
                          __global const float *hg, ulong hg_offset,
                          __global const float *h_prev, ulong h_prev_offset, ulong h_prev_row,
                          __global float *h, ulong h_offset, ulong h_row
% if SAVE:
                          , __global float *gates, ulong gates_offset
% endif
                          )
{
    int j = get_global_id(0), n = get_global_id(1);
    if (j >= H || n >= N)
        return;
    __global const float *x = xg + xg_offset + n * xg_row + j;
    __global const float *q = hg + hg_offset + (ulong)n * 3 * H + j;
    float r = rnn_sigmoid(x[0] + q[0]);
    float z = rnn_sigmoid(x[H] + q[H]);
    float hn = q[2 * H];
    float nn = tanh(x[2 * H] + r * hn);
    float hp = h_prev[h_prev_offset + n * h_prev_row + j];
    h[h_offset + n * h_row + j] = (1.0f - z) * nn + z * hp;
% if SAVE:
    __global float *s = gates + gates_offset + (ulong)n * 4 * H + j;
    s[0] = r;
    s[H] = z;
    s[2 * H] = nn;
    s[3 * H] = hn;
% endif
}

// dh = dy + dh_next; pre-activation gradients of the input part into dxg and of the
// hidden part into dhg (they differ in the n block: d(hg_n) = dn_pre r); the direct
// part of dh_prev, dh z, into dh (the launcher then adds dhg W_hh).
__kernel void gru_backward(int N, int H,
% if DY:
                           __global const float *dy, ulong dy_offset, ulong dy_row,
% endif
                           __global float *dh, ulong dh_offset,
                           __global const float *gates, ulong gates_offset,
                           __global const float *h_prev, ulong h_prev_offset, ulong h_prev_row,
                           __global float *dxg, ulong dxg_offset,
                           __global float *dhg, ulong dhg_offset)
{
    int j = get_global_id(0), n = get_global_id(1);
    if (j >= H || n >= N)
        return;
    ulong k = (ulong)n * H + j;
    float dh_t = dh[dh_offset + k];
% if DY:
    dh_t += dy[dy_offset + n * dy_row + j];
% endif
    __global const float *s = gates + gates_offset + (ulong)n * 4 * H + j;
    float r = s[0], z = s[H], nn = s[2 * H], hn = s[3 * H];
    float hp = h_prev[h_prev_offset + n * h_prev_row + j];
    float dn = dh_t * (1.0f - z) * (1.0f - nn * nn);
    float dz = dh_t * (hp - nn) * z * (1.0f - z);
    float dr = dn * hn * r * (1.0f - r);
    ulong row = (ulong)n * 3 * H + j;
    dxg[dxg_offset + row] = dr;
    dxg[dxg_offset + row + H] = dz;
    dxg[dxg_offset + row + 2 * H] = dn;
    dhg[dhg_offset + row] = dr;
    dhg[dhg_offset + row + H] = dz;
    dhg[dhg_offset + row + 2 * H] = dn * r;
    dh[dh_offset + k] = dh_t * z;
}
% endif
