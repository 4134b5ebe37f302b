"""Winograd F(MxM, RxR) convolution (M = 4 or 2) for 3x3 and 5x5 (R), stride-1,
undilated, ungrouped layers. F(4x4, 3x3) does 36 products per 16 outputs where direct
convolution does 144 (F(2x2, 3x3): 16 per 4, against 36); F(4x4, 5x5) 64 per 16 against
400 (F(2x2, 5x5): 36 per 4, against 100). M = 2 serves outputs smaller than 4x4, and
layers where F(4x4)'s larger rounding errors buy no speed (``tuning.winograd_tile``). The
transforms' matrices come from ``core/winograd_transforms.py``.

Forward: filter transform, input transform, (M+R-1)^2 GEMMs (``core/gemm.py``, batched over
the transform element), output transform. The filter transform is a launch of its own at
the start of every pass, so it runs once per forward (once per weight update in
training) and never reads stale weights after a load.

Backward-data is the same algorithm on the transposed problem: dx is the correlation of dy
with the filter rotated by 180 degrees and with input/output channels swapped, padded by
``R - 1 - pad`` (``winograd_filter`` with ``flip``).
``kernels/conv_winograd.cl`` writes every transform out at render time.

Backward-filter transforms x (as forward) and dy (``winograd_dy``), sums the (M+R-1)^2
products over batch and tiles with the batched Gemm (or, forced, the implicit-GEMM
filter-gradient kernel with split-K), and maps the result back to RxR
(``winograd_filter_grad``).

Precision (``gemm_precision``): with any ``precision`` but "fp32", F(2x2)'s batched
GEMMs multiply on tensor cores where the device has them, always with TF32 operands: the
transformed tiles are float32 in the workspace, and the transforms scale values beyond
what half's range is sure to hold. F(4x4)'s stay float32: its transforms amplify the
operands' rounding about 20-fold, which puts TF32's 2^-11 at 1% of the output's
magnitude (0.52-1.02% measured against float64), where F(2x2)'s stays at 0.06%
(``tests/test_conv_tensor_cores.py``). F(2x2, 5x5) has F(4x4, 3x3)'s 6-wide tile and
points, so its GEMMs stay float32 too.
"""
import numpy as np

from ..dtypes import cl_type
from ..kernels import program
from ..tensor import ws_view
from .conv_geometry import ConvGeometry
from .conv_gemm import BackwardFilter as GemmBackwardFilter
from . import tuning, tuning_launch
from .gemm import Gemm
from .winograd_transforms import TILES
from ..utils import ceil_div, round_up

__all__ = ["Forward", "BackwardData", "BackwardFilter", "WinogradPlan", "choose_tile",
           "gemm_precision", "automatic_tile_serves"]


def gemm_precision(precision, tile, kernel=3):
    """The batched GEMMs' precision for a convolution's at F(tile x tile, kernel x kernel):
    "tf32" for any but "fp32" at F(2x2, 3x3), else "fp32" (see the module's note)."""
    return "tf32" if precision != "fp32" and tile == 2 and kernel == 3 else "fp32"

def choose_tile(ctx, in_c, out_c, out_hw, batch, tile=None, filter_pass=False,
                precision="fp32", kernel=3):
    """M of F(MxM, RxR), R = ``kernel``: ``tile`` when forced, else
    ``tuning.winograd_tile`` (4 unless the output is tiny, the channels few or the
    problem small: F(2x2) rounds less; or wide layers where F(2x2)'s GEMMs of
    ``precision`` run on the device's tensor cores)."""
    if tile is not None:
        if tile not in TILES:
            raise ValueError("Winograd tile must be 2 or 4, got %r" % (tile,))
        return tile
    tensor_cores = Gemm.on_tensor_cores(ctx, gemm_precision(precision, 2, kernel))
    return tuning.winograd_tile(in_c, out_c, out_hw, batch, filter_pass, tensor_cores)


