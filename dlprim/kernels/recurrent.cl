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
// FUSED (CPUs): the step's hidden product is computed here instead, so that a step is
// one launch, not a GEMM and a gate launch (a CPU runtime's launch costs about as much as
// the step's arithmetic). Work item v: units j = VEC v .. VEC v + VEC - 1 (H a multiple
// of VEC) of every row, RB rows at a time, as float VEC-vectors: CPU compilers run
// work-items as scalar code, so the vectors are written out. Forward multiplies h_prev
// by W_hh read transposed (wt: H rows of G H values), backward the gradients of the step
// visited before (dg_next, N x G H) by W_hh as stored (row i: H values along j); either
// way the VEC units of a work-item read VEC neighbouring weights, and each serves RB rows.
//
// CELL "lstm": i, f, g, o = sig, sig, tanh, sig of (xg + hg) blocks 0..3
//              c = f c_prev + i g,  h = o tanh(c); saved: i, f, g, o
// CELL "gru":  r, z = sig(xg + hg) blocks 0, 1;  n = tanh(xg_n + r hg_n)
//              h = (1 - z) n + z h_prev; saved: r, z, n, hg_n
<%
FUSED = context.get("FUSED", 0)
RB = context.get("RB", 4)          # batch rows a work-item, FUSED
BIAS = context.get("BIAS", 1)      # FUSED forward: b_hh added (else the argument is unused)
G = 4 if CELL == "lstm" else 3     # gates
GQ = min(G, context.get("GQ", G))  # FUSED forward: gates summed a pass over k
VEC = context.get("VEC", 1) if FUSED else 1
T = "float" if VEC == 1 else "float%d" % VEC  # a work-item's values of one row
S = "" if VEC == 1 else str(VEC)              # recurrent.h's functions for T


def ld(p):
    """T at global address p"""
    return "(*(%s))" % p if VEC == 1 else "VLOAD_GLOBAL(%d, 0, %s)" % (VEC, p)


def st(v, p):
    """store T v at global address p"""
    return "*(%s) = %s" % (p, v) if VEC == 1 else "vstore%d(%s, 0, %s)" % (VEC, v, p)


def hidden(r, q):
    """the hidden part of gate q of row r: hg read, or the fused sums"""
    return "s%d_%d" % (r, q) if FUSED else ld("hg + hg_offset + (ulong)n * %d * H + j + %d * H" % (G, q))
%>
<%include file="recurrent.h"/>

## FUSED forward: s{r}_{q} = b_hh[q H + j] + sum over k of h_prev[n0 + r, k] W_hh[q H + j, k],
## GQ gates a pass over k (RB x GQ sums live; a pass's sums wait in registers or on the
## stack while the next pass runs, and each pass reads its gates' weights once for all RB rows)
<%def name="hidden_sums()">
% for r in range(RB):
    // rows past N read row N - 1 (in bounds) and are not written
    __global const float *h${r} = h_prev + h_prev_offset + (ulong)min(n0 + ${r}, N - 1) * h_prev_row;
% endfor
% for p0 in range(0, G, GQ):
<% gates = range(p0, min(G, p0 + GQ)) %>\
%   for r in range(RB):
%     for q in gates:
    ${T} s${r}_${q} = ${ld("b_hh + b_hh_offset + %d * H + j" % q) if BIAS else "0.0f"};
%     endfor
%   endfor
    {
    __global const float *w = wt + wt_offset + j;
    for (int k = 0; k < H; k++, w += ${G} * H) {
%   for q in gates:
        const ${T} w${q} = ${ld("w + %d * H" % q)};
%   endfor
%   for r in range(RB):
        const ${T} x${r} = (${T})(h${r}[k]);
%     for q in gates:
        s${r}_${q} = FMA(x${r}, w${q}, s${r}_${q});
%     endfor
%   endfor
    }
    }
% endfor
</%def>

## FUSED backward: d{r} = sum over i of dg_next[n0 + r, i] W_hh[i, j] where product != 0
<%def name="dh_sums()">
% for r in range(RB):
    ${T} d${r} = 0.0f;
    __global const float *g${r} = dg_next + dg_next_offset + (ulong)min(n0 + ${r}, N - 1) * ${G} * H;
