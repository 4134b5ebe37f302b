<%include file="common.h"/>
// Pooling over 1 to 3 spatial dims (1-D and 2-D are 3-D with unit dims), PyTorch's
// windows: MODE "max" / "avg" (kernel K, stride S, padding P, dilation D per dim) or
// "adaptive_max" / "adaptive_avg" (output o of O over I reads [floor(o I / O),
// ceil((o + 1) I / O))). Max keeps the index of its pick in the input plane (the first
// largest; a NaN wins, the last one seen). Backward kernels gather per input element
// over the outputs whose windows hold it, so no atomics are needed.
// T: the storage type; A: the compute type (float for floats, long for integers).
<% FLOAT = T in ("float", "half", "bfloat16", "double") %>
% if T in ("half", "bfloat16"):
#define LOAD(p, i) LD_${T}(p, i)
#define STORE(p, i, v) ST_${T}(p, i, v)
% else:
#define LOAD(p, i) ((p)[i])
#define STORE(p, i, v) ((p)[i] = (${T})(v))
% endif
<% A = ("double" if T == "double" else "float") if FLOAT else "long" %>
% if not FLOAT:
#define LOWEST ${ {"long": "LONG_MIN", "int": "INT_MIN", "short": "SHRT_MIN", "char": "CHAR_MIN", "uchar": "0"}[T] }
% endif
<% ADAPTIVE = MODE.startswith("adaptive") %>
<% MAX = MODE.endswith("max") %>
#define SIZES int I0, int I1, int I2, int O0, int O1, int O2, int K0, int K1, int K2, \
              int S0, int S1, int S2, int P0, int P1, int P2, int D0, int D1, int D2, \
              int count_include_pad, long divisor

// the window of output o along one dim: first tap *lo, one past the last *hi, step *step
// (taps in the padding included, except for max pooling which only reads the input)
inline void window(int o, int I, int O, int K, int S, int P, int D, int *lo, int *hi, int *step)
{
% if ADAPTIVE:
    *lo = (int)(((long)o * I) / O);
    *hi = (int)((((long)o + 1) * I + O - 1) / O);
    *step = 1;
% else:
    *lo = o * S - P;
    *hi = *lo + (K - 1) * D + 1;
    *step = D;
% endif
}

% if not MAX:
// PyTorch's divisor: the window clipped to input + padding, or its part in the input
inline long divide_by(int *lo, int *hi, int I0, int I1, int I2, int P0, int P1, int P2,
                      int count_include_pad, long divisor)
{
    const int I[3] = {I0, I1, I2}, P[3] = {P0, P1, P2};
    long padded = 1, inside = 1;
    for (int d = 0; d < 3; ++d) {
% if ADAPTIVE:
        inside *= hi[d] - lo[d];
% else:
        int end = min(hi[d], I[d] + P[d]);
        padded *= end - lo[d];
        inside *= min(end, I[d]) - max(lo[d], 0);
% endif
    }
% if ADAPTIVE:
    return inside;
% else:
    return divisor > 0 ? divisor : count_include_pad ? padded : inside;
% endif
}
% endif

#define WINDOWS(o0, o1, o2) \
    int lo[3], hi[3], st[3]; \
    window(o0, I0, O0, K0, S0, P0, D0, lo + 0, hi + 0, st + 0); \
    window(o1, I1, O1, K1, S1, P1, D1, lo + 1, hi + 1, st + 1); \
    window(o2, I2, O2, K2, S2, P2, D2, lo + 2, hi + 2, st + 2);

