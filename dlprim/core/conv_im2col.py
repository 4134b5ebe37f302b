"""Convolution as im2col + GEMM, for CPU drivers (``kernels/conv_im2col.cl``,
``core/gemm.py``): all three directions of ungrouped layers.

A chunk of images is unrolled into columns (``conv_im2col``: C*KH*KW rows of OH*OW per
image), then ``Gemm`` works on them: forward one strided-batch GEMM for the chunk,
``y = act(w · col + b + beta * y)``; backward-filter one GEMM per image,
``dw = beta * dw + dy · colᵀ`` (beta for the first image, then 1: the batch sum);
backward-data the other way round, ``col = wᵀ · dy``, then ``conv_col2im``.
Chunks follow one another through a workspace of at most
``tuning.IM2COL_WORKSPACE_BYTES``. On CPUs the GEMM's wide register blocks
(``gemm_cpu.cl``) beat the implicit GEMM, whose gathers and local tiles suit GPUs; the
column copy costs one pass over C*KH*KW*OH*OW floats per image.

``dtype`` float16 or bfloat16: x, y, dx and dy are stored so. The columns stay float32
(im2col widens as it copies); the GEMMs take the 16-bit tensors through their float32
copies on CPUs (``Gemm.float_copies``); col2im sums a 16-bit dx in a float32 plane of the
workspace and rounds once.
"""
import numpy as np

from ..dtypes import as_dtype, cl_type
from ..kernels import program
from ..tensor import ws_view
from ..utils import ceil_div, round_up
from . import tuning
from .gemm import Gemm

__all__ = ["Forward", "BackwardData", "BackwardFilter"]