% endfor
    if (product) {
        __global const float *w = w_hh + w_hh_offset + j;
        for (int i = 0; i < ${G} * H; i++, w += H) {
            const ${T} wv = ${ld("w")};
% for r in range(RB):
            d${r} = FMA((${T})(g${r}[i]), wv, d${r});
% endfor
        }
    }
</%def>

## a kernel's body: work item (j, n) runs row(None) for unit j of row n; FUSED, work item
## v takes units j = VEC v .. of every row, RB rows at a time: sums() (the step's product
## for those rows), then row(r) for each row n = n0 + r that exists
<%def name="kernel_body(sums, row)">
% if FUSED:
    const int j = get_global_id(0) * ${VEC};
    if (j >= H)
        return;
    for (int n0 = 0; n0 < N; n0 += ${RB}) {
${sums()}
%   for r in range(RB):
        if (n0 + ${r} < N) {
            const int n = n0 + ${r};
${row(r)}
        }
%   endfor
    }
% else:
    const int j = get_global_id(0), n = get_global_id(1);
    if (j >= H || n >= N)
        return;
${row(None)}
% endif
</%def>


## the step's hidden-product arguments: hg, or what the fused kernel multiplies
<%def name="forward_args()">
% if FUSED:
                           __global const float *wt, ulong wt_offset,
                           __global const float *b_hh, ulong b_hh_offset,
% else:
                           __global const float *hg, ulong hg_offset,
% endif
</%def>
<%def name="backward_args()">
% if FUSED:
                           __global const float *dg_next, ulong dg_next_offset,
                           __global const float *w_hh, ulong w_hh_offset, int product,
% endif
</%def>

## the saved gates v[0..count-1] of row n
<%def name="save(count)">
        __global float *s = gates + gates_offset + (ulong)n * 4 * H + j;
        for (int q = 0; q < ${count}; q++)
            ${st("v[q]", "s + q * H")};
</%def>

% if CELL == "lstm":
<%def name="lstm_forward_row(r)">
        __global const float *x = xg + xg_offset + n * xg_row + j;
        const ulong k = (ulong)n * H + j;
        ${T} v[4];
        const ${T} cell = lstm_gates${S}(${ld("x")} + ${hidden(r, 0)}, ${ld("x + H")} + ${hidden(r, 1)},
                                      ${ld("x + 2 * H")} + ${hidden(r, 2)}, ${ld("x + 3 * H")} + ${hidden(r, 3)},
                                      ${ld("c_prev + c_prev_offset + k")}, v);
        ${st("cell", "c + c_offset + k")};
        ${st("v[3] * tanh(cell)", "h + h_offset + n * h_row + j")};
% if SAVE:
${save(4)}
% endif
</%def>
__kernel void lstm_forward(int N, int H,
                           __global const float *xg, ulong xg_offset, ulong xg_row,
% if FUSED:
                           __global const float *h_prev, ulong h_prev_offset, ulong h_prev_row,
% endif
${forward_args()}
                           __global const float *c_prev, ulong c_prev_offset,
                           __global float *c, ulong c_offset,
                           __global float *h, ulong h_offset, ulong h_row
% if SAVE:
                           , __global float *gates, ulong gates_offset
% endif
                           )
{
${kernel_body(hidden_sums, lstm_forward_row)}
}

// dh = dy + dh_next (from the step after: read from dh, or FUSED with product, the
// gradients of the step after times W_hh), dc = dc_next + dh o (1 - tanh(c)^2);
// gradients of the pre-activations into dg (N x 4H), dc_prev = dc f into dc.
<%def name="lstm_backward_row(r)">
        const ulong k = (ulong)n * H + j;
% if FUSED:
        ${T} dh_t = product ? d${r} : ${ld("dh + dh_offset + k")};
% else:
        ${T} dh_t = ${ld("dh + dh_offset + k")};
% endif
% if DY:
        dh_t += ${ld("dy + dy_offset + n * dy_row + j")};
