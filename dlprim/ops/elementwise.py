"""Elementwise math: one declaration per operator (see ops/declare.py for the fields).

Expressions are OpenCL C over ``{a}``, ``{b}`` (the inputs, already in the compute type
``{T}``) and ``{p0}``.. (the scalar attributes). ``{R}`` is the real type functions of
kernels/mathfun.h are suffixed with (``dlp_digamma_{R}``). 16-bit floats compute in float.
A gradient is an expression over ``a``, ``b``, ``y`` and ``dy`` per input.
"""
from .declare import declare

FAMILY = "elementwise"
_PI = "(({T})3.14159265358979323846)"


def _unary(name, expr, doc, grad=None, promote="float", dtypes=("float", "int", "bool"),
           **kw):
    return declare(name, FAMILY, "unary", doc, expr=expr, grad=grad, promote=promote,
                   dtypes=dtypes, **kw)


def _binary(name, expr, doc, grad=None, promote="same", dtypes=("float", "int", "bool"),
            **kw):
    return declare(name, FAMILY, "binary", doc, expr=expr, grad=grad, promote=promote,
                   dtypes=dtypes, **kw)


# ----- exponentials, logarithms, powers (integers and bools compute in float, as PyTorch)
_unary("exp", "exp({a})", "e^x", grad=("dy * y",), onnx="Exp")
_unary("exp2", "exp2({a})", "2^x", grad=("dy * y * 0.6931471805599453f",))
_unary("expm1", "expm1({a})", "e^x - 1, exact near 0", grad=("dy * (y + 1)",))
_unary("log", "log({a})", "natural logarithm", grad=("dy / a",), onnx="Log")
_unary("log2", "log2({a})", "base-2 logarithm", grad=("dy / (a * 0.6931471805599453f)",))
_unary("log10", "log10({a})", "base-10 logarithm", grad=("dy / (a * 2.302585092994046f)",))
_unary("log1p", "log1p({a})", "log(1 + x), exact near 0", grad=("dy / (a + 1)",))
_unary("sqrt", "sqrt({a})", "square root", grad=("dy * 0.5f / y",), onnx="Sqrt")
_unary("rsqrt", "rsqrt({a})", "1 / sqrt(x)", grad=("dy * -0.5f * y * y * y",))
_unary("reciprocal", "(({T})1 / {a})", "1 / x", grad=("-dy * y * y",), onnx="Reciprocal")
_unary("sigmoid", "(({T})1 / (({T})1 + exp(-{a})))", "1 / (1 + e^-x)",
       grad=("dy * y * (1 - y)",), onnx="Sigmoid")

# ----- trigonometric and hyperbolic functions and their inverses
_unary("sin", "sin({a})", "sine", grad=("dy * cos(a)",), onnx="Sin")
_unary("cos", "cos({a})", "cosine", grad=("-dy * sin(a)",), onnx="Cos")
_unary("tan", "tan({a})", "tangent", grad=("dy * (1 + y * y)",), onnx="Tan")
_unary("asin", "asin({a})", "arcsine", grad=("dy * rsqrt(1 - a * a)",), onnx="Asin",
       aten=("asin", "arcsin"))
_unary("acos", "acos({a})", "arccosine", grad=("-dy * rsqrt(1 - a * a)",), onnx="Acos",
       aten=("acos", "arccos"))
_unary("atan", "atan({a})", "arctangent", grad=("dy / (1 + a * a)",), onnx="Atan",
       aten=("atan", "arctan"))
_unary("sinh", "sinh({a})", "hyperbolic sine", grad=("dy * cosh(a)",), onnx="Sinh")
_unary("cosh", "cosh({a})", "hyperbolic cosine", grad=("dy * sinh(a)",), onnx="Cosh")
_unary("tanh", "tanh({a})", "hyperbolic tangent", grad=("dy * (1 - y * y)",), onnx="Tanh")
_unary("asinh", "asinh({a})", "inverse hyperbolic sine", grad=("dy * rsqrt(a * a + 1)",),
       onnx="Asinh", aten=("asinh", "arcsinh"))
