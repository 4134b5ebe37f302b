## Special functions for the operator library's expressions (dlprim/ops/special.py):
## included by pointwise.cl only where an expression calls a dlp_sf_ function, once per
## real type R the kernel computes in (MATH_REALS), suffixed by it.
<%page args="MATH_REALS=()"/>\
% for R in MATH_REALS:
// Hurwitz zeta: sum_{k<N} (q + k)^-s, then the Euler-Maclaurin tail with the Bernoulli
// numbers B_2j / (2j)!; NaN for s < 1 (as PyTorch), +inf at s == 1, and at the poles
inline ${R} dlp_sf_zeta_${R}(${R} s, ${R} q)
{
    if (s == 1)
        return INFINITY;
    if (s < 1 || isnan(s) || isnan(q))
        return NAN;
    if (q <= 0) {
        if (q == floor(q))
            return INFINITY;
        if (s != floor(s))
            return NAN;   // a negative q to a non-integer power
    }
    const ${R} bernoulli[6] = {1.0 / 6, -1.0 / 30, 1.0 / 42, -1.0 / 30, 5.0 / 66,
                               -691.0 / 2730};
    // the terms until q + k > 9 (at least nine), where the tail's expansion is accurate
    ${R} sum = 0, a = q;
    for (int k = 0; k < 9 || a <= 9; ++k, a += 1) {
        if (k > 100000)
            return NAN;
        sum += pow(a, -s);
    }
    // the integral and half the first omitted term
    sum += pow(a, 1 - s) / (s - 1) + pow(a, -s) / 2;
    ${R} fact = 1, rising = s, power = pow(a, -s - 1);
    for (int j = 1; j <= 6; ++j) {
        fact *= (2 * j - 1) * (2 * j);
        sum += bernoulli[j - 1] / fact * rising * power;
        rising *= (s + 2 * j - 1) * (s + 2 * j);
        power /= a * a;
    }
    return sum;
}

// erfc(x) e^(x^2) = (1 / sqrt(pi)) / (x + (1/2) / (x + 1 / (x + (3/2) / (x + ...))))
inline ${R} dlp_sf_erfcx_cf_${R}(${R} x)
{
    if (isinf(x))
        return 0;
    ${R} f = x, c = x, d = 0;
    for (int k = 1; k < 200; ++k) {
        ${R} a = k * (${R})0.5;
        d = x + a * d;
        c = x + a / c;
        d = 1 / d;
        ${R} step = c * d;
        f *= step;
        if (fabs(step - 1) < 1e-16)
            break;
    }
    return (${R})0.56418958354775628695 / f;
}

// the complementary error function scaled by e^(x^2): directly up to 2, then a
// continued fraction (Lentz's method) where erfc underflows; 2 e^(x^2) - erfcx(-x) below 0
inline ${R} dlp_sf_erfcx_${R}(${R} x)
{
    if (isnan(x))
        return x;
    if (x < 0) {
        if (x < -26.7)
            return INFINITY;
        return 2 * exp(x * x) - (x > -2 ? exp(x * x) * erfc(-x) : dlp_sf_erfcx_cf_${R}(-x));
    }
    if (x < 2)
        return exp(x * x) * erfc(x);
    return dlp_sf_erfcx_cf_${R}(x);
}

// e^-|x| I_nu(x) for nu = 0, 1: the power series up to |x| = 30, Hankel's asymptotic
// series beyond (eight terms reach float and double precision there)
inline ${R} dlp_sf_ie_${R}(${R} x, int nu)
{
    ${R} ax = fabs(x);
    if (isinf(ax))
        return 0;
    if (ax <= 30) {
        ${R} q = x * x / 4, term = nu ? x / 2 : 1, sum = term;
        for (int k = 1; k < 500; ++k) {
            term *= q / ((${R})k * (k + nu));
            sum += term;
            if (fabs(term) <= fabs(sum) * 1e-17)
                break;
        }
        return sum * exp(-ax);
    }
    ${R} mu = 4 * nu * nu, term = 1, sum = 1;
    for (int k = 1; k < 12; ++k) {
        term *= -(mu - (2 * k - 1) * (2 * k - 1)) / (8 * k * ax);
        sum += term;
    }
    sum /= sqrt(2 * (${R})3.14159265358979323846 * ax);
    return (nu && x < 0) ? -sum : sum;
}

