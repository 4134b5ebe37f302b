"""2-D convolution launchers: forward, backward-data and backward-filter.

Three algorithms, chosen per layer from the shape and the device (``choose_algorithm``)
or forced for testing:

- ``"gemm"``: implicit GEMM (``kernels/conv_gemm.cl``); the im2col/col2im gather is part
  of the tile loads. Backward-data gathers (no atomics), per stride phase when strided.
  Every direction splits its reduction across work-groups where the tiles alone would
  leave the GPU idle (split-K, the partial products summed by a second kernel; ``splits``
  forces the count for testing). 1x1, stride-1, pad-0, ungrouped layers
  run as a plain batched GEMM (``core/gemm.py``) where that module exists.
- ``"winograd"``: F(4x4, 3x3) (F(2x2, 3x3) for tiny outputs) for 3x3 stride-1 undilated
  ungrouped layers (``core/conv_winograd.py``), all three directions.
- ``"depthwise"``: direct kernels when every group has one input channel
  (``core/conv_depthwise.py``).

Tensors are NCHW float32; weights ``[out_c, in_c/groups, kh, kw]``. The batch size is read
from the tensors at ``launches`` time and stays a kernel argument; ``batch`` given to a
constructor is the size whose kernels are built at once (tiles may depend on it).
"""
import importlib

import numpy as np

from ..kernels import program
from .activation import FUSABLE
from ..tensor import Tensor

__all__ = ["ConvGeometry", "ConvForward", "ConvBackwardData", "ConvBackwardFilter",
           "choose_algorithm", "ALGORITHMS"]

# "winograd" picks its tile (F(4x4,3x3) unless the output is tiny); "winograd2" and
# "winograd4" force F(2x2,3x3) / F(4x4,3x3)
ALGORITHMS = ("auto", "gemm", "winograd", "winograd2", "winograd4", "depthwise")
GEOM_NAMES = ("IN_C", "OUT_C", "GROUPS", "IN_H", "IN_W", "OUT_H", "OUT_W",
              "KH", "KW", "SH", "SW", "PH", "PW", "DH", "DW")


