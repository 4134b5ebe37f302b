"""The activation table: every activation's code, fusability and ONNX spelling in one place.

Each entry gives

* ``forward``: the value as an OpenCL expression of ``x``;
* ``backward``: the derivative as an expression of ``dy`` and either ``y`` (``from_y``:
  the gradient follows from the output alone, so the layer may run in place and
  Elementwise may fuse it) or ``x``;
* ``params``: named options with their defaults, which arrive as pointwise scalar params;
* ``epilogue``: the expression the GEMM and convolution epilogues apply (the ``ACT_<name>``
  macros of kernels/common.h, see ``epilogue_macros``), None where it does not fuse there;
* ``onnx``: its ONNX spellings, preferred first (see ``Spelling``).

The pointwise fragments are spliced into ``PointwiseBroadcast`` code (``forward_code``,
``backward_code``); the kernels, the layers and the ONNX importer and exporter read their
lists from here.
"""
import math
import re
from collections import namedtuple

__all__ = ["ACTIVATIONS", "ALIASES", "Activation", "EPILOGUES", "FUSABLE", "Y_ACTIVATIONS", "PARAMS",
           "X", "Option", "OnnxNode", "Spelling", "canonical", "forward_code",
           "backward_code", "epilogue_macros"]

X = "x"  # in a spelling: the activation's input


class Option(namedtuple("Option", "name")):
    """In a spelling: the value of option ``name``, as an attribute or a scalar input."""
    __slots__ = ()


class OnnxNode(namedtuple("OnnxNode", "op inputs attrs")):
    """One ONNX node of a spelling: ``inputs`` are X, float constants, Options or
    OnnxNodes; ``attrs`` values are constants or Options."""
    __slots__ = ()


class Spelling(namedtuple("Spelling", "tree since way when")):
    """ONNX nodes computing an activation: ``tree`` (an OnnxNode). The exporter writes the
    first spelling of way "both"/"export" with ``since`` <= opset whose ``when`` ({option:
    value}) holds; the importer converts one-node spellings and folds trees of way
    "both"/"import" into the activation."""
    __slots__ = ()


def _op(op, *inputs, **attrs):
    return OnnxNode(op, inputs, attrs)


def _spell(tree, since=1, way="both", when=None):
    return Spelling(tree, since, way, when or {})


class Activation(namedtuple("Activation", "forward backward from_y params epilogue onnx")):
    """One entry of the table (the module's docstring says what each field holds)."""
    __slots__ = ()

    @property
    def fusable(self):
        """Whether GEMM and convolution epilogues can apply it in training too: its
        gradient follows from the output, which is all such a layer's backward keeps."""
        return self.epilogue is not None and self.from_y


def _act(forward, backward, from_y=False, params=None, epilogue=None, onnx=()):
    return Activation(forward, backward, from_y, dict(params or {}), epilogue, tuple(onnx))


_SQRT1_2 = "0.70710678118654752f"
_SQRT2_PI = "0.79788456080286536f"   # sqrt(2/pi)
_MINUS_2SQRT2_PI = "-1.5957691216057307f"  # -2 sqrt(2/pi)
_INV_SQRT_2PI = "0.39894228040143268f"  # 1/sqrt(2*pi)
_SIXTH = 1.0 / 6  # HardSigmoid(alpha=1/6, beta=1/2) is relu6(x + 3) / 6

# Clamps are spelled as compare-and-select, with every comparison false for a NaN so that
# the NaN falls through to the unclamped x: OpenCL's fmax/fmin return the other operand
# for a NaN and max/min are undefined for one, while PyTorch propagates it (a diverged net
# must not show a normal-looking loss). One spelling serves the pointwise layers and the
# epilogues, scalar and float4 alike, so both give the same bits.
_RELU = "(x <= 0.0f ? 0.0f : x)"
_RELU6 = "(x <= 0.0f ? 0.0f : (x >= 6.0f ? 6.0f : x))"


def _gelu_tree(inner):
    """x/2 (1 + inner), spelled as PyTorch exports it before opset 20."""
    return _op("Mul", _op("Mul", X, _op("Add", inner, 1.0)), 0.5)


_CUBIC = _op("Add", X, _op("Mul", _op("Mul", X, _op("Mul", X, X)), 0.044715))  # x + 0.044715 x^3


