"""BatchNorm1d / BatchNorm2d (BatchNorm), LayerNorm and GroupNorm."""
from .module import Module
from .shapes import positive_int
from .value import Value

__all__ = ["BatchNorm1d", "BatchNorm2d", "LayerNorm", "GroupNorm"]


def _eps(eps, what):
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not eps > 0:
        raise ValueError("%s eps must be a positive number, got %r" % (what, eps))
    return float(eps)


class _BatchNorm(Module):
    NDIM = 4

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float = 0.1,
                 affine: bool = True, track_running_stats: bool = True):
        super().__init__()
        what = type(self).__name__
        self.num_features = positive_int(num_features, what + " num_features")
        self.eps = _eps(eps, what)
        if momentum is None or isinstance(momentum, bool) or not 0 <= momentum <= 1:
            raise ValueError("%s momentum must be a number in [0, 1] (a cumulative average, "
                             "momentum=None, is not supported), got %r" % (what, momentum))
        if not track_running_stats:
            raise ValueError("%s: track_running_stats=False is not supported; dlprim's "
                             "BatchNorm keeps running statistics for predict mode" % what)
        self.momentum, self.affine = float(momentum), bool(affine)

    def own_parameters(self) -> list:
        stats = ["running_mean", "running_var"]
        return stats + ["weight", "bias"] if self.affine else stats

    def forward(self, x: Value) -> Value:
        trace = x.trace
        if x.ndim != self.NDIM or x.dtype != "float":
            trace.fail("expects a float %s input, got %s %s"
                       % ("(N, C, H, W)" if self.NDIM == 4 else "(N, C)", x.dtype, x.shape))
        if x.shape[1] != self.num_features:
            trace.fail("input has %d channels, num_features is %d" % (x.shape[1], self.num_features))
        options = {"eps": self.eps, "momentum": self.momentum}
        if not self.affine:
            options["affine"] = False
        return trace.add("BatchNorm", [x], x.shape, options=options,
                         params=trace.param_names(self.own_parameters()))

    def extra_repr(self) -> str:
        return "%d, eps=%g, momentum=%g, affine=%s" % (self.num_features, self.eps, self.momentum,
                                                      self.affine)


class BatchNorm2d(_BatchNorm):
    """Batch normalisation over the channels of (N, C, H, W) (Ioffe & Szegedy 2015);
    parameters ``running_mean``, ``running_var``, ``weight``, ``bias`` (PyTorch's
    ``num_batches_tracked`` counter is not kept)."""
    NDIM = 4


class BatchNorm1d(_BatchNorm):
    """Batch normalisation over the features of (N, C); as BatchNorm2d."""
    NDIM = 2


class LayerNorm(Module):
    """Normalisation over the trailing ``normalized_shape`` of each sample (Ba et al.
    2016); parameters ``weight`` and ``bias`` of that shape (``elementwise_affine``)."""

    def __init__(self, normalized_shape, eps: float = 1e-5, elementwise_affine: bool = True,
                 bias: bool = True):
        super().__init__()
        shape = normalized_shape if isinstance(normalized_shape, (list, tuple)) else [normalized_shape]
        self.normalized_shape = tuple(positive_int(n, "LayerNorm normalized_shape") for n in shape)
        self.eps = _eps(eps, "LayerNorm")
        self.elementwise_affine = bool(elementwise_affine)
        if self.elementwise_affine and not bias:
            raise ValueError("LayerNorm: bias=False is not supported; dlprim's LayerNorm has a "
                             "weight and a bias, or neither (elementwise_affine=False)")

    def own_parameters(self) -> list:
        return ["weight", "bias"] if self.elementwise_affine else []

    def forward(self, x: Value) -> Value:
        trace = x.trace
        n = len(self.normalized_shape)
        if x.dtype != "float" or x.shape[x.ndim - n:] != self.normalized_shape or x.ndim <= n:
            trace.fail("input %s %s does not end in normalized_shape %s"
                       % (x.dtype, x.shape, self.normalized_shape))
        # spelled as dlprim.models spells it: options at their defaults left out
        options = {"eps": self.eps}
        if n != 1:
            options["normalized_dims"] = n
        if not self.elementwise_affine:
            options["affine"] = False
        return trace.add("LayerNorm", [x], x.shape, options=options,
                         params=trace.param_names(self.own_parameters()) or None)

    def extra_repr(self) -> str:
        return "%s, eps=%g, elementwise_affine=%s" % (self.normalized_shape, self.eps,
                                                      self.elementwise_affine)


class GroupNorm(Module):
    """Normalisation over ``num_groups`` groups of the channels of (N, C, ...) (Wu & He
    2018); parameters ``weight`` and ``bias`` per channel (``affine``)."""

    def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5, affine: bool = True):
        super().__init__()
        self.num_groups = positive_int(num_groups, "GroupNorm num_groups")
        self.num_channels = positive_int(num_channels, "GroupNorm num_channels")
        if self.num_channels % self.num_groups:
            raise ValueError("GroupNorm: num_groups (%d) must divide num_channels (%d)"
                             % (self.num_groups, self.num_channels))
        self.eps, self.affine = _eps(eps, "GroupNorm"), bool(affine)

    def own_parameters(self) -> list:
        return ["weight", "bias"] if self.affine else []

    def forward(self, x: Value) -> Value:
        trace = x.trace
        if x.ndim < 2 or x.dtype != "float":
            trace.fail("expects a float (N, C, ...) input, got %s %s" % (x.dtype, x.shape))
        if x.shape[1] != self.num_channels:
            trace.fail("input has %d channels, num_channels is %d" % (x.shape[1], self.num_channels))
        options = {"groups": self.num_groups, "eps": self.eps}
        if not self.affine:
            options["affine"] = False
        return trace.add("GroupNorm", [x], x.shape, options=options,
                         params=trace.param_names(self.own_parameters()) or None)

    def extra_repr(self) -> str:
        return "%d, %d, eps=%g, affine=%s" % (self.num_groups, self.num_channels, self.eps,
                                             self.affine)
