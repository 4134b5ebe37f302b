"""GEMM: ``C = act(alpha * op(A) @ op(B) + beta * C + bias)`` in float32.

op(A) is M x K, op(B) is K x N, all matrices row-major with leading dimensions (row
pitches in elements); ``trans_a`` means A is stored K x M, ``trans_b`` that B is stored
N x K. ``batch`` > 1 runs strided batches: matrix b of X starts ``b * stride_x`` elements
after the first. The epilogue (alpha, beta, bias, activation) is fused into the kernel:
``bias="col"`` adds bias[n] to column n (C = X Wᵀ of an inner product), ``bias="row"``
adds bias[m] to row m (convolution as W · im2col). With ``beta == 0`` C is not read.
"""
import logging

import numpy as np

from ..dtypes import HALF_TYPES, as_dtype, bfloat16, bfloat16_values, cl_type, to_bfloat16
from ..kernels import program
from .activation import EPILOGUES
from .copy import StridedCopy
from .precision import HALF_STORAGE_TYPES, check_precision
from ..tensor import Tensor, ws_view
from . import gemm_autotune, tuning, tuning_launch
from ..utils import ceil_div, round_up

__all__ = ["Gemm", "gemm", "BIAS_MODES", "tensor_cores"]

BIAS_MODES = (None, "row", "col")
HALF_OR_FLOAT = (np.dtype(np.float32),) + HALF_TYPES  # what an operand may store
MMA_KINDS = ("tf32", "fp16", "bf16")  # the precisions with a tensor-core kernel (gemm_mma.cl)
# the template's MMA parameter of each: the operands' type on the tensor cores
MMA_TYPES = {"tf32": "tf32", "fp16": "f16", "bf16": "bf16"}
COPY_VALUES = 8  # 16-bit values in one 16-byte cp.async copy: rows must start at multiples


def _count(name, value):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        raise ValueError("Gemm: %s must be a non-negative integer, got %r" % (name, value))
    return int(value)