// the regularized lower incomplete gamma P(a, x) by its series (x < a + 1), else 1 - Q by
// Q's continued fraction; upper = 1 gives Q(a, x)
inline ${R} dlp_sf_igamma_${R}(${R} a, ${R} x, int upper)
{
    if (isnan(a) || isnan(x) || a < 0 || x < 0)
        return NAN;
    if (a == 0)
        return x > 0 ? (upper ? 0 : 1) : NAN;
    if (x == 0)
        return upper ? 1 : 0;
    if (isinf(a))
        return isinf(x) ? NAN : (upper ? 1 : 0);
    if (isinf(x))
        return upper ? 0 : 1;
    ${R} log_front = a * log(x) - x - lgamma(a);
    if (x < a + 1) {
        ${R} term = 1 / a, sum = term, ap = a;
        for (int k = 0; k < 2000; ++k) {
            ap += 1;
            term *= x / ap;
            sum += term;
            if (fabs(term) < fabs(sum) * 1e-17)
                break;
        }
        ${R} p = sum * exp(log_front);
        return upper ? 1 - p : p;
    }
    // Lentz: Q = e^(log_front) / (x + 1 - a - 1 (1 - a) / (x + 3 - a - ...))
    const ${R} tiny = 1e-30;
    ${R} b = x + 1 - a, c = 1 / tiny, d = 1 / b, h = d;
    for (int k = 1; k < 2000; ++k) {
        ${R} an = -k * (k - a);
        b += 2;
        d = an * d + b;
        d = fabs(d) < tiny ? tiny : d;
        c = b + an / c;
        c = fabs(c) < tiny ? tiny : c;
        d = 1 / d;
        ${R} step = d * c;
        h *= step;
        if (fabs(step - 1) < 1e-16)
            break;
    }
    ${R} q = exp(log_front) * h;
    return upper ? q : 1 - q;
}

// the orthogonal polynomials of torch.special at an integer degree n (a float n is
// truncated; n < 0 gives 0), by their three-term recurrences; Chebyshev's switch to the
// trigonometric form past a small degree inside (-1, 1), as PyTorch does
inline ${R} dlp_sf_chebyshev_${R}(${R} x, long n, int kind)
{
    // kind 0..3: T, U, V, W
    if (n < 0)
        return 0;
    if (fabs(x) == 1) {
        ${R} odd = (n % 2) ? -1 : 1;
        switch (kind) {
        case 0: return x > 0 ? 1 : odd;
        case 1: return (x > 0 ? 1 : odd) * (${R})(n + 1);
        case 2: return x > 0 ? 1 : odd * (${R})(n + n + 1);
        default: return x > 0 ? (${R})(n + n + 1) : odd;
        }
    }
    if (fabs(x) < 1 && n > (kind == 0 ? 6 : 8)) {
        ${R} t = acos(x);
        switch (kind) {
        case 0: return cos(n * t);
        case 1: return sin(t) != 0 ? sin((n + 1) * t) / sin(t) : (n + 1) * cos((n + 1) * t) / x;
        case 2: if (sin(t / 2) != 1)
                    return cos((n + (${R})0.5) * t) / cos(t / 2);
                return ((n % 2) ? -1 : 1) * (${R})(n + n + 1);
        default: if (cos(t / 2) != 1)
                     return sin((n + (${R})0.5) * t) / sin(t / 2);
                 return x > 0 ? (${R})(n + n + 1) : ((n % 2) ? -1 : 1);
        }
    }
    ${R} p = 1;
    ${R} q = kind == 0 ? x : (kind == 1 ? x + x : (kind == 2 ? x + x - 1 : x + x + 1));
    if (n == 0)
        return p;
    for (long k = 2; k <= n; ++k) {
        ${R} r = (x + x) * q - p;
        p = q;
        q = r;
    }
    return q;
}

inline ${R} dlp_sf_hermite_${R}(${R} x, long n, int probabilists)
{
    if (n < 0)
        return 0;
    if (n == 0)
        return 1;
    ${R} p = 1, q = probabilists ? x : x + x;
    for (long k = 1; k < n; ++k) {
        ${R} r = probabilists ? x * q - k * p : (x + x) * q - (k + k) * p;
        p = q;
        q = r;
    }
    return q;
}

inline ${R} dlp_sf_laguerre_${R}(${R} x, long n)
{
    if (n < 0)
        return 0;
    if (x == 0 || n == 0)
        return 1;
    ${R} p = 1, q = 1 - x;
    for (long k = 1; k < n; ++k) {
        ${R} r = (((k + k) + (1 - x)) * q - k * p) / (k + 1);
        p = q;
        q = r;
    }
    return q;
}

inline ${R} dlp_sf_legendre_${R}(${R} x, long n)
{
    if (n < 0)
        return 0;
    if (fabs(x) == 1)
        return (x > 0 || n % 2 == 0) ? 1 : -1;
    if (n == 0)
        return 1;
    ${R} p = 1, q = x;
    for (long k = 1; k < n; ++k) {
        ${R} r = ((k + k + 1) * x * q - k * p) / (k + 1);
        p = q;
        q = r;
    }
    return q;
}
% endfor
