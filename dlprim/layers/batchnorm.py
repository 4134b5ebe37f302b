"""BatchNorm over the channel axis (1) of inputs of rank 2 or more: (N, C), (N, C, L),
(N, C, H, W), (N, C, D, H, W); as DLPrimitives, every axis after the channels is pooled
with the batch into the statistics.

    y = (x - mean) / sqrt(var + eps) * weight + bias

Train mode (unless ``use_global_stats``) normalises with the batch's mean and biased
variance and updates the running statistics as PyTorch does (momentum, unbiased variance);
predict mode, or ``use_global_stats``, uses the running values. Parameters, in
DLPrimitives' order: running_mean, running_var (not trainable), weight, bias (``affine``).
DLPrimitives has no fused activation for BatchNorm, so neither does this layer's graph
node; in a training plan an activation that alone reads the output (in place) runs inside
its kernels where they can (``fuses_activation``, ``net/fusion.py``).

Memory from the Net: the batch's mean and variance are saved tensors (written by the
training forward, read by backward); the workspace holds two per-channel scratch vectors
(the forward's counts, the backward's sums of dy and dy * xhat).
"""
import numpy as np

from ..core.batchnorm import BatchNormOps
from ..tensor import ws_view
from ..utils import is_int
from .base import TRAIN, Layer, ParamSpec, Setup, TensorSpec, register


@register("BatchNorm")
class BatchNorm(Layer):
    """Batch normalisation over the channels of (N, C, ...) (Ioffe & Szegedy 2015), with
    running statistics for predict mode (docs/operators.md).
    """
    OPTIONS = {"features": -1, "eps": 1e-5, "momentum": 0.1, "affine": True,
               "use_global_stats": False}
    BACKWARD_READS_INPUTS = True
    HALF_STORAGE = "follows"

    def __init__(self, ctx, name=None, **options):
        super().__init__(ctx, name=name, **options)
        o = self.options
        for key in ("eps", "momentum"):
            if isinstance(o[key], bool) or not isinstance(o[key], (int, float, np.integer, np.floating)):
                self.fail("option %r must be a number, got %r" % (key, o[key]))
        if not o["eps"] > 0:
            self.fail("option 'eps' must be positive, got %r" % (o["eps"],))
        if not 0 <= o["momentum"] <= 1:
            self.fail("option 'momentum' must be in [0, 1], got %r" % (o["momentum"],))
        features = o["features"]
        if not is_int(features) or not (features == -1 or features > 0):
            self.fail("option 'features' must be a positive int or -1 (deduce), got %r" % (features,))
        for key in ("affine", "use_global_stats"):
            if o[key] not in (True, False, 0, 1):
                self.fail("option %r must be true/false, got %r" % (key, o[key]))
        self.affine = bool(o["affine"])
        self.use_global_stats = bool(o["use_global_stats"])

    @property
    def batch_stats(self):
        """Whether this pass normalises with the batch's statistics."""
        return self.mode == TRAIN and not self.use_global_stats

    def build(self, in_specs):
        spec = self.single_input(in_specs, "(N, C, ...) of rank 2 or more", min_ndim=2)
        c = spec.shape[1]
        if self.options["features"] not in (-1, c):
            self.fail("option 'features' is %d but the input has %d channels"
                      % (self.options["features"], c))
        if self.param_specs is not None and c != self.param_specs[0].shape[0]:
            self.fail("input has %d channels, the layer was set up for %d"
                      % (c, self.param_specs[0].shape[0]))
        n = spec.shape[0]
        s = int(np.prod(spec.shape[2:], dtype=np.int64))
        self._check_batch(spec.shape)
        self.features, self.view_shape = c, (n, c, s)
        self.ops = BatchNormOps(self.ctx, self.view_shape, self.options["eps"], self.affine,
                                spec.dtype)
        params = [ParamSpec((c,), trainable=False), ParamSpec((c,), trainable=False)]
        if self.affine:
            params += [ParamSpec((c,)), ParamSpec((c,))]
        # the batch's mean and variance live from forward to backward
        saved = [TensorSpec((c,)), TensorSpec((c,))] if self.batch_stats else []
        # two (C,) scratch vectors: the training forward's counts, the backward's two sums
        # (in either mode: fixed statistics have a backward too)
        return Setup([TensorSpec(spec.shape, spec.dtype)], params, 2 * 4 * c, saved)

    def init_params(self, params, rng):
        for p, value in zip(params, (0.0, 1.0, 1.0, 0.0)):
            p.to_device(np.full(p.shape, value, p.dtype))

    def _check_batch(self, shape):
        if self.batch_stats and int(np.prod(shape, dtype=np.int64)) // shape[1] < 2:
            self.fail("train mode needs more than one value per channel, input %s" % (shape,))

    def _stats(self, params, saved):
        if not self.batch_stats:
            return params[0], params[1]
        if len(saved) != 2:
            self.fail("train mode normalises with batch statistics that only a setup in train "
                      "mode saves")
        return saved[0], saved[1]

    def _scratch(self, ws):
        """Two (C,) float vectors in the workspace."""
        c = self.features
        if ws is None or ws.nbytes < 8 * c:
            got = 0 if ws is None else ws.nbytes
            self.fail("needs a workspace of %d bytes, got %d" % (8 * c, got))
        return [ws_view(ws, 0, c), ws_view(ws, 4 * c, c)]

    def fuses_activation(self, name):
        """Whether this layer's kernels can run activation ``name`` after it (the
        ``activation=`` of forward and backward)."""
        return self.ops.fuses(name)

    def forward(self, x, y, params, ws, saved, activation="identity"):
        xv, yv = x[0].view(self.view_shape), y[0].view(self.view_shape)
        out = []
        self._check_batch(x[0].shape)   # a Net may switch to train mode after setup
        mean, var = self._stats(params, saved)
        if self.batch_stats:
            out += self.ops.stats_launches(xv, mean, var, params[0], params[1],
                                           float(self.options["momentum"]), self._scratch(ws)[0])
        gamma, beta = (params[2], params[3]) if self.affine else (None, None)
        return out + self.ops.apply_launches(xv, yv, mean, var, gamma, beta, activation)

    def backward(self, x, dx, y, dy, params, dparams, ws, saved, accumulate,
                 activation="identity"):
        """``activation``: ``dy`` is the gradient of activation(y), which forward ran."""
        mean, var = self._stats(params, saved)
        dgamma = dparams[2] if self.affine and len(dparams) > 2 else None
        dbeta = dparams[3] if self.affine and len(dparams) > 3 else None
        dxv = dx[0].view(self.view_shape) if dx[0] is not None else None
        return self.ops.backward_launches(
            x[0].view(self.view_shape), dy[0].view(self.view_shape), mean, var, self._scratch(ws),
            gamma=params[2] if self.affine else None, dx=dxv, beta=float(accumulate[0]),
            dgamma=dgamma, dbeta=dbeta, batch_stats=self.batch_stats, activation=activation,
            bn_beta=params[3] if self.affine else None, y=y[0].view(self.view_shape))