_unary("acosh", "acosh({a})", "inverse hyperbolic cosine", grad=("dy * rsqrt(a * a - 1)",),
       onnx="Acosh", aten=("acosh", "arccosh"))
_unary("atanh", "atanh({a})", "inverse hyperbolic tangent", grad=("dy / (1 - a * a)",),
       onnx="Atanh", aten=("atanh", "arctanh"))
_unary("deg2rad", "({a} * (%s / 180))" % _PI, "degrees to radians",
       grad=("dy * 0.017453292519943295f",))
_unary("rad2deg", "({a} * (180 / %s))" % _PI, "radians to degrees",
       grad=("dy * 57.29577951308232f",))
_unary("sinc", "dlp_sinc_{R}({a})", "sin(pi x) / (pi x), 1 at 0", grad=None)

# ----- special functions
_unary("erf", "erf({a})", "error function", grad=("dy * 1.1283791670955126f * exp(-a * a)",),
       onnx="Erf")
_unary("erfc", "erfc({a})", "complementary error function",
       grad=("-dy * 1.1283791670955126f * exp(-a * a)",))
_unary("erfinv", "dlp_erfinv_{R}({a})", "inverse error function",
       grad=("dy * 0.886226925452758f * exp(y * y)",))
_unary("lgamma", "lgamma({a})", "log |Gamma(x)|", grad=("dy * dlp_digamma_{R}(a)",))
_unary("digamma", "dlp_digamma_{R}({a})", "d/dx log Gamma(x)", grad=None,
       aten=("digamma", "special_psi", "special_digamma"))
_unary("special_ndtr", "(({T})0.5 * erfc(-{a} * ({T})0.7071067811865476))",
       "the standard normal distribution function",
       grad=("dy * 0.3989422804014327f * exp(-0.5f * a * a)",))
_unary("special_log_ndtr", "log(({T})0.5 * erfc(-{a} * ({T})0.7071067811865476))",
       "log of the standard normal distribution function",
       grad=("dy * 0.3989422804014327f * exp(-0.5f * a * a - y)",))
_unary("special_entr", "(isnan({a}) ? {a} : ({a} > 0 ? -{a} * log({a}) : ({a} == 0 ? ({T})0 "
       ": -({T})INFINITY)))", "-x ln x (0 at 0, -inf below)", grad=("-dy * (1 + log(a))",))
_unary("i0", "dlp_i0_{R}({a})", "modified Bessel function of the first kind, order 0",
       grad=None, aten=("i0", "special_i0"))

# ----- signs and magnitudes (the dtype is kept)
_unary("abs", {"float": "fabs({a})", "int": "({a} < 0 ? -{a} : {a})", "bool": "{a}"},
       "|x|", grad=("a > 0 ? dy : (a < 0 ? -dy : 0)",), promote="same", onnx="Abs",
       aten=("abs", "absolute"))
_unary("neg", "(-{a})", "-x", grad=("-dy",), promote="same", dtypes=("float", "int"),
       onnx="Neg", aten=("neg", "negative"))
_unary("sign", {"float": "({a} > 0 ? ({T})1 : ({a} < 0 ? ({T})-1 : {a}))",
                "int": "({a} > 0 ? ({T})1 : ({a} < 0 ? ({T})-1 : ({T})0))", "bool": "{a}"},
       "-1, 0 or 1 by the sign (NaN stays NaN)", grad=("0",), promote="same", onnx="Sign",
       aten=("sign", "sgn"))
_unary("signbit", {"float": "(signbit({a}) != 0)", "int": "({a} < 0)", "bool": "0"},
       "whether the sign bit is set", promote="bool")

