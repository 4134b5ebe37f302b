"""Convolution forward as im2col + GEMM, for CPU drivers (``kernels/conv_im2col.cl``,
``core/gemm.py``).

A chunk of images is unrolled into columns (``conv_im2col``: C*KH*KW rows of OH*OW per
image), then one strided-batch ``Gemm`` computes ``y = act(w · col + b + beta * y)`` for
the chunk; chunks follow one another through a workspace of at most
``tuning.IM2COL_WORKSPACE_BYTES``. On CPUs the GEMM's wide register blocks
(``gemm_cpu.cl``) beat the implicit GEMM, whose gathers and local tiles suit GPUs; the
column copy costs one pass over C*KH*KW*OH*OW floats per image.
Ungrouped convolutions only (``conv.algorithm_applies``).
"""
import numpy as np

from ..kernels import program
from ..tensor import ws_view
from . import tuning
from .gemm import Gemm

__all__ = ["Forward"]


class Forward:
    def __init__(self, ctx, geom, bias=False, activation="identity", batch=16):
        self.ctx, self.geom = ctx, geom
        self.bias, self.activation = "row" if bias else None, activation
        self.k = geom.in_c * geom.kh * geom.kw
        self.n = geom.out_h * geom.out_w
        self.ops = {}
        self.program = program.get(ctx, "conv_im2col")
        self.op(self.chunk(batch))  # build the GEMM now

    def chunk(self, batch):
        """Images unrolled at a time: as many as the workspace bound allows, at least one."""
        per_image = self.k * self.n * 4
        return max(1, min(batch, tuning.IM2COL_WORKSPACE_BYTES // max(per_image, 1)))

    def op(self, chunk):
        if chunk not in self.ops:
            self.ops[chunk] = Gemm(self.ctx, self.geom.out_c, self.n, self.k, bias=self.bias,
                                   activation=self.activation, batch=chunk)
        return self.ops[chunk]

    def workspace_bytes(self, batch):
        return self.chunk(batch) * self.k * self.n * 4

    def launches(self, x, w, y, b, ws, beta):
        g, batch = self.geom, x.shape[0]
        chunk = self.chunk(batch)
        col = ws_view(ws, 0, chunk * self.k * self.n)
        i32 = np.int32
        geom = [i32(v) for v in (g.in_c, g.in_h, g.in_w, g.out_h, g.out_w, g.kh, g.kw, g.sh,
                                 g.sw, g.pad[0], g.pad[1], g.dh, g.dw)]
        out = []
        y_image = g.out_c * self.n
        for img0 in range(0, batch, chunk):
            count = min(chunk, batch - img0)
            out.append(program.Launch(self.program, "conv_im2col", (g.out_h, self.k, count),
                                      None, geom + [x, np.uint64(img0), col]))
            y_part = y.view((count * y_image,), offset=img0 * y_image)
            out += self.op(count).launches(w, col, y_part, bias=b, beta=beta, stride_a=0,
                                           stride_b=self.k * self.n, stride_c=y_image)
        return out
