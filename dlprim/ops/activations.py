"""Activations, clamps and their ATen backward operators (declarations: see
ops/declare.py). Backward operators take the incoming gradient as ``{a}`` and the input
(or output) as ``{b}``, as their ATen schemas order them."""
from .declare import declare

FAMILY = "activations"
_F, _FI = ("float",), ("float", "int")


def _unary(name, expr, doc, dtypes=_F, **kw):
    return declare(name, FAMILY, "unary", doc, expr=expr, dtypes=dtypes, **kw)


def _backward(name, expr, doc, dtypes=_F, **kw):
    return declare(name, FAMILY, "binary", doc, expr=expr, dtypes=dtypes, **kw)


_unary("relu", {"float": "(({a} > 0 || isnan({a})) ? {a} : ({T})0)",
                "int": "({a} > 0 ? {a} : ({T})0)"}, "max(x, 0)", dtypes=_FI,
       grad=("y > 0 ? dy : 0",), onnx="Relu", layer="relu")
_unary("leaky_relu", "(({a} > 0 || isnan({a})) ? {a} : {a} * {negative_slope})",
       "x, or x * negative_slope below 0", grad=("a > 0 ? dy : dy * negative_slope",),
       onnx="LeakyRelu")
_backward("leaky_relu_backward", "({b} > 0 ? {a} : {a} * {negative_slope})",
          "leaky_relu's gradient", attrs=("self_is_result",))
_unary("elu", "({a} > 0 ? {scale} * {a} : {scale} * {alpha} * (exp({a} * {input_scale}) - 1))",
       "x above 0, alpha (e^x - 1) below (scaled: selu, celu)", onnx="Elu")
_backward("elu_backward",
          "({is_result} ? ({b} <= 0 ? {a} * {input_scale} * ({b} + {alpha} * {scale}) "
          ": {a} * {scale}) : ({b} <= 0 ? {a} * {input_scale} * {alpha} * {scale} "
          "* exp({b} * {input_scale}) : {a} * {scale}))", "elu's gradient",
          inputs=("grad_output", "self_or_result"))
_unary("softplus", "({a} * {beta} > {threshold} ? {a} : log1p(exp({a} * {beta})) / {beta})",
       "log(1 + e^(beta x)) / beta, x past the threshold", onnx="Softplus")
_backward("softplus_backward",
          "({b} * {beta} > {threshold} ? {a} : {a} / (1 + exp(-{b} * {beta})))",
          "softplus's gradient")
_unary("mish", "({a} * tanh({a} > 20 ? {a} : log1p(exp({a}))))", "x tanh(softplus(x))",
       onnx="Mish")
_backward("mish_backward",
          "({a} * (tanh({b} > 20 ? {b} : log1p(exp({b}))) + {b} / (1 + exp(-{b})) "
          "* (1 - tanh({b} > 20 ? {b} : log1p(exp({b}))) * tanh({b} > 20 ? {b} "
          ": log1p(exp({b}))))))", "mish's gradient")
_unary("silu", "({a} / (1 + exp(-{a})))", "x sigmoid(x)")
_backward("silu_backward",
          "({a} / (1 + exp(-{b})) * (1 + {b} * (1 - 1 / (1 + exp(-{b})))))", "silu's gradient")
_unary("hardswish", "({a} * ({a} <= -3 ? 0 : ({a} >= 3 ? 1 : ({a} + 3) / 6)))",
       "x relu6(x + 3) / 6", onnx="HardSwish")
_backward("hardswish_backward",
          "({b} < -3 ? 0 : ({b} <= 3 ? {a} * ({b} / 3 + (%s)0.5) : {a}))" % "{T}",
          "hardswish's gradient")
_unary("hardsigmoid", "(isnan({a}) ? {a} : ({a} <= -3 ? 0 : ({a} >= 3 ? 1 : ({a} + 3) / 6)))",
       "relu6(x + 3) / 6")
_backward("hardsigmoid_backward", "(({b} > -3 && {b} < 3) ? {a} / 6 : 0)",
          "hardsigmoid's gradient")
_unary("hardtanh", {"float": "(isnan({a}) ? {a} : ({a} < {min_val} ? ({T}){min_val} "
                             ": ({a} > {max_val} ? ({T}){max_val} : {a})))",
                    "int": "({a} < {min_val} ? ({T}){min_val} : ({a} > {max_val} "
                           "? ({T}){max_val} : {a}))"},
       "x clamped to [min_val, max_val]", dtypes=_FI)
_backward("hardtanh_backward", "(({b} <= {min_val} || {b} >= {max_val}) ? 0 : {a})",
          "hardtanh's gradient")
_unary("hardshrink", "(({a} >= -{lambd} && {a} <= {lambd}) ? 0 : {a})",
       "x outside [-lambd, lambd], else 0")
_backward("hardshrink_backward", "(({b} >= -{lambd} && {b} <= {lambd}) ? 0 : {a})",
          "hardshrink's gradient")
_unary("softshrink", "({a} > {lambd} ? {a} - {lambd} : ({a} < -{lambd} ? {a} + {lambd} "
       ": {a} * 0))", "x moved toward 0 by lambd")
_backward("softshrink_backward", "(({b} >= -{lambd} && {b} <= {lambd}) ? 0 : {a})",
          "softshrink's gradient")