# ----- rounding (integers and bools pass through)
_unary("floor", {"float": "floor({a})", "int": "{a}"}, "round toward -inf", grad=("0",),
       promote="same", onnx="Floor")
_unary("ceil", {"float": "ceil({a})", "int": "{a}"}, "round toward +inf", grad=("0",),
       promote="same", onnx="Ceil")
_unary("trunc", {"float": "trunc({a})", "int": "{a}"}, "round toward 0", grad=("0",),
       promote="same", aten=("trunc", "fix"))
_unary("round", lambda attrs, out_ctype: _round(attrs, out_ctype),
       "round half to even (at decimals places)", grad=("0",), promote="same", onnx="Round",
       attrs=("decimals",))
_unary("frac", "({a} - trunc({a}))", "x - trunc(x)", grad=("dy",), promote="same",
       dtypes=("float",))

# ----- predicates (bool results)
_unary("isnan", {"float": "(isnan({a}) != 0)", "int": "0"}, "whether x is NaN",
       promote="bool", onnx="IsNaN")
_unary("isinf", {"float": "(isinf({a}) != 0)", "int": "0"}, "whether x is +-inf",
       promote="bool", onnx="IsInf")
_unary("isfinite", {"float": "(isfinite({a}) != 0)", "int": "1"}, "neither inf nor NaN",
       promote="bool")
_unary("isposinf", {"float": "({a} == INFINITY)", "int": "0"}, "whether x is +inf",
       promote="bool")
_unary("isneginf", {"float": "({a} == -INFINITY)", "int": "0"}, "whether x is -inf",
       promote="bool")

# ----- two inputs
_binary("atan2", "atan2({a}, {b})", "the angle of (b, a)",
        grad=("dy * b / (a * a + b * b)", "-dy * a / (a * a + b * b)"), promote="float",
        aten=("atan2", "arctan2"))
_binary("hypot", "hypot({a}, {b})", "sqrt(a^2 + b^2) without overflow",
        grad=("dy * a / y", "dy * b / y"), dtypes=("float",))
_binary("copysign", "copysign({a}, {b})", "|a| with b's sign", promote="float",
        grad=("(signbit(a) == signbit(y)) ? dy : -dy", "0"))
_binary("logaddexp", "dlp_logaddexp_{R}({a}, {b})", "log(e^a + e^b)",
        grad=("dy / (1 + exp(b - a))", "dy / (1 + exp(a - b))"), dtypes=("float",))
_binary("logaddexp2", "dlp_logaddexp2_{R}({a}, {b})", "log2(2^a + 2^b)",
        grad=("dy / (1 + exp2(b - a))", "dy / (1 + exp2(a - b))"), dtypes=("float",))
_binary("xlogy", "dlp_xlogy_{R}({a}, {b})", "a * log(b), 0 where a is 0", promote="float",
        grad=("dy * log(b)", "dy * a / b"), aten=("xlogy", "special_xlogy"))
_binary("special_xlog1py", "dlp_xlog1py_{R}({a}, {b})", "a * log1p(b), 0 where a is 0",
        promote="float", grad=("dy * log1p(b)", "dy * a / (1 + b)"))
_binary("nextafter", "nextafter({a}, {b})", "the next float after a toward b",
        dtypes=("float",))
_binary("fmax", {"float": "fmax({a}, {b})", "int": "max({a}, {b})"},
        "the larger, ignoring a NaN", grad=None)
_binary("fmin", {"float": "fmin({a}, {b})", "int": "min({a}, {b})"},
        "the smaller, ignoring a NaN", grad=None)
_binary("heaviside", "({a} == 0 ? {b} : ({a} > 0 ? ({T})1 : ({T})0))",
        "0 below 0, 1 above, b at 0", dtypes=("float", "int", "bool"))
_binary("floor_divide", {"float": "dlp_floordiv_{R}({a}, {b})",
                         "int": "(({a} / {b}) - ((({a} % {b}) != 0) & (({a} < 0) != ({b} < 0))))"},
        "floor(a / b)", dtypes=("float", "int"))
