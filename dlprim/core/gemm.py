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
from .quantize import Q4_GROUP
from . import gemm_autotune, gemm_kernels as kernels, tuning, tuning_launch
from ..utils import ceil_div, round_up

__all__ = ["Gemm", "gemm", "BIAS_MODES", "tensor_cores"]

BIAS_MODES = (None, "row", "col")
HALF_OR_FLOAT = (np.dtype(np.float32),) + HALF_TYPES  # what an operand may store
MMA_KINDS = ("tf32", "fp16", "bf16")  # the precisions with a tensor-core kernel (gemm_mma.cl)
# float32 products as TF32 ones (split_tf32): lo hi + hi lo + hi hi, each a product over K
SPLIT_TF32_TERMS = 3


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
    the device has them, else the float32 kernels; "fp32" runs the float32 kernels, or,
    where Hopper's TF32 warpgroup products pay (``split_tf32``), three TF32 products of
    each operand's two TF32 parts, to float32's accuracy. A and B stored in the 16-bit type of
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
                 precision="fp32", dtypes=None, b_scale=False, a_norm=None, a_norm_kind="rms",
                 glu=False, _mma=False, _copy_async=None, _wgmma=None, _subgroup_mma=None):
        self.ctx = ctx
        self.precision = check_precision(precision, "Gemm: precision")
        self.dtypes = tuple(as_dtype(d) for d in (dtypes or (np.float32,) * 3))
        # int8 B: weights quantized per row of the stored B (a column of C), each row times
        # its float32 scale (b_scale); uint8 B: 4-bit weights (core/quantize.py's layout:
        # two values a byte, a float32 scale per group of Q4_GROUP values of a row, the
        # row's groups one after another in b_scale). Few rows only (gemv), B transposed.
        self.b_scale = bool(b_scale)
        typed = len(self.dtypes) == 3 and self.dtypes[1] in (np.int8, np.uint8)
        if self.b_scale != typed:
            raise TypeError("Gemm: b_scale goes with an int8 or a 4-bit (uint8) B, and such a "
                            "B with b_scale")
        self.b_q4 = self.b_scale and self.dtypes[1] == np.uint8
        if len(self.dtypes) != 3 or any(d not in HALF_OR_FLOAT for i, d in enumerate(self.dtypes)
                                        if not (i == 1 and self.b_scale)):
            raise TypeError("Gemm: dtypes must be 3 of float32, float16 and bfloat16 (A, B, "
                            "C; B int8 or uint8 with b_scale), got %r" % (dtypes,))
        self.half = any(d in HALF_TYPES for d in self.dtypes)
        self.M, self.N, self.K = _count("M", M), _count("N", N), _count("K", K)
        if max(self.M, self.N, self.K) >= 2 ** 31:
            raise ValueError("Gemm: M, N and K must be under 2^31, got %d, %d, %d"
                             % (self.M, self.N, self.K))
        self.batch = _count("batch", batch)
        self.trans_a, self.trans_b = bool(trans_a), bool(trans_b)
        if bias not in BIAS_MODES:
            raise ValueError("Gemm: bias must be None, 'row' or 'col', got %r" % (bias,))
        if activation not in EPILOGUES:
            raise ValueError("Gemm: unknown activation %r; known: %s"
                             % (activation, ", ".join(EPILOGUES)))
        self.bias, self.activation = bias, activation
        self.batch_sum = bool(batch_sum)
        self._copies = {}  # float32 copies of 16-bit operands (float_copies), by operand
        self._workspace = self._packed_b = self._packed_a = None
        self.kernel, split_k = choose(
            self, tile, split_k, dict(mma=_mma, copy_async=_copy_async, wgmma=_wgmma,
                                      subgroup_mma=_subgroup_mma))
        # rows of A normalized (``a_norm_kind`` "rms": an RMSNorm before the product, its
        # weight given to the launches; "layer": a LayerNorm, weight and bias) with eps
        # ``a_norm``: the few-rows kernel only (``normalizes_a``)
        self.a_norm = None if a_norm is None else float(a_norm)
        if a_norm_kind not in ("rms", "layer"):
            raise ValueError("Gemm: a_norm_kind must be 'rms' or 'layer', got %r" % (a_norm_kind,))
        self.a_norm_kind = a_norm_kind
        if self.a_norm is not None and not (self.gemv and self.a_norm > 0 and ctx.facts.is_gpu):
            raise ValueError("Gemm: a_norm (A's rows normalized, eps > 0) runs on the few-rows "
                             "kernel on GPUs only (Gemm.normalizes_a: at most %d rows, B "
                             "transposed), got eps %r for M=%d" % (tuning.GEMV_MAX_ROWS, a_norm, M))
        # C = act(A B^T + bias) * (A B2^T + bias2), B2 a second B (a gated MLP's two
        # projections in one launch): the few-rows kernel only
        self.glu = bool(glu)
        if self.glu and not self.gemv:
            raise ValueError("Gemm: glu (act(A B^T) * (A B2^T) in one product) runs on the "
                             "few-rows kernel only (at most %d rows, B transposed), got M=%d"
                             % (tuning.GEMV_MAX_ROWS, M))
        self.small_m = isinstance(self.kernel, kernels.CpuFewRows)
        self.splits, self.k_chunk = (1, self.K) if self.small_m or self.gemv else \
            self._split(split_k)
        if self.batch_sum and not self.batch_summable(ctx, M, trans_b):
            raise ValueError("Gemm: batch_sum (C = the sum of the batch's products) needs the "
                             "few-rows CPU kernel with a transposed B; see Gemm.batch_summable")
        self.pack_b = tuning.pack_b(self.tile, self.M) and self.K > 0
        self.pack_a = tuning.pack_a(self.tile, self.M, self.trans_a) and self.K > 0
        self.kernel.prepare()

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
    def reads_quantized(ctx, M):
        """Whether a Gemm of M rows with B transposed takes an int8 or 4-bit B
        (``b_scale``) as stored: the few-rows kernel; more rows take it widened to float32
        first."""
        return tuning.gemv_rows(ctx.facts, M, typed_b=True)

    @staticmethod
    def streams_b(ctx, M, b_dtype=np.float32):
        """Whether a Gemm of M rows with B transposed (stored as ``b_dtype``) runs the
        few-rows kernel, which takes ``glu``."""
        return tuning.gemv_rows(ctx.facts, M, as_dtype(b_dtype) in (np.int8, np.uint8,
                                                                   bfloat16, np.float16))

    @staticmethod
    def normalizes_a(ctx, M, b_dtype=np.float32):
        """Whether such a Gemm takes ``a_norm``: the few-rows kernel on GPUs. (On CPUs a
        work-item takes one column, and normalizing the row again for each made GPT-2's
        decoding 2x slower on the 2-core EPYC: 11.3-12.0 -> 25.2-25.7 ms a token in
        float16; a norm launch first is the faster there.)"""
        return ctx.facts.is_gpu and Gemm.streams_b(ctx, M, b_dtype)

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
            return 1, self.product_k
        return tuning_launch.split_k(self.product_k, parts, (self.wg_tile or t)["TILE_K"])

    # ----- facts about the operands
    def packed_ld(self, which):
        """The leading dimension of a packed operand: its stored row length."""
        return self._rows_cols(which)[1]

    def _rows_cols(self, which):
        """(rows, columns) of an operand as stored (a 4-bit B's rows in bytes)."""
        if which == "a":
            return (self.K, self.M) if self.trans_a else (self.M, self.K)
        if which == "b":
            k = ceil_div(self.K, 2) if self.b_q4 else self.K
            return (self.N, k) if self.trans_b else (k, self.N)
        return self.M, self.N

    @property
    def b_scale_size(self):
        """Values of ``b_scale``: one a row of B (int8), one a group of Q4_GROUP values of
        each row (4-bit)."""
        return self.N * ceil_div(self.K, Q4_GROUP) if self.b_q4 else self.N

    def aligned(self, ld, offset, stride, values=4):
        """Whether every row of every batch entry starts at a multiple of ``values``
        elements: 4 for float4 loads, 8 for the 16-byte copies of 16-bit values."""
        return int(ld % values == 0 and offset % values == 0
                   and (self.batch <= 1 or stride % values == 0))

    def kernel_types(self, epilogue=True, staged=False):
        """The templates' A_T, B_T, C_T where an operand is half (none where all are float32,
        so those programs keep their cache entries); C is the float32 workspace in split-K's
        first pass (``epilogue=False``); ``staged``: the staged operands (``staged``) in
        the products' 16-bit type."""
        if not self.kernel_half:
            return {}
        a_t, b_t, c_t = (cl_type(d) for d in self.kernel_dtypes)
        if staged and self.staged:  # the staged operands as the products read them
            kind = cl_type(as_dtype(HALF_STORAGE_TYPES[self.precision]))
            a_t, b_t = (kind if x in self.staged else t for x, t in (("a", a_t), ("b", b_t)))
        return dict(A_T=a_t, B_T=b_t, C_T=c_t if epilogue else "float")

    def reduce_program(self):
        """The split-K sum's program (kernels/gemm_reduce.cl) with this Gemm's epilogue."""
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
        ld = self.packed_ld(which) if ld is None else ld
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
        """float32 elements of the split-K partial sums, of TF32 warpgroup products'
        operands packed K-major and of the staged operands (0 where none is needed); a
        caller that plans memory passes that much as ``workspace``, else the Gemm keeps
        its own."""
        return self.partials_elements + sum(self.k_major_elements()) + \
            sum(self.staged_elements(x) for x in self.staged)

    def staged_ld(self, which):
        """The leading dimension of staged operand ``which``: its stored rows padded to 16
        bytes of the 16-bit type."""
        return round_up(self.packed_ld(which), 8)

    def staged_elements(self, which):
        """float32 elements (two 16-bit values each) of operand ``which`` ("a" or "b")
        staged in the products' 16-bit type for the warpgroup kernel (``staged``), one
        copy per batch entry; 0 where it is not staged."""
        if which not in self.staged or 0 in (self.M, self.N, self.K):
            return 0
        rows = self._rows_cols(which)[0]
        return round_up(self.batch * rows * self.staged_ld(which), 8) // 2

    @property
    def partials_elements(self):
        """float32 elements of the split-K partial sums (0 where K is not split)."""
        if self.splits == 1 or self.M == 0 or self.N == 0:
            return 0
        return self.batch * self.splits * round_up(self.M * self.N, 4)

    def k_major_elements(self):
        """float32 elements of A and B packed K-major for TF32 warpgroup products (rows of
        K padded to 16 bytes, three of them for split_tf32; one per batch entry), else
        (0, 0)."""
        if not (self.wgmma and self.mma_kind == "tf32") or 0 in (self.M, self.N, self.K):
            return 0, 0
        return self.batch * self.M * self.k_major_ld, self.batch * self.N * self.k_major_ld

    @property
    def k_major_ld(self):
        """The row length of an operand packed K-major for TF32 warpgroup products: K
        rounded up to 4 values (16 bytes), three of those for split_tf32."""
        return (SPLIT_TF32_TERMS if self.split_tf32 else 1) * round_up(self.K, 4)

    @property
    def product_k(self):
        """K as the product kernel runs it: with ``split_tf32``, the SPLIT_TF32_TERMS
        packed segments of K (each rounded up to 4 values, zeros past K) one after another."""
        return self.k_major_ld if self.split_tf32 else self.K

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
                 b_scale=None, a_norm_weight=None, a_norm_bias=None, b2=None, bias2=None,
                 b2_scale=None):
        """C = act(alpha * op(A) op(B) + bias + beta * C) over the given tensors, with leading
        dimensions and batch strides in elements (None: packed); checked before anything is built.

        ``b_packed``: B already holds op(B) as ``gemm_pack_b`` lays it out (strips of
        BLOCK_N columns, each K x BLOCK_N, zero past N; ``packed_b_elements`` per batch
        entry, one after another), as a producer such as im2col can write it; only for a
        GEMM that packs (``pack_b``). ``workspace``: a float32 tensor of at least
        ``workspace_elements`` for the split-K partial sums (None: the Gemm's own).
        ``a_norm_weight``: with ``a_norm``, the float32 weight of K values the normalized
        rows of A are multiplied by (and ``a_norm_bias``, K values added, for a_norm_kind
        "layer"). ``b2``, ``bias2``, ``b2_scale``: with ``glu``, the
        second B (B's shape, type and layout) and its bias and int8 scales: C = act(alpha
        op(A) op(B) + bias) * (alpha op(A) op(B2) + bias2) + beta C.
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
        self._check_vector("b_scale", b_scale, self.b_scale, self.b_scale_size,
                           "an int8 or 4-bit B's scales", "b_scale")
        extra = {}
        if self.a_norm is not None:
            layer = self.a_norm_kind == "layer"
            self._check_vector("a_norm_weight", a_norm_weight, True, self.K, "the norm's weight",
                               "a_norm")
            self._check_vector("a_norm_bias", a_norm_bias, layer, self.K, "a LayerNorm's bias",
                               "a_norm_kind 'layer'")
            extra.update(norm_weight=a_norm_weight, norm_bias=a_norm_bias)
        else:
            for name, t in (("a_norm_weight", a_norm_weight), ("a_norm_bias", a_norm_bias)):
                self._check_vector(name, t, False, self.K, "", "a_norm")
        if self.glu:
            if b2 is None or self._check_operand("b", b2, ldb, stride_b) != (ldb, stride_b):
                raise ValueError("Gemm: glu needs b2, a second B of B's shape and layout")
            self._check_vector("b2_scale", b2_scale, self.b_scale, self.b_scale_size,
                               "B2's int8 or 4-bit scales", "b_scale")
            extra["second"] = (b2, self._check_bias(bias2), b2_scale)
        elif b2 is not None or bias2 is not None or b2_scale is not None:
            raise ValueError("Gemm: b2, bias2 or b2_scale given to a Gemm built without glu")
        if self.float_copies:  # (never with extra: those run on the few-rows kernel)
            return self._float_copy_launches(*operands)
        return self.kernel.launches(*operands, b_scale, **extra)

    @staticmethod
    def _check_vector(name, t, wanted, size, what, option):
        """``t``, a launch's float32 vector of ``size`` values (``what`` it holds), is given
        where ``wanted`` (the Gemm built with ``option``) and None elsewhere, else a
        ValueError naming it."""
        if not wanted:
            if t is not None:
                raise ValueError("Gemm: %s given to a Gemm built without %s" % (name, option))
        elif not isinstance(t, Tensor) or t.dtype != np.float32 or t.size != size:
            raise ValueError("Gemm: this Gemm needs %s, %s: a float32 Tensor of %d values"
                             % (name, what, size))

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
            return out + self.kernel.launches(A, B, C, bias, alpha, beta, lda, ldb, ldc,
                                              stride_a, stride_b, stride_c, b_packed,
                                              workspace, None)
        count = 1 if self.batch_sum else self.batch
        shape, own = (count, self.M, self.N), (stride_c, ldc, 1)
        packed = (self.M * self.N, self.N, 1)
        C32 = self._float_copy("c", count * self.M * self.N)
        if beta != 0.0:  # the sum reads C
            out += StridedCopy(self.ctx, shape, own, packed, C.dtype, np.float32).launches(C, C32)
        out += self.kernel.launches(A, B, C32, bias, alpha, beta, lda, ldb, self.N, stride_a,
                                    stride_b, self.M * self.N, b_packed, workspace, None)
        return out + StridedCopy(self.ctx, shape, packed, own, np.float32, C.dtype).launches(C32, C)

    def _float_copy(self, which, size):
        """The float32 copy of operand ``which`` (a, b or c), at least ``size`` elements,
        kept by the Gemm from call to call."""
        held = self._copies.get(which)
        if held is None or held.size < size:
            held = self._copies[which] = Tensor(self.ctx, (size,))
        return held

    def held(self, name, size):
        """The operand layout ``name`` ("packed_a" or "packed_b") the families keep from
        call to call, ``size`` float32 elements, made on first use."""
        attr = "_" + name
        if getattr(self, attr) is None:
            setattr(self, attr, Tensor(self.ctx, (size,)))
        return getattr(self, attr)

    def workspace_for(self, workspace):
        """The split-K / K-major workspace of a call: ``workspace`` checked, else the
        Gemm's own; None where the launches need none."""
        if not self.workspace_elements:
            return None
        if workspace is not None:
            return self._check_workspace(workspace)
        if self._workspace is None:
            self._workspace = Tensor(self.ctx, (self.workspace_elements,))
        return self._workspace

    def __call__(self, A, B, C, bias=None, alpha=1.0, beta=0.0, lda=None, ldb=None, ldc=None,
                 stride_a=0, stride_b=0, stride_c=0, queue=None, b_packed=False, workspace=None,
                 b_scale=None, **extra):
        """Enqueue ``launches`` now (``extra``: its a_norm and glu arguments)."""
        queue = self.ctx.queue if queue is None else queue
        for launch in self.launches(A, B, C, bias, alpha, beta, lda, ldb, ldc,
                                    stride_a, stride_b, stride_c, b_packed, workspace, b_scale,
                                    **extra):
            launch(queue)
        return C


