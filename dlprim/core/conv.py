"""2-D convolution launchers: forward, backward-data and backward-filter.

Three algorithms, chosen per layer from the shape and the device (``choose_algorithm``)
or forced for testing:

- ``"gemm"``: implicit GEMM (``kernels/conv_gemm.cl``); the im2col/col2im gather is part
  of the tile loads. Backward-data gathers (no atomics), per stride phase when strided.
  Every direction splits its reduction across work-groups where the tiles alone would
  leave the GPU idle (split-K, the partial products summed by a second kernel; ``splits``
  forces the count for testing). 1x1, stride-1, pad-0, ungrouped layers
  run as a plain batched GEMM (``core/gemm.py``) where that module exists.
- ``"winograd"``: F(4x4, 3x3) and F(4x4, 5x5) for 3x3 and 5x5 stride-1 undilated
  ungrouped layers (``core/conv_winograd.py``), all three directions; F(2x2) for tiny
  outputs, and where F(4x4)'s larger rounding errors buy no speed (few channels, small
  problems: ``tuning.winograd_tile``).
- ``"depthwise"``: direct kernels when every group has one input channel
  (``core/conv_depthwise.py``).
- ``"direct"``: CPUs' kernels for ungrouped layers of few output channels: forward,
  backward-data at stride 1, backward-filter (``core/conv_direct.py``).
- ``"im2col"``: ungrouped layers as column unrolling (col2im for backward-data) + the
  GEMM of ``core/gemm.py`` in chunks of the batch (``core/conv_im2col.py``); CPUs' choice.

Tensors are NCHW float32, or float16 or bfloat16 activations (``dtype``: x, y and their
gradients stored so, the weights, bias and sums float32) on every algorithm; weights
``[out_c, in_c/groups, kh, kw]``.
The batch size is read from the tensors at ``launches`` time and stays a kernel argument;
``batch`` given to a constructor is the size whose kernels are built at once (tiles may
depend on it).
"""
import logging

import numpy as np

from ..dtypes import HALF_TYPES, as_dtype
from . import (conv_depthwise, conv_direct, conv_gemm, conv_im2col, conv_winograd, tuning,
               winograd_transforms)
from .activation import EPILOGUES
from .conv_geometry import ConvGeometry
from .precision import check_precision

__all__ = ["ConvGeometry", "ConvForward", "ConvBackwardData", "ConvBackwardFilter",
           "choose_algorithm", "algorithm_name", "ALGORITHMS", "DLPRIMITIVES_ALGORITHMS"]

log = logging.getLogger(__name__)

# "winograd" picks its tile (tuning.winograd_tile); "winograd2" and "winograd4" force
# F(2x2) / F(4x4)
ALGORITHMS = ("auto", "gemm", "winograd", "winograd2", "winograd4", "depthwise", "direct",
              "im2col")
# DLPrimitives' spellings (its layers' fwd_algo / bwd_data_algo / bwd_filter_algo options)
# and the algorithm each names here
DLPRIMITIVES_ALGORITHMS = {"auto": "auto", "gemm": "gemm", "winograd": "winograd",
                           "depthwise_separable": "depthwise"}


def algorithm_name(name):
    """dlprim's algorithm for ``name``, one of ALGORITHMS or DLPrimitives' spellings
    (``depthwise_separable`` is ``depthwise``); anything else is a ValueError."""
    if name in ALGORITHMS:
        return name
    if isinstance(name, str) and name in DLPRIMITIVES_ALGORITHMS:
        return DLPRIMITIVES_ALGORITHMS[name]
    raise ValueError("unknown convolution algorithm %r; known: %s"
                     % (name, ", ".join(sorted(set(ALGORITHMS) | set(DLPRIMITIVES_ALGORITHMS)))))


def algorithm_applies(geom, algo, direction="forward"):
    """Whether ``algo`` can compute ``direction`` for ``geom``."""
    if algo == "gemm":
        return True
    if algo.startswith("winograd") and algo in ALGORITHMS:
        return (geom.kh == geom.kw and geom.kh in winograd_transforms.KERNELS
                and geom.sh == geom.sw == 1 and geom.dh == geom.dw == 1 and geom.groups == 1)
    if algo == "depthwise":
        return geom.groups > 1 and geom.in_c == geom.groups
    if algo == "direct":  # backward-data as the flipped forward: stride 1 only
        return geom.groups == 1 and (direction != "backward_data" or geom.flipped() is not None)
    if algo == "im2col":
        return geom.groups == 1
    raise ValueError("unknown convolution algorithm %r; known: %s" % (algo, ", ".join(ALGORITHMS)))