_binary("remainder", {"float": "dlp_remainder_{R}({a}, {b})",
                      "int": "((({a} % {b}) != 0 && ((({a} % {b}) < 0) != ({b} < 0))) "
                             "? ({a} % {b}) + {b} : ({a} % {b}))"},
        "a mod b with b's sign (Python's %)", grad=("dy", "-dy * dlp_floordiv_{R}(a, b)"),
        dtypes=("float", "int"), onnx=None)
_binary("gcd", "dlp_gcd_{T}({a}, {b})", "the greatest common divisor (never negative)",
        dtypes=("int",))
_binary("lcm", "(dlp_gcd_{T}({a}, {b}) == 0 ? ({T})0 : ({T})abs({a} / dlp_gcd_{T}({a}, {b}) * {b}))",
        "the least common multiple (never negative)", dtypes=("int",))
_binary("fmod", {"float": "fmod({a}, {b})", "int": "({a} % {b})"},
        "a mod b with a's sign (C's fmod)", grad=("dy", "-dy * trunc(a / b)"),
        dtypes=("float", "int"))

# ----- arithmetic (bools: add is or, mul is and, as PyTorch)
_binary("add", {"float": "{a} + {alpha} * {b}", "int": "{a} + ({T}){alpha} * {b}",
                "bool": "({a} || ({alpha} && {b}))"}, "a + alpha * b",
        grad=("dy", "dy"), onnx="Add")
_binary("sub", {"float": "{a} - {alpha} * {b}", "int": "{a} - ({T}){alpha} * {b}"},
        "a - alpha * b", grad=("dy", "-dy"), dtypes=("float", "int"), onnx="Sub",
        aten=("sub", "subtract"))
_binary("rsub", {"float": "{b} - {alpha} * {a}", "int": "{b} - ({T}){alpha} * {a}"},
        "b - alpha * a", grad=("-dy", "dy"), dtypes=("float", "int"))
_binary("mul", {"float": "{a} * {b}", "int": "{a} * {b}", "bool": "({a} && {b})"}, "a * b",
        grad=("dy * b", "dy * a"), onnx="Mul", aten=("mul", "multiply"))


def _div(attrs, out_ctype):
    mode = attrs.get("rounding_mode")
    if mode is None:
        return "{a} / {b}"
    if mode == "trunc":
        return {"float": "trunc({a} / {b})", "int": "({a} / {b})"}
    if mode == "floor":
        return {"float": "dlp_floordiv_{R}({a}, {b})",
                "int": "(({a} / {b}) - ((({a} % {b}) != 0) & (({a} < 0) != ({b} < 0))))"}
    return None


_binary("div", _div, "a / b, or rounded toward 0 ('trunc') or -inf ('floor')",
        grad=("dy / b", "-dy * a / (b * b)"), dtypes=("float", "int"), attrs=("rounding_mode",),
        onnx="Div", aten=("div", "divide", "true_divide"))
_binary("pow", {"float": "pow({a}, {b})", "int": "dlp_ipow_{T}({a}, {b})"}, "a ^ b",
        grad=("dy * b * pow(a, b - 1)", "dy * y * log(a)"), dtypes=("float", "int"),
        onnx="Pow")
# NaN wins, as in torch.maximum / minimum
_binary("maximum", {"float": "(isnan({a}) || {a} > {b} ? {a} : {b})", "int": "max({a}, {b})",
                    "bool": "({a} || {b})"}, "the larger (NaN if either is)",
        grad=("a >= b ? dy : 0", "b > a ? dy : 0"), onnx="Max")
_binary("minimum", {"float": "(isnan({a}) || {a} < {b} ? {a} : {b})", "int": "min({a}, {b})",
                    "bool": "({a} && {b})"}, "the smaller (NaN if either is)",
        grad=("a <= b ? dy : 0", "b < a ? dy : 0"), onnx="Min")
