// Antialiased resampling along one dim (included by resample_nd.cl for the *_aa modes):
// output o reads inputs [lo, hi) around centre c = scale (o + 1/2), weights
// filter((i - c + 1/2) / stretch) normalised to sum to 1.

inline real_t aa_filter(real_t x)
{
    x = fabs(x);
% if MODE == "linear_aa":
    return x < 1.0f ? 1.0f - x : 0.0f;
% else:
    const real_t a = -0.5f;   // Keys' cubic, as PIL
    if (x < 1.0f)
        return ((a + 2) * x - (a + 3)) * x * x + 1;
    return x < 2.0f ? ((a * x - 5 * a) * x + 8 * a) * x - 4 * a : 0.0f;
% endif
}

// trunc(f + 1/2) for f + 1/2 >= 0 (else 0), without rounding f + 1/2 to a float first
inline int round_up_half(real_t f)
{
    if (f < -0.5f)
        return 0;
    real_t k = floor(f);
    return (int)k + (f - k >= 0.5f ? 1 : 0);
}

// the window of output o: inputs [*lo, *hi) and the sum of their raw weights
inline real_t aa_window(int o, int I, real_t scale, real_t support, real_t inv, int *lo, int *hi)
{
    real_t centre = scale * (o + 0.5f);
    *lo = max(round_up_half(centre - support), 0);
    *hi = min(round_up_half(centre + support), I);
    real_t total = 0.0f;
    for (int i = *lo; i < *hi; ++i)
        total += aa_filter(((real_t)i - centre + 0.5f) * inv);
    return total;
}

inline real_t aa_weight(int i, int o, real_t scale, real_t inv, real_t total)
{
    real_t w = aa_filter(((real_t)i - scale * (o + 0.5f) + 0.5f) * inv);
    return total != 0.0f ? w / total : w;
}

__kernel void resample_forward(ulong total, SIZES,
                               __global const ${T} *x, ulong x_offset, __global ${T} *y, ulong y_offset)
{
    ulong g = get_global_id(0);
    if (g >= total)
        return;
    int o2 = (int)(g % O2), o1 = (int)((g / O2) % O1), o0 = (int)((g / O2 / O1) % O0);
    ulong nc = g / O2 / O1 / O0;
    __global const ${T} *xp = x + x_offset + nc * I0 * I1 * I2;
    int lo0, hi0, lo1, hi1, lo2, hi2;
    real_t t0 = aa_window(o0, I0, C0, U0, V0, &lo0, &hi0);
    real_t t1 = aa_window(o1, I1, C1, U1, V1, &lo1, &hi1);
    real_t t2 = aa_window(o2, I2, C2, U2, V2, &lo2, &hi2);
    acc_t sum = 0.0f;
    for (int i0 = lo0; i0 < hi0; ++i0) {
        acc_t s1 = 0.0f;
        for (int i1 = lo1; i1 < hi1; ++i1) {
            acc_t s2 = 0.0f;
            for (int i2 = lo2; i2 < hi2; ++i2)
                s2 += aa_weight(i2, o2, C2, V2, t2) * LOAD(xp, ((ulong)i0 * I1 + i1) * I2 + i2);
            s1 += aa_weight(i1, o1, C1, V1, t1) * s2;
        }
        sum += aa_weight(i0, o0, C0, V0, t0) * s1;
    }
    STORE(y + y_offset, g, sum);
}

inline real_t aa_weight_of(int o, int i, int I, int O, real_t scale, real_t support, real_t inv)
{
    int lo, hi;
    real_t total = aa_window(o, I, scale, support, inv, &lo, &hi);
    return lo <= i && i < hi ? aa_weight(i, o, scale, inv, total) : 0.0f;
}

// the outputs whose windows may hold input i: centres within the support (and a margin)
inline void reach(int i, int I, int O, real_t scale, real_t support, int *first, int *last)
{
    if (scale <= 0) {
        *first = 0;
        *last = O - 1;
        return;
    }
    *first = max(0, (int)floor((i - support) / scale) - 2);
    *last = min(O - 1, (int)ceil((i + 1 + support) / scale) + 2);
}