def automatic_tile_serves(ctx, geom, direction, batch, precision="fp32"):
    """Whether the layer runs Winograd when asked for it without a tile ("winograd"):
    always for 3x3 (F(2x2, 3x3) wherever F(4x4) would round too coarsely); for 5x5 only
    where ``choose_tile`` takes F(4x4, 5x5). F(2x2, 5x5) has F(4x4, 3x3)'s tile and
    rounding, which the tile rule avoids on small problems: on DLPrimitives' conv2d_win
    cases it erred 2.3x their tolerance forward (98->128 at 4x4) and 1.1x on the input
    gradient (16->32 at 7x7), so such layers take the implicit GEMM instead."""
    if geom.kh == 3:
        return True
    if direction == "backward_data":  # the transposed problem (BackwardData's plan)
        sides = (geom.out_c, geom.in_c, (geom.in_h, geom.in_w))
    else:
        sides = (geom.in_c, geom.out_c, (geom.out_h, geom.out_w))
    return choose_tile(ctx, *sides, batch, filter_pass=direction == "backward_filter",
                       precision=precision, kernel=geom.kh) == 4


class _Tiles:
    """MxM output tiles over an out_h x out_w plane for an RxR filter, and the launch
    helpers."""

    def __init__(self, ctx, out_hw, m, r):
        self.ctx, self.m, self.elems = ctx, m, (m + r - 1) ** 2
        self.out_h, self.out_w = out_hw
        self.tiles_w = ceil_div(self.out_w, m)
        self.tiles = ceil_div(self.out_h, m) * self.tiles_w

    def launch(self, prg, name, channels, batch, args):
        """One work-item per (tile, channel, image). Work-groups of WINOGRAD_WG span
        several channels where an image has fewer tiles (deep layers: 4 tiles at 7x7), so
        that no work-item idles for want of tiles."""
        if self.ctx.facts.is_cpu:  # a work-item per (channel, image) walks the tiles
            return program.Launch(prg, name, (1, channels, batch), None, args)
        if not self.ctx.facts.is_gpu:
            return program.Launch(prg, name, (self.tiles, channels, batch), None, args)
        wg = tuning_launch.WINOGRAD_WG
        lx = min(wg, program.pow2_at_least(self.tiles))
        ly = wg // lx
        return program.Launch(prg, name, (round_up(self.tiles, lx),
                                          round_up(channels, ly), batch),
                              (lx, ly, 1), args)

    def matrix_launch(self, prg, name, rows, cols, args):
        wg = tuning_launch.WINOGRAD_MATRIX_WG
        return program.Launch(prg, name, (round_up(cols, wg), round_up(rows, wg)),
                              tuning_launch.gpu_local(self.ctx.facts, (wg, wg)), args)


