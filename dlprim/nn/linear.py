"""Linear (InnerProduct) and Identity."""
import math

from .module import Module
from .shapes import positive_int
from .value import Value

__all__ = ["Linear", "Identity"]


class Linear(Module):
    """y = x W^T + b, PyTorch's ``nn.Linear`` (``weight`` [out_features, in_features],
    ``bias``). An (N, in_features) input is the plain case; an (N, C, H, W) input whose
    C*H*W is ``in_features`` is flattened first, as dlprim's InnerProduct does (so a
    flatten before it is optional); an (N, ..., in_features) input is transformed along
    its last axis, as in PyTorch."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True):
        super().__init__()
        self.in_features = positive_int(in_features, "Linear in_features")
        self.out_features = positive_int(out_features, "Linear out_features")
        self.bias = bool(bias)

    def own_parameters(self) -> list:
        return ["weight", "bias"] if self.bias else ["weight"]

    def forward(self, x: Value) -> Value:
        trace = x.trace
        if x.ndim < 2 or x.dtype != "float":
            trace.fail("expects a float (N, in_features) input, got %s %s" % (x.dtype, x.shape))
        options = {"bias": self.bias, "outputs": self.out_features, "inputs": self.in_features}
        params = trace.param_names(self.own_parameters())
        features = math.prod(x.shape[1:])
        if features == self.in_features:
            return trace.add("InnerProduct", [x], (x.shape[0], self.out_features),
                             options=options, params=params)
        if x.shape[-1] != self.in_features:
            if x.ndim == 2:
                trace.fail("input has %d features, in_features is %d" % (features, self.in_features))
            trace.fail("input %s flattens to %d features and its last axis has %d, in_features "
                       "is %d" % (x.shape, features, x.shape[-1], self.in_features))
        # along the last axis: rows of in_features, the product, the leading axes back
        name = trace.own_name()
        rows = trace.add("Reshape", [x], (features // self.in_features, self.in_features),
                         options={"dims": [-1, self.in_features]}, name=trace.unique(name + "/rows"))
        y = trace.add("InnerProduct", [rows], (rows.shape[0], self.out_features),
                      options=options, params=params, name=name)
        return trace.add("Reshape", [y], x.shape[:-1] + (self.out_features,),
                         options={"dims": [-1] + list(x.shape[1:-1]) + [self.out_features]},
                         name=trace.unique(name + "/seq"))

    def extra_repr(self) -> str:
        return "in_features=%d, out_features=%d, bias=%s" % (self.in_features, self.out_features,
                                                             self.bias)


class Identity(Module):
    """Its input, unchanged; adds no operator (a placeholder that keeps the indices of a
    Sequential, as torchvision uses it)."""

    def __init__(self, *args, **kwargs):
        super().__init__()

    def forward(self, x: Value) -> Value:
        return x