ACTIVATIONS = {
    "identity": _act("x", "dy", True, epilogue="x", onnx=[_spell(_op("Identity", X), way="export")]),
    # d/dx max(x, 0) = [x > 0]; a NaN passes forward and passes dy backward, as in PyTorch
    "relu": _act(_RELU, "(y <= 0.0f ? 0.0f : dy)", True, epilogue=_RELU,
                 onnx=[_spell(_op("Relu", X)), _spell(_op("Clip", X, 0.0, math.inf), way="import")]),
    "relu6": _act(_RELU6, "((y <= 0.0f || y >= 6.0f) ? 0.0f : dy)", True, epilogue=_RELU6,
                  onnx=[_spell(_op("Clip", X, 0.0, 6.0))]),
    # sigma' = sigma (1 - sigma)
    "sigmoid": _act("(1.0f / (1.0f + exp(-x)))", "(dy * y * (1.0f - y))", True,
                    epilogue="(1.0f / (1.0f + exp(-x)))", onnx=[_spell(_op("Sigmoid", X))]),
    # tanh' = 1 - tanh^2
    "tanh": _act("tanh(x)", "(dy * (1.0f - y * y))", True, epilogue="tanh(x)",
                 onnx=[_spell(_op("Tanh", X))]),
    "leaky_relu": _act("(x > 0.0f ? x : negative_slope * x)", "(x > 0.0f ? dy : negative_slope * dy)",
                       params={"negative_slope": 0.01},
                       onnx=[_spell(_op("LeakyRelu", X, alpha=Option("negative_slope")))]),
    # elu' = alpha e^x for x <= 0
    "elu": _act("(x > 0.0f ? x : alpha * (exp(x) - 1.0f))", "(x <= 0.0f ? dy * alpha * exp(x) : dy)",
                params={"alpha": 1.0}, onnx=[_spell(_op("Elu", X, alpha=Option("alpha")))]),
    # gelu = x Phi(x); gelu' = Phi(x) + x phi(x)
    "gelu": _act("(0.5f * x * (1.0f + erf(x * %s)))" % _SQRT1_2,
                 "(dy * (0.5f * (1.0f + erf(x * %s)) + x * %s * exp(-0.5f * x * x)))"
                 % (_SQRT1_2, _INV_SQRT_2PI),
                 epilogue="(0.5f * x * (1.0f + erf(x * %s)))" % _SQRT1_2,
                 onnx=[_spell(_op("Gelu", X, approximate="none"), since=20),
                       _spell(_gelu_tree(_op("Erf", _op("Div", X, math.sqrt(2.0)))))]),
    # erf' = 2/sqrt(pi) e^(-x^2)
    "erf": _act("erf(x)", "(dy * 1.12837916709551257f * exp(-x * x))", onnx=[_spell(_op("Erf", X))]),
    # u = sqrt(2/pi)(x + 0.044715 x^3), y = x/2 (1 + tanh u) = x s with s = (1 + tanh u)/2
    # = sigmoid(2u): one exp and a division, and no cancellation in 1 + tanh u where
    # tanh u is near -1; y' = s + x/2 (1 - t^2) sqrt(2/pi) (1 + 3*0.044715 x^2), where
    # (1 - t^2)/2 = 2 s (1 - s)
    "gelu_tanh": _act(
        "(x / (1.0f + exp(%s * (x + 0.044715f * x * x * x))))" % _MINUS_2SQRT2_PI,
        "(dy * (1.0f / (1.0f + exp(%s * (x + 0.044715f * x * x * x))) * (1.0f + 2.0f * x * "
        "(1.0f - 1.0f / (1.0f + exp(%s * (x + 0.044715f * x * x * x)))) * %s * "
        "(1.0f + 0.134145f * x * x))))" % (_MINUS_2SQRT2_PI, _MINUS_2SQRT2_PI, _SQRT2_PI),
        epilogue="(x / (1.0f + exp(%s * (x + 0.044715f * x * x * x))))" % _MINUS_2SQRT2_PI,
        onnx=[_spell(_op("Gelu", X, approximate="tanh"), since=20),
              # (as PyTorch exports F.gelu(approximate="tanh") before opset 20, too)
              _spell(_gelu_tree(_op("Tanh", _op("Mul", _CUBIC, math.sqrt(2 / math.pi))))),
              # x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) as PyTorch exports the
              # transformers' formula (GPT-2's NewGELUActivation): x^3 a Pow
              _spell(_op("Mul", _op("Mul", X, 0.5), _op("Add", _op("Tanh", _op(
                  "Mul", _op("Add", X, _op("Mul", _op("Pow", X, 3.0), 0.044715)),
                  math.sqrt(2 / math.pi))), 1.0)), way="import")]),
    # silu = x s(x); silu' = s (1 + x (1 - s))
    "silu": _act("(x / (1.0f + exp(-x)))",
                 "(dy * (1.0f + x * (1.0f - 1.0f / (1.0f + exp(-x)))) / (1.0f + exp(-x)))",
                 epilogue="(x / (1.0f + exp(-x)))",
                 onnx=[_spell(_op("Mul", X, _op("Sigmoid", X)))]),
    # hardswish = x relu6(x + 3) / 6 (the factor x carries a NaN, and makes -inf NaN as
    # PyTorch does); derivative 0 below -3, 1 above 3, (2x + 3)/6 between, dy at a NaN
    "hardswish": _act("(x * fmin(fmax(x + 3.0f, 0.0f), 6.0f) / 6.0f)",
                      "(x <= -3.0f ? 0.0f : (x < 3.0f ? dy * (2.0f * x + 3.0f) / 6.0f : dy))",
                      onnx=[_spell(_op("HardSwish", X), since=14),
                            _spell(_op("Mul", X, _op("HardSigmoid", X, alpha=_SIXTH, beta=0.5)))]),
    "hardsigmoid": _act("(x <= -3.0f ? 0.0f : (x >= 3.0f ? 1.0f : (x + 3.0f) / 6.0f))",
                        "((x > -3.0f && x < 3.0f) ? dy / 6.0f : 0.0f)",
                        onnx=[_spell(_op("HardSigmoid", X, alpha=_SIXTH, beta=0.5))]),
    # mish = x tanh(sp(x)), sp = softplus; mish' = tanh(sp) + x s(x) (1 - tanh^2(sp))
    "mish": _act("(x * tanh(x > 20.0f ? x : log1p(exp(x))))",
                 "(dy * (tanh(x > 20.0f ? x : log1p(exp(x))) + x / (1.0f + exp(-x)) * "
                 "(1.0f - pow(tanh(x > 20.0f ? x : log1p(exp(x))), 2.0f))))",
                 onnx=[_spell(_op("Mish", X), way="import"),
                       _spell(_op("Mul", X, _op("Tanh", _op("Softplus", X))), way="export")]),
    # softplus = log(1 + e^(beta x)) / beta, linear above threshold (ONNX has no threshold:
    # the two agree to e^-threshold); derivative s(beta x)
    "softplus": _act("(beta * x > threshold ? x : log1p(exp(beta * x)) / beta)",
                     "(beta * x > threshold ? dy : dy / (1.0f + exp(-beta * x)))",
                     params={"beta": 1.0, "threshold": 20.0},
                     onnx=[_spell(_op("Softplus", X), when={"beta": 1.0}),
                           _spell(_op("Div", _op("Softplus", _op("Mul", X, Option("beta"))),
                                      Option("beta")), way="export")]),
}
ALIASES = {"swish": "silu"}
ACTIVATIONS.update((alias, ACTIVATIONS[name]) for alias, name in ALIASES.items())


