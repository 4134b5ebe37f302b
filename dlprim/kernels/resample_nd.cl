<%include file="common.h"/>
// Resampling over 1 to 3 spatial dims (1-D and 2-D are 3-D with unit dims), PyTorch's
// upsample_* rules: MODE "nearest" / "nearest_exact" (1 tap per dim), "linear" (2) or
// "cubic" (4, A = -0.75, taps clamped to the edge). Per dim, ``scale`` is the float
// ratio PyTorch derives from the sizes, the scale factor and align_corners (the host
// works it out as PyTorch does). The backward kernel gathers per input element over the
// outputs whose taps may reach it, recomputing their taps (no atomics).
// MODE "linear_aa" / "cubic_aa": antialiased (interpolate's antialias=True), every input
// under a filter stretched by the ratio when shrinking (support U, 1 / stretch V per dim),
// its weights normalised to sum to 1 (PyTorch's _upsample_*_aa, after PIL).
// T: the storage type (computed in float, float64 in double; integers only for the
// nearest modes, forward). real_t: the type of positions and weights, double for float64
// but in the nearest modes (PyTorch finds their index in float whatever the dtype);
// acc_t: the type of sums, double for float64.
% if T in ("half", "bfloat16"):
#define LOAD(p, i) LD_${T}(p, i)
#define STORE(p, i, v) ST_${T}(p, i, v)
% else:
#define LOAD(p, i) ((p)[i])
#define STORE(p, i, v) ((p)[i] = (v))
% endif
% if T == "double" and not MODE.startswith("nearest"):
#define real_t double
% else:
#define real_t float
% endif
#define acc_t ${"double" if T == "double" else "float"}
<% AA = MODE.endswith("_aa") %>
<% TAPS = {"nearest": 1, "nearest_exact": 1, "linear": 2, "cubic": 4}.get(MODE, 0) %>
#define TAPS ${TAPS}
#define SIZES int I0, int I1, int I2, int O0, int O1, int O2, \
              real_t C0, real_t C1, real_t C2, int align_corners, \
              real_t U0, real_t U1, real_t U2, real_t V0, real_t V1, real_t V2
% if AA:
<%include file="resample_aa.h"/>
% else:

% if MODE == "cubic":
inline real_t cubic1(real_t x) { const real_t A = -0.75f; return ((A + 2) * x - (A + 3)) * x * x + 1; }
inline real_t cubic2(real_t x) { const real_t A = -0.75f; return ((A * x - 5 * A) * x + 8 * A) * x - 4 * A; }
% endif

// the input positions and weights output o reads along one dim
inline void taps(int o, int I, int O, real_t scale, int align_corners, int *at, real_t *w)
{
% if MODE in ("nearest", "nearest_exact"):
% if MODE == "nearest":
    at[0] = O == I ? o : O == 2 * I ? o >> 1 : min((int)floor(o * scale), I - 1);
% else:
    at[0] = min((int)floor((o + 0.5f) * scale), I - 1);
% endif
    w[0] = 1.0f;
% else:
    real_t real = align_corners ? scale * o : scale * (o + 0.5f) - 0.5f;
% if MODE == "linear":
    if (!align_corners && real < 0)
        real = 0;
% endif
    int base = min((int)floor(real), I - 1);
    real_t t = clamp(real - base, (real_t)0, (real_t)1);
% if MODE == "linear":
    at[0] = base;
    at[1] = base + (base < I - 1 ? 1 : 0);
    w[0] = 1.0f - t;
    w[1] = t;
% else:
    w[0] = cubic2(t + 1.0f);
    w[1] = cubic1(t);
    w[2] = cubic1(1.0f - t);
    w[3] = cubic2(2.0f - t);
    for (int k = 0; k < 4; ++k)
        at[k] = clamp(base - 1 + k, 0, I - 1);
% endif
% endif
}

% endif

