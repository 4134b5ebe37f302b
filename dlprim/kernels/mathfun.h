## Math functions OpenCL C lacks, for the operator library's expressions (dlprim/ops).
## Included by pointwise.cl only where an expression calls a dlp_ function; written once
## per real type the kernel computes in (MATH_REALS: "float", and "double" where used),
## suffixed by it: dlp_digamma_float(x).
<%page args="MATH_REALS=(), MATH_INTS=()"/>\
% for R in MATH_REALS:
<% one = "1.0" + ("f" if R == "float" else "") %>\
// PyTorch's floor division: fmod's remainder decides the step down, and the quotient is
// rounded to the nearest integer so that a / b's rounding cannot drop it by one
inline ${R} dlp_floordiv_${R}(${R} a, ${R} b)
{
    if (b == 0)
        return a / b;
    ${R} m = fmod(a, b);
    ${R} d = (a - m) / b;
    if (m != 0 && ((b < 0) != (m < 0)))
        d -= 1;
    ${R} f = floor(d);
    if (d - f > 0.5${"f" if R == "float" else ""})
        f += 1;
    return d == 0 ? copysign((${R})0, a / b) : f;
}

// Python's remainder: the sign of the divisor
inline ${R} dlp_remainder_${R}(${R} a, ${R} b)
{
    ${R} m = fmod(a, b);
    return (m != 0 && ((b < 0) != (m < 0))) ? m + b : m;
}

// digamma: the recurrence up to x >= 6, then the asymptotic series (Abramowitz & Stegun
// 6.3.18); the reflection formula for x < 0; poles give -inf at 0 and NaN at -1, -2, ..
// as PyTorch does
inline ${R} dlp_digamma_${R}(${R} x)
{
    const ${R} pi = 3.14159265358979323846;
    if (x == 0)
        return copysign((${R})INFINITY, -x);
    ${R} result = 0;
    if (x < 0) {
        if (x == floor(x))
            return NAN;
        // psi(1 - x) - psi(x) = pi / tan(pi x)
        result = -pi / tan(pi * x);
        x = 1 - x;
    }
    while (x < 6) {
        result -= 1 / x;
        x += 1;
    }
    ${R} f = 1 / (x * x);
    ${R} series = f * (1.0 / 12 - f * (1.0 / 120 - f * (1.0 / 252 - f * (1.0 / 240
                  - f * (1.0 / 132)))));
    return result + log(x) - 0.5 / x - series;
}

// erfinv: Giles' single-precision approximation ("Approximating the erfinv function",
// GPU Computing Gems, 2011), then two Newton steps on erf for full precision
inline ${R} dlp_erfinv_${R}(${R} y)
{
    if (y <= -1 || y >= 1)
        return y == -1 ? -INFINITY : (y == 1 ? INFINITY : NAN);
    ${R} w = -log((1 - y) * (1 + y)), p;
    if (w < 5) {
        w = w - 2.5;
        p = 2.81022636e-08;
        p = 3.43273939e-07 + p * w;
        p = -3.5233877e-06 + p * w;
        p = -4.39150654e-06 + p * w;
        p = 0.00021858087 + p * w;
        p = -0.00125372503 + p * w;
        p = -0.00417768164 + p * w;
        p = 0.246640727 + p * w;
        p = 1.50140941 + p * w;
    } else {
        w = sqrt(w) - 3;
        p = -0.000200214257;
        p = 0.000100950558 + p * w;
        p = 0.00134934322 + p * w;
        p = -0.00367342844 + p * w;
        p = 0.00573950773 + p * w;
        p = -0.0076224613 + p * w;
        p = 0.00943887047 + p * w;
        p = 1.00167406 + p * w;
        p = 2.83297682 + p * w;
    }
    ${R} x = p * y;
    const ${R} two_over_sqrt_pi = 1.12837916709551257390;
    for (int k = 0; k < 2; ++k)
        x -= (erf(x) - y) / (two_over_sqrt_pi * exp(-x * x));
    return x;
}

// the modified Bessel function I0: its power series sum (x/2)^2k / (k!)^2, which
// converges for every x (terms shrink once k > |x| / 2)
inline ${R} dlp_i0_${R}(${R} x)
{
    ${R} q = x * x / 4, term = 1, sum = 1;
    for (int k = 1; k < 500; ++k) {
        term *= q / ((${R})k * k);
        sum += term;
        if (term < sum * 1e-17)
            break;
    }
    return sum;
}

// sinc: sin(pi x) / (pi x), 1 at 0
inline ${R} dlp_sinc_${R}(${R} x)
{
    const ${R} pi = 3.14159265358979323846;
    return x == 0 ? ${one} : sin(pi * x) / (pi * x);
}

// x * log(y) with 0 where x is 0 (and y is not NaN), as torch.xlogy
inline ${R} dlp_xlogy_${R}(${R} x, ${R} y)
{
    return isnan(y) ? y : (x == 0 ? 0 : x * log(y));
}

// x * log1p(y) with 0 where x is 0 (and y is not NaN), as torch.special.xlog1py
inline ${R} dlp_xlog1py_${R}(${R} x, ${R} y)
{
    return isnan(y) ? y : (x == 0 ? 0 : x * log1p(y));
}

// log(exp(a) + exp(b)) without overflow; equal infinities stay themselves
inline ${R} dlp_logaddexp_${R}(${R} a, ${R} b)
{
    if (isinf(a) && a == b)
        return a;
    ${R} m = fmax(a, b);
    return m + log1p(exp(-fabs(a - b)));
}

// log2(2^a + 2^b)
inline ${R} dlp_logaddexp2_${R}(${R} a, ${R} b)
{
    if (isinf(a) && a == b)
        return a;
    ${R} m = fmax(a, b);
    return m + log1p(exp2(-fabs(a - b))) / log((${R})2);
}
% endfor
% for I in MATH_INTS:
// Euclid's greatest common divisor, never negative (gcd(0, 0) = 0)
inline ${I} dlp_gcd_${I}(${I} a, ${I} b)
{
    a = a < 0 ? -a : a;
    b = b < 0 ? -b : b;
    while (b != 0) {
        ${I} t = a % b;
        a = b;
        b = t;
    }
    return a;
}

// integer powers by squaring; a negative exponent gives 0 except for bases 1 and -1
// (PyTorch's answer for integer tensors)
inline ${I} dlp_ipow_${I}(${I} a, ${I} b)
{
    if (b < 0)
        return a == 1 ? 1 : (a == -1 ? ((b & 1) ? -1 : 1) : 0);
    ${I} r = 1;
    while (b) {
        if (b & 1)
            r *= a;
        a *= a;
        b >>= 1;
    }
    return r;
}
% endfor