def choose_algorithm(ctx, geom, direction="forward", precision="fp32", batch=16):
    """The algorithm for one direction: depthwise wherever it applies; on CPUs direct
    where ``tuning.prefer_direct`` says so; Winograd where it applies and
    ``tuning.prefer_winograd`` says it pays on this device (benchmarks/conv.py,
    docs/benchmarks.md "Convolutions"), except where the implicit GEMM runs tap-major on
    16-bit tensor cores and ``tuning.taps_beat_winograd`` says so; on CPUs
    im2col where ``tuning.prefer_im2col`` says so; implicit GEMM otherwise. With precision
    "tf32", "fp16" or "bf16" the implicit GEMM and Winograd's batched GEMMs multiply on
    tensor cores where the device has them. ``batch``: the size the layer is built for
    (Winograd's tile depends on it: ``conv_winograd.automatic_tile_serves``).
    """
    if algorithm_applies(geom, "depthwise", direction):
        return "depthwise"
    if conv_gemm.tap_major_on_tensor_cores(ctx, geom, direction, precision) and \
            tuning.taps_beat_winograd(direction, geom.in_c, geom.out_c, geom.out_h * geom.out_w):
        return "gemm"
    if algorithm_applies(geom, "direct", direction) and \
            tuning.prefer_direct(ctx.facts, direction, geom.in_c, geom.out_c,
                                 geom.kh * geom.kw, geom.is_plain_1x1):
        return "direct"
    if algorithm_applies(geom, "winograd", direction) and \
            tuning.prefer_winograd(ctx.facts, direction, geom.in_c, geom.out_c,
                                   geom.out_h * geom.out_w, geom.kh) and \
            conv_winograd.automatic_tile_serves(ctx, geom, direction, batch, precision):
        return "winograd"
    if algorithm_applies(geom, "im2col", direction) and \
            tuning.prefer_im2col(ctx.facts, direction, geom.is_plain_1x1):
        return "im2col"
    return "gemm"


def _resolve(ctx, geom, algo, direction, precision, batch):
    if algo not in ALGORITHMS:
        raise ValueError("unknown convolution algorithm %r; known: %s"
                         % (algo, ", ".join(ALGORITHMS)))
    if algo == "auto":
        return choose_algorithm(ctx, geom, direction, precision, batch)
    if not algorithm_applies(geom, algo, direction) or (
            algo == "winograd" and
            not conv_winograd.automatic_tile_serves(ctx, geom, direction, batch, precision)):
        # an algorithm forced for the layer serves the directions it can; gemm the rest,
        # as DLPrimitives substitutes its GEMM for an algorithm that cannot serve a shape
        log.debug("convolution %s: %s cannot serve %s; gemm", direction, algo, geom)
        return "gemm"
    return algo


def check_tensor(what, t, shape, dtype=np.float32):
    if t is None:
        raise ValueError("%s: a tensor is required" % what)
    if tuple(t.shape) != tuple(shape):
        raise ValueError("%s: shape %s, expected %s" % (what, tuple(t.shape), tuple(shape)))
    if t.dtype != dtype:
        raise TypeError("%s: dtype %s, expected %s (the launcher's)" % (what, t.dtype,
                                                                       np.dtype(dtype)))
    if t.size >= 2 ** 31:
        raise ValueError("%s: %d elements; the convolution kernels index with 32-bit ints"
                         % (what, t.size))


def check_workspace(ws, need):
    if need and (ws is None or ws.nbytes < need):
        raise ValueError("workspace: %d bytes needed, got %s"
                         % (need, "none" if ws is None else ws.nbytes))


def _check_activation(activation):
    if activation not in EPILOGUES:
        raise ValueError("unknown activation %r; known: %s"
                         % (activation, ", ".join(EPILOGUES)))


def _enqueue(launches, queue, ctx):
    queue = queue or ctx.queue
    for launch in launches:
        launch(queue)


class _Op:
    """Dispatch of one direction to its algorithm's implementation (``impls``: algorithm
    family -> class)."""
    direction, impls = None, {}

    def __init__(self, ctx, geom, algo, impl_args):
        self.ctx, self.geom = ctx, geom
        impl_args = dict(impl_args)
        self.dtype = as_dtype(impl_args.pop("dtype", "float32"))
        if self.dtype not in (np.float32,) + HALF_TYPES:
            raise TypeError("convolution: activations' dtype %s; float32, float16 or bfloat16"
                            % self.dtype)
        self.algo = _resolve(ctx, geom, algo, self.direction,
                             impl_args.get("precision", "fp32"), impl_args["batch"])
        family = "winograd" if self.algo.startswith("winograd") else self.algo
        if self.algo != family:
            impl_args = dict(impl_args, tile=int(self.algo[-1]))
        # the precision reaches the GEMM-based algorithms (tensor cores where the device
        # has them: the implicit GEMM, Winograd's batched GEMMs); the others multiply in
        # float32
        precision = impl_args.pop("precision", "fp32")
        if family in ("gemm", "winograd"):
            impl_args["precision"] = precision
        impl_args["dtype"] = self.dtype  # every algorithm stores 16-bit activations
        # every backward-filter takes a split count; forward/backward-data only on gemm
        if self.direction != "backward_filter" and impl_args["splits"] is None:
            del impl_args["splits"]
        elif self.direction != "backward_filter" and family != "gemm":
            raise ValueError("splits: only the gemm algorithm splits its reduction "
                             "(algorithm %r)" % self.algo)
        self.impl = self.impls[family](ctx, geom, **impl_args)

    def workspace_bytes(self, batch):
        return self.impl.workspace_bytes(batch)

    def flops(self, batch):
        return self.geom.flops(batch)


