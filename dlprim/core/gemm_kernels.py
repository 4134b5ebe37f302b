"""The kernel families a ``Gemm`` runs, behind one interface; ``gemm.choose`` is the one
place that picks a family for a product.

Every family builds its programs (``program``, and ``prepare`` at construction) and turns
checked operands into launches (``launches``); ``Gemm`` checks the operands, holds the
workspace and the float32 copies CPUs take of 16-bit operands, and asks its family for
the rest. A new kernel is a new family here and a line in ``gemm.choose``.

| family | template | where |
|---|---|---|
| ``Gemv`` | gemv.cl | at most ``tuning.GEMV_MAX_ROWS`` rows, B transposed: on GPUs, and anywhere over an int8, bfloat16 or float16 B; one row on CPUs |
| ``TensorCore`` | gemm_mma.cl, gemm_wgmma.cl | "tf32", "fp16", "bf16" on NVIDIA GPUs that pass the probes (mma.sync; cp.async tiles; Hopper's warpgroup products), and large "fp32" products there (``split_tf32``) |
| ``SubgroupMatrix`` | gemm_subgroup_mma.cl | "fp16", "bf16" on Intel GPUs with subgroup matrix products |
| ``CpuFewRows`` | gemm_cpu.cl (gemm_small_m) | CPUs, fewer than ``tuning.CPU_PACK_MIN_M`` rows |
| ``CpuTiled`` | gemm_cpu.cl | CPUs, B (and a transposed A) packed into strips first |
| ``Tiled`` | gemm.cl | everything else: register-blocked tiles in local memory |

The tiled families (all but ``Gemv`` and ``CpuFewRows``) share one launch: one pass, or
split-K partial products into the workspace then ``gemm_reduce``.
"""
import numpy as np

from ..dtypes import as_dtype, cl_type
from ..kernels import program
from ..tensor import ws_view
from ..utils import ceil_div, round_up
from . import tuning
from .activation import ACTIVATIONS
from .copy import StridedCopy
from .pointwise import vector_code
from .precision import HALF_STORAGE_TYPES
from .quantize import Q4_GROUP

__all__ = ["GemmKernel", "Gemv", "TensorCore", "SubgroupMatrix", "CpuFewRows", "CpuTiled",
           "Tiled", "MMA_TYPES", "COPY_VALUES"]

# the template's MMA parameter of each tensor-core precision: the operands' type there
MMA_TYPES = {"tf32": "tf32", "fp16": "f16", "bf16": "bf16"}
COPY_VALUES = 8  # 16-bit values in one 16-byte cp.async copy: rows must start at multiples


def vector_epilogue(activation, width):
    """Whether ``activation``'s epilogue computes the same on float``width`` vectors (so
    gemm_cpu.cl applies it to its accumulator vectors)."""
    return vector_code("y0 = %s;" % ACTIVATIONS[activation].epilogue, width) is not None


def _epilogue(g, epilogue):
    return (g.bias or "none", g.activation) if epilogue else ("none", "identity")


class GemmKernel:
    """One family of kernels for ``g`` (a Gemm)."""

    def __init__(self, g):
        self.g = g

    def program(self, aligned_a, aligned_b, aligned_c, epilogue=True, copy_async=False,
                wgmma=False):
        """The built kernels; epilogue=False: split-K's first pass (plain alpha * acc)."""
        raise NotImplementedError

    def prepare(self):
        """Build now what the launches of packed, aligned operands will use."""
        g = self.g
        self.program(*(g.aligned(g.packed_ld(x), 0, 0) for x in "abc"))

    def launches(self, A, B, C, bias, alpha, beta, lda, ldb, ldc, stride_a, stride_b,
                 stride_c, b_packed, workspace, b_scale):
        """The product's launches over operands ``Gemm.launches`` checked (leading
        dimensions and batch strides resolved; ``workspace`` the caller's or None)."""
        raise NotImplementedError