_unary("threshold", "({a} <= {threshold} ? ({T}){value} : {a})",
       "value where x <= threshold, else x", dtypes=_FI)
_backward("threshold_backward", "({b} <= {threshold} ? 0 : {a})", "threshold's gradient",
          dtypes=_FI)
# ONNX's activations that PyTorch spells otherwise (or composes): the ONNX converters and
# the LibraryOp layer run them, with their attributes
_unary("softsign", "({a} / (({T})1 + fabs({a})))", "x / (1 + |x|)",
       grad=("dy / ((1 + fabs(a)) * (1 + fabs(a)))",), onnx="Softsign", aten=())
declare("silu_mul", FAMILY, "binary", "silu(a) b: the gate of a SwiGLU MLP (Llama's)",
        expr="({a} / (1 + exp(-{a})) * {b})", grad=(
            "dy * b / (1 + exp(-a)) * (1 + a * (1 - 1 / (1 + exp(-a))))",
            "dy * a / (1 + exp(-a))"), aten=())
declare("prelu", FAMILY, "binary", "x, or x * slope below 0 (the slope broadcast to x)",
        expr="({a} < 0 ? {a} * {b} : {a})", dtypes=_FI,
        grad=("a < 0 ? dy * b : dy", "a < 0 ? dy * a : 0"), onnx="PRelu", aten=())
_unary("selu", "({a} > 0 ? {gamma} * {a} : {gamma} * {alpha} * (exp({a}) - 1))",
       "gamma x above 0, gamma alpha (e^x - 1) below",
       grad=("a > 0 ? dy * gamma : dy * gamma * alpha * exp(a)",), onnx="Selu", aten=())
_unary("celu", "({a} > 0 ? {a} : {alpha} * (exp({a} / {alpha}) - 1))",
       "x above 0, alpha (e^(x / alpha) - 1) below",
       grad=("a > 0 ? dy : dy * exp(a / alpha)",), onnx="Celu", aten=())
_unary("thresholded_relu", "({a} > {alpha} ? {a} : ({T})0)", "x above alpha, else 0",
       grad=("a > alpha ? dy : 0",), onnx="ThresholdedRelu", aten=())
_unary("shrink", "({a} < -{lambd} ? {a} + {bias} : ({a} > {lambd} ? {a} - {bias} : ({T})0))",
       "x + bias below -lambd, x - bias above lambd, else 0",
       grad=("(a < -lambd || a > lambd) ? dy : 0",), onnx="Shrink", aten=())
_unary("swish", "({a} / (1 + exp(-{alpha} * {a})))", "x sigmoid(alpha x)",
       grad=("dy / (1 + exp(-alpha * a)) * (1 + alpha * a * (1 - 1 / (1 + exp(-alpha * a))))",),
       onnx="Swish", aten=())
_backward("sigmoid_backward", "({a} * {b} * (1 - {b}))", "sigmoid's gradient from its output")
_backward("tanh_backward", "({a} * (1 - {b} * {b}))", "tanh's gradient from its output")


def _gelu(attrs, out_ctype):
    if attrs.get("approximate", "none") == "tanh":
        return ("({T})0.5 * {a} * (1 + tanh(({T})0.7978845608028654 * ({a} + ({T})0.044715 "
                "* {a} * {a} * {a})))")
    return "({T})0.5 * {a} * (1 + erf({a} * ({T})0.7071067811865476))"


def _gelu_backward(attrs, out_ctype):
    if attrs.get("approximate", "none") == "tanh":
        k = "(({T})0.7978845608028654 * ({b} + ({T})0.044715 * {b} * {b} * {b}))"
        return ("{a} * (({T})0.5 * (1 + tanh(K)) + ({T})0.5 * {b} * (1 - tanh(K) * tanh(K)) "
                "* ({T})0.7978845608028654 * (1 + ({T})0.134145 * {b} * {b}))").replace("K", k)
    return ("{a} * (({T})0.5 * (1 + erf({b} * ({T})0.7071067811865476)) "
            "+ {b} * ({T})0.3989422804014327 * exp(({T})-0.5 * {b} * {b}))")


_unary("gelu", _gelu, "x Phi(x) (or its tanh approximation)", attrs=("approximate",),
       onnx="Gelu")
_backward("gelu_backward", _gelu_backward, "gelu's gradient", attrs=("approximate",))


def _logit(attrs, out_ctype):
    if attrs.get("eps") is None:
        return "log({a} / (1 - {a}))"
    return ("log(({a} < {eps} ? ({T}){eps} : ({a} > 1 - {eps} ? 1 - ({T}){eps} : {a})) "
            "/ (1 - ({a} < {eps} ? ({T}){eps} : ({a} > 1 - {eps} ? 1 - ({T}){eps} : {a}))))")


def _logit_backward(attrs, out_ctype):
    if attrs.get("eps") is None:
        return "(({b} < 0 || {b} > 1) ? NAN : {a} / ({b} * (1 - {b})))"
    return "(({b} < {eps} || {b} > 1 - {eps}) ? 0 : {a} / ({b} * (1 - {b})))"


_unary("logit", _logit, "log(x / (1 - x)), x clamped to [eps, 1 - eps]", dtypes=_FI,
       promote="float", aten=("logit", "special_logit"))
_backward("logit_backward", _logit_backward, "logit's gradient")
