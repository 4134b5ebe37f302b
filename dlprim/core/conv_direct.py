"""Direct convolution for CPU drivers (``kernels/conv_direct.cl``): forward,
backward-data at stride 1 as the forward convolution of dy with the flipped kernel, and
backward-filter as per-tap sums over the batch.

For layers of few output channels (the few-rows side of a GEMM) im2col + GEMM writes
and reads C*KH*KW columns per pixel and runs a GEMM too narrow for its register blocks;
here the input is read in place and every work-item keeps up to 32 output channels of a
run of pixels in registers. The weights are first rearranged (``conv_direct_pack``) into
blocks of those output channels per tap, in a workspace: a tenth of a millisecond, every
call, so that the weights a solver has just updated are the ones used.

``dtype`` float16 or bfloat16: x, y, dx and dy are stored so, read and written by the
kernels directly; the weights, their packed blocks, dy's pixel-major rows and the sums
stay float32.
"""
import numpy as np

from ..dtypes import cl_type
from ..kernels import program
from ..tensor import ws_view
from ..utils import ceil_div, round_up
from .conv_geometry import scalar
from .copy import TransposeCopy
from .pointwise import memo
from . import tuning, tuning_launch

__all__ = ["Forward", "BackwardData", "BackwardFilter", "register_block", "filter_block",
           "filter_channels"]

# A work-item's register block: output channels (a multiple of 8: one float8 each per
# pixel) by pixels of a row, about 8 float8 accumulators. More pixels would share input
# values between taps, which the compiler then keeps in registers and spills the
# accumulators (16 channels by 6 pixels ran 1.3-1.6x slower than by 3 on PoCL, 2-core
# EPYC); more channels per pixel make each broadcast input value feed more FMAs.
# With AVX-512's 32 vector registers (float16 vectors, tuning.cpu_vector_width) blocks of
# up to 64 channels by 4 pixels (16 accumulators) run best: resnet18's 3x3 layers at
# batch 4 on a 2-core AVX-512 EPYC, Intel's runtime, ms (float8 32x2 / float16 32x4 /
# float16 64x4): 64 -> 64 at 56x56 7.00 / 5.21 / 5.23, 128 -> 128 at 28x28 6.11 / 5.79 /
# 5.60, 64 -> 128 at stride 2 4.53 / 3.42 / 3.06, 512 -> 512 at 7x7 15.85 / 13.91 / 12.97
MAX_CHANNEL_BLOCK = {8: 32, 16: 64}  # by vector width (tuning.cpu_vector_width)
# pixels per work-item by vector width and channel block
PIXELS = {8: {8: 4, 16: 3, 24: 3, 32: 2}, 16: {16: 6, 32: 4, 48: 4, 64: 4}}


def register_block(out_c, width, vw=8):
    """(output channels, pixels) of a work-item with vectors of ``vw`` floats: the
    channels cut into equal blocks of at most MAX_CHANNEL_BLOCK rounded up to vw
    (48 -> 24 + 24 at 8), and the output row into equal runs of at most PIXELS[block]
    (28 at 3 -> ten runs of 3)."""
    blocks = ceil_div(out_c, MAX_CHANNEL_BLOCK[vw])
    ocb = round_up(ceil_div(out_c, blocks), vw)
    most = PIXELS[vw][ocb]
    return ocb, ceil_div(width, ceil_div(width, most))


class Forward:
    """y = act(conv(x, w) + b + beta * y) for an ungrouped layer; ``flip``: w holds the
    weights of the layer whose backward-data this convolution is (see BackwardData)."""

    def __init__(self, ctx, geom, bias=False, activation="identity", batch=16, flip=False,
                 dtype="float32"):
        self.ctx, self.geom, self.bias, self.flip = ctx, geom, bool(bias), bool(flip)
        g = geom
        vw = tuning.cpu_vector_width(ctx.facts)
        self.ocb, self.px = register_block(g.out_c, g.out_w, vw)
        self.blocks = ceil_div(g.out_c, self.ocb)
        self.program = program.get(ctx, "conv_direct", FILTER=False, BIAS=self.bias,
                                   ACTIVATION=activation, ACT_T=cl_type(dtype),
                                   KH=g.kh, KW=g.kw, SH=g.sh, SW=g.sw, DH=g.dh, DW=g.dw,
                                   OCB=self.ocb, PX=self.px, VW=vw)

    @property
    def packed_elements(self):
        """Floats of the rearranged weights (whole channel blocks, zero past out_c)."""
        g = self.geom
        return self.blocks * self.ocb * g.in_c * g.kh * g.kw

    def workspace_bytes(self, batch):
        """Scratch bytes: the rearranged weights, whatever the batch."""
        return round_up(self.packed_elements * 4, 64)

    def launches(self, x, w, y, b, ws, beta):
        """The weight rearrangement, then the convolution (nothing for an empty batch)."""
        g, batch = self.geom, x.shape[0]
        if batch == 0:
            return []
        packed = ws_view(ws, 0, self.packed_elements)
        pack = program.Launch(self.program, "conv_direct_pack", (self.packed_elements,), None,
                              [np.int32(g.out_c), np.int32(g.in_c), np.int32(self.flip), w,
                               packed])
        bias_args = b.kernel_args if self.bias else (y.buffer, np.uint64(0))
        args = [np.int32(v) for v in (g.in_c, g.in_h, g.in_w, g.out_c, g.out_h, g.out_w,
                                      g.pad[0], g.pad[1], self.blocks)]
        args += [x, packed, y, *bias_args, scalar(beta)]
        gsize = (ceil_div(g.out_w, self.px), g.out_h, batch * self.blocks)
        # a work-item per work-group: PoCL runs each as straight vector code, not a loop
        # its vectoriser would spread over neighbouring work-items' gathers
        return [pack, program.Launch(self.program, "conv_direct", gsize, (1, 1, 1), args,
                                     flops=g.flops(batch))]


