// The formulas of one unit of an LSTM or a GRU step, PyTorch's, and their gradients:
// one home for the step-per-launch kernels (recurrent.cl) and the one-launch loop
// (recurrent_persistent.cl). Gates are saved for backward as four values per unit:
// LSTM i, f, g, o; GRU r, z, n, W_hn h + b_hn.
// Each function also comes for vectors of VEC floats (suffix VEC) where the includer sets
// VEC > 1: the fused CPU step (recurrent.cl) applies them to a vector of units at once.

<%
LANES = context.get("VEC", 1)
FORMS = [("float", "")] + ([("float%d" % LANES, str(LANES))] if LANES > 1 else [])
%>
% for T, S in FORMS:
inline ${T} rnn_sigmoid${S}(${T} x)
{
    return 1.0f / (1.0f + exp(-x));
}

// LSTM: from the pre-activations a0..a3 (input and hidden parts summed) and c_prev, the
// gates into s (i, f, g, o); returns c. (h = o tanh(c).)
inline ${T} lstm_gates${S}(${T} a0, ${T} a1, ${T} a2, ${T} a3, ${T} c_prev, ${T} *s)
{
    s[0] = rnn_sigmoid${S}(a0);
    s[1] = rnn_sigmoid${S}(a1);
    s[2] = tanh(a2);
    s[3] = rnn_sigmoid${S}(a3);
    return s[1] * c_prev + s[0] * s[2];
}

// LSTM backward: from dh and dc of the step (dc: what the step after sent back), the
// saved gates s, c and c_prev, the pre-activation gradients into d; returns dc_prev.
inline ${T} lstm_grads${S}(${T} dh, ${T} dc, const ${T} *s, ${T} c, ${T} c_prev, ${T} *d)
{
    ${T} tc = tanh(c);
    ${T} dc_t = dc + dh * s[3] * (1.0f - tc * tc);
    d[0] = dc_t * s[2] * s[0] * (1.0f - s[0]);
    d[1] = dc_t * c_prev * s[1] * (1.0f - s[1]);
    d[2] = dc_t * s[0] * (1.0f - s[2] * s[2]);
    d[3] = dh * tc * s[3] * (1.0f - s[3]);
    return dc_t * s[1];
}

// GRU: from the input parts x0..x2, the hidden parts q0..q2 (q2 = W_hn h + b_hn) and
// h_prev, the saved values into s (r, z, n, q2); returns h.
inline ${T} gru_gates${S}(${T} x0, ${T} x1, ${T} x2, ${T} q0, ${T} q1, ${T} q2, ${T} hp,
                       ${T} *s)
{
    s[0] = rnn_sigmoid${S}(x0 + q0);
    s[1] = rnn_sigmoid${S}(x1 + q1);
    s[2] = tanh(x2 + s[0] * q2);
    s[3] = q2;
    return (1.0f - s[1]) * s[2] + s[1] * hp;
}

// GRU backward: from dh of the step, the saved s and h_prev, the input parts' gradients
// into d (r, z, n; the hidden parts' are d[0], d[1], d[2] r); returns dh's direct part
// of dh_prev, dh z.
inline ${T} gru_grads${S}(${T} dh, const ${T} *s, ${T} hp, ${T} *d)
{
    d[2] = dh * (1.0f - s[1]) * (1.0f - s[2] * s[2]);
    d[1] = dh * (hp - s[2]) * s[1] * (1.0f - s[1]);
    d[0] = d[2] * s[3] * s[0] * (1.0f - s[0]);
    return dh * s[1];
}
% endfor