% endif
        __global const float *s = gates + gates_offset + (ulong)n * 4 * H + j;
        ${T} v[4] = {${ld("s")}, ${ld("s + H")}, ${ld("s + 2 * H")}, ${ld("s + 3 * H")}}, d[4];
        ${st("lstm_grads%s(dh_t, %s, v, %s, %s, d)" % (S, ld("dc + dc_offset + k"), ld("c + c_offset + k"), ld("c_prev + c_prev_offset + k")), "dc + dc_offset + k")};
        __global float *out = dg + dg_offset + (ulong)n * 4 * H + j;
        for (int q = 0; q < 4; q++)
            ${st("d[q]", "out + q * H")};
</%def>
__kernel void lstm_backward(int N, int H,
% if DY:
                            __global const float *dy, ulong dy_offset, ulong dy_row,
% endif
${backward_args()}
                            __global const float *dh, ulong dh_offset,
                            __global float *dc, ulong dc_offset,
                            __global const float *gates, ulong gates_offset,
                            __global const float *c, ulong c_offset,
                            __global const float *c_prev, ulong c_prev_offset,
                            __global float *dg, ulong dg_offset)
{
${kernel_body(dh_sums, lstm_backward_row)}
}
% else:
<%def name="gru_forward_row(r)">
        __global const float *x = xg + xg_offset + n * xg_row + j;
        ${T} v[4];
        ${st("gru_gates%s(%s, %s, %s, %s, %s, %s, %s, v)" % (S, ld("x"), ld("x + H"), ld("x + 2 * H"), hidden(r, 0), hidden(r, 1), hidden(r, 2), ld("h_prev + h_prev_offset + n * h_prev_row + j")), "h + h_offset + n * h_row + j")};
% if SAVE:
${save(4)}
% endif
</%def>
__kernel void gru_forward(int N, int H,
                          __global const float *xg, ulong xg_offset, ulong xg_row,
${forward_args()}
                          __global const float *h_prev, ulong h_prev_offset, ulong h_prev_row,
                          __global float *h, ulong h_offset, ulong h_row
% if SAVE:
                          , __global float *gates, ulong gates_offset
% endif
                          )
{
${kernel_body(hidden_sums, gru_forward_row)}
}

// dh = dy + dh_next (dh as read, plus FUSED with product the gradients of the step after
// times W_hh); pre-activation gradients of the input part into dxg and of the hidden part
// into dhg (they differ in the n block: d(hg_n) = dn_pre r); the direct part of dh_prev,
// dh z, into dh (the launcher, or the next FUSED launch, then adds dhg W_hh).
<%def name="gru_backward_row(r)">
        const ulong k = (ulong)n * H + j;
        ${T} dh_t = ${ld("dh + dh_offset + k")}${" + d%d" % r if FUSED else ""};
% if DY:
        dh_t += ${ld("dy + dy_offset + n * dy_row + j")};
% endif
        __global const float *s = gates + gates_offset + (ulong)n * 4 * H + j;
        ${T} v[4] = {${ld("s")}, ${ld("s + H")}, ${ld("s + 2 * H")}, ${ld("s + 3 * H")}}, d[3];
        ${st("gru_grads%s(dh_t, v, %s, d)" % (S, ld("h_prev + h_prev_offset + n * h_prev_row + j")), "dh + dh_offset + k")};
        const ulong row = (ulong)n * 3 * H + j;
        for (int q = 0; q < 3; q++) {
            ${st("d[q]", "dxg + dxg_offset + row + q * H")};
            ${st("q == 2 ? d[2] * v[0] : d[q]", "dhg + dhg_offset + row + q * H")};
        }
</%def>
__kernel void gru_backward(int N, int H,
% if DY:
                           __global const float *dy, ulong dy_offset, ulong dy_row,
% endif
${backward_args()}
                           __global float *dh, ulong dh_offset,
                           __global const float *gates, ulong gates_offset,
                           __global const float *h_prev, ulong h_prev_offset, ulong h_prev_row,
                           __global float *dxg, ulong dxg_offset,
                           __global float *dhg, ulong dhg_offset)
{
${kernel_body(dh_sums, gru_backward_row)}
}
% endif
