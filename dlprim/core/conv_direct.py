"""Direct convolution for CPU drivers (``kernels/conv_direct.cl``): forward, and
backward-data at stride 1 as the forward convolution of dy with the flipped kernel.

For layers of few output channels (the few-rows side of a GEMM) im2col + GEMM writes
and reads C*KH*KW columns per pixel and runs a GEMM too narrow for its register blocks;
here the input is read in place and every work-item keeps 8 or 16 output channels of a run of
pixels in registers. The weights are first rearranged (``conv_direct_pack``) into blocks
of those output channels per tap, in a workspace: a tenth of a millisecond, every call, so
that the weights a solver has just updated are the ones used.
"""
import numpy as np

from ..kernels import program
from ..tensor import ws_view
from ..utils import ceil_div, round_up
from .conv_geometry import scalar

__all__ = ["Forward", "BackwardData", "register_block"]

# A work-item's register block: output channels (16: two float8 per pixel, so that each
# broadcast input value feeds two FMAs) by pixels, 12 float8 accumulators of AVX2's 16
# registers; a layer of at most 8 output channels takes 8 channels by 8 pixels
MAX_ACCUMULATORS = 12


def register_block(out_c, width):
    """(output channels, pixels) of a work-item: OCB channels, and the output row cut
    into equal runs that fill the accumulators (14 -> 5 + 5 + 4 at 16 channels)."""
    ocb = 8 if out_c <= 8 else 16
    most = MAX_ACCUMULATORS * 8 // ocb if ocb > 8 else 8
    return ocb, ceil_div(width, ceil_div(width, most))


class Forward:
    """y = act(conv(x, w) + b + beta * y) for an ungrouped layer; ``flip``: w holds the
    weights of the layer whose backward-data this convolution is (see BackwardData)."""

    def __init__(self, ctx, geom, bias=False, activation="identity", batch=16, flip=False):
        self.ctx, self.geom, self.bias, self.flip = ctx, geom, bool(bias), bool(flip)
        g = geom
        self.ocb, self.px = register_block(g.out_c, g.out_w)
        self.blocks = ceil_div(g.out_c, self.ocb)
        self.program = program.get(ctx, "conv_direct", BIAS=self.bias, ACTIVATION=activation,
                                   KH=g.kh, KW=g.kw, SH=g.sh, SW=g.sw, DH=g.dh, DW=g.dw,
                                   OCB=self.ocb, PX=self.px)

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
        packed = ws_view(ws, 0, self.packed_elements)
        pack = program.Launch(self.program, "conv_direct_pack", (self.packed_elements,), None,
                              [np.int32(g.out_c), np.int32(g.in_c), np.int32(self.flip), w,
                               packed])
        if batch == 0:
            return []
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

    def __init__(self, ctx, geom, bias=False, activation="identity", batch=16):
        flipped = geom.flipped()
        if flipped is None:
            raise ValueError("direct convolution: backward-data needs stride 1 and pads "
                             "within the kernel span, got %r" % (geom,))
        super().__init__(ctx, flipped, bias, activation, batch, flip=True)