% if not AA:
__kernel void resample_forward(ulong total, SIZES,
                               __global const ${T} *x, ulong x_offset, __global ${T} *y, ulong y_offset)
{
    ulong g = get_global_id(0);
    if (g >= total)
        return;
    int o2 = (int)(g % O2), o1 = (int)((g / O2) % O1), o0 = (int)((g / O2 / O1) % O0);
    ulong nc = g / O2 / O1 / O0;
    __global const ${T} *xp = x + x_offset + nc * I0 * I1 * I2;
    int a0[TAPS], a1[TAPS], a2[TAPS];
    real_t w0[TAPS], w1[TAPS], w2[TAPS];
    taps(o0, I0, O0, C0, align_corners, a0, w0);
    taps(o1, I1, O1, C1, align_corners, a1, w1);
    taps(o2, I2, O2, C2, align_corners, a2, w2);
% if TAPS == 1:
    // a copy: integers (nearest resampling takes them) keep every bit
    ${"float" if T in ("float", "half", "bfloat16") else T} sum = LOAD(xp, ((ulong)a0[0] * I1 + a1[0]) * I2 + a2[0]);
% else:
    acc_t sum = 0.0f;
    for (int k0 = 0; k0 < (I0 > 1 || O0 > 1 ? TAPS : 1); ++k0) {
        acc_t s1 = 0.0f;
        for (int k1 = 0; k1 < (I1 > 1 || O1 > 1 ? TAPS : 1); ++k1) {
            acc_t s2 = 0.0f;
            for (int k2 = 0; k2 < TAPS; ++k2)
                s2 += w2[k2] * LOAD(xp, ((ulong)a0[k0] * I1 + a1[k1]) * I2 + a2[k2]);
            s1 += (I1 > 1 || O1 > 1 ? w1[k1] : 1.0f) * s2;
        }
        sum += (I0 > 1 || O0 > 1 ? w0[k0] : 1.0f) * s1;
    }
% endif
    STORE(y + y_offset, g, sum);
}

% endif

% if not AA:
// the weight with which output o reads input i along one dim (0: it does not)
inline real_t weight_of(int o, int i, int I, int O, real_t scale, int align_corners)
{
    int at[TAPS];
    real_t w[TAPS], sum = 0.0f;
    taps(o, I, O, scale, align_corners, at, w);
    for (int k = 0; k < TAPS; ++k)
        if (at[k] == i)
            sum += w[k];
    return sum;
}

// the outputs along one dim whose taps may reach input i: a margin around i / ratio, and
// every output to the edge for the edge inputs (taps are clamped there)
inline void reach(int i, int I, int O, real_t scale, int *first, int *last)
{
    if (scale <= 0 || I == 1) {
        *first = 0;
        *last = O - 1;
        return;
    }
    *first = i == 0 ? 0 : max(0, (int)floor((i - 3) / scale) - 2);
    *last = i == I - 1 ? O - 1 : min(O - 1, (int)ceil((i + 3) / scale) + 2);
}

% endif

% if T in ("float", "half", "bfloat16", "double"):
% if AA:
#define WEIGHT_OF(d) aa_weight_of(o##d, i##d, I##d, O##d, C##d, U##d, V##d)
% else:
#define WEIGHT_OF(d) weight_of(o##d, i##d, I##d, O##d, C##d, align_corners)
% endif
__kernel void resample_backward(ulong total, SIZES,
                                __global const ${T} *dy, ulong dy_offset, __global ${T} *dx, ulong dx_offset)
{
    ulong g = get_global_id(0);
    if (g >= total)
        return;
    int i2 = (int)(g % I2), i1 = (int)((g / I2) % I1), i0 = (int)((g / I2 / I1) % I0);
    ulong nc = g / I2 / I1 / I0;
    __global const ${T} *dyp = dy + dy_offset + nc * O0 * O1 * O2;
    int f0, l0, f1, l1, f2, l2;
% if AA:
    reach(i0, I0, O0, C0, U0, &f0, &l0);
    reach(i1, I1, O1, C1, U1, &f1, &l1);
    reach(i2, I2, O2, C2, U2, &f2, &l2);
% else:
    reach(i0, I0, O0, C0, &f0, &l0);
    reach(i1, I1, O1, C1, &f1, &l1);
    reach(i2, I2, O2, C2, &f2, &l2);
% endif
    acc_t sum = 0.0f;
    for (int o0 = f0; o0 <= l0; ++o0) {
        real_t v0 = WEIGHT_OF(0);
        if (v0 == 0.0f)
            continue;
        for (int o1 = f1; o1 <= l1; ++o1) {
            real_t v1 = WEIGHT_OF(1);
            if (v1 == 0.0f)
                continue;
            for (int o2 = f2; o2 <= l2; ++o2) {
                real_t v2 = WEIGHT_OF(2);
                if (v2 != 0.0f)
                    sum += v0 * v1 * v2 * LOAD(dyp, ((ulong)o0 * O1 + o1) * O2 + o2);
            }
        }
    }
    STORE(dx + dx_offset, g, sum);
}
% endif
