"""Activation functions as pointwise code fragments, forward and backward.

Each entry gives the forward value as an OpenCL expression of ``x`` and the derivative
as an expression of ``dy`` and either ``y`` (when the gradient follows from the output
alone, so the layer may run in place) or ``x``. Named options (``negative_slope``,
``alpha``, ``beta``, ``threshold``) arrive as pointwise scalar params. These fragments
are spliced into ``PointwiseBroadcast`` / ``PointwiseBroadcastReduce`` code, the one
generator for elementwise work.
"""
from collections import namedtuple

__all__ = ["ACTIVATIONS", "Activation", "forward_code", "backward_code", "Y_ACTIVATIONS"]

Activation = namedtuple("Activation", "forward backward from_y params")

_SQRT1_2 = "0.70710678118654752f"
_SQRT2_PI = "0.79788456080286536f"   # sqrt(2/pi)
_INV_SQRT_2PI = "0.39894228040143268f"  # 1/sqrt(2*pi)

ACTIVATIONS = {
    "identity": Activation("x", "dy", True, ()),
    # d/dx max(x, 0) = [y > 0]
    "relu": Activation("max(x, 0.0f)", "(y > 0.0f ? dy : 0.0f)", True, ()),
    "relu6": Activation("min(max(x, 0.0f), 6.0f)", "((y > 0.0f && y < 6.0f) ? dy : 0.0f)", True, ()),
    # sigma' = sigma (1 - sigma)
    "sigmoid": Activation("(1.0f / (1.0f + exp(-x)))", "(dy * y * (1.0f - y))", True, ()),
    # tanh' = 1 - tanh^2
    "tanh": Activation("tanh(x)", "(dy * (1.0f - y * y))", True, ()),
    "leaky_relu": Activation("(x > 0.0f ? x : negative_slope * x)",
                             "(x > 0.0f ? dy : negative_slope * dy)", False, ("negative_slope",)),
    # elu' = alpha e^x for x <= 0
    "elu": Activation("(x > 0.0f ? x : alpha * (exp(x) - 1.0f))",
                      "(x > 0.0f ? dy : dy * alpha * exp(x))", False, ("alpha",)),
    # gelu = x Phi(x); gelu' = Phi(x) + x phi(x)
    "gelu": Activation("(0.5f * x * (1.0f + erf(x * %s)))" % _SQRT1_2,
                       "(dy * (0.5f * (1.0f + erf(x * %s)) + x * %s * exp(-0.5f * x * x)))"
                       % (_SQRT1_2, _INV_SQRT_2PI), False, ()),
    # erf' = 2/sqrt(pi) e^(-x^2)
    "erf": Activation("erf(x)", "(dy * 1.12837916709551257f * exp(-x * x))", False, ()),
    # u = sqrt(2/pi)(x + 0.044715 x^3), y = x/2 (1 + tanh u);
    # y' = (1 + t)/2 + x/2 (1 - t^2) sqrt(2/pi) (1 + 3*0.044715 x^2)
    "gelu_tanh": Activation(
        "(0.5f * x * (1.0f + tanh(%s * (x + 0.044715f * x * x * x))))" % _SQRT2_PI,
        "(dy * (0.5f * (1.0f + tanh(%s * (x + 0.044715f * x * x * x))) + 0.5f * x * "
        "(1.0f - pow(tanh(%s * (x + 0.044715f * x * x * x)), 2.0f)) * %s * "
        "(1.0f + 0.134145f * x * x)))" % (_SQRT2_PI, _SQRT2_PI, _SQRT2_PI), False, ()),
    # silu = x s(x); silu' = s (1 + x (1 - s))
    "silu": Activation("(x / (1.0f + exp(-x)))",
                       "(dy * (1.0f + x * (1.0f - 1.0f / (1.0f + exp(-x)))) / (1.0f + exp(-x)))",
                       False, ()),
    # hardswish = x relu6(x + 3) / 6; derivative 0 below -3, 1 above 3, (2x + 3)/6 between
    "hardswish": Activation("(x * min(max(x + 3.0f, 0.0f), 6.0f) / 6.0f)",
                            "(x <= -3.0f ? 0.0f : (x >= 3.0f ? dy : dy * (2.0f * x + 3.0f) / 6.0f))",
                            False, ()),
    "hardsigmoid": Activation("(min(max(x + 3.0f, 0.0f), 6.0f) / 6.0f)",
                              "((x > -3.0f && x < 3.0f) ? dy / 6.0f : 0.0f)", False, ()),
    # mish = x tanh(sp(x)), sp = softplus; mish' = tanh(sp) + x s(x) (1 - tanh^2(sp))
    "mish": Activation("(x * tanh(x > 20.0f ? x : log1p(exp(x))))",
                       "(dy * (tanh(x > 20.0f ? x : log1p(exp(x))) + x / (1.0f + exp(-x)) * "
                       "(1.0f - pow(tanh(x > 20.0f ? x : log1p(exp(x))), 2.0f))))", False, ()),
    # softplus = log(1 + e^(beta x)) / beta, linear above threshold; derivative s(beta x)
    "softplus": Activation("(beta * x > threshold ? x : log1p(exp(beta * x)) / beta)",
                           "(beta * x > threshold ? dy : dy / (1.0f + exp(-beta * x)))",
                           False, ("beta", "threshold")),
}
ACTIVATIONS["swish"] = ACTIVATIONS["silu"]

# activations whose gradient follows from the output: fusable into ops whose backward
# sees only y (Elementwise), and in-place capable
Y_ACTIVATIONS = tuple(k for k, a in ACTIVATIONS.items() if a.from_y)


def _params(act, first_param):
    return "".join("float %s = w%d; " % (p, first_param + i) for i, p in enumerate(act.params))


def forward_code(name, src, dst, first_param=0):
    """Statements setting ``dst`` to activation(``src``); params start at ``w<first_param>``."""
    act = ACTIVATIONS[name]
    if name == "identity":
        return "%s = %s;" % (dst, src) if src != dst else ""
    return "{ float x = %s; %s%s = %s; }" % (src, _params(act, first_param), dst, act.forward)


def backward_code(name, dy, src, dst, first_param=0):
    """Statements setting ``dst`` to dL/dx given ``dy`` and ``src`` (y when ``from_y``,
    else x)."""
    act = ACTIVATIONS[name]
    var = "y" if act.from_y else "x"
    if name == "identity":
        return "%s = %s;" % (dst, dy)
    return "{ float dy = %s; float %s = %s; %s%s = %s; }" % (dy, var, src, _params(act, first_param),
                                                          dst, act.backward)
