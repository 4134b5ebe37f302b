<%include file="common.h"/>
// Column unrolling for convolutions of 1 to 3 spatial dims (1-D and 2-D ones are 3-D ones
// with unit dims): vol2col lays each sample's receptive fields out as a (C * K, L) matrix
// (K = K0 K1 K2 taps, L = O0 O1 O2 outputs) that a GEMM with the weights turns into the
// output; the columns of the batch's samples lie side by side, col[c, k, n, l] (one
// GEMM over every sample gives the filter's gradient); col2vol is its adjoint, gathered per input element (no atomics): each input
// sums the columns of the taps that read it.
// T: the storage type, computed in float for 16-bit floats.
% if T in ("half", "bfloat16"):
#define LOAD(p, i) LD_${T}(p, i)
#define STORE(p, i, v) ST_${T}(p, i, v)
% else:
#define LOAD(p, i) ((p)[i])
#define STORE(p, i, v) ((p)[i] = (v))
% endif
#define GEOMETRY int NB, int C, int I0, int I1, int I2, int O0, int O1, int O2, \
                 int K0, int K1, int K2, int S0, int S1, int S2, int P0, int P1, int P2, \
                 int D0, int D1, int D2

// col[c, k, n, l] = x[n, c, o * S - P + k * D] (0 in the padding), one work-item each
__kernel void vol2col(ulong total, GEOMETRY,
                      __global const ${T} *x, ulong x_offset, __global ${T} *col, ulong col_offset)
{
    ulong g = get_global_id(0);
    if (g >= total)
        return;
    const ulong L = (ulong)O0 * O1 * O2, KK = (ulong)K0 * K1 * K2;
    ulong l = g % L, r = g / L;
    ulong n = r % NB, ck = r / NB;
    int k = (int)(ck % KK);
    ulong nc = n * C + ck / KK;
    int o2 = (int)(l % O2), o1 = (int)((l / O2) % O1), o0 = (int)(l / O2 / O1);
    int k2 = k % K2, k1 = (k / K2) % K1, k0 = k / K2 / K1;
    int i0 = o0 * S0 - P0 + k0 * D0, i1 = o1 * S1 - P1 + k1 * D1, i2 = o2 * S2 - P2 + k2 * D2;
    __global ${T} *c = col + col_offset;
    if (i0 >= 0 && i0 < I0 && i1 >= 0 && i1 < I1 && i2 >= 0 && i2 < I2) {
        __global const ${T} *xp = x + x_offset;
        STORE(c, g, LOAD(xp, ((nc * I0 + i0) * I1 + i1) * I2 + i2));
    } else {
        STORE(c, g, 0);
    }
}

// dx[n, c, i] = sum over the taps k and outputs o with o * S - P + k * D = i of col[c, k, n, o]
__kernel void col2vol(ulong total, GEOMETRY,
                      __global const ${T} *col, ulong col_offset, __global ${T} *dx, ulong dx_offset)
{
    ulong g = get_global_id(0);
    if (g >= total)
        return;
    const ulong L = (ulong)O0 * O1 * O2, KK = (ulong)K0 * K1 * K2;
    int i2 = (int)(g % I2), i1 = (int)((g / I2) % I1), i0 = (int)((g / I2 / I1) % I0);
    ulong nc = g / I2 / I1 / I0, n = nc / C;
    __global const ${T} *c = col + col_offset + (nc % C) * KK * NB * L + n * L;
    float sum = 0.0f;
    for (int k0 = 0; k0 < K0; ++k0) {
        int t0 = i0 + P0 - k0 * D0;
        if (t0 < 0 || t0 % S0 || t0 / S0 >= O0)
            continue;
        for (int k1 = 0; k1 < K1; ++k1) {
            int t1 = i1 + P1 - k1 * D1;
            if (t1 < 0 || t1 % S1 || t1 / S1 >= O1)
                continue;
            for (int k2 = 0; k2 < K2; ++k2) {
                int t2 = i2 + P2 - k2 * D2;
                if (t2 < 0 || t2 % S2 || t2 / S2 >= O2)
                    continue;
                ulong k = ((ulong)k0 * K1 + k1) * K2 + k2;
                ulong l = ((ulong)(t0 / S0) * O1 + t1 / S1) * O2 + t2 / S2;
                sum += LOAD(c, k * NB * L + l);
            }
        }
    }
    STORE(dx + dx_offset, g, sum);
}
% if T not in ("float", "half", "bfloat16"):
% if T == "double":
typedef double acc_t;
% else:
typedef long acc_t;
% endif