declare("lerp", FAMILY, "ternary", "a + weight * (b - a)",
        expr="({a} + {c} * ({b} - {a}))", dtypes=("float",),
        grad=("dy * (1 - c)", "dy * c", "dy * (b - a)"))
declare("addcmul", FAMILY, "ternary", "a + value * b * c",
        expr={"float": "({a} + {value} * {b} * {c})", "int": "({a} + ({T}){value} * {b} * {c})"},
        dtypes=("float", "int"), grad=("dy", "dy * value * c", "dy * value * b"))
declare("addcdiv", FAMILY, "ternary", "a + value * b / c", expr="({a} + {value} * {b} / {c})",
        dtypes=("float",), grad=("dy", "dy * value / c", "-dy * value * b / (c * c)"))


# ----- clamps (a NaN in x or in a bound gives NaN, as PyTorch)
def _at_least(x, lo):
    return {"float": "((isnan(%s) || %s >= %s) ? %s : %s)" % (x, x, lo, x, lo),
            "int": "(%s >= %s ? %s : %s)" % (x, lo, x, lo)}


def _at_most(x, hi):
    return {"float": "((isnan(%s) || %s <= %s) ? %s : %s)" % (x, x, hi, x, hi),
            "int": "(%s <= %s ? %s : %s)" % (x, hi, x, hi)}


def _clamp(attrs, out_ctype):
    has_lo, has_hi = attrs["present"][1:]
    out = {}
    for cls in ("float", "int"):
        x = "{a}"
        if has_lo:
            x = _at_least(x, "{b}")[cls]
        if has_hi:
            x = _at_most(x, "{c}")[cls]
        out[cls] = x
    return out


declare("clamp", FAMILY, "ternary", "x limited to [min, max] (either may be absent)",
        expr=_clamp, dtypes=("float", "int"), inputs=("self", "min", "max"),
        attrs=("present",), onnx="Clip", aten=("clamp", "clip"),
        grad=("(a >= b && a <= c) ? dy : 0", None, None))
declare("clamp_min", FAMILY, "binary", "max(x, min)", expr=_at_least("{a}", "{b}"),
        grad=("a >= b ? dy : 0", None))
declare("clamp_max", FAMILY, "binary", "min(x, max)", expr=_at_most("{a}", "{b}"),
        grad=("a <= b ? dy : 0", None))

# the largest finite value of each storage type nan_to_num's defaults use
_FINITE_MAX = {"float": "FLT_MAX", "double": "DBL_MAX", "half": "65504.0f",
               "bfloat16": "3.38953139e38f"}


def _nan_to_num(attrs, out_ctype):
    big = _FINITE_MAX.get(out_ctype, "FLT_MAX")
    nan = "{nan}" if attrs.get("nan") is not None else "0"
    pos = "{posinf}" if attrs.get("posinf") is not None else big
    neg = "{neginf}" if attrs.get("neginf") is not None else "-" + big
    return {"float": "(isnan({a}) ? ({T})%s : (isinf({a}) ? ({a} > 0 ? ({T})%s : ({T})%s) "
                     ": {a}))" % (nan, pos, neg),
            "int": "{a}"}


_unary("nan_to_num", _nan_to_num, "NaN, +inf and -inf replaced by finite values",
       promote="same", attrs=("nan", "posinf", "neginf"), grad=("isfinite(a) ? dy : 0",))


def _round(attrs, out_ctype):
    d = attrs.get("decimals") or 0
    if d == 0:
        return {"float": "rint({a})", "int": "{a}"}
    scale = "(({T})1e%d)" % abs(d)
    if d > 0:
        return {"float": "(rint({a} * %s) / %s)" % (scale, scale)}
    return {"float": "(rint({a} / %s) * %s)" % (scale, scale)}
