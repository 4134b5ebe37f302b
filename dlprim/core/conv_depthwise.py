"""Depthwise convolution (every group has one input channel, MobileNet's 3x3 layers):
direct kernels for the three directions. GPUs run ``kernels/conv_depthwise.cl`` (a
work-item per output pixel, filter taps reduced in work-groups); CPU drivers run
``kernels/conv_depthwise_cpu.cl`` (a few dozen work-items of whole rows, vector loads
along W, the stencil compiled in): PoCL runs each work-item as a loop on one thread, where
a pixel per work-item spends its time on index arithmetic and bounds checks. Float16
activations (``dtype``) run the GPU kernels on every device: the CPU ones read float32."""
import numpy as np

from ..dtypes import as_dtype, cl_type
from ..kernels import program
from ..tensor import ws_view
from .conv_geometry import geometry_args, scalar
from . import tuning_launch
from ..utils import ceil_div, round_up

__all__ = ["Forward", "BackwardData", "BackwardFilter"]


def _program(ctx, geom, bias=False, activation="identity", dtype="float32"):
    baked, args = geometry_args(ctx, geom)
    wg = tuning_launch.depthwise_filter_wg(ctx.facts)
    return program.get(ctx, "conv_depthwise", BIAS=bool(bias), ACTIVATION=activation,
                       GEOM_BAKED=baked, WG=wg, KH_T=1, KW_T=1, TAPS=1,
                       ACT_T=cl_type(dtype)), args, wg


def _on_cpu(ctx, dtype):
    """Whether the CPU kernels run (CPU drivers, float32 activations)."""
    return tuning_launch.depthwise_on_cpu(ctx.facts) and as_dtype(dtype) == np.float32


def _cpu_program(ctx, g, bias=False, activation="identity"):
    """The CPU kernels: one build per stencil, channel multiplier and epilogue."""
    return program.get(ctx, "conv_depthwise_cpu", BIAS=bool(bias), ACTIVATION=activation,
                       VEC=tuning_launch.DEPTHWISE_CPU_VEC, KG=g.out_c // g.groups,
                       KH=g.kh, KW=g.kw, SH=g.sh, SW=g.sw, PH=g.pad[0], PW=g.pad[1],
                       DH=g.dh, DW=g.dw)


def _cpu_sizes(g):
    return [np.int32(v) for v in (g.in_c, g.out_c, g.in_h, g.in_w, g.out_h, g.out_w)]


def _cpu_rows(ctx, prog, name, g, rows, row_len, args, flops):
    """A CPU launch over ``rows`` rows of ``row_len`` outputs, a chunk of rows per work-item."""
    items, chunk = tuning_launch.depthwise_cpu_rows(ctx.facts, rows, row_len)
    return program.Launch(prog, name, (items,), (1,),
                          _cpu_sizes(g) + [np.int32(rows), np.int32(chunk)] + args, flops=flops)


def _local(ctx):
    return tuning_launch.gpu_local(ctx.facts, (tuning_launch.DEPTHWISE_WG, 1, 1))


class Forward:
    def __init__(self, ctx, geom, bias=False, activation="identity", batch=16,
                 dtype="float32"):
        self.ctx, self.geom, self.bias = ctx, geom, bool(bias)
        self.cpu = _on_cpu(ctx, dtype)
        if self.cpu:
            self.program = _cpu_program(ctx, geom, bias, activation)
        else:
            self.program, self.geom_args, _ = _program(ctx, geom, bias, activation, dtype)

    def workspace_bytes(self, batch):
        return 0

    def launches(self, x, w, y, b, ws, beta):
        g = self.geom
        tensors = [x, w, y] + ([b] if self.bias else []) + [scalar(beta)]
        if self.cpu:
            return [_cpu_rows(self.ctx, self.program, "depthwise_forward", g,
                              x.shape[0] * g.out_c * g.out_h, g.out_w, tensors,
                              g.flops(x.shape[0]))]
        gsize = (round_up(g.out_h * g.out_w, tuning_launch.DEPTHWISE_WG), g.out_c, x.shape[0])
        return [program.Launch(self.program, "depthwise_forward", gsize, _local(self.ctx),
                               self.geom_args + tensors, flops=g.flops(x.shape[0]))]