class BackwardData(Forward):
    """dx = act(conv_transpose(dy, w) + b + beta * dx) at stride 1: the forward
    convolution of dy with the kernel turned by 180 degrees, input and output channels
    swapped, padded by span - 1 - pad (``ConvGeometry.flipped``)."""

    def __init__(self, ctx, geom, bias=False, activation="identity", batch=16, dtype="float32"):
        flipped = geom.flipped()
        if flipped is None:
            raise ValueError("direct convolution: backward-data needs stride 1 and pads "
                             "within the kernel span, got %r" % (geom,))
        super().__init__(ctx, flipped, bias, activation, batch, flip=True, dtype=dtype)


# The filter gradient's work-item: KW taps by up to FILTER_VECTORS[vw] vectors of output
# channels, at most FILTER_ACCUMULATORS vector accumulators. With float16 vectors, blocks
# of 64 channels: 3x3 layers of resnet18 at batch 4, 2-core AVX-512 EPYC, Intel's
# runtime, ms float8 x 2 / float16 x 1, 2, 4: 64 -> 64 at 56x56 12.66 / 7.57 / 7.15 /
# 5.23; 256 -> 256 at 14x14 8.30 / 7.65 / 4.98 / 4.98; 512 -> 512 at 7x7 14.41 / 13.00 /
# 10.22 / 8.14; 64 -> 128 at stride 2 5.42 / 4.43 / 3.79 / 4.24
FILTER_ACCUMULATORS = 12
FILTER_VECTORS = {8: 2, 16: 4}


def filter_block(out_c, kw, vw=8):
    """Output channels per work-item of the filter gradient: the most vectors of ``vw``
    (1, 2, 4 up to FILTER_VECTORS[vw]) whose KW x vectors accumulators fit
    FILTER_ACCUMULATORS and whose last vector holds some of the layer's channels."""
    n = 1
    while 2 * n <= FILTER_VECTORS[vw] and kw * 2 * n <= FILTER_ACCUMULATORS \
            and n * vw < out_c:
        n *= 2
    return n * vw


# Input channels per work-item of the filter gradient (CB), each load of dy shared between
# them: on CPUs of 16-float vectors (32 vector registers) as many of 1, 2, 4 as keep
# CB x KW x vectors accumulators within FILTER_SHARED_ACCUMULATORS, for kernels up to 3
# wide. Same EPYC and runtime, batch 4, ms, CB 1 -> the rule's: 3x3 64 -> 64 at 56x56
# 5.00 -> 4.41; 128 -> 128 at 28 5.44 -> 4.41; 256 at 14 4.66 -> 4.32; 512 at 7 5.72 ->
# 6.00; 64 -> 128 at stride 2 2.82 -> 2.31; 1x1 64 -> 256 at 56 14.6 -> 9.1, 256 -> 64
# 5.39 -> 2.38, 512 -> 128 at 28 5.91 -> 2.84. The 7x7 stem (3 channels) ran 1.5-2x
# slower with CB 2 (spilled accumulators); 8-float vectors (16 registers) keep CB 1
# (not measured).
FILTER_SHARED_ACCUMULATORS = 24