class WinogradPlan:
    """``y (out_c, out_hw) = act(correlate(x (in_c, in_hw), w (kernel x kernel)) + bias)
    + beta*y``."""

    def __init__(self, ctx, in_c, out_c, in_hw, out_hw, pad_hw, flip, bias, activation, batch,
                 tile, dtype="float32", precision="fp32", kernel=3):
        self.ctx = ctx
        self.in_c, self.out_c, self.flip, self.bias = in_c, out_c, flip, bias
        self.in_h, self.in_w = in_hw
        self.pad_h, self.pad_w = pad_hw
        self.t = _Tiles(ctx, out_hw, choose_tile(ctx, in_c, out_c, out_hw, batch, tile,
                                                 precision=precision, kernel=kernel), kernel)
        self.precision = gemm_precision(precision, self.t.m, kernel)
        self.program = program.get(ctx, "conv_winograd", ACTIVATION=activation, BIAS=bool(bias),
                                   CPU=ctx.facts.is_cpu, ACT_T=cl_type(dtype),
                                   TILE=self.t.m, KERNEL=kernel)
        self.gemms = {}
        self.gemm(batch)

    def gemm(self, batch):
        """M[xi] (out_c x BT) = U[xi] (out_c x in_c) @ V[xi] (in_c x BT), one per xi."""
        if batch not in self.gemms:
            self.gemms[batch] = Gemm(self.ctx, self.out_c, batch * self.t.tiles, self.in_c,
                                     batch=self.t.elems, precision=self.precision)
        return self.gemms[batch]

    def sizes(self, batch):
        """Float counts of U, V and M in the workspace."""
        bt, e = batch * self.t.tiles, self.t.elems
        return e * self.out_c * self.in_c, e * self.in_c * bt, e * self.out_c * bt

    def workspace_bytes(self, batch):
        return 4 * sum(self.sizes(batch))

    def launches(self, x, w, y, b, ws, beta):
        batch = x.shape[0]
        bt = batch * self.t.tiles
        nu, nv, nm = self.sizes(batch)
        u, v, m = ws_view(ws, 0, nu), ws_view(ws, 4 * nu, nv), ws_view(ws, 4 * (nu + nv), nm)
        i32, t = np.int32, self.t
        filt = t.matrix_launch(self.program, "winograd_filter", self.out_c, self.in_c,
                               [i32(self.out_c), i32(self.in_c), i32(self.flip), w, u])
        inp = t.launch(self.program, "winograd_input", self.in_c, batch,
                       [i32(self.in_c), i32(self.in_h), i32(self.in_w), i32(t.tiles_w),
                        i32(t.tiles), i32(bt), i32(self.pad_h), i32(self.pad_w), x, v])
        gemm = self.gemm(batch).launches(u, v, m, stride_a=self.out_c * self.in_c,
                                         stride_b=self.in_c * bt, stride_c=self.out_c * bt)
        args = [i32(self.out_c), i32(t.out_h), i32(t.out_w), i32(t.tiles_w), i32(t.tiles),
                i32(bt), m, y] + ([b] if self.bias else []) + [np.float32(beta)]
        out = t.launch(self.program, "winograd_output", self.out_c, batch, args)
        return [filt, inp] + gemm + [out]


class Forward:
    def __init__(self, ctx, geom, bias=False, activation="identity", batch=16, tile=None,
                 dtype="float32", precision="fp32"):
        self.plan = WinogradPlan(ctx, geom.in_c, geom.out_c, (geom.in_h, geom.in_w),
                                 (geom.out_h, geom.out_w), geom.pad[:2], False, bias,
                                 activation, batch, tile, dtype, precision, geom.kh)

    def workspace_bytes(self, batch):
        return self.plan.workspace_bytes(batch)

    def launches(self, x, w, y, b, ws, beta):
        return self.plan.launches(x, w, y, b, ws, beta)


class BackwardData:
    def __init__(self, ctx, geom, bias=False, activation="identity", batch=16, tile=None,
                 dtype="float32", precision="fp32"):
        r = geom.kh
        self.plan = WinogradPlan(ctx, geom.out_c, geom.in_c, (geom.out_h, geom.out_w),
                                 (geom.in_h, geom.in_w), (r - 1 - geom.pad[0], r - 1 - geom.pad[1]),
                                 True, bias, activation, batch, tile, dtype, precision, r)

    def workspace_bytes(self, batch):
        return self.plan.workspace_bytes(batch)

    def launches(self, dy, w, dx, b, ws, beta):
        return self.plan.launches(dy, w, dx, b, ws, beta)