// Integer and float64 convolutions, one output element per work-item (no GEMM takes
// them; float64 sums in double): x (N, C, I), w, y (N, COUT, O), G groups; plain:
// y[n, co, o] = sum x[n, ci, o S - P + k D] w[co, ci, k]; TRANSPOSED: the adjoint, each
// x[n, ci, i] spread to y[n, co, i S - P + k D] by w[ci, co, k]. Integer sums wrap as C's do.
__kernel void conv_direct(ulong total, GEOMETRY, int COUT, int G, int transposed,
                          __global const ${T} *x, ulong x_offset, __global const ${T} *w,
                          ulong w_offset, __global ${T} *y, ulong y_offset)
{
    ulong g = get_global_id(0);
    if (g >= total)
        return;
    int o2 = (int)(g % O2), o1 = (int)((g / O2) % O1), o0 = (int)((g / O2 / O1) % O0);
    ulong nco = g / O2 / O1 / O0;
    int co = (int)(nco % COUT);
    ulong n = nco / COUT;
    const int CG = C / G, COG = COUT / G, grp = co / COG;
    const ulong KK = (ulong)K0 * K1 * K2;
    acc_t sum = 0;
    for (int cg = 0; cg < CG; ++cg) {
        int ci = grp * CG + cg;
        __global const ${T} *xp = x + x_offset + (n * C + ci) * I0 * I1 * I2;
        __global const ${T} *wp = w + w_offset
            + (transposed ? (ulong)ci * COG + co % COG : (ulong)co * CG + cg) * KK;
        for (int k0 = 0; k0 < K0; ++k0)
            for (int k1 = 0; k1 < K1; ++k1)
                for (int k2 = 0; k2 < K2; ++k2) {
                    int i0, i1, i2;
                    if (transposed) {   // o = i S - P + k D
                        int t0 = o0 + P0 - k0 * D0, t1 = o1 + P1 - k1 * D1, t2 = o2 + P2 - k2 * D2;
                        if (t0 < 0 || t1 < 0 || t2 < 0 || t0 % S0 || t1 % S1 || t2 % S2)
                            continue;
                        i0 = t0 / S0; i1 = t1 / S1; i2 = t2 / S2;
                    } else {
                        i0 = o0 * S0 - P0 + k0 * D0;
                        i1 = o1 * S1 - P1 + k1 * D1;
                        i2 = o2 * S2 - P2 + k2 * D2;
                    }
                    if (i0 < 0 || i0 >= I0 || i1 < 0 || i1 >= I1 || i2 < 0 || i2 >= I2)
                        continue;
                    sum += (acc_t)xp[((ulong)i0 * I1 + i1) * I2 + i2]
                         * (acc_t)wp[((ulong)k0 * K1 + k1) * K2 + k2];
                }
    }
    y[y_offset + g] = (${T})sum;
}

// The filter gradient of the plain convolution x -> dy, one weight element per work-item:
// dw[co, cg, k] = sum over n, o of dy[n, co, o] x[n, ci, o S - P + k D] (ci = the group's
// cg-th input channel); dy's channels are COUT. A transposed convolution's is this with x
// and dy's roles swapped (its output gradient is the plain convolution's input).
__kernel void conv_direct_filter(ulong total, GEOMETRY, int COUT, int G,
                                 __global const ${T} *x, ulong x_offset, __global const ${T} *dy,
                                 ulong dy_offset, __global ${T} *dw, ulong dw_offset)
{
    ulong g = get_global_id(0);
    if (g >= total)
        return;
    const int CG = C / G, COG = COUT / G;
    int k2 = (int)(g % K2), k1 = (int)((g / K2) % K1), k0 = (int)((g / K2 / K1) % K0);
    ulong cocg = g / K2 / K1 / K0;
    int cg = (int)(cocg % CG), co = (int)(cocg / CG);
    int ci = co / COG * CG + cg;
    const ulong IV = (ulong)I0 * I1 * I2, OV = (ulong)O0 * O1 * O2;
    acc_t sum = 0;
    for (ulong n = 0; n < (ulong)NB; ++n) {
        __global const ${T} *xp = x + x_offset + (n * C + ci) * IV;
        __global const ${T} *dp = dy + dy_offset + (n * COUT + co) * OV;
        for (int o0 = 0; o0 < O0; ++o0) {
            int i0 = o0 * S0 - P0 + k0 * D0;
            if (i0 < 0 || i0 >= I0)
                continue;
            for (int o1 = 0; o1 < O1; ++o1) {
                int i1 = o1 * S1 - P1 + k1 * D1;
                if (i1 < 0 || i1 >= I1)
                    continue;
                for (int o2 = 0; o2 < O2; ++o2) {
                    int i2 = o2 * S2 - P2 + k2 * D2;
                    if (i2 < 0 || i2 >= I2)
                        continue;
                    sum += (acc_t)dp[((ulong)o0 * O1 + o1) * O2 + o2]
                         * (acc_t)xp[((ulong)i0 * I1 + i1) * I2 + i2];
                }
            }
        }
    }
    dw[dw_offset + g] = (${T})sum;
}
% endif