class _Columns:
    """The column workspace of a layer and the launches that fill it, chunk by chunk."""

    def __init__(self, ctx, geom, bias=False, activation="identity", strip=0, dtype="float32"):
        self.ctx, self.geom = ctx, geom
        self.dtype = as_dtype(dtype)
        self.k = geom.in_c * geom.kh * geom.kw
        self.n = geom.out_h * geom.out_w
        self.strip = strip  # columns written as the GEMM's packed strips this wide (0: rows)
        # the epilogue is col2im's (backward-data); im2col ignores it
        self.program = program.get(ctx, "conv_im2col", BIAS=int(bias), ACTIVATION=activation,
                                   STRIP=strip, PACK_K=tuning.CPU_PACK_K,
                                   ACT_T=cl_type(self.dtype))
        g = geom
        self.geom_args = [np.int32(v) for v in (g.in_c, g.in_h, g.in_w, g.out_h, g.out_w, g.kh,
                                                g.kw, g.sh, g.sw, g.pad[0], g.pad[1], g.dh,
                                                g.dw)]

    @property
    def image_elements(self):
        """Column elements of one image: k rows of n, or strips of ``strip`` columns."""
        return self.k * (round_up(self.n, self.strip) if self.strip else self.n)

    def chunk(self, batch):
        """Images unrolled at a time: as many as the workspace bound allows, at least one."""
        per_image = self.image_elements * 4
        return max(1, min(batch, tuning.IM2COL_WORKSPACE_BYTES // max(per_image, 1)))

    def workspace_bytes(self, batch):
        return self.chunk(batch) * self.image_elements * 4

    def chunks(self, x, ws):
        """(first image, images, launch unrolling them into col, col) per chunk of x."""
        batch = x.shape[0]
        chunk = self.chunk(batch)
        col = ws_view(ws, 0, chunk * self.image_elements)
        for img0 in range(0, batch, chunk):
            count = min(chunk, batch - img0)
            args = self.geom_args + [x, np.uint64(img0), col]
            if self.strip:
                strips = ceil_div(self.n, self.strip)
                unroll = program.Launch(self.program, "conv_im2col_strips",
                                        (ceil_div(strips, 16), ceil_div(self.k, tuning.CPU_PACK_K),
                                         count), (1, 1, 1), args + [np.int32(self.k)])
            else:
                unroll = program.Launch(self.program, "conv_im2col", (self.k, count), None, args)
            yield img0, count, unroll, col


class Forward(_Columns):
    """y = act(w · col + b + beta * y); where the GEMM packs B, im2col writes the columns
    straight into its strips (``conv_im2col_strips``) and the packing pass is skipped."""

    def __init__(self, ctx, geom, bias=False, activation="identity", batch=16, dtype="float32"):
        self.bias, self.activation = "row" if bias else None, activation
        tile = tuning.pick_tile(ctx.facts, geom.out_c, geom.out_h * geom.out_w)
        self.tile = tile if tuning.pack_b(tile, geom.out_c) else None  # the GEMM's strips
        super().__init__(ctx, geom, strip=self.tile["BLOCK_N"] if self.tile else 0, dtype=dtype)
        self.ops = {}
        self.op(self.chunk(batch))  # build the GEMM now

    def op(self, chunk):
        if chunk not in self.ops:
            self.ops[chunk] = Gemm(self.ctx, self.geom.out_c, self.n, self.k, bias=self.bias,
                                   activation=self.activation, batch=chunk, tile=self.tile,
                                   dtypes=(np.float32, np.float32, self.dtype))
        return self.ops[chunk]

    def launches(self, x, w, y, b, ws, beta):
        out = []
        y_image = self.geom.out_c * self.n
        for img0, count, unroll, col in self.chunks(x, ws):
            y_part = y.view((count * y_image,), offset=img0 * y_image)
            if self.strip:
                gemm = self.op(count).launches(w, col, y_part, bias=b, beta=beta, stride_a=0,
                                               stride_c=y_image, b_packed=True)
            else:
                gemm = self.op(count).launches(w, col, y_part, bias=b, beta=beta, stride_a=0,
                                               stride_b=self.k * self.n, stride_c=y_image)
            out += [unroll] + gemm
        return out


class BackwardFilter(_Columns):
    """dw (out_c x C*KH*KW) = beta * dw + sum over images of dy[img] · col[img]ᵀ."""

    def __init__(self, ctx, geom, splits=None, batch=16, dtype="float32"):
        if splits is not None:
            raise ValueError("splits: im2col sums the batch image by image; it does not "
                             "split its reduction")
        super().__init__(ctx, geom, dtype=dtype)
        self.dtypes = (self.dtype, np.float32, np.float32)  # dy, the columns, dw
        self.gemm = Gemm(ctx, geom.out_c, self.k, self.n, trans_b=True, dtypes=self.dtypes)
        # few output channels on a CPU: one launch sums the chunk's images
        self.summed = {} if Gemm.batch_summable(ctx, geom.out_c, True) else None

    def _summed(self, count):
        if count not in self.summed:
            self.summed[count] = Gemm(self.ctx, self.geom.out_c, self.k, self.n, trans_b=True,
                                      batch=count, batch_sum=True, dtypes=self.dtypes)
        return self.summed[count]

    def launches(self, x, dy, dw, ws, beta):
        out = []
        dy_image = self.geom.out_c * self.n
        for img0, count, unroll, col in self.chunks(x, ws):
            out.append(unroll)
            if self.summed is not None:
                dy_part = dy.view((count * dy_image,), offset=img0 * dy_image)
                out += self._summed(count).launches(dy_part, col, dw, stride_a=dy_image,
                                                    stride_b=self.k * self.n,
                                                    beta=beta if img0 == 0 else 1.0)
                continue
            for i in range(count):
                dy_i = dy.view((dy_image,), offset=(img0 + i) * dy_image)
                col_i = col.view((self.k * self.n,), offset=i * self.k * self.n)
                out += self.gemm.launches(dy_i, col_i, dw, beta=beta if img0 + i == 0 else 1.0)
        return out


class BackwardData(_Columns):
    """dx = act(beta * dx + col2im(wᵀ · dy) + bias): one strided-batch GEMM per chunk into
    the columns, then ``conv_col2im`` gathers every pixel's taps (bias per input channel
    and the activation: a transposed convolution's forward). Layers of few input
    channels at stride 1 run as a direct convolution of dy instead (``core/conv_direct.py``)."""

    def __init__(self, ctx, geom, bias=False, activation="identity", batch=16, dtype="float32"):
        super().__init__(ctx, geom, bias, activation, dtype=dtype)
        self.bias = bias
        self.ops = {}
        self.op(self.chunk(batch))

    def op(self, chunk):
        if chunk not in self.ops:
            self.ops[chunk] = Gemm(self.ctx, self.k, self.n, self.geom.out_c, trans_a=True,
                                   batch=chunk, dtypes=(np.float32, self.dtype, np.float32))
        return self.ops[chunk]

    def _plane_elements(self):
        """float32 sums of a 16-bit dx's image (col2im's ``sums``), 0 for float32."""
        g = self.geom
        return 0 if self.dtype == np.float32 else g.in_c * g.in_h * g.in_w

    def workspace_bytes(self, batch):
        chunk = self.chunk(batch)
        return super().workspace_bytes(batch) + chunk * self._plane_elements() * 4

    def launches(self, dy, w, dx, b, ws, beta):
        g, batch = self.geom, dy.shape[0]
        chunk = self.chunk(batch)
        col = ws_view(ws, 0, chunk * self.k * self.n)
        dy_image = g.out_c * self.n
        bias_args = b.kernel_args if self.bias else (col.buffer, np.uint64(0))
        out = []
        for img0 in range(0, batch, chunk):
            count = min(chunk, batch - img0)
            dy_part = dy.view((count * dy_image,), offset=img0 * dy_image)
            out += self.op(count).launches(w, dy_part, col, stride_a=0, stride_b=dy_image,
                                           stride_c=self.k * self.n)
            sums = [ws_view(ws, chunk * self.k * self.n * 4, chunk * self._plane_elements())] \
                if self._plane_elements() else []
            out.append(program.Launch(self.program, "conv_col2im", (g.in_c, count), None,
                                      self.geom_args + [col, dx, np.uint64(img0), *bias_args,
                                                        np.float32(beta), *sums]))
        return out