def canonical():
    """(name, Activation) of every activation, aliases left out."""
    return [(k, a) for k, a in ACTIVATIONS.items() if k not in ALIASES]


# what GEMM and convolution epilogues apply
FUSABLE = tuple(k for k, a in canonical() if a.fusable)
# activations a GEMM or convolution epilogue can apply: FUSABLE, and those whose gradient
# needs the input (GELU, SiLU), for inference only
EPILOGUES = tuple(k for k, a in canonical() if a.epilogue is not None)
# activations whose gradient follows from the output: fusable into ops whose backward
# sees only y (Elementwise), and in-place capable
Y_ACTIVATIONS = tuple(k for k, a in ACTIVATIONS.items() if a.from_y)


def _defaults():
    out = {}
    for name, act in canonical():
        for p, v in act.params.items():
            if out.setdefault(p, v) != v:  # one Activation layer option serves them all
                raise ValueError("activation %r: option %r defaults to %r, another to %r"
                                 % (name, p, v, out[p]))
    return out


PARAMS = _defaults()  # every activation option with its default


def epilogue_macros():
    """``#define ACT_<name>(x) ...`` for every activation an epilogue applies
    (kernels/common.h)."""
    return "\n".join("#define ACT_%s(x) %s" % (k, re.sub(r"\bx\b", "(x)", ACTIVATIONS[k].epilogue))
                     for k in EPILOGUES)


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