def filter_channels(kw, ocb, vw, in_c):
    """Input channels per work-item of the filter gradient (see FILTER_SHARED_ACCUMULATORS)."""
    cb = 1
    if vw == 16 and kw <= 3:
        while 2 * cb <= min(4, in_c) and 2 * cb * kw * (ocb // vw) <= FILTER_SHARED_ACCUMULATORS:
            cb *= 2
    return cb


class BackwardFilter:
    """dw = beta * dw + the batch sum of dy x at each tap: dy laid out pixel-major in
    the workspace (a ``TransposeCopy``, or ``conv_direct_dy_rows`` where channels are
    padded or dy is 16-bit), then a work-item per (channel block, input channel, kernel
    row) and part of the batch; the parts' partial sums (where the layer alone gives the
    cores too few work-items) are added by ``conv_direct_filter_sum``."""

    def __init__(self, ctx, geom, splits=None, batch=16, dtype="float32", block=None):
        """``block``: (output channels, input channels) per work-item, else
        ``filter_block`` and ``filter_channels``."""
        self.ctx, self.geom, self.forced_parts = ctx, geom, splits
        self.dtype = np.dtype(dtype)
        g = geom
        vw = tuning.cpu_vector_width(ctx.facts)
        if block is None:
            ocb = filter_block(g.out_c, g.kw, vw)
            block = ocb, filter_channels(g.kw, ocb, vw, g.in_c)
        self.ocb, self.cb = block
        self.blocks = ceil_div(g.out_c, self.ocb)
        self.padded_c = self.blocks * self.ocb
        self.program = program.get(ctx, "conv_direct", FILTER=True, BIAS=False,
                                   ACTIVATION="identity", ACT_T=cl_type(dtype),
                                   KH=g.kh, KW=g.kw, SH=g.sh, SW=g.sw,
                                   DH=g.dh, DW=g.dw, OCB=self.ocb, PX=0, VW=vw, CB=self.cb)

    def parts(self, batch):
        """How many parts the batch is cut into: enough work-items for every core
        (``tuning_launch.direct_filter_parts``), or the forced ``splits``."""
        items = self.blocks * ceil_div(self.geom.in_c, self.cb) * self.geom.kh
        if self.forced_parts:
            return max(1, min(batch, self.forced_parts))
        return tuning_launch.direct_filter_parts(self.ctx.facts, items, batch)

    def _rows_elements(self, batch):
        return batch * self.geom.out_h * self.geom.out_w * self.padded_c

    def workspace_bytes(self, batch):
        """Scratch bytes: dy pixel-major, and the parts' partial sums where there are parts."""
        parts = self.parts(batch)
        partial = parts * self.geom.out_c * self.geom.in_c * self.geom.kh * self.geom.kw
        return round_up(self._rows_elements(batch) * 4, 64) + (4 * partial if parts > 1 else 0)

    def launches(self, x, dy, dw, ws, beta):
        """The dy layout, the sums (and the parts' total): nothing but beta * dw for an
        empty batch."""
        g, batch = self.geom, x.shape[0]
        parts = self.parts(batch) if batch else 1
        n = g.out_c * g.in_c * g.kh * g.kw
        rows = ws_view(ws, 0, self._rows_elements(batch)) if batch else dw
        partial = ws_view(ws, round_up(self._rows_elements(batch) * 4, 64), parts * n) \
            if parts > 1 else dw
        out = []
        pixels = g.out_h * g.out_w
        if batch and self.padded_c == g.out_c and self.dtype == np.float32:
            # no channels to pad: a plain transpose, which CPUs move in register blocks
            # (conv_direct_dy_rows, a channel's pixels a work-item, was 4x slower there)
            shape = (batch, g.out_c, pixels)
            op = memo(self.ctx, ("transpose", shape, (0, 2, 1), "float32"),
                      lambda: TransposeCopy(self.ctx, shape, (0, 2, 1)))
            out += op.launches(dy.view(shape), rows.view((batch, pixels, g.out_c)))
        elif batch:
            out.append(program.Launch(self.program, "conv_direct_dy_rows",
                                      (self.padded_c, batch), (1, 1),
                                      [np.int32(g.out_c), np.int32(pixels),
                                       np.int32(self.padded_c), dy, rows]))
        chunk = ceil_div(batch, parts) if batch else 0
        args = [np.int32(v) for v in (g.in_c, g.in_h, g.in_w, g.out_c, g.out_h, g.out_w,
                                      g.pad[0], g.pad[1], self.padded_c, batch, chunk,
                                      self.blocks)]
        args += [x, rows, partial, scalar(beta), np.int32(parts)]
        out.append(program.Launch(self.program, "conv_direct_filter",
                                  (parts * self.blocks * ceil_div(g.in_c, self.cb) * g.kh,), (1,),
                                  args,
                                  flops=g.flops(batch)))
        if parts > 1:
            out.append(program.Launch(self.program, "conv_direct_filter_sum", (n,), None,
                                      [np.int32(n), np.int32(parts), partial, dw,
                                       scalar(beta)]))
        return out