def choose(g, tile, split_k, forced):
    """The kernel family of the Gemm ``g`` (``core/gemm_kernels.py``), the one place that
    decides it: sets ``g``'s tensor-core flags, storage of the kernels and tile, and
    returns (family, split_k).
    ``forced``: the private switches of the probes' self-tests (mma, copy_async, wgmma,
    subgroup_mma), taking the device's word for it."""
    ctx, facts, M, N = g.ctx, g.ctx.facts, g.M, g.N

    def warpgroup(kind):  # the warpgroup probe of products ``kind``, asked only where they may run
        return tuning.MMA_WARPGROUP and (forced["wgmma"] if forced["wgmma"] is not None
                                         else warpgroup_products(ctx, kind))
    # "fp32" products as TF32 warpgroup products: each operand x = hi + lo, hi and lo TF32
    # values (the rest below 2^-22 |x|), and lo hi + hi lo + hi hi summed in float32 (lo
    # lo, under 2^-22 of the product, dropped), as accurate as the float32 kernels (see
    # tuning.split_tf32_pays for where it is faster)
    g.split_tf32 = bool(
        g.precision == "fp32" and not tile and not g.b_scale and g.batch
        and all(d == np.float32 for d in g.dtypes) and tuning.split_tf32_pays(M, N, g.K)
        and (forced["mma"] or tensor_cores(ctx, "tf32")) and warpgroup("tf32"))
    # the products the tensor-core kernel runs
    g.mma_kind = "tf32" if g.split_tf32 else g.precision
    # the tensor-core kernel: TF32 products for "tf32", FP16 or BF16 for the others, where
    # the probe passes
    g.mma = bool(forced["mma"]) or g.split_tf32 or g.on_tensor_cores(ctx, g.precision)
    native = HALF_STORAGE_TYPES.get(g.precision)
    native = as_dtype(native) if native is not None else None

    def copies():  # the cp.async probe, asked only where its tiles may run
        return (g.mma and tuning.MMA_COPY_ASYNC and native is not None
                and (forced["copy_async"] if forced["copy_async"] is not None
                     else copies_async(ctx, g.precision)))

    # tiles copied by cp.async (gemm_mma.cl ASYNC) where A and B store the 16-bit type the
    # products take (launches check their rows' alignment)
    g.copy_async = bool(native is not None and g.dtypes[0] == g.dtypes[1] == native
                        and copies())
    # Hopper's warpgroup products (gemm_wgmma.cl) where the device takes them: for the
    # 16-bit tiles that cp.async copies, and for TF32 on float32 operands where M and N
    # are large enough to pay for packing them (tuning.wgmma_packs_pay)
    tf32_floats = (g.mma and g.mma_kind == "tf32"
                   and g.dtypes[0] == g.dtypes[1] == np.float32)
    g.wgmma = bool((g.copy_async or tf32_floats) and warpgroup(g.mma_kind)
                   and (forced["wgmma"] is not None or not tf32_floats or g.split_tf32
                        or tuning.wgmma_packs_pay(M, N)))
    assert g.wgmma or not g.split_tf32  # never plain TF32 products for "fp32"
    # operands copied into the workspace as the warpgroup kernel takes them (``staged``):
    # a float32 A or B beside the other stored in the 16-bit type (an fp16 net's float32
    # weights), narrowed; a 16-bit one whose contiguous rows do not start 16-byte aligned
    # (GPT-2's 50,257 logits a row), into padded rows; each where the copy pays
    # (tuning.staging_pays). Without it gemm_mma.cl reads them through registers.
    wants = [x for x, d in zip("ab", g.dtypes[:2])
             if d == np.float32 or g.packed_ld(x) % kernels.COPY_VALUES]
    g.staged = ()
    if wants and native in g.dtypes[:2] and \
            all(d in (np.float32, native) for d in g.dtypes[:2]) and \
            all(tuning.staging_pays(M, N, g.K, x) for x in wants) and copies() and \
            warpgroup(g.mma_kind):
        g.staged, g.copy_async, g.wgmma = tuple(wants), True, True
    # Intel's subgroup matrix products (gemm_subgroup_mma.cl) for 16-bit operands stored
    # as they take them, where the device has them
    g.subgroup_mma = (native is not None and not g.mma
                      and g.dtypes[0] == g.dtypes[1] == native
                      and (forced["subgroup_mma"] if forced["subgroup_mma"] is not None
                           else subgroup_matrix_products(ctx, g.precision)))
    g.subgroup = subgroup_mma_size(ctx) if g.subgroup_mma else None
    # CPUs run 16-bit products on float32 copies (tuning.CPU_HALF_AS_FLOAT)
    g.float_copies = (g.half and not g.mma and not g.subgroup_mma and facts.is_cpu
                      and tuning.CPU_HALF_AS_FLOAT)
    if (g.mma or g.subgroup_mma) and tile:
        raise ValueError("Gemm: the tensor-core kernels have their own tiles "
                         "(tuning.mma_tile, tuning.subgroup_mma_tile)")
    # a few rows (a decoder's step) on a GPU, or over an int8, bfloat16 or float16 B
    # anywhere, or one row on a CPU (tuning.gemv_rows): one launch streaming B
    # (kernels/gemv.cl), which reads every storage itself
    # (CPUs read float16 eight values at a time: common.h's load_half8)
    g.gemv = (Gemm.streams_b(ctx, M, g.dtypes[1]) and g.trans_b and not g.trans_a
              and not tile and split_k is None and not g.batch_sum)
    # (its teams of 32 add their sums by warp shuffles where inline PTX runs: NVIDIA)
    g.gemv_shuffle = g.gemv and facts.is_gpu and tuning.gemv_shuffle(
        facts, lambda: inline_ptx(ctx))
    if g.gemv:
        g.float_copies = False
    elif g.b_scale:
        raise ValueError("Gemm: an int8 or 4-bit B takes at most %d rows of A with B transposed "
                         "(tuning.GEMV_MAX_ROWS), got M=%d%s" % (
                             tuning.GEMV_MAX_ROWS, M, "" if g.trans_b else " and B not transposed"))
    # what the kernels read and write: float32 where the operands travel as copies
    g.kernel_dtypes = (np.dtype(np.float32),) * 3 if g.float_copies else g.dtypes
    g.kernel_half = g.half and not g.float_copies
    g.tile = (tuning.half_tile if g.kernel_half else tuning.pick_tile)(facts, M, N, g.batch)
    # measured for this very shape where autotuning is on (float32 on a GPU)
    if not tile and split_k is None and g.batch == 1 and facts.is_gpu and not g.gemv and \
            min(M, N, g.K) > 0 and not (g.mma or g.subgroup_mma or g.half) and \
            gemm_autotune.autotuning():
        tile, split_k = gemm_autotune.tuned_choice(
            ctx, M, N, g.K, g.trans_a, g.trans_b,
            lambda tile: Gemm(ctx, M, N, g.K, g.trans_a, g.trans_b, tile=tile)) or (None, None)
    # whole waves of one-per-compute-unit tiles where that is predicted faster
    planned = None if tile or split_k is not None or g.mma or g.subgroup_mma else \
        tuning.wave_plan(facts, M, N, g.K, g.batch, g.trans_b)
    if planned:
        g.tile, split_k = planned
    if g.mma:
        g.tile = tuning.mma_tile(g.mma_kind, M, N)
    # the warpgroup kernel's own tile, stages and split (gemm_mma.cl keeps g.tile for
    # launches whose operands turn out unaligned)
    g.wg_tile = None
    if g.wgmma:
        g.wg_tile, parts = tuning.wgmma_plan(facts.compute_units, M, N, g.product_k, g.batch,
                                             4 if g.mma_kind == "tf32" else 2, split_k,
                                             tuning.SPLIT_TF32_TILES if g.split_tf32 else None)
        split_k = parts if split_k is None else split_k
    if g.subgroup_mma:
        g.tile = tuning.subgroup_mma_tile(g.subgroup)
    if tile:
        g.tile = tuning.check_tile(dict(g.tile, **tile), facts)
        if g.kernel_half and tuning.gemm_kernel(g.tile) != "gemm":
            raise ValueError("Gemm: half and bfloat16 operands run on the tiled template only "
                             "(VEC 1 or 4), got tile %r" % (g.tile,))
    if g.gemv:
        family = kernels.Gemv
    elif g.mma:
        family = kernels.TensorCore
    elif g.subgroup_mma:
        family = kernels.SubgroupMatrix
    elif tuning.gemm_small_m(g.tile, M) and split_k is None and not tile and not planned:
        family = kernels.CpuFewRows
    elif tuning.gemm_kernel(g.tile) == "gemm_cpu":
        family = kernels.CpuTiled
    else:
        family = kernels.Tiled
    return family(g), split_k


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


def inline_ptx(ctx):
    """Whether ``ctx``'s device takes inline PTX (warp shuffles, fences): NVIDIA GPUs where
    the TF32 tensor-core probe, itself a kernel of inline PTX, passes."""
    return ctx.facts.is_gpu and ctx.facts.vendor_id == "nvidia" and tensor_cores(ctx, "tf32")


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