class ConvForward(_Op):
    """``y = act(conv(x, w) + b) (+ beta * y)``."""
    direction = "forward"
    impls = {"gemm": conv_gemm.Forward, "winograd": conv_winograd.Forward,
             "depthwise": conv_depthwise.Forward, "direct": conv_direct.Forward,
             "im2col": conv_im2col.Forward}

    def __init__(self, ctx, geom, bias=False, activation="identity", algo="auto", batch=16,
                 splits=None, precision="fp32", dtype="float32"):
        _check_activation(activation)
        super().__init__(ctx, geom, algo, dict(bias=bool(bias), activation=activation,
                                               batch=batch, splits=splits,
                                               precision=check_precision(precision),
                                               dtype=dtype))
        self.bias = bool(bias)

    def launches(self, x, w, y, b=None, ws=None, beta=0.0):
        """y = act(conv(x, w) + b + beta * y); ``ws``: the workspace, when one is needed."""
        batch = x.shape[0]
        g = self.geom
        check_tensor("conv forward x", x, g.in_shape(batch), self.dtype)
        check_tensor("conv forward w", w, g.weight_shape)
        check_tensor("conv forward y", y, g.out_shape(batch), self.dtype)
        if self.bias:
            check_tensor("conv forward bias", b, (g.out_c,))
        check_workspace(ws, self.workspace_bytes(batch))
        return self.impl.launches(x, w, y, b, ws, beta)

    def __call__(self, x, w, y, b=None, ws=None, beta=0.0, queue=None):
        _enqueue(self.launches(x, w, y, b, ws, beta), queue, self.ctx)


class ConvBackwardData(_Op):
    """``dx = beta * dx + conv_transpose(dy, w)``; with ``bias``/``activation`` this is
    also the forward pass of a transposed convolution (bias per input channel)."""
    direction = "backward_data"
    impls = {"gemm": conv_gemm.BackwardData, "winograd": conv_winograd.BackwardData,
             "depthwise": conv_depthwise.BackwardData, "direct": conv_direct.BackwardData,
             "im2col": conv_im2col.BackwardData}

    def __init__(self, ctx, geom, bias=False, activation="identity", algo="auto", batch=16,
                 splits=None, precision="fp32", dtype="float32"):
        _check_activation(activation)
        super().__init__(ctx, geom, algo, dict(bias=bool(bias), activation=activation,
                                               batch=batch, splits=splits,
                                               precision=check_precision(precision),
                                               dtype=dtype))
        self.bias = bool(bias)

    def launches(self, dy, w, dx, b=None, ws=None, beta=0.0):
        """dx = beta * dx + conv_transpose(dy, w)."""
        batch = dy.shape[0]
        g = self.geom
        check_tensor("conv backward-data dy", dy, g.out_shape(batch), self.dtype)
        check_tensor("conv backward-data w", w, g.weight_shape)
        check_tensor("conv backward-data dx", dx, g.in_shape(batch), self.dtype)
        if self.bias:
            check_tensor("conv backward-data bias", b, (g.in_c,))
        check_workspace(ws, self.workspace_bytes(batch))
        return self.impl.launches(dy, w, dx, b, ws, beta)

    def __call__(self, dy, w, dx, b=None, ws=None, beta=0.0, queue=None):
        _enqueue(self.launches(dy, w, dx, b, ws, beta), queue, self.ctx)


class ConvBackwardFilter(_Op):
    """``dw = beta * dw + correlate(x, dy)`` (beta=1: gradients add up)."""
    direction = "backward_filter"
    impls = {"gemm": conv_gemm.BackwardFilter, "winograd": conv_winograd.BackwardFilter,
             "depthwise": conv_depthwise.BackwardFilter, "direct": conv_direct.BackwardFilter,
             "im2col": conv_im2col.BackwardFilter}

    def __init__(self, ctx, geom, algo="auto", splits=None, batch=16, precision="fp32",
                 dtype="float32"):
        super().__init__(ctx, geom, algo, dict(splits=splits, batch=batch, dtype=dtype,
                                               precision=check_precision(precision)))

    def launches(self, x, dy, dw, ws=None, beta=1.0):
        """dw = beta * dw + correlate(x, dy)."""
        batch = x.shape[0]
        g = self.geom
        check_tensor("conv backward-filter x", x, g.in_shape(batch), self.dtype)
        check_tensor("conv backward-filter dy", dy, g.out_shape(batch), self.dtype)
        check_tensor("conv backward-filter dw", dw, g.weight_shape)
        check_workspace(ws, self.workspace_bytes(batch))
        return self.impl.launches(x, dy, dw, ws, beta)

    def __call__(self, x, dy, dw, ws=None, beta=1.0, queue=None):
        _enqueue(self.launches(x, dy, dw, ws, beta), queue, self.ctx)