class ConvGeometry:
    """Everything about a convolution except the batch size.

    ``pad`` is ``(top, left, bottom, right)``; ``out_h = (in_h + top + bottom -
    dh*(kh-1) - 1) // sh + 1``.
    """

    def __init__(self, in_c, out_c, in_hw, kernel, stride=(1, 1), pad=(0, 0, 0, 0),
                 dilate=(1, 1), groups=1):
        self.in_c, self.out_c, self.groups = int(in_c), int(out_c), int(groups)
        self.in_h, self.in_w = (int(v) for v in in_hw)
        self.kh, self.kw = (int(v) for v in kernel)
        self.sh, self.sw = (int(v) for v in stride)
        self.pad = tuple(int(v) for v in pad)
        self.dh, self.dw = (int(v) for v in dilate)
        if self.groups < 1 or self.in_c % self.groups or self.out_c % self.groups:
            raise ValueError("groups=%d must divide in_c=%d and out_c=%d"
                             % (self.groups, self.in_c, self.out_c))
        if min(self.sh, self.sw, self.dh, self.dw, self.kh, self.kw) < 1 or min(self.pad) < 0:
            raise ValueError("bad convolution geometry %r" % (self,))
        span_h, span_w = self.dh * (self.kh - 1) + 1, self.dw * (self.kw - 1) + 1
        padded_h = self.in_h + self.pad[0] + self.pad[2]
        padded_w = self.in_w + self.pad[1] + self.pad[3]
        if span_h > padded_h or span_w > padded_w:
            raise ValueError("kernel span %dx%d larger than the padded input %dx%d"
                             % (span_h, span_w, padded_h, padded_w))
        self.out_h = (padded_h - span_h) // self.sh + 1
        self.out_w = (padded_w - span_w) // self.sw + 1

    @property
    def weight_shape(self):
        """(out_c, in_c / groups, kh, kw): PyTorch's weight layout."""
        return (self.out_c, self.in_c // self.groups, self.kh, self.kw)

    def in_shape(self, batch):
        """The input shape (batch, in_c, in_h, in_w)."""
        return (batch, self.in_c, self.in_h, self.in_w)

    def out_shape(self, batch):
        """The output shape (batch, out_c, out_h, out_w)."""
        return (batch, self.out_c, self.out_h, self.out_w)

    def values(self):
        """Every size of the geometry as one tuple (kernel arguments and cache keys)."""
        return (self.in_c, self.out_c, self.groups, self.in_h, self.in_w, self.out_h,
                self.out_w, self.kh, self.kw, self.sh, self.sw, self.pad[0], self.pad[1],
                self.dh, self.dw)

    def flops(self, batch):
        """Multiply-adds counted as 2 FLOPs, one direction (forward = each backward)."""
        return 2 * batch * self.out_c * self.out_h * self.out_w * \
            (self.in_c // self.groups) * self.kh * self.kw

    @property
    def is_plain_1x1(self):
        """True for a 1x1, stride-1, unpadded, ungrouped convolution (a plain GEMM)."""
        return (self.kh == self.kw == 1 and self.sh == self.sw == 1 and self.groups == 1
                and not any(self.pad))

    def __repr__(self):
        return ("ConvGeometry(in_c=%d, out_c=%d, in=%dx%d, kernel=%dx%d, stride=%dx%d, "
                "pad=%s, dilate=%dx%d, groups=%d)"
                % (self.in_c, self.out_c, self.in_h, self.in_w, self.kh, self.kw, self.sh,
                   self.sw, list(self.pad), self.dh, self.dw, self.groups))


def algorithm_applies(geom, algo, direction="forward"):
    """Whether ``algo`` can compute ``direction`` for ``geom``."""
    if algo == "gemm":
        return True
    if algo.startswith("winograd") and algo in ALGORITHMS:
        return (geom.kh == geom.kw == 3 and geom.sh == geom.sw == 1 and geom.dh == geom.dw == 1
                and geom.groups == 1)
    if algo == "depthwise":
        return geom.groups > 1 and geom.in_c == geom.groups
    raise ValueError("unknown convolution algorithm %r; known: %s" % (algo, ", ".join(ALGORITHMS)))


def choose_algorithm(ctx, geom, direction="forward"):
    """The algorithm for one direction: a small table over shape and device.

    From benchmarks/conv.py on an H100/H200 (docs/benchmarks.md, "Convolutions"): depthwise
    wherever it applies; Winograd for 3x3 stride-1 layers once the channels its GEMMs sum
    over (input channels forward, output channels backward-data) and the other side are
    at least 64 -- with 3 input channels implicit GEMM wins forward and backward-filter,
    Winograd still wins backward-data; implicit GEMM otherwise. PoCL/CPUs: gemm.
    """
    if algorithm_applies(geom, "depthwise", direction):
        return "depthwise"
    if ctx.facts.is_gpu and algorithm_applies(geom, "winograd", direction):
        if direction == "backward_data":
            if geom.out_c >= 64:
                return "winograd"
        elif geom.in_c >= 64 and geom.out_c >= 64:
            return "winograd"
    return "gemm"


def _resolve(ctx, geom, algo, direction):
    if algo not in ALGORITHMS:
        raise ValueError("unknown convolution algorithm %r; known: %s"
                         % (algo, ", ".join(ALGORITHMS)))
    if algo == "auto":
        return choose_algorithm(ctx, geom, direction)
    if not algorithm_applies(geom, algo, direction):
        # an algorithm forced for the layer serves the directions it can; gemm the rest
        return "gemm"
    return algo


def ws_view(ws, byte_offset, count):
    """A float32 tensor of ``count`` elements inside the byte workspace ``ws``."""
    start = ws.byte_offset + byte_offset
    if start % 4:
        raise ValueError("workspace offset %d is not float-aligned" % start)
    t = Tensor(ws.ctx, (count,), "float32", buffer=ws.buffer, offset=start // 4)
    t._owner = ws
    return t


def check_tensor(what, t, shape):
    if t is None:
        raise ValueError("%s: a tensor is required" % what)
    if tuple(t.shape) != tuple(shape):
        raise ValueError("%s: shape %s, expected %s" % (what, tuple(t.shape), tuple(shape)))
    if t.dtype != np.float32:
        raise TypeError("%s: dtype %s, only float32 is supported" % (what, t.dtype))
    if t.size >= 2 ** 31:
        raise ValueError("%s: %d elements; the convolution kernels index with 32-bit ints"
                         % (what, t.size))


def check_workspace(ws, need):
    if need and (ws is None or ws.nbytes < need):
        raise ValueError("workspace: %d bytes needed, got %s"
                         % (need, "none" if ws is None else ws.nbytes))


def _check_activation(activation):
    if activation not in FUSABLE:
        raise ValueError("unknown activation %r; known: %s"
                         % (activation, ", ".join(FUSABLE)))


def _enqueue(launches, queue, ctx):
    queue = queue or ctx.queue
    for launch in launches:
        launch(queue)


class _Op:
    """Dispatch of one direction to its algorithm's implementation."""
    direction = None

    def __init__(self, ctx, geom, algo, impl_args):
        self.ctx, self.geom = ctx, geom
        self.algo = _resolve(ctx, geom, algo, self.direction)
        family = "winograd" if self.algo.startswith("winograd") else self.algo
        module = importlib.import_module(".conv_" + family, __package__)
        if self.algo != family:
            impl_args = dict(impl_args, tile=int(self.algo[-1]))
        # every backward-filter takes a split count; forward/backward-data only on gemm
        if self.direction != "backward_filter" and impl_args["splits"] is None:
            del impl_args["splits"]
        elif self.direction != "backward_filter" and family != "gemm":
            raise ValueError("splits: only the gemm algorithm splits its reduction "
                             "(algorithm %r)" % self.algo)
        self.impl = getattr(module, self.impl_class)(ctx, geom, **impl_args)

    def workspace_bytes(self, batch):
        return self.impl.workspace_bytes(batch)

    def flops(self, batch):
        return self.geom.flops(batch)


class ConvForward(_Op):
    """``y = act(conv(x, w) + b) (+ beta * y)``."""
    direction, impl_class = "forward", "Forward"

    def __init__(self, ctx, geom, bias=False, activation="identity", algo="auto", batch=16,
                 splits=None):
        _check_activation(activation)
        super().__init__(ctx, geom, algo, dict(bias=bool(bias), activation=activation,
                                               batch=batch, splits=splits))
        self.bias = bool(bias)

    def launches(self, x, w, y, b=None, ws=None, beta=0.0):
        """y = act(conv(x, w) + b + beta * y); ``ws``: the workspace, when one is needed."""
        batch = x.shape[0]
        g = self.geom
        check_tensor("conv forward x", x, g.in_shape(batch))
        check_tensor("conv forward w", w, g.weight_shape)
        check_tensor("conv forward y", y, g.out_shape(batch))
        if self.bias:
            check_tensor("conv forward bias", b, (g.out_c,))
        check_workspace(ws, self.workspace_bytes(batch))
        return self.impl.launches(x, w, y, b, ws, beta)

    def __call__(self, x, w, y, b=None, ws=None, beta=0.0, queue=None):
        _enqueue(self.launches(x, w, y, b, ws, beta), queue, self.ctx)


class ConvBackwardData(_Op):
    """``dx = beta * dx + conv_transpose(dy, w)``; with ``bias``/``activation`` this is
    also the forward pass of a transposed convolution (bias per input channel)."""
    direction, impl_class = "backward_data", "BackwardData"

    def __init__(self, ctx, geom, bias=False, activation="identity", algo="auto", batch=16,
                 splits=None):
        _check_activation(activation)
        super().__init__(ctx, geom, algo, dict(bias=bool(bias), activation=activation,
                                               batch=batch, splits=splits))
        self.bias = bool(bias)

    def launches(self, dy, w, dx, b=None, ws=None, beta=0.0):
        """dx = beta * dx + conv_transpose(dy, w)."""
        batch = dy.shape[0]
        g = self.geom
        check_tensor("conv backward-data dy", dy, g.out_shape(batch))
        check_tensor("conv backward-data w", w, g.weight_shape)
        check_tensor("conv backward-data dx", dx, g.in_shape(batch))
        if self.bias:
            check_tensor("conv backward-data bias", b, (g.in_c,))
        check_workspace(ws, self.workspace_bytes(batch))
        return self.impl.launches(dy, w, dx, b, ws, beta)

    def __call__(self, dy, w, dx, b=None, ws=None, beta=0.0, queue=None):
        _enqueue(self.launches(dy, w, dx, b, ws, beta), queue, self.ctx)


class ConvBackwardFilter(_Op):
    """``dw = beta * dw + correlate(x, dy)`` (beta=1: gradients add up)."""
    direction, impl_class = "backward_filter", "BackwardFilter"

    def __init__(self, ctx, geom, algo="auto", splits=None, batch=16):
        super().__init__(ctx, geom, algo, dict(splits=splits, batch=batch))

    def launches(self, x, dy, dw, ws=None, beta=1.0):
        """dw = beta * dw + correlate(x, dy)."""
        batch = x.shape[0]
        g = self.geom
        check_tensor("conv backward-filter x", x, g.in_shape(batch))
        check_tensor("conv backward-filter dy", dy, g.out_shape(batch))
        check_tensor("conv backward-filter dw", dw, g.weight_shape)
        check_workspace(ws, self.workspace_bytes(batch))
        return self.impl.launches(x, dy, dw, ws, beta)

    def __call__(self, x, dy, dw, ws=None, beta=1.0, queue=None):
        _enqueue(self.launches(x, dy, dw, ws, beta), queue, self.ctx)


def geometry_args(ctx, geom):
    """(template parameter, kernel arguments): geometry baked in where builds are cheap
    and index arithmetic matters (GPUs), passed as arguments elsewhere (PoCL)."""
    if ctx.facts.is_gpu:
        return dict(zip(GEOM_NAMES, geom.values())), []
    return None, [np.int32(v) for v in geom.values()]


def scalar(v):
    return program.scalar(v, np.float32)
