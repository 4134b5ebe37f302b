"""Implicit-GEMM convolution (``kernels/conv_gemm.cl``): the three directions.

Each direction is one tiled GEMM whose loads gather straight from the NCHW tensors; see
the template for the index algebra. Plain 1x1 layers run forward and backward-data on
``core/gemm.py`` (batched over images); their backward-filter sums over the batch, which
the implicit GEMM does in its reduction.
"""
import logging

import numpy as np

from ..dtypes import cl_type
from ..kernels import program
from ..tensor import Tensor, ws_view
from .copy import StridedCopy, fill_launches
from .conv_geometry import ConvGeometry, geometry_args, scalar
from . import tuning, tuning_launch
from .gemm import _SELF_TEST_TOLERANCE, MMA_KINDS, Gemm, memo_probe, tensor_cores
from .gemm_kernels import MMA_TYPES
from ..utils import ceil_div, round_up

__all__ = ["Forward", "BackwardData", "BackwardFilter", "ConvGemm", "conv_tensor_cores"]

log = logging.getLogger(__name__)
MODES = ("forward", "backward_data", "backward_filter")


class ConvGemm:
    """One implicit-GEMM direction (``mode``) for a geometry. Forward and backward-data
    pick their tiles per batch size (their N grows with it; ``tuning.conv_tile``, or
    ``tile`` forced: a dict of ``tuning.TILE_KEYS``); ``batch`` is the size whose kernels
    are built at once.

    Where the tiles alone leave the GPU half idle (small batches, deep layers), the
    reduction is split (split-K, ``split_plan``); the partial outputs go to the workspace
    and ``conv_split_reduce`` adds them up and applies beta, bias and the activation.

    ``precision`` "tf32", "fp16" or "bf16" runs the tile's products on tensor cores where the
    device has them (``conv_tensor_cores``; tiles ``tuning.conv_mma_tile``), else in
    float32; ``_mma``: on them without asking (the self-test's own kernels).
    """

    def __init__(self, ctx, geom, mode, bias=False, activation="identity", batch=16,
                 min_chunk=None, splits=None, tile=None, dtype="float32", precision="fp32",
                 _mma=False):
        self.ctx, self.geom, self.mode = ctx, geom, mode
        self.mma = ""
        if _mma or precision in MMA_KINDS and conv_tensor_cores(ctx, precision):
            if tile:
                raise ValueError("ConvGemm: the tensor-core kernel picks its own tile "
                                 "(tuning.conv_mma_tile)")
            self.mma = MMA_TYPES[precision]
        self.min_chunk = min_chunk or tuning_launch.CONV_MIN_CHUNK
        self.forced_splits = splits
        # per batch: forced, tuned or the table's, fixed once asked so that the workspace
        # size and the launches agree even if the tuning file changes in between
        self.tiles = {}
        self.forced_tile = tuning.check_tile(tile, ctx.facts, "conv") if tile else None
        self.baked, self.geom_args = geometry_args(ctx, geom)
        # strided backward-data runs per stride phase (see the template); on GPUs all
        # phases share one launch with their sizes baked in
        self.phased = (mode == "backward_data" and max(geom.sh, geom.sw) > 1
                       and geom.dh == geom.dw == 1)
        self.phase_table = self._phase_table() if self.phased else []
        self.merged = self.phased and self.baked is not None
        self.taps = self._taps()
        self.tile_k = self._tile_k()
        self.k_run, x_runs, self.n_run = self._runs(dtype)
        self.weights_copy = self._weights_copy()
        self.share = self._share()
        # the activations' storage (x, y, dy, dx); weights and their gradient are float
        self.params = dict(MODE=mode, BIAS=bool(bias), ACTIVATION=activation,
                           ACT_T=cl_type(dtype), GEOM_BAKED=self.baked, PHASES=self.phased,
                           MERGED=self.merged, MMA=self.mma, TAPS=self.taps,
                           K_RUN=self.k_run, X_RUNS=x_runs, N_RUN=self.n_run,
                           PHASE_LIST=tuple(self.phase_table) if self.merged else (),
                           MERGED_SWITCH_MAX=tuning.CONV_MERGED_SWITCH_MAX)
        self.bias = bool(bias)
        # what batch will launch, built now (or by a worker, in a Net's building_ahead)
        self.program(batch, self.split_plan(batch)[0] > 1, ahead=True)

    def _taps(self):
        """Whether the reduction runs tap-major (conv_gemm.cl TAPS): 16-bit products
        where ``tap_major`` says the layer suits it."""
        return self.mma in ("f16", "bf16") and tap_major(self.geom, self.mode, self.phased)

    def _runs(self, dtype):
        """(K_RUN, X_RUNS, N_RUN) of conv_gemm.cl, for tap-major layers whose activations
        are stored in the products' own 16-bit type: runs of the largest of 8, 4 and 2
        pixels that divides an image's. Backward-filter loads dy in runs of K (K_RUN),
        and x too where the layer is a stride-1 unpadded 1x1 (X_RUNS; else x's pixels
        gather one by one); forward and backward-data of such a 1x1 load B's columns in
        runs (N_RUN). (1, False, 1) elsewhere."""
        g = self.geom
        native = {"f16": "half", "bf16": "bfloat16"}.get(self.mma)
        if not (tuning.CONV_RUNS and self.taps and cl_type(dtype) == native):
            return 1, False, 1
        pixels = g.out_h * g.out_w
        run = next((r for r in (8, 4, 2) if pixels % r == 0), 1)
        plain = g.kh == g.kw == 1 and g.sh == g.sw == 1 and not any(g.pad)
        if self.mode == "backward_filter":
            return run, run > 1 and plain, 1
        return 1, False, run if plain else 1

    def _tile_k(self):
        """K staged per tile on tensor cores: ``tuning.CONV_MMA_DEEP_K`` for 16-bit
        products in backward-filter and tap-major layers whose channels pad little to it,
        else the tiles' own K."""
        shallow = tuning.CONV_MMA_TILES[0]["TILE_K"]
        if self.mma not in ("f16", "bf16") or not (self.taps or self.mode == "backward_filter"):
            return shallow
        deep = tuning.CONV_MMA_DEEP_K
        if self.mode != "backward_filter" and tuning.conv_taps_padding(
                tap_channels(self.geom, self.mode), deep) > tuning.CONV_TAPS_MAX_PADDING:
            return shallow
        return deep

    def _phase_table(self):
        """Per stride phase (ph, pw): the kernel's phase constants (ph, pw, ihp, iwp, r0,
        s0, rh, rw, qh, qw, taps); rh/rw are at least 1, taps = 0 where no tap reaches."""
        g = self.geom
        out = []
        for ph in range(g.sh):
            for pw in range(g.sw):
                ihp, iwp = ceil_div(g.in_h - ph, g.sh), ceil_div(g.in_w - pw, g.sw)
                if ihp <= 0 or iwp <= 0:
                    continue
                r0, s0 = (ph + g.pad[0]) % g.sh, (pw + g.pad[1]) % g.sw
                rh, rw = max(0, ceil_div(g.kh - r0, g.sh)), max(0, ceil_div(g.kw - s0, g.sw))
                qh, qw = (ph + g.pad[0] - r0) // g.sh, (pw + g.pad[1] - s0) // g.sw
                out.append((ph, pw, ihp, iwp, r0, s0, max(rh, 1), max(rw, 1), qh, qw, rh * rw))
        return out

    def _share(self):
        """The independent GEMMs, counted in work of the longest: groups, times the stride
        phases weighted by their taps (a 3x3 stride-2 layer's phases have 4, 2, 2 and 1,
        so its work-groups of the short phases finish early: 9/4 of one phase)."""
        if not self.phased:
            return self.geom.groups
        taps = [p[-1] for p in self.phase_table]
        return self.geom.groups * max(1.0, sum(taps) / max(max(taps), 1))

    def tile(self, batch):
        """The tile for ``batch``: forced, tuned, else the table's (``tuning.conv_tile``)."""
        if self.forced_tile:
            return self.forced_tile
        if batch not in self.tiles:
            m, n, _ = self.shape(batch)
            if self.mma:
                t = tuning.conv_mma_tile(self.ctx.facts, m, n, self.share)
                cg, narrow = self.geom.in_c // self.geom.groups, tuning.CONV_MMA_NARROW_N
                if self.taps and self.mode == "backward_filter" and \
                        tuning.conv_taps_padding(cg, t["TILE_N"]) > tuning.conv_taps_padding(cg, narrow):
                    t = dict(tuning.CONV_MMA_NARROW[t["TILE_M"]])  # pads its columns less
                self.tiles[batch] = dict(t, TILE_K=self.tile_k)
            else:
                self.tiles[batch] = tuning.conv_tile(self.ctx.facts, self.mode, m, n, self.share)
        return self.tiles[batch]

    def program(self, batch, split=False, ahead=False):
        """The program for ``batch``; ``split``: its GEMM writes raw partial sums;
        ``ahead``: only ask for it (``program.prefetch``: None)."""
        t = self.tile(batch)
        warps_m, warps_n = tuning.mma_warps(t) if self.mma else (0, 0)
        return program.get(self.ctx, "conv_gemm", ahead=ahead, TM=t["TILE_M"], TN=t["TILE_N"],
                           TK=t["TILE_K"], WM=t["BLOCK_M"], WN=t["BLOCK_N"],
                           WARPS_M=warps_m, WARPS_N=warps_n,
                           VEC=tuning.conv_vec(t, self.mode, self.dims(batch)[2]),
                           SPLIT=bool(split), **self.params)

    def dims(self, batch):
        """(m, n, k) of the GEMM as launched: tap-major ones with each tap's channels
        padded (conv_gemm.cl: CP, KP, CPN)."""
        m, n, k = self.shape(batch)
        if not self.taps:
            return m, n, k
        g = self.geom
        khw, tk = g.kh * g.kw, self.tile_k
        if self.mode == "backward_filter":
            return m, khw * round_up(g.in_c // g.groups, self.tile(batch)["TILE_N"]), k
        if self.phased:  # the phase with the most taps
            return m, n, max(p[-1] for p in self.phase_table) * round_up(g.out_c // g.groups, tk)
        return m, n, khw * round_up(k // khw, tk)

    def shape(self, batch):
        """(m, n, k) of the convolution's GEMM; for stride phases the largest n and k of
        any phase."""
        g = self.geom
        cg, kg, khw = g.in_c // g.groups, g.out_c // g.groups, g.kh * g.kw
        if self.mode == "forward":
            return kg, batch * g.out_h * g.out_w, cg * khw
        if self.mode == "backward_data" and self.phased:
            return (cg, batch * max(p[2] * p[3] for p in self.phase_table),
                    kg * max(p[-1] for p in self.phase_table))
        if self.mode == "backward_data":
            return cg, batch * g.in_h * g.in_w, kg * khw
        return kg, cg * khw, batch * g.out_h * g.out_w

    def phases(self, batch):
        """Per stride phase: its kernel arguments and (m, n, k)."""
        g = self.geom
        kg = g.out_c // g.groups
        if self.taps:  # each tap's channels padded (conv_gemm.cl: KP)
            kg = round_up(kg, self.tile_k)
        return [(list(p), (g.in_c // g.groups, batch * p[2] * p[3], kg * p[-1]))
                for p in self.phase_table]

    def out_layout(self):
        """(plane, channels) of the output tensor: bias index = (i / plane) % channels."""
        g = self.geom
        if self.mode == "forward":
            return g.out_h * g.out_w, g.out_c
        if self.mode == "backward_data":
            return g.in_h * g.in_w, g.in_c
        return 1, 1

    def out_size(self, batch):
        g = self.geom
        if self.mode == "forward":
            return int(np.prod(g.out_shape(batch)))
        if self.mode == "backward_data":
            return int(np.prod(g.in_shape(batch)))
        return int(np.prod(g.weight_shape))

    def split_plan(self, batch):
        """(splits, k_per_split) of the reduction: the forced count, else the split model
        (``tuning_launch.split_parts``: 'conv_filter' for backward-filter, else 'conv')."""
        m, n, k = self.dims(batch)
        t = self.tile(batch)
        k = max(k, 1)
        if self.forced_splits:
            splits = self.forced_splits
        else:
            work_groups = int(ceil_div(m, t["TILE_M"]) * ceil_div(n, t["TILE_N"]) * self.share)
            threads = (t["TILE_M"] // t["BLOCK_M"]) * (t["TILE_N"] // t["BLOCK_N"])
            out_bytes = 4 * self.out_size(batch)
            if self.phased:
                # phases no tap reaches (1x1 stride 2: three of four) still write every partial
                out_bytes *= len(self.phase_table) / max(1, sum(1 for p in self.phase_table
                                                                 if p[-1]))
            kind = "conv_filter" if self.mode == "backward_filter" else "conv"
            splits = tuning_launch.split_parts(self.ctx.facts, kind, k, work_groups, threads,
                                               self.geom.flops(batch), out_bytes, self.min_chunk)
        return tuning_launch.split_k(k, splits, t["TILE_K"])

    def _partials_bytes(self, batch):
        splits = self.split_plan(batch)[0]
        return 0 if splits == 1 else 4 * splits * self.out_size(batch)

    def _weights_copy(self):
        """Tap-major forward and backward-data read the weights as a 16-bit copy in their
        order, [OUT_C][KH KW][CP] with each tap's CG channels padded to CP (zeros): the
        StridedCopy that converts and reorders them, or None."""
        if not self.taps or self.mode == "backward_filter":
            return None
        g = self.geom
        khw, cg = g.kh * g.kw, g.in_c // g.groups
        self.weights_cp = round_up(cg, self.tile_k)
        # every value, the last tap's padding too (past the copy's own extent)
        self.weights_copy_size = g.out_c * khw * self.weights_cp
        return StridedCopy(self.ctx, (g.out_c, khw, cg), (cg * khw, 1, khw),
                           (khw * self.weights_cp, self.weights_cp, 1), np.float32,
                           "float16" if self.mma == "f16" else "bfloat16")

    def workspace_bytes(self, batch):
        partials = self._partials_bytes(batch)
        if self.weights_copy is None:
            return partials
        return round_up(partials, 256) + 2 * self.weights_copy_size

    def launches(self, batch, a, b, out, bias=None, beta=0.0, ws=None):
        """Every launch of this direction: the GEMM (one launch, or one per stride phase
        where phases are not merged) and, with split-K, the reduction of the partials;
        tap-major forward and backward-data first copy the weights (``a``) into their
        order, after the partials in the workspace."""
        splits, k_per_split = self.split_plan(batch)
        size = self.out_size(batch)
        copies = []
        if self.weights_copy is not None:
            copy = self.weights_copy
            w = ws_view(ws, round_up(self._partials_bytes(batch), 256), self.weights_copy_size,
                        copy.dst_dtype)
            if self.weights_cp > self.geom.in_c // self.geom.groups:
                copies += fill_launches(self.ctx, w, 0.0)  # the taps' padding
            copies += copy.launches(a, w)
            a = w
        dst = out if splits == 1 else ws_view(ws, 0, splits * size)
        kw = dict(splits=splits, k_per_split=k_per_split,
                  split_stride=size if splits > 1 else 0)
        if self.phased and not self.merged:
            gemms = copies + [self.launch(batch, a, b, dst, bias, beta=beta, phase=p, dims=d,
                                          **kw) for p, d in self.phases(batch)]
        else:
            gemms = copies + [self.launch(batch, a, b, dst, bias, beta=beta, **kw)]
        if splits == 1:
            return gemms
        plane, channels = self.out_layout()
        args = [np.int32(size), np.int32(splits), np.int32(plane), np.int32(channels), dst, out]
        if self.bias:
            args.append(bias)
        wg = tuning_launch.CONV_REDUCE_WG
        reduce = program.Launch(self.program(batch, True), "conv_split_reduce",
                                (round_up(size, wg),),
                                tuning_launch.gpu_local(self.ctx.facts, (wg,)),
                                args + [scalar(beta)])
        return gemms + [reduce]

    def launch(self, batch, a, b, out, bias=None, alpha=1.0, beta=0.0, splits=1,
               k_per_split=None, split_stride=0, phase=None, dims=None):
        t = self.tile(batch)
        tm, tn = t["TILE_M"], t["TILE_N"]
        m, n, k = dims or self.dims(batch)
        if k_per_split is None:
            k_per_split = max(k, 1)
        local = (tn // t["BLOCK_N"], tm // t["BLOCK_M"], 1)
        groups = self.geom.groups * splits * (len(self.phase_table) if self.merged else 1)
        gsize = (max(1, round_up(n, tn) // tn) * local[0],
                 round_up(m, tm) // tm * local[1], groups)
        args = [np.int32(batch)] + self.geom_args + [np.int32(splits), np.int32(k_per_split)]
        args += [np.int32(v) for v in phase or []]
        args += [a, b, out, np.uint64(split_stride)]
        if self.bias:
            args.append(bias)
        args += [scalar(alpha), scalar(beta)]
        return program.Launch(self.program(batch, splits > 1), "conv_gemm", gsize, local, args,
                              flops=self.geom.flops(batch))


def tap_channels(geom, mode):
    """The channels each tap of a tap-major ``mode`` pads: dy's (per group) in
    backward-data, x's otherwise."""
    return (geom.out_c if mode == "backward_data" else geom.in_c) // geom.groups


def tap_major(geom, mode, phased=None):
    """Whether ``mode`` of ``geom`` runs tap-major on 16-bit tensor cores: backward-data
    at stride 1 or per stride phase (``phased``: not dilated; by default as ConvGemm
    decides), and the channels each tap pads to the tile (K's 32; the filter gradient's
    TN, at least ``tuning.CONV_MMA_NARROW_N``) adding at most
    ``tuning.CONV_TAPS_MAX_PADDING`` of the work."""
    g = geom
    if phased is None:
        phased = mode == "backward_data" and max(g.sh, g.sw) > 1 and g.dh == g.dw == 1
    if mode == "backward_data" and (g.sh, g.sw) != (1, 1) and not phased:
        return False
    width = (tuning.CONV_MMA_NARROW_N if mode == "backward_filter"
             else tuning.CONV_MMA_TILES[0]["TILE_K"])
    return tuning.conv_taps_padding(tap_channels(g, mode), width) <= tuning.CONV_TAPS_MAX_PADDING


def tap_major_on_tensor_cores(ctx, geom, mode, precision):
    """Whether the implicit GEMM would run ``mode`` of ``geom`` tap-major on this
    device's tensor cores at ``precision``."""
    return (MMA_TYPES.get(precision) in ("f16", "bf16") and tap_major(geom, mode)
            and conv_tensor_cores(ctx, precision))


class _Plain1x1:
    """A 1x1, stride-1, pad-0 layer is a GEMM per image; the Gemm's strided batch runs
    them in one launch: forward y[b] = w @ x[b], backward-data dx[b] = w^T @ dy[b]."""

    def __init__(self, ctx, m, n, k, trans_a, bias, activation, precision="fp32",
                 dtype="float32"):
        self.ctx, self.shape, self.trans_a = ctx, (m, n, k), trans_a
        self.precision = precision
        self.dtypes = ("float32", dtype, dtype)  # w, then the activations
        self.bias, self.activation = "row" if bias else None, activation
        self.ops = {}
        self.op(1)  # build the kernels now

    def op(self, batch):
        if batch not in self.ops:
            m, n, k = self.shape
            self.ops[batch] = Gemm(self.ctx, m, n, k, trans_a=self.trans_a, bias=self.bias,
                                   activation=self.activation, batch=batch,
                                   precision=self.precision, dtypes=self.dtypes)
        return self.ops[batch]

    def workspace_bytes(self, batch):
        """The Gemm's workspace (split-K partials, TF32 operands packed) at ``batch``."""
        return 4 * self.op(batch).workspace_elements

    def launches(self, w, src, dst, b, beta, ws=None):
        m, n, k = self.shape
        op = self.op(src.shape[0])
        return op.launches(w, src, dst, bias=b, beta=beta, stride_a=0, stride_b=k * n,
                           stride_c=m * n, workspace=None if ws is None else op.workspace_in(ws))


class _DataDirection:
    """Forward or backward-data: the batched Gemm for plain 1x1 layers, else ConvGemm;
    ``splits`` forces the split-K count (tests); ``precision`` reaches either (tensor
    cores where the device has them); ``dtype``: the activations' storage."""
    mode = None

    def __init__(self, ctx, geom, bias=False, activation="identity", batch=16, splits=None,
                 precision="fp32", dtype="float32"):
        # 16-bit products on tensor cores: the tap-major implicit GEMM, one launch over
        # the whole batch, outruns the per-image GEMMs (docs/benchmarks.md)
        if geom.is_plain_1x1 and not tap_major_on_tensor_cores(ctx, geom, self.mode, precision):
            m, k = (geom.out_c, geom.in_c) if self.mode == "forward" else (geom.in_c, geom.out_c)
            self.op = _Plain1x1(ctx, m, geom.in_h * geom.in_w, k, self.mode != "forward",
                                bias, activation, precision, dtype)
        else:
            self.op = ConvGemm(ctx, geom, self.mode, bias, activation, batch, splits=splits,
                               dtype=dtype, precision=precision)

    def workspace_bytes(self, batch):
        return self.op.workspace_bytes(batch)

    def launches(self, src, w, dst, b, ws, beta):
        if isinstance(self.op, _Plain1x1):
            return self.op.launches(w, src, dst, b, beta, ws)
        return self.op.launches(src.shape[0], w, src, dst, b, beta=beta, ws=ws)


class Forward(_DataDirection):
    mode = "forward"


class BackwardData(_DataDirection):
    mode = "backward_data"


class BackwardFilter:
    """dW: the reduction runs over batch*pixels, so split-K is its usual way to fill the
    GPU; ``min_chunk`` is the shortest slice of it one work-group sums."""

    def __init__(self, ctx, geom, splits=None, batch=16, min_chunk=None, dtype="float32",
                 precision="fp32"):
        self.op = ConvGemm(ctx, geom, "backward_filter", batch=batch, min_chunk=min_chunk,
                           splits=splits, dtype=dtype, precision=precision)

    def split_plan(self, batch):
        """(splits, k_per_split) of the batch*pixels reduction."""
        return self.op.split_plan(batch)

    def workspace_bytes(self, batch):
        return self.op.workspace_bytes(batch)

    def launches(self, x, dy, dw, ws, beta):
        return self.op.launches(x.shape[0], dy, x, dw, beta=beta, ws=ws)


def conv_tensor_cores(ctx, precision):
    """Whether the implicit GEMM runs ``precision``'s products on tensor cores here: the
    GEMM's probe passes (``tensor_cores``) and each direction of a strided 3x3 layer,
    built with them, agrees with the float32 kernels (memoized per context; a build or
    numeric failure logs why and means "no", so the float32 kernels serve)."""
    return memo_probe(ctx, "_conv_tensor_cores", precision,
                      lambda ctx, p: tensor_cores(ctx, p) and _self_test(ctx, p))


def _self_test(ctx, precision):
    geom, batch = ConvGeometry(20, 72, (9, 11), (3, 3), (2, 2), (1, 1, 1, 1)), 2
    rng = np.random.default_rng(0)
    shapes = {"w": geom.weight_shape, "x": geom.in_shape(batch), "dy": geom.out_shape(batch)}
    data = {k: Tensor.from_numpy(ctx, rng.standard_normal(v).astype(np.float32))
            for k, v in shapes.items()}
    operands = {"forward": ("w", "x", "dy"), "backward_data": ("w", "dy", "x"),
                "backward_filter": ("dy", "x", "w")}
    try:
        for mode in MODES:
            a, b, out = operands[mode]
            got = []
            for op in (ConvGemm(ctx, geom, mode, batch=batch, precision=precision, _mma=True),
                       ConvGemm(ctx, geom, mode, batch=batch)):
                ws = Tensor(ctx, (max(1, op.workspace_bytes(batch)),), "uint8")
                y = Tensor(ctx, shapes[out])
                for launch in op.launches(batch, data[a], data[b], y, ws=ws):
                    launch(ctx.queue)
                got.append(y.numpy().astype(np.float64))
            err = np.abs(got[0] - got[1]).max() / np.abs(got[1]).max()
            if not np.isfinite(err) or err > _SELF_TEST_TOLERANCE[precision]:
                log.warning("tensor cores: the %s convolution self-test (%s) on %s failed "
                            "(relative error %.2g); its convolutions run in float32",
                            precision.upper(), mode, ctx.facts.name, err)
                return False
    except Exception as err:  # a build the driver refuses, or a failing launch
        log.warning("tensor cores: the %s convolution kernels do not run on %s (%s); its "
                    "convolutions run in float32", precision.upper(), ctx.facts.name,
                    str(err).splitlines()[0])
        return False
    return True
