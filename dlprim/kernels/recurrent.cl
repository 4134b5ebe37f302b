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

<%include file="recurrent.h"/>
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
    ulong k = (ulong)n * H + j;
    float v[4];
    float cell = lstm_gates(x[0] + r[0], x[H] + r[H], x[2 * H] + r[2 * H], x[3 * H] + r[3 * H],
                            c_prev[c_prev_offset + k], v);
    c[c_offset + k] = cell;
    h[h_offset + n * h_row + j] = v[3] * tanh(cell);
% if SAVE:
    __global float *s = gates + gates_offset + (ulong)n * 4 * H + j;
    for (int q = 0; q < 4; q++)
        s[q * H] = v[q];
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
    float v[4] = {s[0], s[H], s[2 * H], s[3 * H]}, d[4];
    dc[dc_offset + k] = lstm_grads(dh_t, dc[dc_offset + k], v, c[c_offset + k],
                                   c_prev[c_prev_offset + k], d);
    __global float *out = dg + dg_offset + (ulong)n * 4 * H + j;
    for (int q = 0; q < 4; q++)
        out[q * H] = d[q];
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
    float v[4];
    h[h_offset + n * h_row + j] = gru_gates(x[0], x[H], x[2 * H], q[0], q[H], q[2 * H],
                                            h_prev[h_prev_offset + n * h_prev_row + j], v);
% if SAVE:
    __global float *s = gates + gates_offset + (ulong)n * 4 * H + j;
    for (int p = 0; p < 4; p++)
        s[p * H] = v[p];
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
    float v[4] = {s[0], s[H], s[2 * H], s[3 * H]}, d[3];
    dh[dh_offset + k] = gru_grads(dh_t, v, h_prev[h_prev_offset + n * h_prev_row + j], d);
    ulong row = (ulong)n * 3 * H + j;
    for (int q = 0; q < 3; q++) {
        dxg[dxg_offset + row + q * H] = d[q];
        dhg[dhg_offset + row + q * H] = q == 2 ? d[2] * v[0] : d[q];
    }
}
% endif
