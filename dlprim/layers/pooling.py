"""Pooling2D and GlobalPooling (max / avg over NCHW planes).

Pooling2D follows DLPrimitives' defaults (kernel 1, stride 1, pad 0) and PyTorch's output
size rule, including ``ceil_mode`` (the last window must start inside the input or its
left padding) and ``count_include_pad`` for averages. Max backward routes dy to the first
maximum of each window (ties: first index in row-major order), which the training forward
keeps in a saved int32 tensor of the output's shape (planned by the Net like any other).
A NaN in a window makes its maximum NaN and takes its gradient, as in PyTorch.
"""
from ..core.pointwise import PointwiseBroadcast
from ..core.pooling import MODES, GlobalMaxBackward, Pool2D
from ..core.reduction import Reduce
from .base import TRAIN, Layer, Setup, TensorSpec, pair, register


def _check_mode(layer):
    if layer.options["mode"] not in MODES:
        layer.fail("option 'mode': unknown pooling mode %r; expected one of %s"
                   % (layer.options["mode"], ", ".join(MODES)))


def _check_input(layer, in_specs):
    return layer.single_input(in_specs, "(N, C, H, W)", ndims=(4,))


def _flag(layer, option):
    value = layer.options[option]
    if value not in (True, False, 0, 1):
        layer.fail("option %r must be true/false (or 0/1), got %r" % (option, value))
    return bool(value)


@register("Pooling2D")
class Pooling2D(Layer):
    """y[n,c,i,j] = max or mean of x[n,c] over the window at (i*stride - pad)."""
    HALF_STORAGE = "follows"
    OPTIONS = {"mode": "max", "kernel": 1, "stride": 1, "pad": 0,
               "count_include_pad": False, "ceil_mode": False}
    # max backward reads the argmax its training forward kept, avg only dy
    BACKWARD_READS_INPUTS = False

    def __init__(self, ctx, name=None, **options):
        super().__init__(ctx, name=name, **options)
        _check_mode(self)
        self.kernel = pair(self, "kernel", self.options["kernel"])
        self.stride = pair(self, "stride", self.options["stride"])
        self.pad = pair(self, "pad", self.options["pad"])
        if min(self.kernel) < 1:
            self.fail("option 'kernel' must be at least 1, got %r" % (self.options["kernel"],))
        if min(self.stride) < 1:
            self.fail("option 'stride' must be at least 1, got %r" % (self.options["stride"],))
        if any(2 * p > k for p, k in zip(self.pad, self.kernel)):
            self.fail("option 'pad' %r must be at most half of kernel %r"
                      % (list(self.pad), list(self.kernel)))
        self.count_include_pad = _flag(self, "count_include_pad")
        self.ceil_mode = _flag(self, "ceil_mode")

    def build(self, in_specs):
        spec = _check_input(self, in_specs)
        self.op = Pool2D(self.ctx, self.options["mode"], self.kernel, self.stride, self.pad,
                         self.count_include_pad, self.ceil_mode, spec.dtype)
        try:
            out = self.op.output_shape(spec.shape)
        except ValueError as err:
            self.fail(str(err))
        # training max pooling keeps each window's argmax from forward to backward
        keeps_index = self.options["mode"] == "max" and self.mode == TRAIN
        saved = [TensorSpec(out, "int32")] if keeps_index else []
        return Setup([TensorSpec(out, spec.dtype)], saved=saved)

    def _index(self, saved, shape):
        if self.options["mode"] != "max":
            return None
        if not saved or saved[0].shape != shape:
            self.fail("the argmax that backward reads is saved only by a setup in train mode")
        return saved[0]

    def forward(self, x, y, params, ws, saved):
        index = self._index(saved, y[0].shape) if self.mode == TRAIN else None
        return self.op.launches(x[0], y[0], index)

    def backward(self, x, dx, y, dy, params, dparams, ws, saved, accumulate):
        if dx[0] is None:
            return []
        index = self._index(saved, dy[0].shape)
        return self.op.backward_launches(dx[0], dy[0], index, beta=float(accumulate[0]))


@register("GlobalPooling")
class GlobalPooling(Layer):
    """y[n,c,0,0] = max or mean of x[n,c,:,:]."""
    HALF_STORAGE = "follows"
    OPTIONS = {"mode": "max"}

    def __init__(self, ctx, name=None, **options):
        super().__init__(ctx, name=name, **options)
        _check_mode(self)

    def build(self, in_specs):
        spec = _check_input(self, in_specs)
        n, c, h, w = spec.shape
        self.out_shape = (n, c, 1, 1)
        mode = self.options["mode"]
        # the forward reduces each plane (its max propagates a NaN, as torch.amax)
        self._fwd = Reduce(self.ctx, spec.shape, (2, 3), "max" if mode == "max" else "mean",
                           keepdims=True, dtype=spec.dtype)
        if mode == "max":
            self._bwd = GlobalMaxBackward(self.ctx, spec.dtype)
        else:
            self._alpha = 1.0 / (h * w)
            full, small = (spec.shape, spec.dtype), (self.out_shape, spec.dtype)
            # dx = dy / (H W) broadcast over the plane
            self._bwd = PointwiseBroadcast(self.ctx, [small], [full], "y0 = x0 * w0;", ["float"],
                                           name="global_avg_backward")
        # max backward finds the maximum in x again; avg needs only dy
        flags = self.default_flags(backward_reads_inputs=self.options["mode"] == "max")
        return Setup([TensorSpec(self.out_shape, spec.dtype)], flags=flags)

    def forward(self, x, y, params, ws, saved):
        return self._fwd.launches(x[0], y[0])

    def backward(self, x, dx, y, dy, params, dparams, ws, saved, accumulate):
        if dx[0] is None:
            return []
        beta = float(accumulate[0])
        if self.options["mode"] == "max":
            return self._bwd.launches(x[0], dx[0], dy[0], beta=beta)
        return self._bwd.launches([dy[0]], [dx[0]], [self._alpha], beta=beta)