class Gemv(GemmKernel):
    """A few rows of C in one launch streaming B (kernels/gemv.cl): GPUs, ``gemv``, teams
    of 32 work-items a column, eight teams a group, ``vec`` values a load (``_vec``: 8 or
    4 where rows start aligned to them, else 1) and ``tuning.gemv_gpu_unroll`` steps a
    turn whose loads are asked for together, the team's sums added by warp shuffles on
    NVIDIA (``gemv_shuffle``);
    CPUs, ``gemv_cpu``, ``tuning.gemv_cpu_cols`` columns a work-item in float8 vectors,
    ``tuning.GEMV_CPU_SUMS`` sums each (their compilers would
    otherwise vectorize across work-items, gathering a row each). It reads every storage
    itself: no float32 copies, no tensor cores."""

    def program(self, vec):
        """(program, work-group size, columns of C a work-group)."""
        g = self.g
        sums, rows, unroll = 1, program.pow2_at_least(g.M), 1
        stage = 0
        if g.ctx.facts.is_gpu:
            team, teams, cols = 32, max(1, min(8, g.ctx.facts.max_work_group // 32)), 1
            unroll = tuning.gemv_gpu_unroll(rows)
            stage = tuning.gemv_stage(g.K, rows, vec, g.a_norm is not None)
        else:
            team, teams, cols, vec = 1, 1, tuning.gemv_cpu_cols(g.ctx.facts, g.dtypes[1]), 0
            sums = tuning.GEMV_CPU_SUMS
        types = {} if all(d == np.float32 for d in g.dtypes) else \
            dict(zip(("A_T", "B_T", "C_T"), (cl_type(d) for d in g.dtypes)))
        prg = program.get(g.ctx, "gemv", ROWS=rows, VEC=vec, UNROLL=unroll,
                          TEAMS=teams, BIAS=g.bias or "none", ACTIVATION=g.activation,
                          SCALE=int(g.b_scale and not g.b_q4),
                          Q4=Q4_GROUP if g.b_q4 else 0, TEAM=team, COLS=cols, SUMS=sums,
                          Q4_GROUPS=int(team == 1 and g.b_q4 and tuning.GEMV_CPU_Q4_GROUPS),
                          SHUFFLE=int(team == 32 and g.gemv_shuffle),
                          NORM=int(g.a_norm is not None and g.a_norm_kind == "rms"),
                          LN=int(g.a_norm is not None and g.a_norm_kind == "layer"),
                          GLU=int(g.glu), STAGE=int(bool(stage)), KS=stage,
                          **types)
        return prg, team * teams, teams * cols

    def _vec(self, rows=None):
        """Values a work item loads at once on GPUs: eight where K is a multiple of 8 and
        every row starts where eight values' loads may (``tuning.GEMV_GPU_VEC``: 16 bytes
        of 16-bit values, 8 of int8, two float4 loads of float32), four where rows start
        on 4 values, else one. ``rows``: (ld, offset, stride) of A, of B (and of B2);
        None: packed, aligned operands."""
        g = self.g
        if rows is None:
            rows = ((g.K, 0, g.M * g.K), (g.packed_ld("b"), 0, g.N * g.packed_ld("b")))
        if g.b_q4:  # (4-bit rows are read a byte at a time: only A's alignment counts)
            rows = rows[:1]
        if not g.ctx.facts.is_gpu:
            return 0
        wide = tuning.GEMV_GPU_VEC
        # (float32 rows take eight values as two float4 loads: 16-byte starts suffice)
        starts = [4 if d == np.float32 else wide for d in (g.dtypes[0],) + (g.dtypes[1],) * 2]
        if g.K % wide == 0 and all(g.aligned(*r, values=v) for r, v in zip(rows, starts)):
            return wide
        return 4 if g.K % 4 == 0 and all(g.aligned(*r, values=4) for r in rows) else 1

    def prepare(self):
        """Build the variant packed, aligned operands use."""
        self.program(self._vec())

    def launches(self, A, B, C, bias, alpha, beta, lda, ldb, ldc, stride_a, stride_b,
                 stride_c, b_packed, workspace, b_scale, norm_weight=None, norm_bias=None,
                 second=None):
        """One launch: wide loads where K and both operands' rows allow them; A's rows
        normalized by their RMS times ``norm_weight`` where the Gemm has ``a_norm`` (a
        LayerNorm's, plus ``norm_bias``, for a_norm_kind "layer"); with
        ``glu``, ``second`` = (B2, its bias, its scales)."""
        g = self.g
        i32, u64, f32 = np.int32, np.uint64, np.float32
        rows = [(lda, A.offset, stride_a), (ldb, B.offset, stride_b)]
        if second is not None:
            rows.append((ldb, second[0].offset, stride_b))
        vec = self._vec(rows)
        prg, size, cols = self.program(vec)
        def vector(t):  # (a float vector argument; C's buffer where there is none)
            return t.kernel_args if t is not None else (C.buffer, u64(0))
        args = [i32(g.M), i32(g.N), i32(g.K), A, i32(lda), u64(stride_a), B, i32(ldb),
                u64(stride_b), C, i32(ldc), u64(stride_c), *vector(bias), *vector(b_scale),
                f32(alpha), f32(beta), *vector(norm_weight), f32(g.a_norm or 0.0)]
        if second is not None:  # (GLU_ARGS, then LN_ARGS: the kernel's order)
            b2, bias2, scale2 = second
            args += [b2, *vector(bias2), *vector(scale2)]
        if norm_bias is not None:
            args.append(norm_bias)
        name = "gemv" if g.ctx.facts.is_gpu else "gemv_cpu"
        return [program.Launch(prg, name, (ceil_div(g.N, cols) * size, g.batch),
                               (size, 1), args, flops=g.flops)]


class CpuFewRows(GemmKernel):
    """CPUs, fewer than ``tuning.CPU_PACK_MIN_M`` rows: ``gemm_small_m`` of gemm_cpu.cl,
    ``tuning.CPU_SMALL_M_BLOCK`` rows of C a work-item; the only family that sums a
    batch's products into one C (``batch_sum``)."""

    def program(self, aligned_a=0, aligned_b=0, aligned_c=0, epilogue=True, copy_async=False,
                wgmma=False):
        g = self.g
        bias, act = _epilogue(g, epilogue)
        return program.get(g.ctx, "gemm_cpu", TRANS_A=int(g.trans_a), TRANS_B=int(g.trans_b),
                           BIAS=bias, ACTIVATION=act,
                           SMALL_M=min(g.M, tuning.CPU_SMALL_M_BLOCK),
                           SMALL_N=tuning.cpu_small_n(g.trans_b), PACK_B=0, PACK_A=0, PACK_K=0,
                           SUM_BATCH=int(g.batch_sum), **g.tile)

    def launches(self, A, B, C, bias, alpha, beta, lda, ldb, ldc, stride_a, stride_b,
                 stride_c, b_packed, workspace, b_scale):
        """One launch of gemm_small_m over the operands as they are."""
        g = self.g
        i32, u64, f32 = np.int32, np.uint64, np.float32
        bias_args = bias.kernel_args if bias is not None else (C.buffer, u64(0))
        args = [i32(g.M), i32(g.N), i32(g.K), A, i32(lda), u64(stride_a),
                B, i32(ldb), u64(stride_b), C, i32(ldc), u64(stride_c), *bias_args,
                f32(alpha), f32(beta), i32(g.batch)]
        items = ceil_div(g.N, tuning.cpu_small_n(g.trans_b))
        return [program.Launch(self.program(), "gemm_small_m",
                               (items, 1 if g.batch_sum else g.batch), (1, 1),
                               args, flops=g.flops)]


class _TiledLaunch(GemmKernel):
    """The families launched as tiles of C: one pass, or split-K (partial products into
    the workspace, then ``gemm_reduce`` sums them with the epilogue)."""

    def launch_tile(self, wgmma):
        """The tile a launch runs (the warpgroup kernel has its own, ``g.wg_tile``)."""
        return self.g.tile

    def geometry(self, copy_async):
        """(work-items along N, along M) of a work-group, whether it runs warpgroup
        products."""
        t = self.g.tile
        return t["TILE_N"] // t["BLOCK_N"], t["TILE_M"] // t["BLOCK_M"], False

    def pre_launches(self, A, B, lda, ldb, stride_a, stride_b, b_packed, aligned_ab, W,
                     wgmma, c_layout):
        """Launches that lay A and B out for the product first, and the operands as the
        product then reads them: ([launches], A, B, lda, ldb, stride_a, stride_b,
        aligned_ab). ``c_layout``: (aligned_c, epilogue) of the product's program, which
        carries the warpgroup kernel's layout passes too."""
        return [], A, B, lda, ldb, stride_a, stride_b, aligned_ab

    def copies_async(self, A, B, lda, ldb, stride_a, stride_b, W):
        """Whether the launch's tiles are copied by cp.async: the Gemm's ``copy_async``
        and every operand it copies as stored with 16-byte aligned rows."""
        g = self.g
        return bool(g.copy_async and g.aligned(lda, A.offset, stride_a, COPY_VALUES)
                    and g.aligned(ldb, B.offset, stride_b, COPY_VALUES))

    def launches(self, A, B, C, bias, alpha, beta, lda, ldb, ldc, stride_a, stride_b,
                 stride_c, b_packed, workspace, b_scale):
        g = self.g
        i32, u64, f32 = np.int32, np.uint64, np.float32
        bias_args = bias.kernel_args if bias is not None else (C.buffer, u64(0))
        aligned_ab = (g.aligned(lda, A.offset, stride_a), g.aligned(ldb, B.offset, stride_b))
        W = g.workspace_for(workspace)
        copy_async = self.copies_async(A, B, lda, ldb, stride_a, stride_b, W)
        wg_n, wg_m, wgmma = self.geometry(copy_async)
        t = self.launch_tile(wgmma)
        part = round_up(g.M * g.N, 4)  # split-K: keeps every part 16-byte aligned
        c_layout = ((g.aligned(ldc, C.offset, stride_c), True) if g.splits == 1
                    else (g.aligned(g.N, 0, part), False))
        pack, A, B, lda, ldb, stride_a, stride_b, aligned_ab = self.pre_launches(
            A, B, lda, ldb, stride_a, stride_b, b_packed, aligned_ab, W, wgmma, c_layout)
        gsize = (ceil_div(g.N, t["TILE_N"]) * wg_n, ceil_div(g.M, t["TILE_M"]) * wg_m,
                 g.batch * g.splits)
        head = [i32(g.M), i32(g.N), i32(g.product_k), i32(g.k_chunk), i32(g.splits),
                A, i32(lda), u64(stride_a), B, i32(ldb), u64(stride_b)]
        prg = self.program(*aligned_ab, c_layout[0], epilogue=c_layout[1],
                           copy_async=copy_async, wgmma=wgmma)
        if g.splits == 1:
            args = head + [C, i32(ldc), u64(stride_c), *bias_args, f32(alpha), f32(beta)]
            return pack + [program.Launch(prg, "gemm", gsize, (wg_n, wg_m, 1), args,
                                          flops=g.flops)]
        args = head + [W, i32(g.N), u64(part), W.buffer, u64(0), f32(alpha), f32(0)]
        reduce_args = [i32(g.M), i32(g.N), i32(g.splits), W, u64(part),
                       C, i32(ldc), u64(stride_c), *bias_args, f32(beta)]
        return pack + [program.Launch(prg, "gemm", gsize, (wg_n, wg_m, 1), args,
                                      flops=g.flops),
                       program.Launch(g.reduce_program(), "gemm_reduce",
                                      (round_up(g.N, 32), round_up(g.M, 4), g.batch),
                                      (32, 4, 1), reduce_args)]


class Tiled(_TiledLaunch):
    """kernels/gemm.cl: register-blocked tiles staged in local memory (float32, or 16-bit
    operands widened as they load: ``tuning.half_tile``)."""

    def program(self, aligned_a, aligned_b, aligned_c, epilogue=True, copy_async=False,
                wgmma=False):
        g = self.g
        bias, act = _epilogue(g, epilogue)
        return program.get(g.ctx, "gemm", TRANS_A=int(g.trans_a), TRANS_B=int(g.trans_b),
                           BIAS=bias, ACTIVATION=act,
                           ALIGNED_A=aligned_a, ALIGNED_B=aligned_b,
                           ALIGNED_C=aligned_c if g.tile["VEC"] == 4 else 0,
                           **g.kernel_types(epilogue), **g.tile)


class CpuTiled(_TiledLaunch):
    """kernels/gemm_cpu.cl: wide tiles from global memory (a work-group is one loop on one
    core), op(B) packed into strips of BLOCK_N columns first where enough rows read each
    (``tuning.pack_b``), and a transposed A into strips of BLOCK_M rows
    (``tuning.pack_a``); unaligned loads cost no more there."""

    def program(self, aligned_a=0, aligned_b=0, aligned_c=0, epilogue=True, copy_async=False,
                wgmma=False):
        g = self.g
        bias, act = _epilogue(g, epilogue)
        return program.get(g.ctx, "gemm_cpu", TRANS_A=int(g.trans_a), TRANS_B=int(g.trans_b),
                           BIAS=bias, ACTIVATION=act, PACK_B=int(g.pack_b),
                           PACK_A=int(g.pack_a), SMALL_M=0, SMALL_N=0, SUM_BATCH=0,
                           PACK_K=tuning.CPU_PACK_K,
                           VECTOR_EPILOGUE=vector_epilogue(act, g.tile["VEC"]), **g.tile)

    def pre_launches(self, A, B, lda, ldb, stride_a, stride_b, b_packed, aligned_ab, W,
                     wgmma, c_layout):
        g = self.g
        i32, u64 = np.int32, np.uint64
        t, pack = g.tile, []
        if g.pack_b and not b_packed:  # op(B) -> strips of BLOCK_N columns
            strips = ceil_div(g.N, t["BLOCK_N"])
            held = g.held("packed_b", g.batch * strips * g.K * t["BLOCK_N"])
            pack.append(program.Launch(
                self.program(*aligned_ab, 0), "gemm_pack_b",
                (strips if g.trans_b else ceil_div(strips, 16),
                 ceil_div(g.K, tuning.CPU_PACK_K), g.batch), (1, 1, 1),
                [i32(g.N), i32(g.K), B, i32(ldb), u64(stride_b), held]))
            B, ldb, stride_b = held, t["BLOCK_N"], strips * g.K * t["BLOCK_N"]
        if g.pack_a:  # a transposed A -> strips of BLOCK_M rows
            strips = ceil_div(g.M, t["BLOCK_M"])
            copies = g.batch if stride_a else 1  # a shared A is packed once
            held = g.held("packed_a", copies * strips * g.K * t["BLOCK_M"])
            pack.append(program.Launch(
                self.program(*aligned_ab, 0), "gemm_pack_a",
                (ceil_div(strips, 16), ceil_div(g.K, tuning.CPU_PACK_K), copies), (1, 1, 1),
                [i32(g.M), i32(g.K), A, i32(lda), u64(stride_a), held]))
            A, lda = held, t["BLOCK_M"]
            stride_a = strips * g.K * t["BLOCK_M"] if stride_a else 0
        return pack, A, B, lda, ldb, stride_a, stride_b, aligned_ab


# split_tf32's packed parts of A and B (gemm_wgmma.cl's pack): lo hi + hi lo + hi hi
SPLIT_PARTS = {"a": "lch", "b": "clh"}


class TensorCore(_TiledLaunch):
    """NVIDIA's tensor cores: kernels/gemm_mma.cl (``mma.sync``; 16-bit tiles copied by
    cp.async where ``g.copy_async`` and the rows are 16-byte aligned), and on Hopper
    kernels/gemm_wgmma.cl (``wgmma``) where ``g.wgmma``: for the tiles cp.async copies,
    and for TF32 on float32 operands packed K-major into the workspace first."""

    def __init__(self, g):
        super().__init__(g)
        self._staging = {}  # the staging copy of each (operand, ld, batch stride) met

    def warpgroup(self, copy_async):
        """Whether a launch runs gemm_wgmma.cl: 16-bit tiles that cp.async copies (aligned
        rows), or any TF32 product (packed as it needs)."""
        return self.g.wgmma and (copy_async or self.g.mma_kind == "tf32")

    def prepare(self):
        g = self.g
        copies = g.copy_async and all(g.aligned(g.packed_ld(x), 0, 0, COPY_VALUES)
                                      for x in "ab" if x not in g.staged)
        # (asked ahead: in a Net's set-up a worker process builds it, kernels/build_ahead.py)
        self.program(*(g.aligned(g.packed_ld(x), 0, 0) for x in "abc"),
                     copy_async=copies, wgmma=self.warpgroup(copies), ahead=True)

    def copies_async(self, A, B, lda, ldb, stride_a, stride_b, W):
        """As for every tiled family, but a staged operand (``g.staged``) is copied from
        its copy in the workspace, whose rows the Gemm aligns."""
        g = self.g
        if not g.staged:
            return super().copies_async(A, B, lda, ldb, stride_a, stride_b, W)
        kept = [(X, ld, stride) for x, X, ld, stride in (("a", A, lda, stride_a),
                                                        ("b", B, ldb, stride_b))
                if x not in g.staged]
        return bool(g.copy_async and all(g.aligned(ld, X.offset, stride, COPY_VALUES)
                                         for X, ld, stride in kept)
                    and (W.byte_offset + 4 * self._after_partials()) % 16 == 0)

    def _after_partials(self):
        """Where the operands' layouts (TF32 K-major packing, the staged operands) start in
        the workspace, in float32 elements: after the split-K partial sums."""
        return self.g.partials_elements

    def program(self, aligned_a, aligned_b, aligned_c, epilogue=True, copy_async=False,
                wgmma=False, ahead=False):
        """As the family's; ``ahead``: only ask for it (``program.prefetch``: None)."""
        g = self.g
        bias, act = _epilogue(g, epilogue)
        t = g.tile
        if wgmma:
            tf32, w = g.mma_kind == "tf32", g.wg_tile
            return program.get(g.ctx, "gemm_wgmma", ahead=ahead,
                               TRANS_A=0 if tf32 else int(g.trans_a),
                               TRANS_B=1 if tf32 else int(g.trans_b), BIAS=bias,
                               ACTIVATION=act, TILE_M=w["TILE_M"], TILE_N=w["TILE_N"],
                               TILE_K=w["TILE_K"], GROUP=t["GROUP"],
                               WARPGROUPS=w["TILE_M"] // 64, STAGES=w["STAGES"],
                               IN_FLIGHT=tuning.WGMMA_IN_FLIGHT,
                               PROMOTE=tuning.SPLIT_TF32_PROMOTE if g.split_tf32 else 0,
                               SPLIT_PARTS=tuple(SPLIT_PARTS.values()) if g.split_tf32 else (),
                               ALIGNED_C=aligned_c,
                               **g.kernel_types(epilogue, staged=True),
                               MMA=MMA_TYPES[g.mma_kind])
        warps_m, warps_n = tuning.mma_warps(t)
        staging = (dict(ASYNC=1, STAGES=tuning.MMA_ASYNC_STAGES) if copy_async
                   else dict(STAGES=tuning.MMA_STAGES))
        return program.get(g.ctx, "gemm_mma", ahead=ahead, TRANS_A=int(g.trans_a),
                           TRANS_B=int(g.trans_b), BIAS=bias, ACTIVATION=act,
                           ALIGNED_A=aligned_a, ALIGNED_B=aligned_b, TILE_M=t["TILE_M"],
                           TILE_N=t["TILE_N"], TILE_K=t["TILE_K"], GROUP=t["GROUP"],
                           WARPS_M=warps_m, WARPS_N=warps_n, **staging,
                           **g.kernel_types(epilogue), MMA=MMA_TYPES.get(g.precision, "tf32"))

    def launch_tile(self, wgmma):
        return self.g.wg_tile if wgmma else self.g.tile

    def geometry(self, copy_async):
        wgmma = self.warpgroup(copy_async)
        if wgmma:  # warpgroups of 4 warps, one per 64 rows of the tile
            return 32, self.g.wg_tile["TILE_M"] // 16, True
        return super().geometry(copy_async)

    def pre_launches(self, A, B, lda, ldb, stride_a, stride_b, b_packed, aligned_ab, W,
                     wgmma, c_layout):
        g = self.g
        if not (wgmma and g.K):
            return [], A, B, lda, ldb, stride_a, stride_b, aligned_ab
        if g.staged:
            return self._staged(A, B, lda, ldb, stride_a, stride_b, aligned_ab, W)
        if g.mma_kind != "tf32":
            return [], A, B, lda, ldb, stride_a, stride_b, aligned_ab
        # the packing kernels are in the product's own program: no second build
        prg = self.program(1, 1, c_layout[0], epilogue=c_layout[1], wgmma=True)
        size_a, _ = g.k_major_elements()
        at = self._after_partials()
        a_src, a_args, copies_a, A, lda, stride_a = self._k_major("a", A, lda, stride_a, W, at)
        b_src, b_args, copies_b, B, ldb, stride_b = self._k_major("b", B, ldb, stride_b, W,
                                                                  at + size_a)
        # one launch packs both (pack_<A's source>_<B's source>): 32 x 32 blocks of A
        # (blocks_k along K, rows of D), then B's
        i32 = np.int32
        blocks_k = ceil_div(round_up(g.K, 4), 32)
        tiles_a, tiles_b = (blocks_k * ceil_div(D, 32) for D in (g.M, g.N))
        launch = program.Launch(
            prg, "pack_%s_%s" % (a_src, b_src),
            ((tiles_a + tiles_b) * 32, 8, max(copies_a, copies_b)), (32, 8, 1),
            a_args + b_args + [i32(blocks_k), i32(tiles_a), i32(copies_a), i32(copies_b)])
        return [launch], A, B, lda, ldb, stride_a, stride_b, (1, 1)

    def _staged(self, A, B, lda, ldb, stride_a, stride_b, aligned_ab, W):
        """The copies of the staged operands (``g.staged``) into the workspace in the
        products' 16-bit type (core/copy.py's StridedCopy: their layout kept, rows padded
        to 16 bytes; A's copy first), and the operands as the product then reads them."""
        g = self.g
        kind = as_dtype(HALF_STORAGE_TYPES[g.precision])
        operands = {"a": [A, lda, stride_a], "b": [B, ldb, stride_b]}
        launches, at = [], self._after_partials()
        for which in g.staged:
            X, ld, stride = operands[which]
            rows, cols = g._rows_cols(which)
            lds = g.staged_ld(which)
            copies = g.batch if stride else 1  # a shared operand is copied once
            s_stride = rows * lds if stride else 0
            staged = ws_view(W, 4 * at, copies * rows * lds, kind)
            key = (which, ld, stride)
            if key not in self._staging:
                self._staging[key] = StridedCopy(g.ctx, (copies, rows, cols), (stride, ld, 1),
                                                 (s_stride, lds, 1), X.dtype, kind)
            launches += self._staging[key].launches(X, staged)
            operands[which] = [staged, lds, s_stride]
            at += g.staged_elements(which)
        (A, lda, stride_a), (B, ldb, stride_b) = operands["a"], operands["b"]
        aligned_ab = tuple(1 if x in g.staged else a for x, a in zip("ab", aligned_ab))
        return launches, A, B, lda, ldb, stride_a, stride_b, aligned_ab

    def _k_major(self, which, X, ld, stride, W, at):
        """TF32 warpgroup products read A and B K-major, rounded to TF32 and with 16-byte
        aligned rows: how operand ``which`` is packed so into the workspace ``W`` from
        element ``at`` on, as its source layout ("rows" or "columns"), its arguments of
        the pack kernel and its copies (the batch's, or 1 for an operand the batch
        shares), then the operand as the product then reads it (tensor, leading
        dimension, batch stride). Rounding each value once here costs a
        pass over the operand; rounding it in the kernel costs every work-group that reads
        it. With ``g.split_tf32`` each row is A's parts lo, hi, hi or B's hi, lo, hi
        (SPLIT_PARTS, which keep an inf or NaN out of the products with a lo), a segment of
        K each, which the product runs as one K three times as long (``g.product_k``)."""
        g = self.g
        k_major = not g.trans_a if which == "a" else g.trans_b
        D = g.M if which == "a" else g.N
        ldk = g.k_major_ld
        copies = g.batch if stride else 1  # a shared operand is packed once
        packed = ws_view(W, 4 * at, copies * D * ldk)
        i32, u64 = np.int32, np.uint64
        packed_stride = D * ldk if stride else 0
        args = [i32(D), i32(g.K), X, i32(ld), u64(stride), packed, i32(ldk),
                u64(packed_stride)]
        return ("rows" if k_major else "columns"), args, copies, packed, ldk, packed_stride


class SubgroupMatrix(_TiledLaunch):
    """Intel's subgroup matrix products (kernels/gemm_subgroup_mma.cl,
    ``cl_intel_subgroup_matrix_multiply_accumulate``) for 16-bit operands stored as they
    take them."""

    def program(self, aligned_a=0, aligned_b=0, aligned_c=0, epilogue=True, copy_async=False,
                wgmma=False):
        g = self.g
        bias, act = _epilogue(g, epilogue)
        t = g.tile
        return program.get(g.ctx, "gemm_subgroup_mma", TRANS_A=int(g.trans_a),
                           TRANS_B=int(g.trans_b), BIAS=bias, ACTIVATION=act,
                           TILE_M=t["TILE_M"], TILE_N=t["TILE_N"], GROUP=t["GROUP"],
                           SUBGROUP=g.subgroup, KIND=MMA_TYPES[g.precision],
                           **g.kernel_types(epilogue))
