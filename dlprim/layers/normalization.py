"""LayerNorm, GroupNorm and RMSNorm: statistics per sample (and group), an affine per
feature, on ``core.normalization.GroupNormOps`` (docs/operators.md).

- ``LayerNorm``: over the last ``normalized_dims`` dimensions; parameters weight, bias
  (``affine``) of the normalized shape, as PyTorch's ``nn.LayerNorm``.
- ``GroupNorm``: over ``groups`` groups of the channels of (N, C, ...); weight and bias
  per channel, as ``nn.GroupNorm``.
- ``RMSNorm``: LayerNorm without the mean, y = x / sqrt(mean(x^2) + eps) * weight; weight
  only; ``eps`` null means float32's machine epsilon, as ``nn.RMSNorm``.

Memory from the Net: each (sample, group)'s mean and 1 / std are saved tensors in train
mode (workspace in predict mode), and the backward pass takes two more such vectors of
workspace.
"""
import math

import numpy as np

from ..core.normalization import GroupNormOps
from ..tensor import ws_view
from ..utils import is_int
from .base import TRAIN, Layer, ParamSpec, Setup, TensorSpec, register


class _Normalization(Layer):
    """What the three layers share: options, the (N, G, K, S) view, memory, launches."""
    BACKWARD_READS_INPUTS = True
    RMS = False
    BIAS = True
    HALF_STORAGE = "follows"

    def __init__(self, ctx, name=None, **options):
        super().__init__(ctx, name=name, **options)
        eps = self.options["eps"]
        if eps is None and self.RMS:
            eps = float(np.finfo(np.float32).eps)
        if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not eps > 0:
            self.fail("option 'eps' must be a positive number, got %r" % (eps,))
        if self.options["affine"] not in (True, False, 0, 1):
            self.fail("option 'affine' must be true/false, got %r" % (self.options["affine"],))
        self.eps, self.affine = float(eps), bool(self.options["affine"])

    def view_of(self, shape):
        """(N, G, K, S) of an input shape, and the shape of the parameters."""
        raise NotImplementedError

    def build(self, in_specs):
        spec = self.single_input(in_specs, min_ndim=1)
        view, param_shape = self.view_of(spec.shape)
        self.view = view
        self.ops = GroupNormOps(self.ctx, view, self.eps, self.affine,
                                bias=self.affine and self.BIAS, rms=self.RMS, dtype=spec.dtype)
        stats = view[0] * view[1]
        params = [ParamSpec(param_shape)] * self.affine + \
            [ParamSpec(param_shape)] * (self.affine and self.BIAS)
        saved = [TensorSpec((stats,)), TensorSpec((stats,))] if self.mode == TRAIN else []
        # predict mode keeps mean and 1/std in the workspace; backward takes two sums there
        return Setup([TensorSpec(spec.shape, spec.dtype)], params, 4 * 4 * stats, saved)

    def init_params(self, params, rng):
        for p, value in zip(params, (1.0, 0.0)):
            p.to_device(np.full(p.shape, value, p.dtype))

    def _vectors(self, ws, saved):
        stats = self.view[0] * self.view[1]
        scratch = [ws_view(ws, 4 * stats * i, stats) for i in range(4)]
        return (list(saved) if len(saved) == 2 else scratch[:2]), scratch[2:]

    def forward(self, x, y, params, ws, saved):
        (mean, rstd), _ = self._vectors(ws, saved)
        weight = params[0] if self.affine else None
        bias = params[1] if self.affine and self.BIAS else None
        return self.ops.forward_launches(x[0], y[0], mean, rstd, weight, bias)

    def backward(self, x, dx, y, dy, params, dparams, ws, saved, accumulate):
        if len(saved) != 2:
            self.fail("the backward pass needs the statistics that a setup in train mode saves")
        (mean, rstd), sums = self._vectors(ws, saved)
        dweight = dparams[0] if self.affine and dparams else None
        dbias = dparams[1] if self.affine and self.BIAS and len(dparams) > 1 else None
        return self.ops.backward_launches(
            x[0], dy[0], mean, rstd, dx=dx[0], weight=params[0] if self.affine else None,
            dweight=dweight, dbias=dbias, sums=sums, beta=float(accumulate[0]))


def _normalized_dims(layer, shape):
    dims = layer.options["normalized_dims"]
    if not is_int(dims) or not 1 <= dims <= len(shape):
        layer.fail("option 'normalized_dims' must be an int from 1 to the input's %d "
                   "dimensions, got %r" % (len(shape), dims))
    inner = tuple(shape[len(shape) - dims:])
    return (math.prod(shape[:len(shape) - dims]), 1, math.prod(inner), 1), inner


@register("LayerNorm")
class LayerNorm(_Normalization):
    """Normalise over the last ``normalized_dims`` dimensions (Ba et al. 2016)."""
    OPTIONS = {"normalized_dims": 1, "eps": 1e-5, "affine": True}

    def view_of(self, shape):
        return _normalized_dims(self, shape)


@register("RMSNorm")
class RMSNorm(_Normalization):
    """Root-mean-square normalisation over the last ``normalized_dims`` dimensions (Zhang &
    Sennrich 2019): no mean, no bias."""
    OPTIONS = {"normalized_dims": 1, "eps": None, "affine": True}
    RMS = True
    BIAS = False

    def view_of(self, shape):
        return _normalized_dims(self, shape)


@register("GroupNorm")
class GroupNorm(_Normalization):
    """Normalise each sample over groups of its channels (Wu & He 2018), (N, C, ...)."""
    OPTIONS = {"groups": None, "eps": 1e-5, "affine": True}

    def view_of(self, shape):
        groups = self.options["groups"]
        if len(shape) < 2:
            self.fail("input must be (N, C, ...), got shape %s" % (shape,))
        c = shape[1]
        if not is_int(groups) or groups < 1 or c % groups:
            self.fail("option 'groups' must be a positive int that divides the %d channels, "
                      "got %r" % (c, groups))
        return (shape[0], groups, c // groups, math.prod(shape[2:])), (c,)