class BackwardFilter:
    """dW = beta*dW + G^T (sum over tiles of (A dY A^T) .* (B^T d B)) G."""

    def __init__(self, ctx, geom, splits=None, batch=16, tile=None, dtype="float32",
                 precision="fp32"):
        self.ctx, self.geom, self.splits = ctx, geom, splits
        out_hw = (geom.out_h, geom.out_w)
        self.t = _Tiles(ctx, out_hw, choose_tile(ctx, geom.in_c, geom.out_c, out_hw, batch, tile,
                                                 filter_pass=True, precision=precision,
                                                 kernel=geom.kh), geom.kh)
        self.precision = gemm_precision(precision, self.t.m, geom.kh)
        self.program = program.get(ctx, "conv_winograd", ACTIVATION="identity", BIAS=False,
                                   CPU=ctx.facts.is_cpu, ACT_T=cl_type(dtype),
                                   TILE=self.t.m, KERNEL=geom.kh)
        self.sums = {}
        self.sum_op(batch)

    def use_gemm(self):
        """Whether the filter sum runs on the batched Gemm (``tuning.WINOGRAD_FILTER_SUM``:
        "gemm", "split", or "auto": gemm unless the layer forces a split count)."""
        return not self.splits and tuning.WINOGRAD_FILTER_SUM != "split"

    def sum_op(self, batch):
        """dU[xi] = dM[xi] V[xi]^T: a batched GEMM over xi (tile from
        ``tuning.winograd_sum_tile``), or an (xi-grouped) 1x1 filter gradient over BT
        pixels with split-K."""
        if batch not in self.sums:
            g, e, bt = self.geom, self.t.elems, batch * self.t.tiles
            if self.use_gemm():
                tile = None if Gemm.on_tensor_cores(self.ctx, self.precision) else \
                    tuning.winograd_sum_tile(self.ctx.facts, g.in_c)
                self.sums[batch] = Gemm(self.ctx, g.out_c, g.in_c, bt, trans_b=True, batch=e,
                                        tile=tile, precision=self.precision)
            else:
                bt_geom = ConvGeometry(e * g.in_c, e * g.out_c, (1, bt), (1, 1), groups=e)
                self.sums[batch] = GemmBackwardFilter(
                    self.ctx, bt_geom, self.splits, batch=1,
                    min_chunk=tuning_launch.WINOGRAD_SUM_MIN_CHUNK)
        return self.sums[batch]

    def sizes(self, batch):
        g, bt, e = self.geom, batch * self.t.tiles, self.t.elems
        return e * g.in_c * bt, e * g.out_c * bt, e * g.out_c * g.in_c

    def workspace_bytes(self, batch):
        op = self.sum_op(batch)
        return 4 * sum(self.sizes(batch)) + (0 if isinstance(op, Gemm) else op.workspace_bytes(1))

    def launches(self, x, dy, dw, ws, beta):
        g, t, i32 = self.geom, self.t, np.int32
        batch = x.shape[0]
        bt = batch * t.tiles
        nv, nm, nu = self.sizes(batch)
        e = t.elems
        v = ws_view(ws, 0, nv).reshape(1, e * g.in_c, 1, bt)
        dm = ws_view(ws, 4 * nv, nm).reshape(1, e * g.out_c, 1, bt)
        du = ws_view(ws, 4 * (nv + nm), nu).reshape(e * g.out_c, g.in_c, 1, 1)
        rest = 4 * (nv + nm + nu)
        inner_ws = ws.view((ws.size - rest,), offset=rest)
        inp = t.launch(self.program, "winograd_input", g.in_c, batch,
                       [i32(g.in_c), i32(g.in_h), i32(g.in_w), i32(t.tiles_w), i32(t.tiles),
                        i32(bt), i32(g.pad[0]), i32(g.pad[1]), x, v])
        dyt = t.launch(self.program, "winograd_dy", g.out_c, batch,
                       [i32(g.out_c), i32(g.out_h), i32(g.out_w), i32(t.tiles_w), i32(t.tiles),
                        i32(bt), dy, dm])
        op = self.sum_op(batch)
        if isinstance(op, Gemm):
            sums = op.launches(dm, v, du, stride_a=g.out_c * bt, stride_b=g.in_c * bt,
                               stride_c=g.out_c * g.in_c)
        else:
            sums = op.launches(v, dm, du, inner_ws, 0.0)
        back = t.matrix_launch(self.program, "winograd_filter_grad", g.out_c, g.in_c,
                               [i32(g.out_c), i32(g.in_c), du, dw, np.float32(beta)])
        return [inp, dyt] + sums + [back]