class Gemm:
    """A float32 GEMM for fixed M, N, K, transposes, bias mode, activation and batch.

    ``tile`` (dict, optional) overrides the tiling picked from the tuned results or the
    device table (keys in ``tuning.TILE_KEYS``). ``split_k`` (optional) cuts K into
    that many parts computed in parallel into a workspace and summed by a second kernel;
    by default GPUs split when C has too few tiles to occupy the device. ``precision``
    ("fp32", "tf32", "fp16" or "bf16"; ``core/precision.py``): all but "fp32" run the
    products on tensor cores (``kernels/gemm_mma.cl``: TF32, FP16 or BF16 operands) where
    the device has them, else the float32 kernels; A and B stored in the 16-bit type of
    "fp16" or "bf16" with rows starting 16-byte aligned have their tiles copied by
    cp.async (``copy_async``, where ``copies_async`` says the device takes it). On Hopper
    those tiles, and large TF32 products (packed K-major into the workspace first), run
    Hopper's warpgroup products (``kernels/gemm_wgmma.cl``, ``wgmma``); on Intel GPUs
    with ``cl_intel_subgroup_matrix_multiply_accumulate``, "fp16" and "bf16" products on
    operands stored in that type run ``kernels/gemm_subgroup_mma.cl`` (``subgroup_mma``).
    ``dtypes``: the storage of A, B and C (float32, or float16 or bfloat16 widened as it loads and
    rounded as C stores; the products and sums stay float32), on the tiled template
    (``tuning.half_tile``); the bias and the split-K workspace are float32. On CPUs
    (``tuning.CPU_HALF_AS_FLOAT``) 16-bit operands are copied to float32 first, and a
    16-bit C is computed in float32 and rounded as it is copied back, so the float32 CPU
    kernels run (``float_copies``).
    """

    def __init__(self, ctx, M, N, K, trans_a=False, trans_b=False, bias=None,
                 activation="identity", batch=1, tile=None, split_k=None, batch_sum=False,
                 precision="fp32", dtypes=None, b_scale=False, _mma=False, _copy_async=None,
                 _wgmma=None, _subgroup_mma=None):
        self.ctx = ctx
        self.precision = check_precision(precision, "Gemm: precision")
        self.dtypes = tuple(as_dtype(d) for d in (dtypes or (np.float32,) * 3))
        # int8 B: weights quantized per row of the stored B (a column of C), each row times
        # its float32 scale (b_scale); few rows only (gemv)
        self.b_scale = bool(b_scale)
        if self.b_scale != (len(self.dtypes) == 3 and self.dtypes[1] == np.int8):
            raise TypeError("Gemm: b_scale goes with an int8 B, and an int8 B with b_scale")
        if len(self.dtypes) != 3 or any(d not in HALF_OR_FLOAT for i, d in enumerate(self.dtypes)
                                        if not (i == 1 and self.b_scale)):
            raise TypeError("Gemm: dtypes must be 3 of float32, float16 and bfloat16 (A, B, "
                            "C; B int8 with b_scale), got %r" % (dtypes,))
        self.half = any(d in HALF_TYPES for d in self.dtypes)
        # the tensor-core kernel: TF32 products for "tf32", FP16 or BF16 for the others, where the probe
        # passes (_mma: without asking it, the probe's own test)
        self.mma = bool(_mma) or self.on_tensor_cores(ctx, precision)
        # tiles copied by cp.async (gemm_mma.cl ASYNC) where A and B store the 16-bit type
        # the products take (launches check their rows' alignment); _copy_async: without
        # asking the probe, its own test
        native = HALF_STORAGE_TYPES.get(self.precision)
        self.copy_async = (self.mma and tuning.MMA_COPY_ASYNC and native is not None
                           and self.dtypes[0] == self.dtypes[1] == as_dtype(native)
                           and (_copy_async if _copy_async is not None
                                else copies_async(ctx, self.precision)))
        # Hopper's warpgroup products (gemm_wgmma.cl) where the device takes them: for the
        # 16-bit tiles that cp.async copies, and for TF32 on float32 operands where M and N
        # are large enough to pay for packing them (tuning.wgmma_packs_pay); _wgmma:
        # without asking the probe or the size, its own test
        tf32_floats = (self.mma and self.precision == "tf32"
                       and self.dtypes[0] == self.dtypes[1] == np.float32)
        self.wgmma = ((self.copy_async or tf32_floats) and tuning.MMA_WARPGROUP
                      and (_wgmma if _wgmma is not None
                           else warpgroup_products(ctx, self.precision)
                           and (not tf32_floats or tuning.wgmma_packs_pay(M, N))))
        # Intel's subgroup matrix products (gemm_subgroup_mma.cl) for 16-bit operands stored
        # as they take them, where the device has them; _subgroup_mma: without asking
        self.subgroup_mma = (native is not None and not self.mma
                             and self.dtypes[0] == self.dtypes[1] == as_dtype(native)
                             and (_subgroup_mma if _subgroup_mma is not None
                                  else subgroup_matrix_products(ctx, self.precision)))
        self.float_copies = (self.half and not self.mma and not self.subgroup_mma
                             and ctx.facts.is_cpu
                             and tuning.CPU_HALF_AS_FLOAT)
        # what the kernels read and write: float32 where the operands travel as copies
        self.kernel_dtypes = (np.dtype(np.float32),) * 3 if self.float_copies else self.dtypes
        self.kernel_half = self.half and not self.float_copies
        self._copies = {}  # float32 copies of 16-bit operands (float_copies), by operand
        if (self.mma or self.subgroup_mma) and tile:
            raise ValueError("Gemm: the tensor-core kernels have their own tiles "
                             "(tuning.mma_tile, tuning.subgroup_mma_tile)")
        self.M, self.N, self.K = _count("M", M), _count("N", N), _count("K", K)
        if max(self.M, self.N, self.K) >= 2 ** 31:
            raise ValueError("Gemm: M, N and K must be under 2^31, got %d, %d, %d"
                             % (self.M, self.N, self.K))
        self.batch = _count("batch", batch)
        self.trans_a, self.trans_b = bool(trans_a), bool(trans_b)
        if bias not in BIAS_MODES:
            raise ValueError("Gemm: bias must be None, 'row' or 'col', got %r" % (bias,))
        # a few rows (a decoder's step) on a GPU, or over an int8 or bfloat16 B anywhere:
        # one launch streaming B (kernels/gemv.cl)
        # (float16 not on CPUs: they decode its bits in integer arithmetic, slower than
        # the float32 copy the CPU kernels read)
        self.gemv = (tuning.gemv_rows(ctx.facts, self.M, self.dtypes[1] in (np.int8, bfloat16))
                     and self.trans_b and not self.trans_a and not tile and split_k is None
                     and not batch_sum)
        if self.gemv:  # (it reads every storage itself: no float32 copies, no tensor cores)
            self.float_copies, self.kernel_dtypes = False, self.dtypes
            self.kernel_half = self.half
        elif self.b_scale:
            raise ValueError("Gemm: an int8 B takes at most %d rows of A with B transposed "
                             "(tuning.GEMV_MAX_ROWS), got M=%d%s" % (
                                 tuning.GEMV_MAX_ROWS, self.M,
                                 "" if self.trans_b else " and B not transposed"))
        if activation not in EPILOGUES:
            raise ValueError("Gemm: unknown activation %r; known: %s"
                             % (activation, ", ".join(EPILOGUES)))
        self.bias, self.activation = bias, activation
        self.tile = (tuning.half_tile if self.kernel_half else tuning.pick_tile)(
            ctx.facts, self.M, self.N, self.batch)
        # measured for this very shape where autotuning is on (float32 on a GPU)
        if not tile and split_k is None and self.batch == 1 and ctx.facts.is_gpu and \
                not self.gemv and \
                min(self.M, self.N, self.K) > 0 and not (self.mma or self.subgroup_mma or self.half) and gemm_autotune.autotuning():
            tile, split_k = gemm_autotune.tuned_choice(
                ctx, self.M, self.N, self.K, self.trans_a, self.trans_b,
                lambda tile: Gemm(ctx, M, N, K, trans_a, trans_b, tile=tile)) or (None, None)
        # whole waves of one-per-compute-unit tiles where that is predicted faster
        planned = None if tile or split_k is not None or self.mma or self.subgroup_mma else \
            tuning.wave_plan(ctx.facts, self.M, self.N, self.K, self.batch, self.trans_b)
        if planned:
            self.tile, split_k = planned
        if self.mma:
            self.tile = tuning.mma_tile(self.precision, self.M, self.N)
        if self.subgroup_mma:
            self.tile = tuning.subgroup_mma_tile(subgroup_mma_size(ctx))
        if tile:
            self.tile = tuning.check_tile(dict(self.tile, **tile), ctx.facts)
            if self.kernel_half and tuning.gemm_kernel(self.tile) != "gemm":
                raise ValueError("Gemm: half and bfloat16 operands run on the tiled template only "
                                 "(VEC 1 or 4), got tile %r" % (self.tile,))
        self.small_m = tuning.gemm_small_m(self.tile, self.M) and split_k is None and not tile \
            and not planned
        self.splits, self.k_chunk = (1, self.K) if self.small_m or self.gemv else \
            self._split(split_k)
        self.batch_sum = bool(batch_sum)
        if self.batch_sum and not self.batch_summable(ctx, M, trans_b):
            raise ValueError("Gemm: batch_sum (C = the sum of the batch's products) needs the "
                             "few-rows CPU kernel with a transposed B; see Gemm.batch_summable")
        self.pack_b = tuning.pack_b(self.tile, self.M) and self.K > 0
        self.pack_a = tuning.pack_a(self.tile, self.M, self.trans_a) and self.K > 0
        self._workspace = self._packed_b = self._packed_a = None
        if self.gemv:  # build now the variant packed operands use
            self._gemv_program(4 if self.K % 4 == 0 else 1)
            return
        # build now the variant that packed, aligned operands use
        copies = self.copy_async and all(
            self._aligned(self._packed(x), 0, 0, COPY_VALUES) for x in "ab")
        self._program(*(self._aligned(self._packed(x), 0, 0) for x in "abc"),
                      copy_async=copies, wgmma=self._warpgroup(copies))

    @staticmethod
    def on_tensor_cores(ctx, precision):
        """Whether a Gemm of ``precision`` runs the tensor-core kernel on ``ctx`` (which
        has its own tile: a ``tile`` given with it is an error)."""
        return precision in MMA_KINDS and tensor_cores(ctx, precision)

    @staticmethod
    def few_rows(ctx, M, N=1):
        """Whether a GEMM of M rows runs on the few-rows CPU kernel (``gemm_small_m``):
        CPU devices, M under ``tuning.CPU_PACK_MIN_M``."""
        return tuning.gemm_small_m(tuning.pick_tile(ctx.facts, M, N), M)

    @staticmethod
    def reads_int8(ctx, M):
        """Whether a Gemm of M rows with B transposed takes an int8 B (``b_scale``): the
        few-rows kernel; more rows take it widened to float32 first."""
        return tuning.gemv_rows(ctx.facts, M, typed_b=True)

    @staticmethod
    def batch_summable(ctx, M, trans_b):
        """Whether ``batch_sum=True`` is available: the few-rows kernel, a transposed B."""
        return bool(trans_b) and Gemm.few_rows(ctx, M)

    def _split(self, split_k):
        """(parts, k per part) for split-K; (1, K) when K is not split."""
        t = self.tile
        if split_k is not None:
            parts = _count("split_k", split_k)
            if parts < 1:
                raise ValueError("Gemm: split_k must be at least 1, got %d" % parts)
        else:
            tiles = ceil_div(self.M, t["TILE_M"]) * ceil_div(self.N, t["TILE_N"]) * self.batch
            threads = (t["TILE_M"] // t["BLOCK_M"]) * (t["TILE_N"] // t["BLOCK_N"])
            parts = tuning_launch.split_parts(self.ctx.facts, "gemm", self.K, tiles, threads,
                                              few_rows=min(self.M, self.N) <= tuning.SMALL)
        if parts <= 1 or self.K == 0:
            return 1, self.K
        return tuning_launch.split_k(self.K, parts, t["TILE_K"])

    # ----- facts about the operands
    def _packed(self, which):
        """The leading dimension of a packed operand: its stored row length."""
        if which == "a":
            return self.M if self.trans_a else self.K
        if which == "b":
            return self.K if self.trans_b else self.N
        return self.N

    def _rows_cols(self, which):
        if which == "a":
            return (self.K, self.M) if self.trans_a else (self.M, self.K)
        if which == "b":
            return (self.N, self.K) if self.trans_b else (self.K, self.N)
        return self.M, self.N

    def _aligned(self, ld, offset, stride, values=4):
        """Whether every row of every batch entry starts at a multiple of ``values``
        elements: 4 for float4 loads, 8 for the 16-byte copies of 16-bit values."""
        return int(ld % values == 0 and offset % values == 0
                   and (self.batch <= 1 or stride % values == 0))

    def _warpgroup(self, copy_async):
        """Whether a launch runs gemm_wgmma.cl: 16-bit tiles that cp.async copies (aligned
        rows), or any TF32 product (packed as it needs)."""
        return self.wgmma and (copy_async or self.precision == "tf32")

    def _program(self, aligned_a, aligned_b, aligned_c, epilogue=True, copy_async=False,
                 wgmma=False):
        """The built kernels; with epilogue=False the split-K first pass (plain alpha * acc);
        copy_async: the tensor-core kernel's cp.async copies (16-byte aligned rows);
        wgmma: Hopper's warpgroup products (TF32: on operands packed K-major)."""
        bias, act = (self.bias or "none", self.activation) if epilogue else ("none", "identity")
        if wgmma:
            t = self.tile
            tf32 = self.precision == "tf32"
            return program.get(self.ctx, "gemm_wgmma", TRANS_A=0 if tf32 else int(self.trans_a),
                               TRANS_B=1 if tf32 else int(self.trans_b), BIAS=bias,
                               ACTIVATION=act, TILE_M=t["TILE_M"], TILE_N=t["TILE_N"],
                               TILE_K=16 if tf32 else 32, GROUP=t["GROUP"],
                               WARPGROUPS=t["TILE_M"] // 64, STAGES=tuning.WGMMA_STAGES,
                               **self._types(epilogue), MMA=MMA_TYPES[self.precision])
        if self.subgroup_mma:
            t = self.tile
            return program.get(self.ctx, "gemm_subgroup_mma", TRANS_A=int(self.trans_a),
                               TRANS_B=int(self.trans_b), BIAS=bias, ACTIVATION=act,
                               TILE_M=t["TILE_M"], TILE_N=t["TILE_N"], GROUP=t["GROUP"],
                               SUBGROUP=subgroup_mma_size(self.ctx), KIND=MMA_TYPES[self.precision],
                               **self._types(epilogue))
        if self.mma:
            t = self.tile
            warps_m, warps_n = tuning.mma_warps(t)
            staging = (dict(ASYNC=1, STAGES=tuning.MMA_ASYNC_STAGES) if copy_async
                       else dict(STAGES=tuning.MMA_STAGES))
            return program.get(self.ctx, "gemm_mma", TRANS_A=int(self.trans_a),
                               TRANS_B=int(self.trans_b), BIAS=bias, ACTIVATION=act,
                               ALIGNED_A=aligned_a, ALIGNED_B=aligned_b, TILE_M=t["TILE_M"],
                               TILE_N=t["TILE_N"], TILE_K=t["TILE_K"], GROUP=t["GROUP"],
                               WARPS_M=warps_m, WARPS_N=warps_n, **staging,
                               **self._types(epilogue), MMA=MMA_TYPES.get(self.precision, "tf32"))
        # half operands always have a tile of the tiled template (tuning.half_tile)
        if self.small_m:
            return program.get(self.ctx, "gemm_cpu", TRANS_A=int(self.trans_a),
                               TRANS_B=int(self.trans_b), BIAS=bias, ACTIVATION=act,
                               SMALL_M=min(self.M, tuning.CPU_SMALL_M_BLOCK),
                               SMALL_N=tuning.cpu_small_n(self.trans_b), PACK_B=0, PACK_A=0, PACK_K=0,
                               SUM_BATCH=int(self.batch_sum),
                               **self.tile)
        if tuning.gemm_kernel(self.tile) == "gemm_cpu":  # unaligned loads cost no more there
            return program.get(self.ctx, "gemm_cpu", TRANS_A=int(self.trans_a),
                               TRANS_B=int(self.trans_b), BIAS=bias, ACTIVATION=act,
                               PACK_B=int(self.pack_b), PACK_A=int(self.pack_a), SMALL_M=0, SMALL_N=0,
                               SUM_BATCH=0,
                               PACK_K=tuning.CPU_PACK_K, **self.tile)
        return program.get(self.ctx, "gemm", TRANS_A=int(self.trans_a), TRANS_B=int(self.trans_b),
                           BIAS=bias, ACTIVATION=act,
                           ALIGNED_A=aligned_a, ALIGNED_B=aligned_b,
                           ALIGNED_C=aligned_c if self.tile["VEC"] == 4 else 0,
                           **self._types(epilogue), **self.tile)

    def _types(self, epilogue=True):
        """The templates' A_T, B_T, C_T where an operand is half (none where all are float32,
        so those programs keep their cache entries); C is the float32 workspace in split-K's
        first pass (``epilogue=False``)."""
        if not self.kernel_half:
            return {}
        a_t, b_t, c_t = (cl_type(d) for d in self.kernel_dtypes)
        return dict(A_T=a_t, B_T=b_t, C_T=c_t if epilogue else "float")

    def _reduce_program(self):
        c_t = self.kernel_dtypes[2]
        extra = dict(C_T=cl_type(c_t)) if c_t in HALF_TYPES else {}
        return program.get(self.ctx, "gemm_reduce", BIAS=self.bias or "none",
                           ACTIVATION=self.activation, **extra)

    @property
    def flops(self):
        """Floating-point operations of one call: 2 M N K per batch entry."""
        return 2 * self.M * self.N * self.K * self.batch

    # ----- checks
    def _check_operand(self, which, t, ld, stride):
        name = which.upper()
        if not isinstance(t, Tensor):
            raise TypeError("Gemm: %s must be a dlprim Tensor, got %s" % (name, type(t).__name__))
        want = self.dtypes["abc".index(which)]
        if t.dtype != want:
            raise TypeError("Gemm: %s must be %s, got %s" % (name, want, t.dtype))
        rows, cols = self._rows_cols(which)
        ld = self._packed(which) if ld is None else ld
        ld = _count("ld" + which, ld)
        stride = _count("stride_" + which, stride)
        if rows and cols and ld < cols:
            raise ValueError("Gemm: ld%s=%d is less than the %d columns of stored %s (%d x %d)"
                             % (which, ld, cols, name, rows, cols))
        # the kernel offsets the loads inside one tile (span rows of ld) in 32-bit ints
        span = max(self.tile["TILE_M"], self.tile["TILE_N"], self.tile["TILE_K"])
        if which != "c" and ld * span >= 2 ** 31:
            raise ValueError("Gemm: ld%s=%d is too large (the kernel needs ld * %d < 2^31)"
                             % (which, ld, span))
        batch = 1 if which == "c" and self.batch_sum else self.batch  # one C for the sum
        if rows and cols and batch:
            need = (batch - 1) * stride + (rows - 1) * ld + cols
            if t.size < need:
                raise ValueError("Gemm: %s has %d elements, %s (%d x %d, ld%s=%d, batch=%d, "
                                 "stride_%s=%d) needs %d" % (name, t.size, name, rows, cols, which,
                                                             ld, batch, which, stride, need))
            if which == "c" and batch > 1 and stride < (rows - 1) * ld + cols:
                raise ValueError("Gemm: stride_c=%d makes the %d output matrices overlap"
                                 % (stride, self.batch))
        return ld, stride

    def _check_workspace(self, W):
        if not isinstance(W, Tensor) or W.dtype != np.float32:
            raise TypeError("Gemm: the workspace must be a float32 dlprim Tensor, got %r" % (W,))
        if W.size < self.workspace_elements:
            raise ValueError("Gemm: the workspace has %d elements, this product needs %d (see "
                             "workspace_elements)" % (W.size, self.workspace_elements))
        if W.offset % 4:
            raise ValueError("Gemm: the workspace must start 16-byte aligned (offset %d elements)"
                             % W.offset)
        return W

    def _check_bias(self, bias):
        if self.bias is None:
            if bias is not None:
                raise ValueError("Gemm: a bias tensor was given but the Gemm was built with bias=None")
            return None
        if not isinstance(bias, Tensor):
            raise ValueError("Gemm: bias=%r needs a bias Tensor" % self.bias)
        if bias.dtype != np.float32:
            raise TypeError("Gemm: bias must be float32, got %s" % bias.dtype)
        want = self.M if self.bias == "row" else self.N
        if bias.size != want or bias.ndim > 2 or max(bias.shape, default=1) != want:
            raise ValueError("Gemm: bias (%s) must hold %d values (one per %s), got shape %s"
                             % (self.bias, want, "row m" if self.bias == "row" else "column n",
                                bias.shape))
        return bias

    # ----- launching
    @property
    def workspace_elements(self):
        """float32 elements of the split-K partial sums and of TF32 warpgroup products'
        operands packed K-major (0 where neither is needed); a caller that plans memory
        passes that much as ``workspace``, else the Gemm keeps its own."""
        return self._partials_elements + sum(self._k_major_elements())

    @property
    def _partials_elements(self):
        if self.splits == 1 or self.M == 0 or self.N == 0:
            return 0
        return self.batch * self.splits * round_up(self.M * self.N, 4)

    def _k_major_elements(self):
        """float32 elements of A and B packed K-major for TF32 warpgroup products (rows of
        K padded to 16 bytes; one per batch entry), else (0, 0)."""
        if not (self.wgmma and self.precision == "tf32") or 0 in (self.M, self.N, self.K):
            return 0, 0
        ldk = round_up(self.K, 4)
        return self.batch * self.M * ldk, self.batch * self.N * ldk

    def workspace_in(self, ws, byte_offset=0):
        """The workspace as a view ``byte_offset`` bytes into a layer's uint8 workspace
        ``ws``; None where the launches need none."""
        count = self.workspace_elements
        return ws_view(ws, byte_offset, count) if count else None

    @property
    def packed_b_elements(self):
        """Elements of op(B) packed into strips for one batch entry (see ``b_packed``)."""
        return ceil_div(self.N, self.tile["BLOCK_N"]) * self.K * self.tile["BLOCK_N"]

    def launches(self, A, B, C, bias=None, alpha=1.0, beta=0.0, lda=None, ldb=None, ldc=None,
                 stride_a=0, stride_b=0, stride_c=0, b_packed=False, workspace=None,
                 b_scale=None):
        """C = act(alpha * op(A) op(B) + bias + beta * C) over the given tensors, with leading
        dimensions and batch strides in elements (None: packed); checked before anything is built.

        ``b_packed``: B already holds op(B) as ``gemm_pack_b`` lays it out (strips of
        BLOCK_N columns, each K x BLOCK_N, zero past N; ``packed_b_elements`` per batch
        entry, one after another), as a producer such as im2col can write it; only for a
        GEMM that packs (``pack_b``). ``workspace``: a float32 tensor of at least
        ``workspace_elements`` for the split-K partial sums (None: the Gemm's own).
        """
        lda, stride_a = self._check_operand("a", A, lda, stride_a)
        if b_packed:
            if not self.pack_b:
                raise ValueError("Gemm: b_packed needs a GEMM that packs B (pack_b)")
            if not isinstance(B, Tensor) or B.dtype != np.float32:
                raise TypeError("Gemm: a packed B must be a float32 dlprim Tensor")
            if B.size < self.batch * self.packed_b_elements:
                raise ValueError("Gemm: the packed B has %d elements, %d are needed"
                                 % (B.size, self.batch * self.packed_b_elements))
            ldb, stride_b = self.tile["BLOCK_N"], self.packed_b_elements
        else:
            ldb, stride_b = self._check_operand("b", B, ldb, stride_b)
        ldc, stride_c = self._check_operand("c", C, ldc, stride_c)
        bias = self._check_bias(bias)
        if self.M == 0 or self.N == 0 or self.batch == 0:
            return []
        operands = (A, B, C, bias, alpha, beta, lda, ldb, ldc, stride_a, stride_b, stride_c,
                    b_packed, workspace)
        if self.b_scale:
            if not isinstance(b_scale, Tensor) or b_scale.dtype != np.float32 or \
                    b_scale.size != self.N:
                raise ValueError("Gemm: an int8 B needs b_scale, a float32 Tensor of N = %d "
                                 "scales" % self.N)
        elif b_scale is not None:
            raise ValueError("Gemm: b_scale given to a Gemm built without it")
        if self.gemv:
            return self._gemv_launches(*operands[:12], b_scale)
        if self.float_copies:
            return self._float_copy_launches(*operands)
        return self._launches(*operands)

    def _gemv_program(self, vec):
        """(program, work-group size, columns of C a work-group) of the few-rows kernel:
        on GPUs ``gemv``, teams of 32 work-items a column, eight teams a group, float4
        loads where ``vec`` is 4; on CPUs ``gemv_cpu``, two columns a work-item in float8
        vectors (their compilers would otherwise vectorize across work-items, gathering
        a row each), VEC unused."""
        if self.ctx.facts.is_gpu:
            team, teams, cols = 32, max(1, min(8, self.ctx.facts.max_work_group // 32)), 1
        else:
            team, teams, cols, vec = 1, 1, 2, 0
        types = {} if all(d == np.float32 for d in self.dtypes) else \
            dict(zip(("A_T", "B_T", "C_T"), (cl_type(d) for d in self.dtypes)))
        prg = program.get(self.ctx, "gemv", ROWS=program.pow2_at_least(self.M), VEC=vec,
                          TEAMS=teams, BIAS=self.bias or "none", ACTIVATION=self.activation,
                          SCALE=int(self.b_scale), TEAM=team, COLS=cols, **types)
        return prg, team * teams, teams * cols

    def _gemv_launches(self, A, B, C, bias, alpha, beta, lda, ldb, ldc, stride_a, stride_b,
                       stride_c, b_scale=None):
        """The few-rows kernel over checked operands, one launch."""
        i32, u64, f32 = np.int32, np.uint64, np.float32
        vec = 4 if (self.K % 4 == 0 and self._aligned(lda, A.offset, stride_a)
                    and self._aligned(ldb, B.offset, stride_b)) else 1
        prg, size, cols = self._gemv_program(vec)
        bias_args = bias.kernel_args if bias is not None else (C.buffer, u64(0))
        scale_args = b_scale.kernel_args if b_scale is not None else (C.buffer, u64(0))
        args = [i32(self.M), i32(self.N), i32(self.K), A, i32(lda), u64(stride_a), B, i32(ldb),
                u64(stride_b), C, i32(ldc), u64(stride_c), *bias_args, *scale_args,
                f32(alpha), f32(beta)]
        name = "gemv" if self.ctx.facts.is_gpu else "gemv_cpu"
        return [program.Launch(prg, name, (ceil_div(self.N, cols) * size, self.batch),
                               (size, 1), args, flops=self.flops)]

    def _float_copy_launches(self, A, B, C, bias, alpha, beta, lda, ldb, ldc, stride_a,
                             stride_b, stride_c, b_packed, workspace):
        """The float32 kernels on float32 copies of the 16-bit operands (packed: ld =
        columns), C through a float32 copy rounded back into it."""
        out, args = [], {}
        for which, t, ld, stride in (("a", A, lda, stride_a), ("b", B, ldb, stride_b)):
            if t.dtype != np.float32:
                rows, cols = self._rows_cols(which)
                count = self.batch if stride else 1  # a shared operand is copied once
                held = self._float_copy(which, count * rows * cols)
                out += StridedCopy(self.ctx, (count, rows, cols), (stride, ld, 1),
                                   (rows * cols, cols, 1), t.dtype, np.float32).launches(t, held)
                t, ld, stride = held, cols, rows * cols if stride else 0
            args[which] = (t, ld, stride)
        (A, lda, stride_a), (B, ldb, stride_b) = args["a"], args["b"]
        if C.dtype == np.float32:
            return out + self._launches(A, B, C, bias, alpha, beta, lda, ldb, ldc, stride_a,
                                        stride_b, stride_c, b_packed, workspace)
        count = 1 if self.batch_sum else self.batch
        shape, own = (count, self.M, self.N), (stride_c, ldc, 1)
        packed = (self.M * self.N, self.N, 1)
        C32 = self._float_copy("c", count * self.M * self.N)
        if beta != 0.0:  # the sum reads C
            out += StridedCopy(self.ctx, shape, own, packed, C.dtype, np.float32).launches(C, C32)
        out += self._launches(A, B, C32, bias, alpha, beta, lda, ldb, self.N, stride_a,
                              stride_b, self.M * self.N, b_packed, workspace)
        return out + StridedCopy(self.ctx, shape, packed, own, np.float32, C.dtype).launches(C32, C)

    def _float_copy(self, which, size):
        """The float32 copy of operand ``which`` (a, b or c), at least ``size`` elements,
        kept by the Gemm from call to call."""
        held = self._copies.get(which)
        if held is None or held.size < size:
            held = self._copies[which] = Tensor(self.ctx, (size,))
        return held

    def _launches(self, A, B, C, bias, alpha, beta, lda, ldb, ldc, stride_a, stride_b, stride_c,
                  b_packed, workspace):
        """The launches on checked operands the kernels read as they are."""
        i32, u64, f32 = np.int32, np.uint64, np.float32
        bias_args = bias.kernel_args if bias is not None else (C.buffer, u64(0))
        aligned_ab = (self._aligned(lda, A.offset, stride_a), self._aligned(ldb, B.offset, stride_b))
        copy_async = (self.copy_async and self._aligned(lda, A.offset, stride_a, COPY_VALUES)
                      and self._aligned(ldb, B.offset, stride_b, COPY_VALUES))
        t = self.tile
        pack = []
        if self.pack_b and not b_packed:  # op(B) -> strips of BLOCK_N columns (kernels/gemm_cpu.cl)
            strips = ceil_div(self.N, t["BLOCK_N"])
            if self._packed_b is None:
                self._packed_b = Tensor(self.ctx, (self.batch * strips * self.K * t["BLOCK_N"],))
            prg = self._program(*aligned_ab, 0)
            pack = [program.Launch(prg, "gemm_pack_b",
                                   (strips if self.trans_b else ceil_div(strips, 16),
                                    ceil_div(self.K, tuning.CPU_PACK_K), self.batch), (1, 1, 1),
                                   [i32(self.N), i32(self.K), B, i32(ldb), u64(stride_b),
                                    self._packed_b])]
            B, ldb, stride_b = self._packed_b, t["BLOCK_N"], strips * self.K * t["BLOCK_N"]
        if self.pack_a:  # a transposed A -> strips of BLOCK_M rows (kernels/gemm_cpu.cl)
            strips = ceil_div(self.M, t["BLOCK_M"])
            copies = self.batch if stride_a else 1  # a shared A is packed once
            if self._packed_a is None:
                self._packed_a = Tensor(self.ctx, (copies * strips * self.K * t["BLOCK_M"],))
            pack.append(program.Launch(
                self._program(*aligned_ab, 0), "gemm_pack_a",
                (ceil_div(strips, 16), ceil_div(self.K, tuning.CPU_PACK_K), copies), (1, 1, 1),
                [i32(self.M), i32(self.K), A, i32(lda), u64(stride_a), self._packed_a]))
            A, lda = self._packed_a, t["BLOCK_M"]
            stride_a = strips * self.K * t["BLOCK_M"] if stride_a else 0
        if self.small_m:
            args = [i32(self.M), i32(self.N), i32(self.K), A, i32(lda), u64(stride_a),
                    B, i32(ldb), u64(stride_b), C, i32(ldc), u64(stride_c), *bias_args,
                    f32(alpha), f32(beta), i32(self.batch)]
            items = ceil_div(self.N, tuning.cpu_small_n(self.trans_b))
            return pack + [program.Launch(self._program(0, 0, 0), "gemm_small_m",
                                          (items, 1 if self.batch_sum else self.batch), (1, 1),
                                          args, flops=self.flops)]
        W = None
        if self.workspace_elements:
            if workspace is not None:
                W = self._check_workspace(workspace)
            else:
                if self._workspace is None:
                    self._workspace = Tensor(self.ctx, (self.workspace_elements,))
                W = self._workspace
        wg_m, wg_n = t["TILE_M"] // t["BLOCK_M"], t["TILE_N"] // t["BLOCK_N"]
        wgmma = self._warpgroup(copy_async)
        if wgmma:  # warpgroups of 4 warps, one per 64 rows of the tile
            wg_m, wg_n = t["TILE_M"] // 16, 32
            if self.precision == "tf32" and self.K:
                size_a, size_b = self._k_major_elements()
                at = self._partials_elements
                pack_a, A, lda, stride_a = self._k_major("a", A, lda, stride_a, W, at)
                pack_b, B, ldb, stride_b = self._k_major("b", B, ldb, stride_b, W, at + size_a)
                pack += pack_a + pack_b
                aligned_ab = (1, 1)
        gsize = (ceil_div(self.N, t["TILE_N"]) * wg_n, ceil_div(self.M, t["TILE_M"]) * wg_m,
                 self.batch * self.splits)
        head = [i32(self.M), i32(self.N), i32(self.K), i32(self.k_chunk), i32(self.splits),
                A, i32(lda), u64(stride_a), B, i32(ldb), u64(stride_b)]
        if self.splits == 1:
            prg = self._program(*aligned_ab, self._aligned(ldc, C.offset, stride_c),
                                copy_async=copy_async, wgmma=wgmma)
            args = head + [C, i32(ldc), u64(stride_c), *bias_args, f32(alpha), f32(beta)]
            return pack + [program.Launch(prg, "gemm", gsize, (wg_n, wg_m, 1), args,
                                          flops=self.flops)]
        # split-K: partial products into the workspace, then sum + epilogue into C
        part = round_up(self.M * self.N, 4)  # keeps every part 16-byte aligned
        first = self._program(*aligned_ab, self._aligned(self.N, 0, part), epilogue=False,
                              copy_async=copy_async, wgmma=wgmma)
        args = head + [W, i32(self.N), u64(part), W.buffer, u64(0), f32(alpha), f32(0)]
        reduce_args = [i32(self.M), i32(self.N), i32(self.splits), W, u64(part),
                       C, i32(ldc), u64(stride_c), *bias_args, f32(beta)]
        return pack + [program.Launch(first, "gemm", gsize, (wg_n, wg_m, 1), args, flops=self.flops),
                program.Launch(self._reduce_program(), "gemm_reduce",
                               (round_up(self.N, 32), round_up(self.M, 4),
                                self.batch), (32, 4, 1), reduce_args)]

    def _k_major(self, which, X, ld, stride, W, at):
        """TF32 warpgroup products read A and B K-major, rounded to TF32 and with 16-byte
        aligned rows: the launch that packs operand ``which`` so into the workspace ``W``
        from element ``at`` on, and the operand as the product then reads it (tensor,
        leading dimension, batch stride). Rounding each value once here costs a pass over
        the operand; rounding it in the kernel costs every work-group that reads it."""
        k_major = not self.trans_a if which == "a" else self.trans_b
        D = self.M if which == "a" else self.N
        ldk = round_up(self.K, 4)
        copies = self.batch if stride else 1  # a shared operand is packed once
        packed = Tensor(self.ctx, (copies * D * ldk,), buffer=W.buffer, offset=W.offset + at)
        packed._owner = W
        i32, u64 = np.int32, np.uint64
        launch = program.Launch(
            self._program(1, 1, 1, wgmma=True), "pack_from_rows" if k_major else "pack_from_columns",
            (ceil_div(ldk, 32) * 32, ceil_div(D, 32) * 8, copies), (32, 8, 1),
            [i32(D), i32(self.K), X, i32(ld), u64(stride), packed, i32(ldk),
             u64(D * ldk if stride else 0)])
        return [launch], packed, ldk, (D * ldk if stride else 0)

    def __call__(self, A, B, C, bias=None, alpha=1.0, beta=0.0, lda=None, ldb=None, ldc=None,
                 stride_a=0, stride_b=0, stride_c=0, queue=None, b_packed=False, workspace=None,
                 b_scale=None):
        queue = self.ctx.queue if queue is None else queue
        for launch in self.launches(A, B, C, bias, alpha, beta, lda, ldb, ldc,
                                    stride_a, stride_b, stride_c, b_packed, workspace, b_scale):
            launch(queue)
        return C


def gemm(ctx, A, B, C=None, trans_a=False, trans_b=False, alpha=1.0, beta=0.0, bias=None,
         bias_mode=None, activation="identity"):
    """C = act(alpha * op(A) @ op(B) + beta * C + bias) on 2-D tensors; returns C.

    C is allocated (zeroed) when None. ``bias_mode`` ('row' or 'col') defaults to 'col'
    (one value per output column) when a bias is given.
    """
    for name, t in (("A", A), ("B", B)):
        if not isinstance(t, Tensor) or t.ndim != 2:
            raise ValueError("gemm: %s must be a 2-D Tensor, got %r" % (name, t))
    M, K = A.shape[::-1] if trans_a else A.shape
    Kb, N = B.shape[::-1] if trans_b else B.shape
    if K != Kb:
        raise ValueError("gemm: op(A) is %d x %d but op(B) is %d x %d" % (M, K, Kb, N))
    if C is None:
        C = Tensor.zeros(ctx, (M, N))
    elif C.shape != (M, N):
        raise ValueError("gemm: C has shape %s, expected %s" % (C.shape, (M, N)))
    if bias is not None and bias_mode is None:
        bias_mode = "col"
    op = Gemm(ctx, M, N, K, trans_a, trans_b, bias=bias_mode, activation=activation)
    return op(A, B, C, bias=bias, alpha=alpha, beta=beta)


# ----- tensor cores: found by a probe on first use per context. NVIDIA devices only; a
# build of kernels/gemm_mma.cl (inline PTX mma.sync, which the driver's compiler must take
# for the device's architecture) and a numeric self-test of it against float64 on a small
# product that crosses its tile edges; any failure means "no".
log = logging.getLogger(__name__)
# TF32 keeps 10 explicit mantissa bits: one rounding per operand, relative error 2^-11
# each; a dot product of such products stays within a few 2^-11 of its magnitude
# (BF16 keeps 7: 2^-9 each, 8x more)
_SELF_TEST_TOLERANCE = {"tf32": 4e-3, "fp16": 4e-3, "bf16": 3.2e-2}


def tensor_cores(ctx, precision="tf32"):
    """Whether ``ctx``'s device runs ``kernels/gemm_mma.cl`` correctly with ``precision``'s
    products ("tf32": m16n8k8 TF32, "fp16" and "bf16": m16n8k16 FP16 or BF16; memoized
    per context)."""
    return memo_probe(ctx, "_tensor_cores", precision, _probe)


def copies_async(ctx, precision):
    """Whether ``ctx``'s device runs the 16-bit tensor-core kernel with its tiles copied by
    cp.async (``gemm_mma.cl`` ASYNC, sm_80 on) correctly (memoized per context)."""
    return tensor_cores(ctx, precision) and memo_probe(ctx, "_copies_async", precision,
                                                       _probe_copies)


def warpgroup_products(ctx, precision):
    """Whether ``ctx``'s device runs ``kernels/gemm_wgmma.cl`` (Hopper's wgmma, sm_90a)
    correctly with ``precision``'s products, A and B stored either way (memoized per
    context)."""
    ready = (tensor_cores(ctx, precision) if precision == "tf32"
             else copies_async(ctx, precision))
    return ready and memo_probe(ctx, "_warpgroup", precision, _probe_warpgroup)


SUBGROUP_MMA_EXTENSION = "cl_intel_subgroup_matrix_multiply_accumulate"


def subgroup_mma_size(ctx):
    """The subgroup size Intel's matrix products run at on ``ctx``: the device's smallest
    (8 or 16), None where it has neither."""
    sizes = [s for s in ctx.facts.subgroup_sizes if s in (8, 16)]
    return min(sizes) if sizes else None


def subgroup_matrix_products(ctx, precision):
    """Whether ``ctx``'s device runs ``kernels/gemm_subgroup_mma.cl`` (Intel's subgroup
    matrix products: ``cl_intel_subgroup_matrix_multiply_accumulate``) correctly with
    ``precision``'s 16-bit products (memoized per context)."""
    f = ctx.facts
    if (precision not in HALF_STORAGE_TYPES or f.vendor_id != "intel" or not f.is_gpu
            or SUBGROUP_MMA_EXTENSION not in f.extensions or subgroup_mma_size(ctx) is None):
        return False
    return memo_probe(ctx, "_subgroup_mma", precision, _probe_subgroup_mma)


def memo_probe(ctx, attr, precision, probe):
    """``probe(ctx, precision)``, asked once per context and precision (kept in the
    context's ``attr`` dict)."""
    known = ctx.__dict__.setdefault(attr, {})
    if precision not in known:
        known[precision] = probe(ctx, precision)
    return known[precision]


def _probe(ctx, precision="tf32"):
    if ctx.facts.vendor_id != "nvidia" or not ctx.facts.is_gpu:
        return False
    return _self_test(ctx, precision, np.float32, "tensor cores", dict(_mma=True, _wgmma=False))


def _probe_copies(ctx, precision):
    dtype = as_dtype(HALF_STORAGE_TYPES[precision])
    return _self_test(ctx, precision, dtype, "cp.async tiles",
                      dict(_mma=True, _copy_async=True, _wgmma=False))


def _probe_warpgroup(ctx, precision):
    tf32 = precision == "tf32"
    dtype = np.dtype(np.float32) if tf32 else as_dtype(HALF_STORAGE_TYPES[precision])
    return _self_test(ctx, precision, dtype, "warpgroup products",
                      dict(_mma=True, _copy_async=None if tf32 else True, _wgmma=True),
                      layouts=((False, True), (True, False)))


def _probe_subgroup_mma(ctx, precision):
    return _self_test(ctx, precision, as_dtype(HALF_STORAGE_TYPES[precision]),
                      "subgroup matrix products", dict(_subgroup_mma=True),
                      layouts=((False, True), (True, False)))


def _self_test(ctx, precision, dtype, what, forced, layouts=((False, True),)):
    """Whether a tensor-core Gemm (``forced``: its private switches) with A and B stored
    as ``dtype`` matches float64 on a small product crossing its tile edges, for each
    (trans_a, trans_b) of ``layouts``."""
    rng = np.random.default_rng(0)
    M, N, K = 130, 136, 40  # a partial tile on every side
    for trans_a, trans_b in layouts:
        a = rng.standard_normal((K, M) if trans_a else (M, K)).astype(np.float32)
        b = rng.standard_normal((N, K) if trans_b else (K, N)).astype(np.float32)
        try:
            op = Gemm(ctx, M, N, K, trans_a, trans_b, precision=precision,
                      dtypes=(dtype, dtype, np.float32), **forced)
            C = Tensor(ctx, (M, N))
            stored = [to_bfloat16(x) if dtype == bfloat16 else x.astype(dtype) for x in (a, b)]
            a, b = (bfloat16_values(x) if dtype == bfloat16 else x for x in stored)  # values
            op(*(Tensor.from_numpy(ctx, x) for x in stored), C)
            got = C.numpy()
        except Exception as err:  # a compiler without mma.sync or cp.async, a failing launch
            log.info("%s: not used on %s (%s)", what, ctx.facts.name, str(err).splitlines()[0])
            return False
        a, b = (a.T if trans_a else a), (b.T if trans_b else b)
        want = a.astype(np.float64) @ b.astype(np.float64)
        err = np.abs(got - want).max() / np.abs(want).max()
        if not np.isfinite(err) or err > _SELF_TEST_TOLERANCE[precision]:
            log.warning("%s: the %s self-test on %s failed (relative error %.2g); precision "
                        "'%s' does without them", what, precision.upper(), ctx.facts.name, err,
                        precision)
            return False
    return True