class BackwardData:
    def __init__(self, ctx, geom, bias=False, activation="identity", batch=16,
                 dtype="float32"):
        self.ctx, self.geom, self.bias = ctx, geom, bool(bias)
        self.cpu = _on_cpu(ctx, dtype)
        if self.cpu:
            self.program = _cpu_program(ctx, geom, bias, activation)
        else:
            self.program, self.geom_args, _ = _program(ctx, geom, bias, activation, dtype)

    def workspace_bytes(self, batch):
        return 0

    def launches(self, dy, w, dx, b, ws, beta):
        g = self.geom
        tensors = [dy, w, dx] + ([b] if self.bias else []) + [scalar(beta)]
        if self.cpu:
            return [_cpu_rows(self.ctx, self.program, "depthwise_backward_data", g,
                              dy.shape[0] * g.in_c * g.in_h, g.in_w, tensors,
                              g.flops(dy.shape[0]))]
        gsize = (round_up(g.in_h * g.in_w, tuning_launch.DEPTHWISE_WG), g.in_c, dy.shape[0])
        return [program.Launch(self.program, "depthwise_backward_data", gsize, _local(self.ctx),
                               self.geom_args + tensors, flops=g.flops(dy.shape[0]))]


class BackwardFilter:
    """Per (channel, chunk of batch*pixels) partial tap sums, then a sum over chunks; on
    CPUs per (channels, chunk of batch*rows), summed in the same launch where a work-item
    holds whole channels."""

    def __init__(self, ctx, geom, splits=None, batch=16, dtype="float32"):
        self.ctx, self.geom, self.forced_chunks = ctx, geom, splits
        self.cpu = _on_cpu(ctx, dtype)
        self.wg = tuning_launch.depthwise_filter_wg(ctx.facts)
        if self.cpu:
            self.program = _cpu_program(ctx, geom)
            return
        baked, self.geom_args = geometry_args(ctx, geom)
        # the tap count sizes a register array, so the kernel size is always baked in
        self.program = program.get(ctx, "conv_depthwise", BIAS=False, ACTIVATION="identity",
                                   GEOM_BAKED=baked, WG=self.wg, KH_T=geom.kh, KW_T=geom.kw,
                                   TAPS=geom.kh * geom.kw, ACT_T=cl_type(dtype))

    def cpu_plan(self, batch):
        """(channels per work-item, chunks, rows per chunk) of the CPU kernel."""
        rows = batch * self.geom.out_h
        if self.forced_chunks:
            chunk = ceil_div(rows, self.forced_chunks)
            return 1, ceil_div(rows, chunk), chunk
        return tuning_launch.depthwise_cpu_filter_plan(self.ctx.facts, self.geom.out_c, rows,
                                                       self.geom.out_w)

    def chunk_plan(self, batch):
        """(chunks, chunk): enough work-groups to fill the device, >= 16 items a work-item;
        on CPUs the chunks of each channel's batch*out_h rows (``cpu_plan``)."""
        if self.cpu:
            return self.cpu_plan(batch)[1:]
        total = batch * self.geom.out_h * self.geom.out_w
        if self.forced_chunks:
            chunks = self.forced_chunks
        else:
            chunks = tuning_launch.depthwise_chunks(self.ctx.facts, self.geom.out_c, total,
                                                    self.wg)
        chunk = ceil_div(total, chunks)
        return ceil_div(total, chunk), chunk

    def workspace_bytes(self, batch):
        g = self.geom
        chunks = self.chunk_plan(batch)[0]
        return 0 if self.cpu and chunks == 1 else 4 * chunks * g.out_c * g.kh * g.kw

    def launches(self, x, dy, dw, ws, beta):
        g = self.geom
        batch = x.shape[0]
        chunks, chunk = self.chunk_plan(batch)
        n = g.out_c * g.kh * g.kw
        if self.cpu:
            per_item = self.cpu_plan(batch)[0]
            # one chunk: the work-items write dw themselves, the partials are unused
            part = dw if chunks == 1 else ws_view(ws, 0, chunks * n)
            args = [np.int32(batch)] + _cpu_sizes(g) + \
                [np.int32(v) for v in (per_item, chunks, chunk)] + [x, dy, dw, part, scalar(beta)]
            sums = program.Launch(self.program, "depthwise_backward_filter",
                                  (ceil_div(g.out_c, per_item) * chunks,), (1,), args,
                                  flops=g.flops(batch))
            if chunks == 1:
                return [sums]
        else:
            part = ws_view(ws, 0, chunks * n)
            args = [np.int32(batch)] + self.geom_args + [np.int32(chunk), x, dy, part]
            sums = program.Launch(self.program, "depthwise_backward_filter",
                                  (self.wg, chunks, g.out_c), (self.wg, 1, 1), args,
                                  flops=g.flops(batch))
        wg = tuning_launch.DEPTHWISE_WG
        total = program.Launch(self.program, "depthwise_filter_sum", (round_up(n, wg),),
                               tuning_launch.gpu_local(self.ctx.facts, (wg,)),
                               [np.int32(n), np.int32(chunks), part, dw, scalar(beta)])
        return [sums, total]