__kernel void pool_forward(ulong total, SIZES,
                           __global const ${T} *x, ulong x_offset, __global ${T} *y, ulong y_offset
% if MAX:
                           , __global long *idx, ulong idx_offset
% endif
                           )
{
    ulong g = get_global_id(0);
    if (g >= total)
        return;
    int o2 = (int)(g % O2), o1 = (int)((g / O2) % O1), o0 = (int)((g / O2 / O1) % O0);
    ulong nc = g / O2 / O1 / O0;
    __global const ${T} *xp = x + x_offset + nc * I0 * I1 * I2;
    WINDOWS(o0, o1, o2)
    const int I[3] = {I0, I1, I2};
    int first[3], last[3];
    for (int d = 0; d < 3; ++d) {   // the taps inside the input
        first[d] = lo[d] < 0 ? lo[d] + (-lo[d] + st[d] - 1) / st[d] * st[d] : lo[d];
        last[d] = min(hi[d], I[d]);
    }
% if MAX:
% if FLOAT:
    ${A} best = -INFINITY;
% else:
    ${A} best = LOWEST;
% endif
    long pick = ((long)first[0] * I1 + first[1]) * I2 + first[2];
% else:
    ${A} sum = 0;
% endif
    for (int i0 = first[0]; i0 < last[0]; i0 += st[0])
        for (int i1 = first[1]; i1 < last[1]; i1 += st[1])
            for (int i2 = first[2]; i2 < last[2]; i2 += st[2]) {
                long at = ((long)i0 * I1 + i1) * I2 + i2;
                ${A} v = LOAD(xp, at);
% if MAX:
                if (v > best${" || isnan(v)" if FLOAT else ""}) {
                    best = v;
                    pick = at;
                }
% else:
                sum += v;
% endif
            }
% if MAX:
    STORE(y + y_offset, g, best);
    idx[idx_offset + g] = pick;
% else:
    long n = divide_by(lo, hi, I0, I1, I2, P0, P1, P2, count_include_pad, divisor);
    STORE(y + y_offset, g, sum / (${A})n);
% endif
}

% if FLOAT:
// the outputs along one dim whose windows may hold input i: [*first, *last]
inline void holders(int i, int I, int O, int K, int S, int P, int D, int *first, int *last)
{
% if ADAPTIVE:
    *first = (int)(((long)i * O) / I);
    *last = min(O - 1, (int)((((long)i + 1) * O + I - 1) / I) - 1);
% else:
    int reach = i + P - (K - 1) * D;   // o S >= reach, o S <= i + P
    *first = max(0, reach <= 0 ? 0 : (reach + S - 1) / S);
    *last = min(O - 1, (i + P) / S);
% endif
}

__kernel void pool_backward(ulong total, SIZES,
                            __global const ${T} *dy, ulong dy_offset,
% if MAX:
                            __global const long *idx, ulong idx_offset,
% endif
                            __global ${T} *dx, ulong dx_offset)
{
    ulong g = get_global_id(0);
    if (g >= total)
        return;
    int i2 = (int)(g % I2), i1 = (int)((g / I2) % I1), i0 = (int)((g / I2 / I1) % I0);
    ulong nc = g / I2 / I1 / I0;
    const ulong plane = (ulong)O0 * O1 * O2;
    __global const ${T} *dyp = dy + dy_offset + nc * plane;
% if MAX:
    __global const long *ip = idx + idx_offset + nc * plane;
    const long at = ((long)i0 * I1 + i1) * I2 + i2;
% endif
    int f0, l0, f1, l1, f2, l2;
    holders(i0, I0, O0, K0, S0, P0, D0, &f0, &l0);
    holders(i1, I1, O1, K1, S1, P1, D1, &f1, &l1);
    holders(i2, I2, O2, K2, S2, P2, D2, &f2, &l2);
    ${A} sum = 0;
    for (int o0 = f0; o0 <= l0; ++o0)
        for (int o1 = f1; o1 <= l1; ++o1)
            for (int o2 = f2; o2 <= l2; ++o2) {
                ulong o = ((ulong)o0 * O1 + o1) * O2 + o2;
% if MAX:
                if (ip[o] == at)
                    sum += LOAD(dyp, o);
% else:
                WINDOWS(o0, o1, o2)
                if (lo[0] <= i0 && i0 < hi[0] && lo[1] <= i1 && i1 < hi[1] && lo[2] <= i2 && i2 < hi[2])
                    sum += LOAD(dyp, o) / (${A})divide_by(lo, hi, I0, I1, I2, P0, P1, P2,
                                                           count_include_pad, divisor);
% endif
            }
    STORE(dx + dx_offset, g, sum);
}
% endif

% if MAX:
// max_unpool: y[n, c, idx[n, c, j]] = x[n, c, j] (y zeroed first); an index outside the
// output plane writes nothing
__kernel void unpool(ulong total, ulong in_plane, ulong out_plane,
                     __global const ${T} *x, ulong x_offset, __global const long *idx,
                     ulong idx_offset, __global ${T} *y, ulong y_offset)
{
    ulong g = get_global_id(0);
    if (g >= total)
        return;
    long j = idx[idx_offset + g];
    if (j >= 0 && (ulong)j < out_plane)
        STORE(y + y_offset, g / in_plane * out_plane + j, LOAD(x + x_offset, g));
}
% endif
