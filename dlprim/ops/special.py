"""Special functions of torch.special and friends (declarations: see ops/declare.py):
their helpers are in kernels/specialfun.h (Hurwitz zeta, incomplete gamma, erfcx, scaled
Bessel I0/I1, the orthogonal polynomials), compiled only into kernels that call them."""
import math

from .declare import declare

FAMILY = "special"
_PI = "(({T})3.14159265358979323846)"


def _unary(name, expr, doc, **kw):
    kw.setdefault("dtypes", ("float", "int", "bool"))
    return declare(name, FAMILY, "unary", doc, expr=expr, promote="float", **kw)


def _binary(name, expr, doc, **kw):
    kw.setdefault("dtypes", ("float", "int", "bool"))
    return declare(name, FAMILY, "binary", doc, expr=expr, promote="float", **kw)


def _polygamma(attrs, out_ctype):
    n = attrs.get("n", 0)
    if n == 0:
        return "dlp_digamma_{R}({a})"
    # psi^(n)(x) = (-1)^(n+1) n! zeta(n + 1, x)
    return "(%r * dlp_sf_zeta_{R}((({R})%d), {a}))" % (
        float((-1) ** (n + 1) * math.factorial(n)), n + 1)


_unary("polygamma", _polygamma, "the n-th derivative of digamma", attrs=("n",),
       inputs=("self",), aten=("polygamma", "special_polygamma"))
_binary("special_zeta", "dlp_sf_zeta_{R}({a}, {b})", "the Hurwitz zeta function")
_binary("igamma", "dlp_sf_igamma_{R}({a}, {b}, 0)",
        "the regularized lower incomplete gamma function P(a, x)",
        aten=("igamma", "special_gammainc"))
_binary("igammac", "dlp_sf_igamma_{R}({a}, {b}, 1)",
        "the regularized upper incomplete gamma function Q(a, x)",
        aten=("igammac", "special_gammaincc"))
_unary("special_erfcx", "dlp_sf_erfcx_{R}({a})", "erfc(x) e^(x^2), without underflow")
_unary("special_i0e", "dlp_sf_ie_{R}({a}, 0)", "I0(x) e^-|x|")
_unary("special_i1e", "dlp_sf_ie_{R}({a}, 1)", "I1(x) e^-|x|")
_unary("special_i1", "(dlp_sf_ie_{R}({a}, 1) * exp(fabs({a})))",
       "the modified Bessel function of the first kind, order 1",
       aten=("special_i1", "special_modified_bessel_i1"))
_unary("special_modified_bessel_i0", "(dlp_sf_ie_{R}({a}, 0) * exp(fabs({a})))",
       "the modified Bessel function of the first kind, order 0")
_unary("special_spherical_bessel_j0",
       "({a} == 0 ? ({T})1 : (isinf({a}) ? ({T})0 : sin({a}) / {a}))",
       "sin(x) / x, the spherical Bessel function of order 0")
_unary("angle", "(isnan({a}) ? {a} : ({a} < 0 ? %s : ({T})0))" % _PI,
       "the argument of x: pi below 0, else 0")
_binary("ldexp", "({a} * exp2(({T}){b}))", "a * 2^b")

# the orthogonal polynomials at degree n (b, truncated to an integer)
for _kind, _letter in enumerate("tuvw"):
    _binary("special_chebyshev_polynomial_" + _letter,
            "dlp_sf_chebyshev_{R}({a}, (long){b}, %d)" % _kind,
            "the Chebyshev polynomial %s_n(x)" % _letter.upper())
    _binary("special_shifted_chebyshev_polynomial_" + _letter,
            "dlp_sf_chebyshev_{R}({a} + {a} - 1, (long){b}, %d)" % _kind,
            "the shifted Chebyshev polynomial %s*_n(x) = %s_n(2x - 1)"
            % (_letter.upper(), _letter.upper()))
_binary("special_hermite_polynomial_h", "dlp_sf_hermite_{R}({a}, (long){b}, 0)",
        "the physicists' Hermite polynomial H_n(x)")
_binary("special_hermite_polynomial_he", "dlp_sf_hermite_{R}({a}, (long){b}, 1)",
        "the probabilists' Hermite polynomial He_n(x)")
_binary("special_laguerre_polynomial_l", "dlp_sf_laguerre_{R}({a}, (long){b})",
        "the Laguerre polynomial L_n(x)")
_binary("special_legendre_polynomial_p", "dlp_sf_legendre_{R}({a}, (long){b})",
        "the Legendre polynomial P_n(x)")

# the Bessel functions and friends, by Cephes' approximations (kernels/specialfun.h)
_unary("special_bessel_j0", "dlp_sf_bessel_j0_{R}({a})",
       "the Bessel function of the first kind, order 0")
_unary("special_bessel_j1", "dlp_sf_bessel_j1_{R}({a})",
       "the Bessel function of the first kind, order 1")
_unary("special_bessel_y0", "dlp_sf_bessel_y0_{R}({a})",
       "the Bessel function of the second kind, order 0")
_unary("special_bessel_y1", "dlp_sf_bessel_y1_{R}({a})",
       "the Bessel function of the second kind, order 1")
_unary("special_modified_bessel_k0", "dlp_sf_bessel_k_{R}({a}, 0, 0)",
       "the modified Bessel function of the second kind, order 0")
_unary("special_modified_bessel_k1", "dlp_sf_bessel_k_{R}({a}, 1, 0)",
       "the modified Bessel function of the second kind, order 1")
_unary("special_scaled_modified_bessel_k0", "dlp_sf_bessel_k_{R}({a}, 0, 1)",
       "K0(x) e^x")
_unary("special_scaled_modified_bessel_k1", "dlp_sf_bessel_k_{R}({a}, 1, 1)",
       "K1(x) e^x")
_unary("special_airy_ai", "dlp_sf_airy_ai_{R}({a})", "the Airy function Ai(x)")
_unary("special_ndtri", "dlp_sf_ndtri_{R}({a})",
       "the inverse of the standard normal cumulative distribution function")
