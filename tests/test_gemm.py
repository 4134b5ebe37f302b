import json
import math
import os
from types import SimpleNamespace

import numpy as np
import pytest

import dlprim as dp
from dlprim.cli import tune
from dlprim.core import tuning, tuning_launch
from dlprim.core.gemm import Gemm, gemm
from dlprim.kernels import program
import layer_check
from layer_check import host
from dlprim.utils import ceil_div, round_up

EDGES = [1, 31, 32, 33, 63, 64, 65, 127, 129]
# each edge size appears once as M, once as N and once as K
SHAPES = [(EDGES[i], EDGES[(i + 3) % 9], EDGES[(i + 6) % 9]) for i in range(9)]

ACT = {"identity": lambda x: x, "relu": lambda x: np.maximum(x, 0),
       "relu6": lambda x: np.clip(x, 0, 6), "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
       "tanh": np.tanh, "silu": lambda x: x / (1 + np.exp(-x)),
       "gelu": lambda x: 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))}


def stored(a, trans):
    """The array as it lies in memory when the op transposes it."""
    return np.ascontiguousarray(a.T) if trans else a


def reference(a, b, c_old=None, alpha=1.0, beta=0.0, bias=None, mode=None, act="identity"):
    y = alpha * (a.astype(np.float64) @ b.astype(np.float64))
    if beta:
        y += beta * c_old
    if mode == "row":
        y += bias[:, None]
    elif mode == "col":
        y += bias[None, :]
    return ACT[act](y)


def t(ctx, a):
    return dp.Tensor.from_numpy(ctx, np.asarray(a, np.float32))


def poisoned(ctx, shape):
    return t(ctx, np.full(shape, np.nan, np.float32))


def close(got, want, K):
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5 * max(K, 1) ** 0.5 + 1e-6)


@pytest.mark.parametrize("trans_a, trans_b", [(0, 0), (0, 1), (1, 0), (1, 1)])
def test_edge_shapes_all_transposes(ctx, rng, trans_a, trans_b):
    for M, N, K in SHAPES:
        a = rng.standard_normal((M, K))
        b = rng.standard_normal((K, N))
        C = poisoned(ctx, (M, N))  # beta = 0 must not read C, and every element is written
        Gemm(ctx, M, N, K, trans_a, trans_b)(t(ctx, stored(a, trans_a)), t(ctx, stored(b, trans_b)), C)
        close(C.numpy(), reference(a, b), K)


def test_alpha_beta(ctx, rng):
    M, N, K = 65, 33, 127
    a, b, c = (rng.standard_normal(s) for s in ((M, K), (K, N), (M, N)))
    C = t(ctx, c)
    Gemm(ctx, M, N, K)(t(ctx, a), t(ctx, b), C, alpha=0.5, beta=-1.5)
    close(C.numpy(), reference(a, b, c, 0.5, -1.5), K)


@pytest.mark.parametrize("mode, act, N", [("row", "relu", 65), ("col", "relu6", 68),
                                          (None, "sigmoid", 68), ("row", "tanh", 68),
                                          ("col", "identity", 65)])
def test_bias_and_activation(ctx, rng, mode, act, N):
    # N = 68: float4 epilogue on whole groups of 4 columns, scalar on the ragged rest
    M, K = 33, 31
    a, b, c = (3 * rng.standard_normal(s) for s in ((M, K), (K, N), (M, N)))
    bias = 4 * rng.standard_normal(M if mode == "row" else N)
    C = t(ctx, c)
    op = Gemm(ctx, M, N, K, bias=mode, activation=act)
    op(t(ctx, a), t(ctx, b), C, bias=t(ctx, bias) if mode else None, alpha=0.7, beta=0.3)
    want = reference(a, b, c, 0.7, 0.3, bias, mode, act)
    if act == "relu6":
        assert (want == 6).any() and (want == 0).any()  # the clip is exercised
    close(C.numpy(), want, K)


_ERF = np.vectorize(math.erf)
INFERENCE_ACT = {"gelu": lambda x: 0.5 * x * (1 + _ERF(x / math.sqrt(2))),
                 "gelu_tanh": lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi)
                                                             * (x + 0.044715 * x ** 3))),
                 "silu": lambda x: x / (1 + np.exp(-x))}


@pytest.mark.parametrize("mode, act", [("col", "gelu"), ("row", "silu"), (None, "gelu_tanh"),
                                       ("col", "sigmoid"), ("row", "tanh"), (None, "identity"),
                                       ("col", "relu")])
def test_epilogue_on_whole_blocks_and_the_edge(ctx, rng, mode, act):
    # M >= tuning.CPU_PACK_MIN_M: CPUs' tiled kernel, whose whole blocks apply the
    # epilogue to their vectors where the activation reads the same on them (the rest,
    # and relu, element by element); N = 70 leaves a ragged block past the whole ones
    M, N, K = 130, 70, 37
    a, b, c = (2 * rng.standard_normal(s) for s in ((M, K), (K, N), (M, N)))
    bias = 2 * rng.standard_normal(M if mode == "row" else N)
    C = t(ctx, c)
    op = Gemm(ctx, M, N, K, bias=mode, activation=act)
    op(t(ctx, a), t(ctx, b), C, bias=t(ctx, bias) if mode else None, alpha=0.7, beta=0.3)
    plain = reference(a, b, c, 0.7, 0.3, bias, mode)
    want = INFERENCE_ACT[act](plain) if act in INFERENCE_ACT else ACT[act](plain)
    close(C.numpy(), want, K)


@pytest.mark.parametrize("trans_a, trans_b, pad", [(0, 0, 5), (1, 1, 3), (0, 1, 4), (1, 0, 8)])
def test_offsets_and_leading_dims(ctx, rng, trans_a, trans_b, pad):
    # even pads put every row at a multiple of 4 elements: the float4 load/store paths
    M, N, K = 63, 65, 33
    a, b = rng.standard_normal((M, K)), rng.standard_normal((K, N))
    sa, sb = stored(a, trans_a), stored(b, trans_b)
    lda, ldb, ldc = (round_up(n, 4) + pad for n in (sa.shape[1], sb.shape[1], N))
    off = 4 if pad % 2 == 0 else 7

    def place(start, rows, ld):
        begin = round_up(start, 4) + off
        return begin, begin + rows * ld

    ia, end = place(0, sa.shape[0], lda)
    ib, end = place(end, sb.shape[0], ldb)
    ic, end = place(end, M, ldc)
    arena = np.full(end + 5, -7.0, np.float32)
    arena[ia:ia + sa.shape[0] * lda].reshape(-1, lda)[:, :sa.shape[1]] = sa
    arena[ib:ib + sb.shape[0] * ldb].reshape(-1, ldb)[:, :sb.shape[1]] = sb
    whole = t(ctx, arena)
    A = whole.view((sa.shape[0] * lda,), ia)
    B = whole.view((sb.shape[0] * ldb,), ib)
    C = whole.view((M * ldc,), ic)
    op = Gemm(ctx, M, N, K, trans_a, trans_b)
    assert op.aligned(lda, ia, 0) == op.aligned(ldb, ib, 0) == op.aligned(ldc, ic, 0) == (pad % 2 == 0)
    op(A, B, C, lda=lda, ldb=ldb, ldc=ldc)
    out = whole.numpy()
    close(out[ic:end].reshape(M, ldc)[:, :N], reference(a, b), K)
    assert np.all(out[ic:end].reshape(M, ldc)[:, N:] == -7)  # padding columns untouched
    assert np.array_equal(out[:ic], arena[:ic]) and np.array_equal(out[end:], arena[end:])


def test_strided_batch(ctx, rng):
    M, N, K, batch = 31, 33, 65, 3
    a = rng.standard_normal((batch, M, K))
    b = rng.standard_normal((K, N))  # stride_b = 0: one B shared by every batch
    sc = M * N + 5
    C = poisoned(ctx, (batch * sc,))
    op = Gemm(ctx, M, N, K, bias="col", batch=batch)
    bias = rng.standard_normal(N)
    op(t(ctx, a), t(ctx, b), C, bias=t(ctx, bias), stride_a=M * K, stride_b=0, stride_c=sc)
    out = C.numpy()
    for i in range(batch):
        close(out[i * sc:i * sc + M * N].reshape(M, N), reference(a[i], b, bias=bias, mode="col"), K)


def test_k_zero(ctx, rng):
    M, N = 33, 31
    c, bias = rng.standard_normal((M, N)), rng.standard_normal(M)
    C = t(ctx, c)
    Gemm(ctx, M, N, 0, bias="row", activation="relu")(
        t(ctx, np.zeros((M, 0))), t(ctx, np.zeros((0, N))), C, bias=t(ctx, bias), beta=2.0)
    close(C.numpy(), np.maximum(2 * c + bias[:, None], 0), 1)


def test_functional_gemm(ctx, rng):
    a, b, bias = rng.standard_normal((64, 32)), rng.standard_normal((129, 32)), rng.standard_normal(129)
    C = gemm(ctx, t(ctx, a), t(ctx, b), trans_b=True, bias=t(ctx, bias), activation="tanh")
    assert C.shape == (64, 129)
    close(C.numpy(), reference(a, b.T, bias=bias, mode="col", act="tanh"), 32)
    with pytest.raises(ValueError, match="op\\(A\\) is 64 x 32 but op\\(B\\) is 129 x 32"):
        gemm(ctx, t(ctx, a), t(ctx, b))


@pytest.mark.parametrize("tile", [dict(VEC=1, BLOCK_M=2, BLOCK_N=4, TILE_K=8),
                                  dict(GROUP=2, TILE_M=16, TILE_N=32),
                                  dict(TILE_M=16, TILE_N=48, TILE_K=8, BLOCK_M=4, BLOCK_N=12,
                                       VEC=4, GROUP=8)])
def test_explicit_tiles(ctx, rng, tile):
    # scalar local reads; banded tile order with a ragged last band (9 tile rows); three
    # float4 pieces per thread row as in the 128x192 wave tile (tuning.WAVE_TILES)
    M, N, K = 129, 65, 63
    a, b = rng.standard_normal((M, K)), rng.standard_normal((K, N))
    C = poisoned(ctx, (M, N))
    op = Gemm(ctx, M, N, K, tile=tile)
    assert all(op.tile[k] == v for k, v in tile.items())
    op(t(ctx, a), t(ctx, b), C)
    close(C.numpy(), reference(a, b), K)


def test_errors(ctx):
    op = Gemm(ctx, 4, 5, 6, bias="row")
    A, B, C, bias = t(ctx, np.ones((4, 6))), t(ctx, np.ones((6, 5))), t(ctx, np.ones((4, 5))), t(ctx, np.ones(4))
    with pytest.raises(ValueError, match="M must be a non-negative integer"):
        Gemm(ctx, -1, 5, 6)
    with pytest.raises(ValueError, match="unknown activation 'softplus'"):
        Gemm(ctx, 4, 5, 6, activation="softplus")
    with pytest.raises(ValueError, match="bias must be None, 'row' or 'col'"):
        Gemm(ctx, 4, 5, 6, bias="both")
    with pytest.raises(ValueError, match="TILE_M=24 must be a multiple of (4 and of )?BLOCK_M=16"):
        Gemm(ctx, 4, 5, 6, tile=dict(TILE_M=24, BLOCK_M=16))
    with pytest.raises(TypeError, match="A must be float32"):
        op.launches(dp.Tensor.from_numpy(ctx, np.ones((4, 6), np.int32)), B, C, bias)
    with pytest.raises(ValueError, match="B has 29 elements"):
        op.launches(A, t(ctx, np.ones(29)), C, bias)
    with pytest.raises(ValueError, match="lda=5 is less than the 6 columns"):
        op.launches(A, B, C, bias, lda=5)
    with pytest.raises(ValueError, match="C has 20 elements.*needs 23"):
        op.launches(A, B, C, bias, ldc=6)
    with pytest.raises(ValueError, match="bias=.row. needs a bias Tensor"):
        op.launches(A, B, C)
    with pytest.raises(ValueError, match="must hold 4 values"):
        op.launches(A, B, C, t(ctx, np.ones(5)))
    with pytest.raises(ValueError, match="built with bias=None"):
        Gemm(ctx, 4, 5, 6).launches(A, B, C, bias)
    with pytest.raises(ValueError, match="ldb=134217728 is too large"):
        op.launches(A, B, C, bias, ldb=2 ** 27)
    with pytest.raises(ValueError, match="stride_c=3 makes the 2 output matrices overlap"):
        Gemm(ctx, 4, 5, 6, batch=2).launches(A, B, t(ctx, np.ones(40)), stride_c=3)
    assert Gemm(ctx, 0, 5, 6).launches(t(ctx, np.ones(0)), B, t(ctx, np.ones(0))) == []


def test_shape_class():
    shapes = ((128, 128), (64, 64), (128, 64), (63, 64), (64, 1), (1, 1), (2048, 2048),
              (4096, 4096))
    assert [tuning.shape_class(m, n, 1, 132) for m, n in shapes] == \
        ["medium", "narrow_m", "narrow_n", "small_m", "small_n", "small", "large", "huge"]
    assert tuning.shape_class(128, 128, batch=200, compute_units=132) == "large"


def test_shape_class_counts_the_tables_own_tiles(monkeypatch):
    # the classes count the family's own large and huge tiles: on Intel's table (64x64,
    # 512 compute units) 2048x2048 gives every unit two 64x64 tiles and is 'large', where
    # counting 128x128 tiles made it (and all up to 2816x2816) 'medium', on 32x32 tiles
    monkeypatch.setattr(tuning, "tuned_tile", lambda *a, **k: None)
    intel = SimpleNamespace(is_cpu=False, is_gpu=True, vendor_id="intel", compute_units=512)
    assert tuning.class_tiles("intel") == ((64, 64), (64, 64))
    sides = (1024, 1408, 1409, 2048, 2816)
    assert [tuning.gemm_class(intel, s, s) for s in sides] == \
        ["medium", "medium", "large", "large", "huge"]
    assert (tuning.pick_tile(intel, 2048, 2048)["TILE_M"],
            tuning.pick_tile(intel, 1024, 1024)["TILE_M"]) == (64, 32)
    assert tuning.gemm_class(intel, 1024, 1024, batch=2) == "large"
    # NVIDIA and AMD ('gpu': 128x128 and 128x256) and the one-tile tables as before
    for vendor_id, cpu in (("nvidia", False), ("amd", False), ("pocl", True)):
        facts = SimpleNamespace(is_cpu=cpu, is_gpu=not cpu, vendor_id=vendor_id,
                                compute_units=132)
        for m, n, batch in ((128, 128, 1), (1408, 1408, 1), (1536, 1536, 1), (2048, 2048, 1),
                            (4096, 4096, 1), (128, 128, 200), (1024, 512, 3)):
            old = ("medium" if ceil_div(m, 128) * ceil_div(n, 128) * batch < 132 else
                   "huge" if ceil_div(m, 128) * ceil_div(n, 256) * batch * 2 >= 5 * 132
                   else "large")
            assert tuning.gemm_class(facts, m, n, batch) == old, (vendor_id, m, n, batch)


def test_tuner_round_trip(ctx, rng, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("DLPRIM_CACHE_DIR", str(tmp_path))
    assert tuning.tuned_tile(ctx.facts, "small") is None
    # a stored entry is what Gemm uses for that shape class
    mine = dict(TILE_M=16, TILE_N=16, TILE_K=8, BLOCK_M=4, BLOCK_N=4, VEC=4, GROUP=1)
    path = tuning.store_tuned(ctx.facts, {"small": mine})
    assert path.startswith(str(tmp_path))
    op = Gemm(ctx, 33, 31, 9)
    assert op.tile == mine
    a, b = rng.standard_normal((33, 9)), rng.standard_normal((9, 31))
    close(op(t(ctx, a), t(ctx, b), t(ctx, np.zeros((33, 31)))).numpy(), reference(a, b), 9)
    # the tuner measures candidates and stores its pick per shape class
    tune.main(["gemm", "--sizes", "64x8x8", "--candidates", "2", "--repeat", "1"], ctx=ctx)
    data = json.loads((tmp_path / "gemm_tuning.json").read_text())
    entry = data[tuning.device_key(ctx.facts)]
    assert entry["small"] == mine and set(entry["small_n"]) == set(tuning.TILE_KEYS)
    assert "small_n" in capsys.readouterr().out


@pytest.mark.parametrize("trans_a, trans_b", [(0, 0), (1, 1)])
def test_split_k(ctx, rng, trans_a, trans_b):
    # K cut into parts summed by a second kernel that also applies beta, bias, activation
    M, N, K, batch = 33, 31, 129, 2
    a, b = rng.standard_normal((batch, M, K)), rng.standard_normal((batch, K, N))
    c, bias = rng.standard_normal((batch, M, N)), rng.standard_normal(M)
    op = Gemm(ctx, M, N, K, trans_a, trans_b, bias="row", activation="tanh", batch=batch,
              split_k=3)
    assert (op.splits, op.k_chunk) == (3, 48)
    sa = np.stack([stored(x, trans_a) for x in a])
    sb = np.stack([stored(x, trans_b) for x in b])
    C = t(ctx, c)
    launches = op.launches(t(ctx, sa), t(ctx, sb), C, bias=t(ctx, bias), alpha=0.5, beta=0.25,
                           stride_a=M * K, stride_b=K * N, stride_c=M * N)
    assert [launch.name for launch in launches] == ["gemm", "gemm_reduce"]
    for launch in launches:
        launch(ctx.queue)
    out = C.numpy()
    for i in range(batch):
        close(out[i], reference(a[i], b[i], c[i], 0.5, 0.25, bias, "row", "tanh"), K)


def test_split_k_choice_on_gpus(ctx, rng, monkeypatch):
    # the automatic rule, seen as a 132-unit GPU with 32x32 tiles of 64 threads
    if ctx.facts.is_gpu:
        pytest.skip("models a GPU with a CPU device's tile table; a real GPU has its own tiles")
    monkeypatch.setattr(ctx.facts, "is_gpu", True)
    monkeypatch.setattr(ctx.facts, "compute_units", 132)
    tile = dict(TILE_M=32, TILE_N=32, TILE_K=16, BLOCK_M=4, BLOCK_N=4, VEC=4, GROUP=1)
    assert Gemm(ctx, 2048, 2048, 2048, tile=tile).splits == 1   # fills the device
    assert Gemm(ctx, 512, 512, 1024, tile=tile).splits == 2     # 6% filled
    assert Gemm(ctx, 512, 512, 512, tile=tile).splits == 1      # ... but K too short to share
    assert Gemm(ctx, 1024, 1024, 1024, tile=tile).splits == 1   # 24% filled: whole
    # few rows (an inner product's batch) split finely up to 10% filled
    assert Gemm(ctx, 16, 4096, 4096, tile=tile).splits == 16    # 3% filled
    assert Gemm(ctx, 16, 9216, 4096, tile=tile).splits == 8     # 7% filled
    assert Gemm(ctx, 16, 4096, 1000, tile=tile).splits == 7     # K/128
    assert Gemm(ctx, 128, 2048, 4096, tile=tile).splits == 2    # not few rows: 6% filled
    assert Gemm(ctx, 0, 31, 4096, tile=tile).splits == 1
    op = Gemm(ctx, 31, 31, 4096, tile=tile)                     # one tile: 16 parts of 256
    assert (op.splits, op.k_chunk) == (16, 256)
    a, b = rng.standard_normal((31, 4096)), rng.standard_normal((4096, 31))
    C = poisoned(ctx, (31, 31))
    op(t(ctx, a), t(ctx, b), C)
    close(C.numpy(), reference(a, b), 4096)


class _GpuFacts:
    """An H100 as the tile tables see it (132 compute units)."""
    is_cpu, is_gpu, vendor_id, compute_units = False, True, "nvidia", 132


def _plan(M, N, K, batch=1, facts=None, trans_b=False):
    p = tuning.wave_plan(facts or _GpuFacts(), M, N, K, batch, trans_b)
    return p and ("%dx%d" % (p[0]["TILE_M"], p[0]["TILE_N"]), p[1])


def test_wave_plan(monkeypatch):
    monkeypatch.setattr(tuning, "tuned_tile", lambda *a, **k: None)
    tokens = 64 * 197  # vit_b_16 at batch 64
    # 768 wide: 128x256 tiles make 2.25 waves of 132, 128x192 and 192x128 tiles 3.0; of
    # those, the one faster with B in its layout (read along K for an inner product)
    assert _plan(tokens, 768, 768, trans_b=True) == ("128x192", 1)
    assert _plan(tokens, 768, 768) == ("192x128", 1)
    assert _plan(tokens, 768, 3072, trans_b=True) == ("128x192", 1)  # a split costs more
    assert _plan(tokens, 3072, 768, trans_b=True) == ("128x256", 1)  # 9.0 waves already
    assert _plan(128, 50176, 1152) is None  # 192-row tiles would be a third empty
    # weight gradients: few tiles, K = tokens long: split into whole waves
    assert _plan(768, 768, tokens) == ("128x256", 7)       # 126 of 132 units
    assert _plan(3072, 768, tokens) == ("128x256", 11)     # 792 work-groups: 6.0 waves
    # nothing whole enough: the shape-class table decides
    assert _plan(1024, 1024, 1024) is None                 # 32 tiles, K too short to split
    assert _plan(2048, 3136, 512) is None                  # 1.6 / 2.1 waves
    assert _plan(64, 4096, 4096) is None                   # narrow: not this plan's tiles

    class Cpu(_GpuFacts):
        is_cpu, is_gpu, vendor_id = True, False, "pocl"
    assert _plan(tokens, 768, 768, facts=Cpu()) is None
    # a tuned tile for the shape's class wins over the plan
    monkeypatch.setattr(tuning, "tuned_tile", lambda *a, **k: dict(tuning.WAVE_TILES[0][0]))
    assert _plan(tokens, 768, 768) is None


def test_wave_plan_in_gemm(ctx, monkeypatch):
    # Gemm takes the plan's tile and split unless a tile or split_k is given
    monkeypatch.setattr(tuning, "wave_plan",
                        lambda facts, M, N, K, batch, trans_b: (dict(tuning.WAVE_TILES[1][0]), 2))
    op = Gemm(ctx, 40, 24, 64)
    assert op.tile == tuning.WAVE_TILES[1][0] and op.splits == 2
    assert Gemm(ctx, 40, 24, 64, split_k=1).splits == 1


def test_caller_workspace(ctx, rng):
    # the split-K partial sums go where the caller (a layer's planned workspace) says
    M, N, K = 33, 31, 129
    op = Gemm(ctx, M, N, K, split_k=3)
    assert op.workspace_elements == 3 * round_up(M * N, 4)
    assert Gemm(ctx, M, N, K, split_k=1).workspace_elements == 0
    a, b = rng.standard_normal((M, K)), rng.standard_normal((K, N))
    W = poisoned(ctx, (4 + op.workspace_elements,))

    def at(offset):
        return dp.Tensor(ctx, (op.workspace_elements,), "float32", buffer=W.buffer, offset=offset)
    C = poisoned(ctx, (M, N))
    op(t(ctx, a), t(ctx, b), C, workspace=at(4))
    close(C.numpy(), reference(a, b), K)
    assert op._workspace is None  # no private copy was made
    with pytest.raises(ValueError, match="the workspace has 10 elements, this product needs"):
        op(t(ctx, a), t(ctx, b), C, workspace=t(ctx, np.zeros(10)))
    with pytest.raises(ValueError, match="16-byte aligned"):
        op(t(ctx, a), t(ctx, b), C, workspace=at(1))
    with pytest.raises(TypeError, match="float32"):
        op(t(ctx, a), t(ctx, b), C, workspace=np.zeros(op.workspace_elements, np.float32))


# the wide register-block tiles of kernels/gemm_cpu.cl (any OpenCL device runs them)
WIDE = [dict(TILE_M=16, TILE_N=64, TILE_K=8, BLOCK_M=4, BLOCK_N=16, VEC=8, GROUP=1),
        dict(TILE_M=12, TILE_N=32, TILE_K=4, BLOCK_M=6, BLOCK_N=32, VEC=16, GROUP=1)]


@pytest.mark.parametrize("tile", WIDE)
@pytest.mark.parametrize("trans_a, trans_b", [(0, 0), (0, 1), (1, 0), (1, 1)])
def test_wide_tiles(ctx, rng, tile, trans_a, trans_b):
    # edges of the register block and of the vectors (N = 1, 31, 33, 65 against 8 and 16);
    # strided batches at odd offsets, padded leading dimensions, beta, bias and activation
    assert tuning.gemm_kernel(tile) == "gemm_cpu"
    if tile["VEC"] > ctx.facts.max_float_vector:  # a compiler that aborts on float16
        with pytest.raises(ValueError, match="VEC=16 is wider than this device's compiler"):
            Gemm(ctx, 8, 8, 8, tile=tile)
        return
    check_strided_batches(ctx, rng, trans_a, trans_b, tile,
                          [(1, 1, 1), (31, 33, 5), (33, 65, 31), (65, 31, 33), (7, 17, 65)])


@pytest.mark.parametrize("trans_a, trans_b", [(0, 0), (0, 1), (1, 0), (1, 1)])
def test_cpu_few_rows(ctx, rng, trans_a, trans_b):
    # the few-rows CPU kernel: M against its 4-row blocks, N against 2 rows of a transposed
    # B and 16 columns (two float8) of a row-major one, K against the 8-wide dot products
    if not ctx.facts.is_cpu:
        pytest.skip("gemm_small_m runs on CPUs")
    shapes = [(1, 1, 1), (3, 17, 9), (4, 2, 8), (5, 15, 7), (9, 33, 65), (63, 31, 16)]
    for M, N, K in shapes:
        op = Gemm(ctx, M, N, K, trans_a, trans_b)
        # (one row over a transposed B: gemv.cl, tuning.gemv_rows)
        assert (op.gemv if M == 1 and trans_b and not trans_a else op.small_m) and \
            op.splits == 1
    check_strided_batches(ctx, rng, trans_a, trans_b, None, shapes, bias_mode="row")
    check_strided_batches(ctx, rng, trans_a, trans_b, None, shapes[:3])
    assert not Gemm(ctx, tuning.CPU_PACK_MIN_M, 8, 8).small_m


def check_strided_batches(ctx, rng, trans_a, trans_b, tile, shapes, bias_mode="col"):
    batch, pad = 2, 3
    for M, N, K in shapes:
        a, b = rng.standard_normal((batch, M, K)), rng.standard_normal((batch, K, N))
        c, bias = rng.standard_normal((batch, M, N)), rng.standard_normal(N if bias_mode == "col" else M)
        sa, sb = (np.stack([stored(x, tr) for x in xs]) for xs, tr in ((a, trans_a), (b, trans_b)))
        lda, ldb = sa.shape[2] + pad, sb.shape[2] + pad
        A = np.full((batch, sa.shape[1], lda), np.nan)
        A[:, :, :sa.shape[2]] = sa
        B = np.full((batch, sb.shape[1], ldb), np.nan)
        B[:, :, :sb.shape[2]] = sb
        Ab = t(ctx, np.concatenate([[np.nan], A.ravel()])).view((A.size,), offset=1)
        op = Gemm(ctx, M, N, K, trans_a, trans_b, bias=bias_mode, activation="relu", batch=batch,
                  tile=tile)
        C = t(ctx, c)
        op(Ab, t(ctx, B), C, bias=t(ctx, bias), alpha=0.5, beta=0.25, lda=lda, ldb=ldb,
           stride_a=A[0].size, stride_b=B[0].size, stride_c=M * N)
        for i in range(batch):
            close(C.numpy()[i], reference(a[i], b[i], c[i], 0.5, 0.25, bias, bias_mode, "relu"), K)


def test_cpu_table_uses_wide_tiles(ctx):
    if not ctx.facts.is_cpu:
        pytest.skip("the CPU row of the GEMM table")
    assert tuning.gemm_kernel(Gemm(ctx, 1024, 1024, 1024).tile) == "gemm_cpu"


def test_wide_tiles_pack_and_split(ctx, rng):
    # B packed into strips (M >= CPU_PACK_MIN_M), then K cut in three and summed
    M, N, K = tuning.CPU_PACK_MIN_M + 6, 33, 100
    a, b, c, bias = (rng.standard_normal(s) for s in ((M, K), (N, K), (M, N), M))
    op = Gemm(ctx, M, N, K, trans_b=True, bias="row", split_k=3, tile=WIDE[0])
    C = t(ctx, c)
    launches = op.launches(t(ctx, a), t(ctx, b), C, bias=t(ctx, bias), beta=0.5)
    assert [launch.name for launch in launches] == ["gemm_pack_b", "gemm", "gemm_reduce"]
    for launch in launches:
        launch(ctx.queue)
    close(C.numpy(), reference(a, b.T, c, 1.0, 0.5, bias, "row"), K)


@pytest.mark.parametrize("trans_a", [0, 1])
def test_packed_strips_past_the_edge_are_not_read(ctx, rng, trans_a):
    """Work-groups cover a multiple of TILE_N (and TILE_M) columns, the packed strips stop at
    N (and M): the blocks past the edge read the last strip, not memory after the packed
    buffer. 17 columns in 64-wide tiles leave two blocks past the two strips; with K large
    the packed buffer is a mapping of its own, so a read past it faults (it did: the filter
    gradient of a 3 -> 64 7x7 layer at 224x224, 147 columns)."""
    M, N, K = 70, 17, 65536
    a, b = rng.standard_normal((M, K)), rng.standard_normal((N, K))
    op = Gemm(ctx, M, N, K, trans_a=trans_a, trans_b=True, tile=WIDE[0])
    assert op.pack_b and op.pack_a == bool(trans_a)
    C = dp.Tensor(ctx, (M, N))
    op(t(ctx, stored(a, trans_a)), t(ctx, b), C)
    close(C.numpy(), reference(a, b.T), K)


@pytest.mark.parametrize("trans_a", [0, 1])
def test_cpu_batch_sum(ctx, rng, trans_a):
    # one C = beta * C + the sum over the batch of op(A_b) op(B_b)ᵀ (filter gradients)
    if not Gemm.batch_summable(ctx, 5, True):
        pytest.skip("batch_sum runs on the few-rows CPU kernel")
    batch = 3
    for M, N, K in [(1, 1, 1), (5, 3, 17), (9, 33, 8)]:
        a, b = rng.standard_normal((batch, M, K)), rng.standard_normal((batch, K, N))
        c = rng.standard_normal((M, N))
        op = Gemm(ctx, M, N, K, trans_a, True, batch=batch, batch_sum=True)
        A = t(ctx, np.stack([stored(x, trans_a) for x in a]))
        B = t(ctx, np.stack([x.T for x in b]))
        want = sum(reference(a[i], b[i]) for i in range(batch))
        C = poisoned(ctx, (M, N))
        op(A, B, C, stride_a=M * K, stride_b=K * N)
        close(C.numpy(), want, K * batch)
        C = t(ctx, c)
        op(A, B, C, stride_a=M * K, stride_b=K * N, beta=0.5)
        close(C.numpy(), want + 0.5 * c, K * batch)
    with pytest.raises(ValueError, match="batch_sum"):
        Gemm(ctx, 5, 3, 17, trans_b=False, batch=2, batch_sum=True)
    with pytest.raises(ValueError, match="batch_sum"):
        Gemm(ctx, tuning.CPU_PACK_MIN_M, 3, 17, trans_b=True, batch=2, batch_sum=True)


def test_packed_b_errors(ctx):
    op = Gemm(ctx, 8, 8, 8)
    A, B, C = (t(ctx, np.zeros((8, 8))) for _ in range(3))
    if not op.pack_b:
        with pytest.raises(ValueError, match="b_packed needs a GEMM that packs B"):
            op.launches(A, B, C, b_packed=True)
    op = Gemm(ctx, tuning.CPU_PACK_MIN_M, 8, 8, tile=WIDE[0])
    A = t(ctx, np.zeros((tuning.CPU_PACK_MIN_M, 8)))
    C = t(ctx, np.zeros((tuning.CPU_PACK_MIN_M, 8)))
    if op.pack_b:
        with pytest.raises(ValueError, match="packed B has 4 elements, 128 are needed"):
            op.launches(A, t(ctx, np.zeros(4)), C, b_packed=True)


# ----- precision "tf32": tensor cores (kernels/gemm_mma.cl) where the device has them
def test_precision_choice(ctx):
    from dlprim.core.gemm import tensor_cores
    with pytest.raises(ValueError, match="Gemm: precision must be one of fp32, tf32, fp16, bf16, got .fp16x."):
        Gemm(ctx, 8, 8, 8, precision="fp16x")
    op = Gemm(ctx, 8, 8, 8, precision="tf32")
    assert op.precision == "tf32" and op.mma == tensor_cores(ctx)
    if not ctx.facts.is_gpu or ctx.facts.vendor_id != "nvidia":
        assert not op.mma  # no probe off NVIDIA GPUs: "tf32" runs the float32 kernels
    with pytest.raises(ValueError, match="own tile"):
        Gemm(ctx, 8, 8, 8, tile=dict(TILE_M=16), _mma=True)


@pytest.mark.parametrize("trans_a, trans_b", [(0, 0), (0, 1), (1, 0), (1, 1)])
def test_tensor_core_template_renders(ctx, trans_a, trans_b):
    # the template's Mako logic for every layout (its PTX only builds on NVIDIA drivers)
    from dlprim.kernels import program
    src = program.render("gemm_mma", facts=ctx.facts, TRANS_A=trans_a, TRANS_B=trans_b,
                         BIAS="row", ACTIVATION="relu", ALIGNED_A=1, ALIGNED_B=0,
                         GROUP=tuning.MMA_TILE["GROUP"], WARPS_M=2, WARPS_N=2, STAGES=tuning.MMA_STAGES,
                         **{k: tuning.MMA_TILE[k] for k in ("TILE_M", "TILE_N", "TILE_K")})
    assert "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32" in src
    assert "cvt.rna.tf32.f32" in src and "MMA_TF32(acc" in src and "MMA_F16(acc" not in src
    src = program.render("gemm_mma", facts=ctx.facts, TRANS_A=trans_a, TRANS_B=trans_b,
                         BIAS="row", ACTIVATION="relu", ALIGNED_A=1, ALIGNED_B=0,
                         GROUP=tuning.MMA_TILE["GROUP"], WARPS_M=2, WARPS_N=2, STAGES=tuning.MMA_STAGES, MMA="f16",
                         A_T="half", B_T="float", C_T="half",
                         **{k: tuning.mma_tile("fp16")[k] for k in ("TILE_M", "TILE_N", "TILE_K")})
    assert "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" in src
    assert "cp.async" not in src.split("#define COPY_ASYNC_WAIT(N)")[-1]
    src = program.render("gemm_mma", facts=ctx.facts, TRANS_A=trans_a, TRANS_B=trans_b,
                         BIAS="row", ACTIVATION="relu", ALIGNED_A=1, ALIGNED_B=1, ASYNC=1,
                         GROUP=8, WARPS_M=2, WARPS_N=2, STAGES=tuning.MMA_ASYNC_STAGES, MMA="f16",
                         A_T="half", B_T="half", C_T="half", TILE_M=128, TILE_N=128,
                         TILE_K=32)
    body = src.split("__kernel")[-1]
    assert "COPY_ASYNC(" in body and "COPY_ASYNC_WAIT(%d)" % (tuning.MMA_ASYNC_STAGES - 2) in body
    assert "a_reg" not in body  # no registers between global and local memory
    assert "MMA_F16(acc" in src and "MMA_TF32(acc" not in src and "__global const half *A" in src
    assert "ldmatrix.sync.aligned.m8n8.x4" in src and "A_FRAGMENTS(af[i]" in src


@pytest.mark.parametrize("mma, trans_a, trans_b", [("f16", 0, 0), ("bf16", 1, 1), ("tf32", 0, 1)])
def test_warpgroup_template_renders(ctx, mma, trans_a, trans_b):
    # gemm_wgmma.cl's PTX (sm_90a, behind program.SM90A) for each kind and layout: the
    # transposes name MN-major tiles; TF32 has none and takes K-major tiles only
    storage = {"f16": "half", "bf16": "bfloat16", "tf32": "float"}[mma]
    types = {} if mma == "tf32" else dict(A_T=storage, B_T=storage, C_T=storage)
    src = program.render("gemm_wgmma", facts=ctx.facts, TRANS_A=trans_a, TRANS_B=trans_b,
                         BIAS="none", ACTIVATION="identity", TILE_M=128, TILE_N=128,
                         TILE_K=16 if mma == "tf32" else 32, GROUP=8, WARPGROUPS=2,
                         STAGES=6, MMA=mma, **types)
    shape = "m64n128k8" if mma == "tf32" else "m64n128k16"
    assert program.SM90A + "wgmma.mma_async.sync.aligned.%s.f32.%s.%s {" % (shape, mma, mma) in src
    tail = "p, 1, 1;" if mma == "tf32" else "p, 1, 1, %d, %d;" % (trans_a, 1 - trans_b)
    assert tail in src
    body = src.split("__kernel")[1]
    for step in ("fence.proxy.async.shared::cta", "wgmma.fence", "wgmma.commit_group",
                 "wgmma.wait_group"):
        assert step in src and "WG_" in body
    assert ("void pack_rows_columns(" in src) == (mma == "tf32")
    with pytest.raises(Exception):  # TF32 products take K-major tiles only
        program.render("gemm_wgmma", facts=ctx.facts, TRANS_A=1, TRANS_B=1, BIAS="none",
                       ACTIVATION="identity", TILE_M=128, TILE_N=128, TILE_K=16, GROUP=8,
                       WARPGROUPS=2, STAGES=3, MMA="tf32")


def _tensor_cores_against_float64(ctx, rng, trans_a, trans_b, precision, dtypes, tolerance,
                                  large=True):
    """The tensor-core kernel of ``precision`` over the edges of the 128x128 tile and of
    K's 16, batches, split-K, beta, bias and activation, operands and C stored as
    ``dtypes``, against float64 within ``tolerance`` of the largest value; ``large``: also
    a long K (2048)."""
    from dlprim.core import gemm
    if not gemm.tensor_cores(ctx, precision):
        pytest.skip("no %s tensor cores this runtime drives on %s"
                    % (precision.upper(), ctx.facts.name))
    shapes = [(1, 1, 1, 1, None), (130, 136, 40, 2, None), (257, 129, 300, 1, 3)]
    for M, N, K, batch, split in shapes + ([(64, 1000, 2048, 1, None)] if large else []):
        a = rng.standard_normal((batch, K, M) if trans_a else (batch, M, K))
        b = rng.standard_normal((batch, N, K) if trans_b else (batch, K, N))
        c, bias = rng.standard_normal((batch, M, N)), rng.standard_normal(N)
        a, b, c = (layer_check.stored(x, d) for x, d in zip((a, b, c), dtypes))
        op = Gemm(ctx, M, N, K, trans_a, trans_b, bias="col", activation="relu", batch=batch,
                  split_k=split, precision=precision, dtypes=dtypes)
        assert op.mma
        C = dp.Tensor.from_numpy(ctx, host(c, dtypes[2]))
        op(dp.Tensor.from_numpy(ctx, host(a, dtypes[0])),
           dp.Tensor.from_numpy(ctx, host(b, dtypes[1])),
           C, bias=t(ctx, bias), alpha=0.5, beta=0.25, stride_a=a[0].size, stride_b=b[0].size,
           stride_c=M * N)
        A = a.transpose(0, 2, 1) if trans_a else a
        B = b.transpose(0, 2, 1) if trans_b else b
        want = np.maximum(0.5 * A @ B + 0.25 * c + bias, 0)
        err = np.abs(C.numpy().astype(np.float64) - want).max() / np.abs(want).max()
        assert err < tolerance, (M, N, K, dtypes, err)


@pytest.mark.parametrize("precision, dtypes, trans_a, trans_b", [
    ("tf32", ("float32",) * 3, 0, 1), ("fp16", ("float16", "float32", "float16"), 1, 0),
    ("fp16", ("float16",) * 3, 0, 0), ("bf16", ("bfloat16", "float32", "bfloat16"), 1, 1)])
def test_emulated_tensor_cores_match_float64(ctx, rng, monkeypatch, precision, dtypes,
                                             trans_a, trans_b):
    # on any device: the fragment layout, K order, staging and epilogue of gemm_mma.cl
    # with kernels/mma.h's products in OpenCL C (MMA_EMULATE), all but the PTX itself
    from dlprim.core import gemm
    layer_check.skip_unless_cpu(ctx)
    build = program.get
    monkeypatch.setattr(gemm, "tensor_cores", lambda ctx, precision="tf32": True)
    monkeypatch.setattr(program, "get", lambda ctx, name, **p: build(
        ctx, name, **(dict(p, MMA_EMULATE=True) if name == "gemm_mma" else p)))
    _tensor_cores_against_float64(ctx, rng, trans_a, trans_b, precision, dtypes,
                                  {"tf32": 2e-3, "fp16": 3e-3, "bf16": 2.5e-2}[precision],
                                  large=False)  # its 131M emulated products: minutes


@pytest.mark.parametrize("precision, trans_a, trans_b, M, N, K, gap, batch, split", [
    ("fp16", 0, 0, 136, 72, 72, 0, 2, None),  # M, N partial tiles, K a partial tile
    ("fp16", 1, 1, 40, 136, 200, 0, 1, 3),    # split-K: each part's K slice
    ("fp16", 0, 1, 129, 65, 24, 0, 1, None),  # rows of K (A and B) past M and N zero-filled
    ("fp16", 1, 0, 45, 70, 40, 3, 1, None),   # K-major A and B: chunks cut at M's and N's edge
    ("bf16", 1, 0, 72, 80, 48, 0, 2, None)])
def test_emulated_async_copies_match_float64(ctx, rng, monkeypatch, precision, trans_a, trans_b,
                                             M, N, K, gap, batch, split):
    # gemm_mma.cl's cp.async path (16-bit operands with 16-byte aligned rows): the
    # chunks, their zero-fill past the edges, the stages' rotation, over every layout;
    # rows of ``gap`` more columns than stored (then padded to 16 bytes), never read
    from dlprim.core import gemm
    layer_check.skip_unless_cpu(ctx)
    build = program.get
    built = []
    monkeypatch.setattr(gemm, "tensor_cores", lambda ctx, precision="tf32": True)
    monkeypatch.setattr(gemm, "copies_async", lambda ctx, precision: True)

    def get(ctx, name, **p):
        built.append(p.get("ASYNC", 0))
        return build(ctx, name, **(dict(p, MMA_EMULATE=True) if name == "gemm_mma" else p))
    monkeypatch.setattr(program, "get", get)
    dtype = {"fp16": "float16", "bf16": "bfloat16"}[precision]
    (ra, ca), (rb, cb) = (K, M) if trans_a else (M, K), (N, K) if trans_b else (K, N)
    lda, ldb = (((c + gap + 7) // 8 * 8) if gap else c for c in (ca, cb))
    a = layer_check.stored(rng.standard_normal((batch, ra, lda)), dtype)
    b = layer_check.stored(rng.standard_normal((batch, rb, ldb)), dtype)
    if gap:  # NaN where nothing may read
        a[..., ca:], b[..., cb:] = np.nan, np.nan
    op = Gemm(ctx, M, N, K, trans_a, trans_b, batch=batch, split_k=split, precision=precision,
              dtypes=(dtype, dtype, "float32"))
    assert op.copy_async
    if split:  # float32 or mixed operands are rounded as they are staged: never copied as stored
        assert not Gemm(ctx, M, N, K, trans_a, trans_b, precision=precision,
                        dtypes=("float32", dtype, dtype)).copy_async
    C = dp.Tensor(ctx, (batch, M, N))
    built.clear()
    op(dp.Tensor.from_numpy(ctx, host(a, dtype)), dp.Tensor.from_numpy(ctx, host(b, dtype)), C,
       lda=lda, ldb=ldb, stride_a=a[0].size, stride_b=b[0].size, stride_c=M * N)
    assert built and built[0] == 1  # the launch took the cp.async kernel
    A, B = a[..., :ca], b[..., :cb]
    A = A.transpose(0, 2, 1) if trans_a else A
    B = B.transpose(0, 2, 1) if trans_b else B
    want = A @ B
    err = np.abs(C.numpy().astype(np.float64) - want).max() / np.abs(want).max()
    assert err < 1e-5, err  # the products of stored 16-bit values, summed in float32
    # rows that do not start 16-byte aligned take the register path (one A for the batch)
    shared = np.pad(a[0], ((0, 0), (0, 1)))
    built.clear()
    op(dp.Tensor.from_numpy(ctx, host(shared, dtype)), dp.Tensor.from_numpy(ctx, host(b, dtype)),
       C, lda=lda + 1, ldb=ldb, stride_a=0, stride_b=b[0].size, stride_c=M * N)
    assert built and built[0] == 0
    want = (A[:1] @ B)
    err = np.abs(C.numpy().astype(np.float64) - want).max() / np.abs(want).max()
    assert err < 1e-5, err


@pytest.mark.parametrize("precision, trans_a, trans_b, M, N, K, gap, batch, split", [
    ("fp16", 0, 0, 136, 72, 72, 0, 2, None),   # K-major A, N-major B; partial tiles
    ("fp16", 1, 1, 40, 136, 200, 0, 1, 3),     # M-major A, K-major B; split-K
    ("bf16", 0, 1, 65, 64, 40, 0, 1, None),
    ("tf32", 1, 0, 70, 130, 37, 0, 2, None),   # both packed from columns; K % 4 != 0
    ("tf32", 0, 0, 33, 97, 45, 1, 2, None),    # A packed from rows, B from columns
    ("tf32", 0, 1, 129, 65, 24, 3, 1, 2),     # packed from rows, rows misaligned; split-K
    ("fp32", 1, 0, 70, 130, 37, 0, 2, None),   # float32 as three TF32 products (split_tf32)
    ("fp32", 0, 1, 129, 65, 24, 3, 1, 2),     # split-K across the three segments of K
    ("fp32", 1, 1, 97, 33, 70, 0, 3, None)])   # A from columns, B from rows
# the tiles of tuning.WGMMA_TILES' kinds: 64- and 128-byte swizzled rows of K, 2 and 4
# warpgroups, 192 columns
@pytest.mark.parametrize("wg_tile", [(128, 128, 64, 6), (128, 192, 128, 5), (256, 128, 128, 3)])
def test_emulated_warpgroup_products_match_float64(ctx, rng, monkeypatch, precision, trans_a,
                                                   trans_b, M, N, K, gap, batch, split, wg_tile):
    # gemm_wgmma.cl with kernels/wgmma.h's products in OpenCL C (MMA_EMULATE), reading
    # local memory as the descriptors say: the swizzled layouts, descriptors, stages,
    # zero-fill, TF32 packing (of two parts each for "fp32") and the epilogue, on any device
    from dlprim.core import gemm
    layer_check.skip_unless_cpu(ctx)
    if precision == "fp32" and wg_tile[0] > 128:
        pytest.skip("split_tf32 keeps to tiles of up to 128 x 192")
    build, built = program.get, []
    for probe in ("tensor_cores", "copies_async", "warpgroup_products"):
        monkeypatch.setattr(gemm, probe, lambda ctx, precision="tf32": True)
    # at these sizes TF32 packing would cost more than it saves: made to pay at any size
    assert not tuning.wgmma_packs_pay(M, N)
    monkeypatch.setattr(tuning, "WGMMA_TF32_MIN_SIZE", 0)
    monkeypatch.setattr(tuning, "WGMMA_TILES", (wg_tile + (100.0,),))
    monkeypatch.setattr(tuning, "SPLIT_TF32_TILES", (wg_tile + (100.0,),))

    def get(ctx, name, **p):
        built.append(name)
        assert name != "gemm_wgmma" or (
            p["TILE_M"], p["TILE_N"], p["TILE_K"] * (4 if precision in ("tf32", "fp32") else 2),
            p["STAGES"]) == wg_tile
        return build(ctx, name, **(dict(p, MMA_EMULATE=True) if name == "gemm_wgmma" else p))
    monkeypatch.setattr(program, "get", get)
    dtype = {"fp16": "float16", "bf16": "bfloat16"}.get(precision, "float32")
    (ra, ca), (rb, cb) = (K, M) if trans_a else (M, K), (N, K) if trans_b else (K, N)
    lda, ldb = ca + gap, cb + gap
    a = layer_check.stored(rng.standard_normal((batch, ra, lda)), dtype)
    b = layer_check.stored(rng.standard_normal((batch, rb, ldb)), dtype)
    if gap:  # NaN where nothing may read
        a[..., ca:], b[..., cb:] = np.nan, np.nan
    op = Gemm(ctx, M, N, K, trans_a, trans_b, batch=batch, split_k=split, precision=precision,
              dtypes=(dtype, dtype, "float32"), bias="col", activation="relu")
    assert op.wgmma and op.split_tf32 == (precision == "fp32")
    # a caller's workspace: the split-K partial sums and the packed TF32 operands (two
    # parts in three segments each for "fp32")
    ld_k = -(-K // 4) * 4 * (3 if precision == "fp32" else 1)
    # split-K slices round to the kernel's TILE_K (of the three segments of K for "fp32")
    K_run = 3 * -(-K // 4) * 4 if precision == "fp32" else K
    assert op.product_k == K_run
    assert op.splits == (tuning_launch.split_k(K_run, split, op.wg_tile["TILE_K"])[0]
                         if split else 1)
    assert op.workspace_elements == (batch * op.splits * -(-M * N // 4) * 4 if op.splits > 1 else 0) + (
        batch * (M + N) * ld_k if precision in ("tf32", "fp32") else 0)
    W = dp.Tensor(ctx, (op.workspace_elements,)) if op.workspace_elements else None
    C, bias = dp.Tensor(ctx, (batch, M, N)), rng.standard_normal(N)
    built.clear()
    op(dp.Tensor.from_numpy(ctx, host(a, dtype)), dp.Tensor.from_numpy(ctx, host(b, dtype)), C,
       bias=t(ctx, bias), lda=lda, ldb=ldb, stride_a=a[0].size, stride_b=b[0].size,
       stride_c=M * N, workspace=W)
    assert "gemm_wgmma" in built and "gemm_mma" not in built
    A, B = a[..., :ca].astype(np.float64), b[..., :cb].astype(np.float64)
    if precision == "tf32":  # each operand rounded once, to nearest
        A, B = (x.astype(np.float32).view(np.uint32) for x in (A, B))
        A, B = (((x + 0x1000) & 0xffffe000).view(np.float32).astype(np.float64) for x in (A, B))
    A = A.transpose(0, 2, 1) if trans_a else A
    B = B.transpose(0, 2, 1) if trans_b else B
    want = np.maximum(A @ B + bias, 0)
    err = np.abs(C.numpy().astype(np.float64) - want).max() / np.abs(want).max()
    assert err < 1e-5, err  # the products of the values the tensor cores take, in float32


def _emulated_tf32_warpgroups(ctx, monkeypatch):
    """TF32 warpgroup products on a CPU (gemm_wgmma.cl with wgmma.h's products in OpenCL
    C) for any size, on 64 x 64 tiles of 3 stages."""
    from dlprim.core import gemm
    layer_check.skip_unless_cpu(ctx)
    build = program.get
    for probe in ("tensor_cores", "warpgroup_products"):
        monkeypatch.setattr(gemm, probe, lambda ctx, precision="tf32": True)
    monkeypatch.setattr(tuning, "WGMMA_TF32_MIN_SIZE", 0)
    for tiles in ("WGMMA_TILES", "SPLIT_TF32_TILES"):
        monkeypatch.setattr(tuning, tiles, ((64, 64, 64, 3, 100.0),))
    monkeypatch.setattr(program, "get", lambda ctx, name, **p: build(
        ctx, name, **(dict(p, MMA_EMULATE=True) if name == "gemm_wgmma" else p)))


def test_emulated_split_tf32_keeps_float32_accuracy_and_values(ctx, rng, monkeypatch):
    # "fp32" as three TF32 products (split_tf32): float32's accuracy on long sums, where
    # one TF32 product is 100x off; an inf stays inf (not inf - inf = NaN in its small
    # part), a NaN NaN, and a value that rounds past float32's range to TF32 is kept
    _emulated_tf32_warpgroups(ctx, monkeypatch)
    M, N, K = 66, 64, 300
    a = rng.standard_normal((M, K)).astype(np.float32)
    b = rng.uniform(0.5, 1.0, (K, N)).astype(np.float32)
    a[1, 5], a[2, 7], a[3, :] = np.inf, np.nan, 0
    a[3, 9], b[9, :] = 3.4e38, 1e-30  # hi of 3.4e38 rounded to TF32 is inf
    C = dp.Tensor(ctx, (M, N))
    errors = {}
    for precision in ("fp32", "tf32"):
        op = Gemm(ctx, M, N, K, precision=precision)
        assert op.wgmma and op.split_tf32 == (precision == "fp32")
        op(t(ctx, a), t(ctx, b), C)
        got, want = C.numpy().astype(np.float64), a.astype(np.float64) @ b
        finite = np.isfinite(want).all(axis=1)
        errors[precision] = np.abs(got - want)[finite].max() / np.abs(want[finite]).max()
        if precision == "fp32":
            assert np.isposinf(got[1]).all() and np.isnan(got[2]).all()
            np.testing.assert_allclose(got[3], want[3], rtol=1e-6)
    assert errors["fp32"] < 2e-6 and errors["tf32"] > 100 * errors["fp32"], errors


@pytest.mark.parametrize("precision", ["fp32", "tf32"])
@pytest.mark.parametrize("shared", ["a", "b"])
def test_emulated_tf32_packing_of_an_operand_the_batch_shares(ctx, rng, monkeypatch,
                                                              precision, shared):
    # one launch packs A and B; an operand with batch stride 0 is packed once and the
    # other once per batch entry (the launch's third dimension covers the larger count)
    _emulated_tf32_warpgroups(ctx, monkeypatch)
    batch, M, N, K = 3, 70, 40, 45
    a = rng.standard_normal((1 if shared == "a" else batch, M, K)).astype(np.float32)
    b = rng.standard_normal((1 if shared == "b" else batch, N, K)).astype(np.float32)
    op = Gemm(ctx, M, N, K, trans_b=True, batch=batch, precision=precision)
    assert op.wgmma
    launches = op.launches(t(ctx, a), t(ctx, b), dp.Tensor(ctx, (batch, M, N)),
                           stride_a=0 if shared == "a" else M * K,
                           stride_b=0 if shared == "b" else N * K, stride_c=M * N)
    assert [launch.name for launch in launches] == ["pack_rows_rows", "gemm"]
    C = dp.Tensor(ctx, (batch, M, N))
    op(t(ctx, a), t(ctx, b), C, stride_a=0 if shared == "a" else M * K,
       stride_b=0 if shared == "b" else N * K, stride_c=M * N)
    A, B = (x.astype(np.float64) for x in (a, b))
    if precision == "tf32":  # each operand rounded once, to nearest
        A, B = (((x.astype(np.float32).view(np.uint32) + 0x1000) & 0xffffe000)
                .view(np.float32).astype(np.float64) for x in (A, B))
    want = A @ B.transpose(0, 2, 1)
    err = np.abs(C.numpy().astype(np.float64) - want).max() / np.abs(want).max()
    assert err < (2e-6 if precision == "fp32" else 1e-5), err


@pytest.mark.parametrize("precision, c_dtype, M, N, K, ldc, beta, bias", [
    ("fp16", "float16", 136, 72, 40, 72, 0.0, "row"),     # four values a store, partial tiles
    ("bf16", "bfloat16", 70, 136, 40, 136, 0.0, "col"),
    ("fp16", "float16", 66, 136, 40, 137, 0.0, "col"),    # rows off 4 values: one at a time
    ("fp16", "float32", 129, 72, 40, 72, 0.5, "row"),     # beta reads C: one at a time
    ("fp16", "float16", 64, 64, 16 * 64 + 8, 64, 0.0, "col")])  # stages reused, K partial
def test_emulated_warpgroup_epilogue_matches_float64(ctx, rng, monkeypatch, precision, c_dtype,
                                                     M, N, K, ldc, beta, bias):
    # gemm_wgmma.cl's epilogue: the tile through local memory, then along C's rows, four
    # values a store where C's rows are aligned and beta is 0, else one at a time; 16-bit
    # C rounded once; values past N (ldc > N) never written. A K of more tiles than
    # stages reuses each stage while a tile's products may still run (IN_FLIGHT)
    from dlprim.core import gemm
    layer_check.skip_unless_cpu(ctx)
    build = program.get
    for probe in ("tensor_cores", "copies_async", "warpgroup_products"):
        monkeypatch.setattr(gemm, probe, lambda ctx, precision="tf32": True)
    monkeypatch.setattr(program, "get", lambda ctx, name, **p: build(
        ctx, name, **(dict(p, MMA_EMULATE=True) if name == "gemm_wgmma" else p)))
    dtype = {"fp16": "float16", "bf16": "bfloat16"}[precision]
    plan, _ = tuning.wgmma_plan(132, M, N, K)
    assert K <= 40 or K > plan["TILE_K"] * plan["STAGES"] * 2
    a = layer_check.stored(rng.standard_normal((M, K)), dtype)
    b = layer_check.stored(rng.standard_normal((K, N)), dtype)
    c = layer_check.stored(rng.standard_normal((M, ldc)), c_dtype)
    c[:, N:] = np.nan  # past N: kept as it is
    v = rng.standard_normal(M if bias == "row" else N)
    op = Gemm(ctx, M, N, K, False, False, precision=precision, dtypes=(dtype, dtype, c_dtype),
              bias=bias, activation="relu")
    assert op.wgmma
    C = dp.Tensor.from_numpy(ctx, host(c, c_dtype))
    op(dp.Tensor.from_numpy(ctx, host(a, dtype)), dp.Tensor.from_numpy(ctx, host(b, dtype)), C,
       bias=t(ctx, v), ldc=ldc, alpha=0.75, beta=beta)
    got = C.numpy().astype(np.float64)
    assert np.isnan(got[:, N:]).all()
    want = np.maximum(0.75 * a.astype(np.float64) @ b + beta * c[:, :N]
                      + (v[:, None] if bias == "row" else v), 0)
    err = np.abs(got[:, :N] - want).max() / np.abs(want).max()
    assert err < {"float32": 1e-5, "float16": 1e-3, "bfloat16": 8e-3}[c_dtype], err


@pytest.mark.parametrize("precision, dtypes, staged, trans_a, trans_b, M, N, K, batch, shared, "
                         "split", [
    # an fp16 net's X W^T: W float32
    ("fp16", "hf", ("b",), 0, 1, 136, 72, 72, 1, False, None),
    # G W, one W for the batch; N % 8 != 0: W's rows realigned as it narrows
    ("fp16", "hf", ("b",), 0, 0, 70, 130, 40, 2, True, None),
    ("bf16", "fh", ("a",), 1, 0, 72, 64, 48, 2, False, 2),      # a float32 A, split-K
    ("fp16", "hf", ("b",), 0, 1, 64, 64, 16 * 32 + 8, 1, False, None),  # stages reused
    # 16-bit operands whose rows miss 16 bytes (GPT-2's head's backward: K = 50,257):
    # dY W with dY's rows realigned and W narrowed; dY^T X with dY^T realigned
    ("fp16", "hf", ("a", "b"), 0, 0, 72, 64, 44, 1, False, None),
    ("fp16", "hh", ("a",), 1, 0, 76, 64, 40, 2, False, None),
    ("bf16", "hh", ("b",), 1, 1, 64, 72, 36, 1, False, 2)])
def test_emulated_warpgroup_stages_operands(ctx, rng, monkeypatch, precision, dtypes, staged,
                                            trans_a, trans_b, M, N, K, batch, shared, split):
    # an operand the warpgroup kernel cannot copy as stored (float32 beside a 16-bit one,
    # or 16-bit rows that do not start 16-byte aligned) is copied once into the workspace
    # in the 16-bit type, rows padded to 16 bytes, then the warpgroup products run; the
    # result is the product of the 16-bit values, summed in float32
    from dlprim.core import gemm
    layer_check.skip_unless_cpu(ctx)
    build, built = program.get, []
    for probe in ("tensor_cores", "copies_async", "warpgroup_products"):
        monkeypatch.setattr(gemm, probe, lambda ctx, precision="tf32": True)
    assert not any(tuning.staging_pays(M, N, K, x) for x in staged)  # too small: made to
    monkeypatch.setattr(tuning, "staging_pays", lambda M, N, K, which: True)

    def get(ctx, name, **p):
        built.append((name, p.get("A_T"), p.get("B_T")))
        return build(ctx, name, **(dict(p, MMA_EMULATE=True) if name == "gemm_wgmma" else p))
    monkeypatch.setattr(program, "get", get)
    kind = {"fp16": "float16", "bf16": "bfloat16"}[precision]
    types = tuple(kind if c == "h" else np.float32 for c in dtypes)
    (ra, ca), (rb, cb) = (K, M) if trans_a else (M, K), (N, K) if trans_b else (K, N)
    a = layer_check.stored(rng.standard_normal((batch, ra, ca)), types[0])
    b = layer_check.stored(rng.standard_normal((1 if shared else batch, rb, cb)), types[1])
    op = Gemm(ctx, M, N, K, trans_a, trans_b, batch=batch, split_k=split, precision=precision,
              dtypes=types + ("float32",), bias="col", activation="relu")
    assert op.wgmma and op.staged == staged
    assert op.workspace_elements >= sum(op.staged_elements(x) for x in staged) > 0
    C, bias = dp.Tensor(ctx, (batch, M, N)), rng.standard_normal(N)
    built.clear()
    op(dp.Tensor.from_numpy(ctx, host(a, types[0])), dp.Tensor.from_numpy(ctx, host(b, types[1])),
       C, bias=t(ctx, bias), stride_a=a[0].size, stride_b=0 if shared else b[0].size,
       stride_c=M * N)
    native = "half" if precision == "fp16" else "bfloat16"
    assert ("gemm_wgmma", native, native) in built and all(n != "gemm_mma" for n, _, _ in built)
    A, B = (layer_check.stored(x, kind).astype(np.float64) for x in (a, b))
    A = A.transpose(0, 2, 1) if trans_a else A
    B = B.transpose(0, 2, 1) if trans_b else B
    want = np.maximum(A @ B + bias, 0)
    err = np.abs(C.numpy().astype(np.float64) - want).max() / np.abs(want).max()
    assert err < 1e-5, err


@pytest.mark.parametrize("precision, subgroup, trans_a, trans_b, M, N, K, batch, split", [
    ("fp16", 8, 0, 0, 130, 20, 40, 2, None),   # partial tiles, K a partial step
    ("fp16", 16, 1, 1, 40, 36, 70, 1, 3),      # split-K
    ("bf16", 8, 0, 1, 33, 17, 16, 1, None)])
def test_emulated_subgroup_matrix_products_match_float64(ctx, rng, monkeypatch, precision,
                                                         subgroup, trans_a, trans_b, M, N, K,
                                                         batch, split):
    # gemm_subgroup_mma.cl with kernels/subgroup_mma.h's Intel products in OpenCL C
    # (SUBGROUP_MMA_EMULATE): each item's share of A's rows and B's columns, the
    # epilogue, at either subgroup size, on any device
    from dlprim.core import gemm
    layer_check.skip_unless_cpu(ctx)
    build, built = program.get, []
    monkeypatch.setattr(gemm, "subgroup_matrix_products", lambda ctx, precision: True)
    monkeypatch.setattr(gemm, "subgroup_mma_size", lambda ctx: subgroup)

    def get(ctx, name, **p):
        built.append(name)
        emulated = dict(p, SUBGROUP_MMA_EMULATE=True) if name == "gemm_subgroup_mma" else p
        return build(ctx, name, **emulated)
    monkeypatch.setattr(program, "get", get)
    dtype = {"fp16": "float16", "bf16": "bfloat16"}[precision]
    a = layer_check.stored(rng.standard_normal((batch, K, M) if trans_a else (batch, M, K)), dtype)
    b = layer_check.stored(rng.standard_normal((batch, N, K) if trans_b else (batch, K, N)), dtype)
    op = Gemm(ctx, M, N, K, trans_a, trans_b, batch=batch, split_k=split, precision=precision,
              dtypes=(dtype, dtype, "float32"), bias="row", activation="relu")
    assert op.subgroup_mma and op.tile["TILE_N"] == 2 * subgroup
    C, bias = dp.Tensor(ctx, (batch, M, N)), rng.standard_normal(M)
    built.clear()
    op(dp.Tensor.from_numpy(ctx, host(a, dtype)), dp.Tensor.from_numpy(ctx, host(b, dtype)), C,
       bias=t(ctx, bias), stride_a=a[0].size, stride_b=b[0].size, stride_c=M * N)
    assert "gemm_subgroup_mma" in built
    A, B = a.astype(np.float64), b.astype(np.float64)
    A = A.transpose(0, 2, 1) if trans_a else A
    B = B.transpose(0, 2, 1) if trans_b else B
    want = np.maximum(A @ B + bias[:, None], 0)
    err = np.abs(C.numpy().astype(np.float64) - want).max() / np.abs(want).max()
    assert err < 1e-5, err


def test_subgroup_matrix_products_are_asked_of_intel_gpus_only(ctx, monkeypatch):
    # the probe runs only where the extension is exposed; fp32 and tf32 never take it
    from types import SimpleNamespace
    from dlprim.core import gemm
    assert not gemm.subgroup_matrix_products(ctx, "fp16")
    asked = []
    monkeypatch.setattr(gemm, "_probe_subgroup_mma", lambda ctx, p: asked.append(p) or True)
    intel = SimpleNamespace(vendor_id="intel", is_gpu=True, subgroup_sizes=[8, 16, 32],
                            extensions={gemm.SUBGROUP_MMA_EXTENSION})
    fake = SimpleNamespace(facts=intel)
    assert gemm.subgroup_mma_size(fake) == 8
    assert gemm.subgroup_matrix_products(fake, "bf16") and asked == ["bf16"]
    assert not gemm.subgroup_matrix_products(fake, "tf32")
    intel.extensions = {"cl_intel_subgroups"}
    assert not gemm.subgroup_matrix_products(SimpleNamespace(facts=intel), "fp16")
    assert asked == ["bf16"]


def test_tensor_core_tile_fits_the_product():
    # one GEMM per image of a ResNet's 7x7 1x1 layers (N = 49), MobileNet's 64 channels
    assert (tuning.mma_tile("fp16", 2048, 49)["TILE_M"], tuning.mma_tile("fp16", 2048, 49)["TILE_N"]) == (128, 64)
    assert tuning.mma_tile("tf32", 64, 3136)["TILE_M"] == 64
    for precision in ("tf32", "fp16"):
        big = tuning.mma_tile(precision, 8192, 8192)
        assert big == tuning.mma_tile(precision) and big["TILE_M"] == big["TILE_N"] == 128
    t = tuning.mma_tile("bf16", 1, 1)
    assert (t["TILE_M"], t["TILE_N"], t["TILE_K"]) == (64, 64, 32)
    # the work-group stays 4 warps of 32 lanes
    assert (t["TILE_M"] // t["BLOCK_M"], t["TILE_N"] // t["BLOCK_N"]) == (4, 32)


def test_warpgroup_plan_fills_the_waves():
    # H200 (132 compute units), measured: ViT-B's fc1 data gradient (12608x768x3072) ran
    # 128x192 tiles at 512 TFLOP/s against 409-411 on 128x128 and 128x256 (396 tiles:
    # three whole waves of one a compute unit); its qkv forward and 8192^3 ran best on
    # 128x256 (413, 579)
    def tile(*shape, **kw):
        t, parts = tuning.wgmma_plan(132, *shape, **kw)
        return t["TILE_M"], t["TILE_N"], t["TILE_K"], parts
    assert tile(12608, 768, 3072) == (128, 192, 64, 1)
    assert tile(12608, 2304, 768) == (128, 256, 64, 1)
    assert tile(8192, 8192, 8192) == (128, 256, 64, 1)
    assert tile(8192, 8192, 8192, value_bytes=4) == (128, 256, 32, 1)  # TF32: 128 bytes
    # a small C over a long K splits it (768x768x12608: 36 tiles of 128x128)
    assert tile(768, 768, 12608)[3] > 2
    assert tile(768, 768, 12608, split_k=1)[3] == 1  # the caller's split stands
    assert tile(768, 768, 12608, split_k=3)[3] == 3
    # tiny products run whole
    assert tile(40, 50, 60)[3] == 1
    assert tile(0, 64, 64)[3] == 1 and tile(64, 64, 0)[3] == 1
    # every tile fits a compute unit's local memory
    for tm, tn, k_bytes, stages, _ in tuning.WGMMA_TILES:
        assert tuning.wgmma_local_bytes(tm, tn, k_bytes, stages) + 1024 <= tuning.WGMMA_CU_LOCAL


@pytest.mark.parametrize("shape", tuning.MMA_SMALLER)
@pytest.mark.parametrize("precision, dtypes", [("tf32", ("float32",) * 3),
                                               ("fp16", ("float16",) * 3)])
def test_emulated_smaller_tensor_core_tiles_match_float64(ctx, rng, monkeypatch, shape, precision,
                                                          dtypes):
    # each smaller tile over its edges (M, N, K all partial, two batch entries)
    from dlprim.core import gemm
    layer_check.skip_unless_cpu(ctx)
    build, pick = program.get, tuning.mma_tile
    monkeypatch.setattr(gemm, "tensor_cores", lambda ctx, precision="tf32": True)
    monkeypatch.setattr(program, "get", lambda ctx, name, **p: build(
        ctx, name, **(dict(p, MMA_EMULATE=True) if name == "gemm_mma" else p)))
    monkeypatch.setattr(tuning, "mma_tile", lambda precision, M=None, N=None: dict(
        pick(precision), TILE_M=shape[0], TILE_N=shape[1], BLOCK_M=shape[0] // 4,
        BLOCK_N=shape[1] // 32))
    M, N, K = shape[0] + 6, shape[1] + 11, 40
    a, b = rng.standard_normal((2, M, K)), rng.standard_normal((2, N, K))
    a, b = (layer_check.stored(x, dtypes[0]) for x in (a, b))
    op = Gemm(ctx, M, N, K, trans_b=True, batch=2, precision=precision, dtypes=dtypes)
    assert (op.tile["TILE_M"], op.tile["TILE_N"]) == shape
    C = dp.Tensor(ctx, (2, M, N), dtypes[2])
    op(dp.Tensor.from_numpy(ctx, host(a, dtypes[0])), dp.Tensor.from_numpy(ctx, host(b, dtypes[1])),
       C, stride_a=M * K, stride_b=N * K, stride_c=M * N)
    want = a @ b.transpose(0, 2, 1)
    err = np.abs(C.numpy().astype(np.float64) - want).max() / np.abs(want).max()
    assert err < 3e-3, err


@pytest.mark.parametrize("trans_a, trans_b", [(0, 0), (0, 1), (1, 0), (1, 1)])
def test_tf32_matches_float64(ctx, rng, trans_a, trans_b):
    # TF32 rounds each operand to 11 significant bits
    _tensor_cores_against_float64(ctx, rng, trans_a, trans_b, "tf32", ("float32",) * 3, 2e-3)


@pytest.mark.parametrize("trans_a, trans_b", [(0, 0), (1, 1)])
def test_fp32_on_tensor_cores_is_as_accurate_as_float32(ctx, rng, trans_a, trans_b):
    # where "fp32" runs as three TF32 products (split_tf32, Hopper): the real tensor
    # cores' sums, promoted to float32 adds, against float64 on all-positive long sums
    # (truncated sums would be 25x off) and split-K, within the float32 kernels' error
    M, N, K = 1024, 1030, 3002
    probe = Gemm(ctx, M, N, K, trans_a, trans_b)
    if not probe.split_tf32:
        pytest.skip("no TF32 warpgroup products on %s" % ctx.facts.name)
    a = rng.uniform(0, 1, (K, M) if trans_a else (M, K)).astype(np.float32)
    b = rng.uniform(0, 1, (N, K) if trans_b else (K, N)).astype(np.float32)
    A = a.T if trans_a else a
    B = b.T if trans_b else b
    want = A.astype(np.float64) @ B.astype(np.float64)
    for split in (None, 3):
        C = dp.Tensor(ctx, (M, N))
        Gemm(ctx, M, N, K, trans_a, trans_b, split_k=split)(t(ctx, a), t(ctx, b), C)
        err = np.abs(C.numpy() - want).max() / want.max()
        assert err < 1.5e-6, (split, err)


@pytest.mark.parametrize("trans_a, trans_b", [(0, 0), (0, 1), (1, 0), (1, 1)])
@pytest.mark.parametrize("dtypes", [("float32",) * 3, ("float16", "float32", "float16"),
                                    ("float16", "float16", "float32")])
def test_fp16_tensor_cores_match_float64(ctx, rng, trans_a, trans_b, dtypes):
    # precision "fp16": FP16 products (operands rounded to 11 significant bits and to
    # half's range), float32 sums; operands and C stored as float32 or half
    _tensor_cores_against_float64(ctx, rng, trans_a, trans_b, "fp16", dtypes, 3e-3)


@pytest.mark.parametrize("as_float", [True, False])
@pytest.mark.parametrize("dtypes", [("float16", "float32", "float16"),
                                    ("float32", "bfloat16", "float32"),
                                    ("float16", "float16", "float16")])
def test_16bit_operands_match_float64(ctx, rng, monkeypatch, as_float, dtypes):
    """16-bit A, B or C against float64 on what they store: on CPUs through float32
    copies of the operands and of C (``as_float``: tuning.CPU_HALF_AS_FLOAT), and on the
    tiled template that reads them directly (the GPUs' path). Gaps between rows (ld >
    columns), strided and shared batches, beta, bias, activation, split-K and the
    few-rows kernels (gemv.cl where B is bfloat16 or float16); within a few roundings of C's storage of the largest value."""
    layer_check.skip_unless_cpu(ctx)
    monkeypatch.setattr(tuning, "CPU_HALF_AS_FLOAT", as_float)
    tol = 4 * (2 ** -8 if "bfloat16" in dtypes else 2 ** -11)  # units of the storage's rounding
    for M, N, K, batch, trans_a, trans_b, split, shared in (
            (70, 33, 40, 2, 0, 0, None, False), (130, 100, 64, 3, 1, 1, None, True),
            (5, 9, 17, 2, 0, 1, None, False), (96, 50, 400, 2, 1, 0, 3, False)):
        ra, ca = (K, M) if trans_a else (M, K)
        rb, cb = (N, K) if trans_b else (K, N)
        lda, ldb, ldc = ca + 3, cb + 2, N + 5  # rows with gaps, which nothing may touch
        a = layer_check.stored(rng.standard_normal((1 if shared else batch, ra, lda)), dtypes[0])
        b = layer_check.stored(rng.standard_normal((batch, rb, ldb)), dtypes[1])
        c = layer_check.stored(rng.standard_normal((batch, M, ldc)), dtypes[2])
        bias = rng.standard_normal(N).astype(np.float32)
        op = Gemm(ctx, M, N, K, trans_a, trans_b, bias="col", activation="relu", batch=batch,
                  split_k=split, dtypes=dtypes)
        # (a few rows over a 16-bit B transposed run kernels/gemv.cl, which reads it)
        assert op.float_copies == (as_float and not op.gemv)
        assert op.gemv == (M <= tuning.GEMV_MAX_ROWS and bool(trans_b) and not trans_a
                           and dtypes[1] in ("bfloat16", "float16"))
        C = dp.Tensor.from_numpy(ctx, host(c, dtypes[2]))
        op(dp.Tensor.from_numpy(ctx, host(a, dtypes[0])), dp.Tensor.from_numpy(ctx, host(b, dtypes[1])),
           C, bias=t(ctx, bias), alpha=0.5, beta=0.25, lda=lda, ldb=ldb, ldc=ldc,
           stride_a=0 if shared else ra * lda, stride_b=rb * ldb, stride_c=M * ldc)
        A, B = a[..., :ca], b[..., :cb]
        A = A.transpose(0, 2, 1) if trans_a else A
        B = B.transpose(0, 2, 1) if trans_b else B
        want = np.maximum(0.5 * A @ B + 0.25 * c[..., :N] + bias, 0)
        got = C.numpy().astype(np.float64)
        err = np.abs(got[..., :N] - want).max() / np.abs(want).max()
        assert err < tol, (M, N, K, dtypes, err)
        np.testing.assert_array_equal(got[..., N:], c[..., N:])  # the gaps are untouched


def test_autotuning_measures_a_shape_once_and_keeps_its_pick(ctx, rng, tmp_path, monkeypatch):
    """Per-shape autotuning (opt-in): the first Gemm of a shape times the class choice and
    the candidates, stores the fastest under the shape, and gives correct products; the
    next Gemm of that shape reads it back without timing; an entry that no longer fits
    the device is ignored; with autotuning off nothing is measured or stored."""
    from dlprim.core import gemm_autotune
    monkeypatch.setenv("DLPRIM_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(ctx.facts, "is_gpu", True)  # (GPUs only; the mechanics are the same)
    monkeypatch.setattr(gemm_autotune, "TIMED_SECONDS", 0.0)
    M, N, K = 70, 45, 33
    a, b = rng.standard_normal((K, M)), rng.standard_normal((K, N))
    key = gemm_autotune.shape_key(M, N, K, True, False)

    def product(op):
        return op(t(ctx, a), t(ctx, b), poisoned(ctx, (M, N))).numpy()

    monkeypatch.setattr(gemm_autotune, "_on", [False])
    Gemm(ctx, M, N, K, True, False)
    assert not (tmp_path / "gemm_tuning.json").exists()
    gemm_autotune.set_autotune(True)
    timed = []
    real = gemm_autotune._seconds
    monkeypatch.setattr(gemm_autotune, "_seconds", lambda *x: timed.append(1) or real(*x))
    op = Gemm(ctx, M, N, K, True, False)
    assert len(timed) == 1 + len(tuning.candidates(ctx.facts))
    entry = tuning.tuned_entry(ctx.facts, "gemm", key)
    assert {k: entry[k] for k in tuning.TILE_KEYS} == op.tile
    assert entry[gemm_autotune.SPLIT] == op.splits
    close(product(op), reference(a.T, b), K)
    again = Gemm(ctx, M, N, K, True, False)
    assert len(timed) == 1 + len(tuning.candidates(ctx.facts))  # read back, not timed
    assert again.tile == op.tile and again.splits == op.splits
    tuning.store_tuned(ctx.facts, {key: dict(entry, TILE_M=3)})  # no longer a valid tile
    close(product(Gemm(ctx, M, N, K, True, False)), reference(a.T, b), K)
    assert len(timed) == 1 + len(tuning.candidates(ctx.facts))


def test_cpu_few_rows_columns_by_runtime_and_storage():
    """gemv_cpu's columns a work-item: PoCL 8 for every storage; Intel's runtime 8 for
    float32 weights (bound by memory) and 4-bit ones read a group a turn, 1 for the other
    storages it widens."""
    intel, pocl = SimpleNamespace(vendor_id="intel"), SimpleNamespace(vendor_id="pocl")
    assert tuning.gemv_cpu_cols(intel, np.float32) == tuning.GEMV_CPU_COLS_FLOAT32 == 8
    assert tuning.gemv_cpu_cols(intel, np.uint8) == tuning.GEMV_CPU_COLS_Q4 == 8
    for weights in (np.float16, np.int8, np.uint8, dp.bfloat16):
        if weights != np.uint8:
            assert tuning.gemv_cpu_cols(intel, weights) == tuning.GEMV_CPU_COLS == 1
        assert tuning.gemv_cpu_cols(pocl, weights) == tuning.GEMV_CPU_COLS_POCL == 8


@pytest.mark.parametrize("M", [1, 2, 3, 5, 8])
def test_few_rows_with_b_transposed(ctx, rng, M):
    """A decoder step's Linear (M <= tuning.GEMV_MAX_ROWS, B^T): on GPUs (and under GPU
    facts; on CPUs at one row) one launch of kernels/gemv.cl, float4 and scalar loads,
    bias, activation, alpha and beta, a batch with strides, 16-bit operands."""
    for N, K, mode, act in ((1, 1, None, "identity"), (33, 129, "col", "relu"),
                            (300, 1024, "row", "tanh"), (7, 3, "col", "identity")):
        a = rng.standard_normal((M, K))
        b = rng.standard_normal((K, N))
        bias = rng.standard_normal(M if mode == "row" else N)
        c_old = rng.standard_normal((M, N))
        g = Gemm(ctx, M, N, K, trans_b=True, bias=mode, activation=act)
        assert g.gemv == (ctx.facts.is_gpu or M == 1)
        C = t(ctx, c_old)
        launches = g.launches(t(ctx, a), t(ctx, stored(b, True)), C,
                              bias=t(ctx, bias) if mode else None, alpha=0.5, beta=0.25)
        if g.gemv:
            assert len(launches) == 1 and launches[0].name.startswith("gemv")
        for launch in launches:
            launch(ctx.queue)
        close(C.numpy(), reference(a, b, c_old, 0.5, 0.25, bias, mode, act), K)
    # a batch with strides, rows not 16-byte aligned (scalar loads): lda = K + 1
    K, N, batch = 65, 40, 3
    a = rng.standard_normal((batch, M, K + 1))
    b = rng.standard_normal((batch, N, K))
    g = Gemm(ctx, M, N, K, trans_b=True, batch=batch)
    C = poisoned(ctx, (batch, M, N))
    g(t(ctx, a), t(ctx, b), C, lda=K + 1, stride_a=M * (K + 1), stride_b=N * K,
      stride_c=M * N)
    want = np.einsum("bmk,bnk->bmn", a[..., :K].astype(np.float64), b)
    close(C.numpy(), want, K)
    # 16-bit operands and result
    a, b = rng.standard_normal((M, 256)), rng.standard_normal((96, 256))
    h = np.float16
    g = Gemm(ctx, M, 96, 256, trans_b=True, dtypes=(h, h, h))
    C = dp.Tensor(ctx, (M, 96), h)
    g(dp.Tensor.from_numpy(ctx, a.astype(h)), dp.Tensor.from_numpy(ctx, b.astype(h)), C)
    want = a.astype(h).astype(np.float64) @ b.astype(h).astype(np.float64).T
    np.testing.assert_allclose(C.numpy().astype(np.float64), want, rtol=2e-3, atol=2e-2)


@pytest.mark.parametrize("M", [1, 3, 8])
@pytest.mark.parametrize("a_type, b_type", [("float32", "float32"), ("float16", "float16"),
                                            ("bfloat16", "bfloat16"), ("float32", "float16"),
                                            ("float16", "int8")])
def test_few_rows_turns_and_tails(ctx, rng, M, a_type, b_type):
    """The few-rows kernel's steps (GPUs and GPU facts: kernels/gemv.cl's ``gemv``; CPUs
    at one row: ``gemv_cpu``) against float64 of the stored values: K of whole turns of
    UNROLL steps and of turns and tail steps; eight values a load where rows start on
    eight (16-bit, int8) or four (float32) values, four where they start on four, one
    where they start anywhere (lda = K + 1); every storage of A and B that decoders
    read, an int8 B with its row scales."""
    quantized = b_type == "int8"
    for K, pad in ((1024, 0), (1288, 0), (1288, 4), (1288, 1), (1036, 0), (1291, 0)):
        N = 70
        a = layer_check.stored(rng.standard_normal((M, K + pad)), a_type)
        if quantized:
            b = rng.integers(-128, 128, (N, K)).astype(np.float64)
            scale = rng.uniform(0.001, 0.02, N).astype(np.float32)
            w = b * scale[:, None]
        else:
            b = w = layer_check.stored(rng.standard_normal((N, K)), b_type)
        g = Gemm(ctx, M, N, K, trans_b=True, dtypes=(a_type, b_type, "float32"),
                 b_scale=quantized)
        if not g.gemv:
            continue
        if ctx.facts.is_gpu:
            wide = K % 8 == 0 and pad % (4 if a_type == "float32" else 8) == 0
            four = K % 4 == 0 and pad % 4 == 0
            assert g.kernel._vec(((K + pad, 0, M * (K + pad)), (K, 0, N * K))) == \
                (8 if wide else 4 if four else 1)
        C = poisoned(ctx, (M, N))
        g(dp.Tensor.from_numpy(ctx, host(a, a_type)), dp.Tensor.from_numpy(ctx, host(b, b_type)),
          C, lda=K + pad, b_scale=t(ctx, scale) if quantized else None)
        want = a[:, :K] @ w.T
        np.testing.assert_allclose(C.numpy(), want, rtol=1e-4, atol=1e-4 * K ** 0.5)


@pytest.mark.parametrize("M", [1, 4, 8])
def test_int8_b_with_row_scales(ctx, rng, M):
    """Weight-only int8 (kernels/gemv.cl on any device): C = A (q * scale)^T per row of
    the stored B, against float64; K not a multiple of 4 (scalar loads) too; refused past
    GEMV_MAX_ROWS rows or without its scales."""
    for N, K in ((37, 256), (5, 33)):
        q = rng.integers(-128, 128, (N, K)).astype(np.int8)
        scale = rng.uniform(0.001, 0.02, N).astype(np.float32)
        a = rng.standard_normal((M, K))
        bias = rng.standard_normal(N)
        g = Gemm(ctx, M, N, K, trans_b=True, bias="col", dtypes=(np.float32, np.int8, np.float32),
                 b_scale=True)
        C = poisoned(ctx, (M, N))
        g(t(ctx, a), dp.Tensor.from_numpy(ctx, q), C, bias=t(ctx, bias), b_scale=t(ctx, scale))
        want = a @ (q.astype(np.float64) * scale[:, None]).T + bias
        close(C.numpy(), want, K)
    with pytest.raises(ValueError, match="b_scale"):
        g(t(ctx, a), dp.Tensor.from_numpy(ctx, q), C, bias=t(ctx, bias))
    with pytest.raises(ValueError, match="at most 8 rows"):
        Gemm(ctx, 9, N, K, trans_b=True, dtypes=(np.float32, np.int8, np.float32), b_scale=True)
    with pytest.raises(TypeError, match="b_scale"):
        Gemm(ctx, M, N, K, trans_b=True, dtypes=(np.float32, np.int8, np.float32))


@pytest.mark.parametrize("M", [1, 3, 8])
@pytest.mark.parametrize("a_type", ["float32", "float16"])
def test_4bit_b_with_group_scales(ctx, rng, M, a_type):
    """4-bit weights (a uint8 B, core/quantize.py's layout; kernels/gemv.cl on any
    device): C = A W^T with W the values times their group's scale, against float64 of the
    dequantized W; K odd, not a multiple of 8 (scalar loads), of 8 and of 32 (eight a
    step); alone, as a gated pair, and (GPUs) with A's rows normalized on the way; refused
    past GEMV_MAX_ROWS rows, without its scales or with an int8 B's one a row."""
    from dlprim.core.quantize import Q4_GROUP, dequantize_q4, quantize_q4
    dt = (np.float32, np.uint8, np.float32)
    eps = 1e-5
    for N, K in ((37, 256), (5, 45), (9, 72), (6, 33)):
        a = layer_check.stored(rng.standard_normal((M, K)), a_type).astype(np.float64)
        gamma = rng.standard_normal(K)
        packed, ws = [], []
        for _ in range(2):
            q, scale = quantize_q4(rng.standard_normal((N, K)).astype(np.float32))
            assert scale.shape == (N, -(-K // Q4_GROUP))
            packed.append((dp.Tensor.from_numpy(ctx, q), t(ctx, scale.ravel())))
            ws.append(dequantize_q4(q, scale, K).astype(np.float64))
        bias, bias2 = rng.standard_normal(N), rng.standard_normal(N)
        A = dp.Tensor.from_numpy(ctx, host(a, a_type))
        g = Gemm(ctx, M, N, K, trans_b=True, bias="col", dtypes=(a_type, np.uint8, "float32"),
                 b_scale=True)
        assert g.gemv
        C = poisoned(ctx, (M, N))
        g(A, packed[0][0], C, bias=t(ctx, bias), b_scale=packed[0][1])
        close(C.numpy(), a @ ws[0].T + bias, K)
        norm = Gemm.normalizes_a(ctx, M, np.uint8)  # (GPUs only)
        pair = Gemm(ctx, M, N, K, trans_b=True, bias="col", activation="silu", glu=True,
                    a_norm=eps if norm else None, dtypes=(a_type, np.uint8, "float32"),
                    b_scale=True)
        launches = pair.launches(A, packed[0][0], C, bias=t(ctx, bias), b_scale=packed[0][1],
                                 a_norm_weight=t(ctx, gamma) if norm else None,
                                 b2=packed[1][0], bias2=t(ctx, bias2), b2_scale=packed[1][1])
        assert len(launches) == 1
        for launch in launches:
            launch(ctx.queue)
        x = a / np.sqrt((a * a).mean(axis=1, keepdims=True) + eps) * gamma if norm else a
        gate = x @ ws[0].T + bias
        close(C.numpy(), gate / (1 + np.exp(-gate)) * (x @ ws[1].T + bias2), K)
    with pytest.raises(ValueError, match="b_scale"):
        g(A, packed[0][0], C, bias=t(ctx, bias))
    with pytest.raises(ValueError, match="4-bit"):  # one scale a row is an int8 B's
        g(A, packed[0][0], C, bias=t(ctx, bias), b_scale=t(ctx, np.ones(N)))
    with pytest.raises(ValueError, match="at most 8 rows"):
        Gemm(ctx, 9, N, K, trans_b=True, dtypes=dt, b_scale=True)
    with pytest.raises(TypeError, match="b_scale"):
        Gemm(ctx, M, N, K, trans_b=True, dtypes=dt)


@pytest.mark.parametrize("M", [1, 3, 8])
@pytest.mark.parametrize("kind", ["rms", "layer"])
def test_few_rows_normalize_a_by_rms(ctx, rng, M, kind):
    """``a_norm``: A's rows normalized by their RMS times a weight on the way (an RMSNorm
    before the product, no launch of its own; ``a_norm_kind="layer"``: a LayerNorm, weight
    and bias), against float64: float32, float16 and int8 B (the CPU kernel takes one row
    of a float32 B), bias, activation, alpha and beta, K not a multiple of 4 or 8;
    refused where the few-rows kernel does not run."""
    eps = 1e-5
    for N, K, b_type, act in ((33, 129, "float32", "relu"), (300, 1024, "float16", "identity"),
                              (7, 3, "int8", "tanh"), (40, 72, "float32", "identity")):
        if not Gemm.normalizes_a(ctx, M, b_type):
            with pytest.raises(ValueError, match="a_norm"):
                Gemm(ctx, M, N, K, trans_b=True, a_norm=eps)
            continue
        a = rng.standard_normal((M, K)) * 3 + 5  # (a mean far from 0: LayerNorm's two passes)
        gamma, beta_n = rng.standard_normal(K), rng.standard_normal(K)
        w = rng.standard_normal((N, K))
        int8 = b_type == "int8"
        scale = rng.uniform(0.01, 0.02, N)
        stored_b = np.round(w / scale[:, None] / 100).clip(-127, 127) if int8 else \
            host(w, b_type).astype(np.float64)
        b = stored_b * scale[:, None] if int8 else stored_b
        bias, c_old = rng.standard_normal(N), rng.standard_normal((M, N))
        g = Gemm(ctx, M, N, K, trans_b=True, bias="col", activation=act, a_norm=eps,
                 a_norm_kind=kind, dtypes=("float32", b_type, "float32"), b_scale=int8)
        C = t(ctx, c_old)
        B = dp.Tensor.from_numpy(ctx, stored_b.astype(np.int8) if int8 else host(w, b_type))
        layer = kind == "layer"
        g(t(ctx, a), B, C, bias=t(ctx, bias), alpha=0.5, beta=0.25, a_norm_weight=t(ctx, gamma),
          a_norm_bias=t(ctx, beta_n) if layer else None, b_scale=t(ctx, scale) if int8 else None)
        if layer:
            d = a - a.mean(axis=1, keepdims=True)
            normed = d / np.sqrt((d * d).mean(axis=1, keepdims=True) + eps) * gamma + beta_n
        else:
            normed = a / np.sqrt((a * a).mean(axis=1, keepdims=True) + eps) * gamma
        close(C.numpy(), reference(normed, b.T, c_old, 0.5, 0.25, bias, "col", act), K)
        with pytest.raises(ValueError, match="a_norm_weight"):
            g(t(ctx, a), B, C, bias=t(ctx, bias), b_scale=t(ctx, scale) if int8 else None)
        if layer:
            with pytest.raises(ValueError, match="a_norm_bias"):
                g(t(ctx, a), B, C, bias=t(ctx, bias), a_norm_weight=t(ctx, gamma),
                  b_scale=t(ctx, scale) if int8 else None)
    with pytest.raises(ValueError, match="a_norm"):
        Gemm(ctx, tuning.GEMV_MAX_ROWS + 1, 8, 8, trans_b=True, a_norm=eps)
    plain = Gemm(ctx, 1, 8, 8, trans_b=True)
    with pytest.raises(ValueError, match="built without a_norm"):
        plain(t(ctx, np.ones((1, 8))), t(ctx, np.ones((8, 8))), t(ctx, np.ones((1, 8))),
              a_norm_weight=t(ctx, np.ones(8)))


@pytest.mark.parametrize("M", [1, 3])
@pytest.mark.parametrize("kind", [None, "rms", "layer"])
def test_gpu_few_rows_staged_rows(ctx, rng, monkeypatch, M, kind):
    """The GPU few-rows kernel with A's rows staged in local memory by each work-group
    (gemv.cl STAGE; ``tuning.gemv_stage``: where a norm comes first, or every product with
    DLPRIM_GEMV_STAGE=1), normalized there once (RMSNorm, LayerNorm), on the device at
    hand as an AMD GPU's facts describe it (tests/vendor_facts.py): K of whole blocks and
    of a ragged last one, a float16 B, against float64; refused to stage past
    GEMV_STAGE_BYTES or unaligned, where the rows are read (and normalized) on the way."""
    import vendor_facts
    gpu = dp.Context(os.environ.get("DLPRIM_TEST_DEVICE") or None)
    gpu.facts = vendor_facts.emulated(ctx.facts, "amd") if not ctx.facts.is_gpu else ctx.facts
    monkeypatch.setenv("DLPRIM_GEMV_STAGE", "1" if kind is None else "")
    eps = 1e-5
    assert tuning.gemv_stage(1000, 4, 8, True) == 1024
    assert tuning.gemv_stage(1000, 4, 4, True) == 0  # (unaligned rows: read on the way)
    assert tuning.gemv_stage(tuning.GEMV_STAGE_BYTES // 4 + 8, 1, 8, True) == 0
    for N, K in ((70, 1024), (33, 1288)):
        a = rng.standard_normal((M, K)) * 3 + 2
        gamma, beta_n = rng.standard_normal(K), rng.standard_normal(K)
        w = host(rng.standard_normal((N, K)), "float16").astype(np.float64)
        norm = {} if kind is None else {"a_norm": eps, "a_norm_kind": kind}
        g = Gemm(gpu, M, N, K, trans_b=True, dtypes=("float32", "float16", "float32"), **norm)
        built = []
        real_get = program.get
        monkeypatch.setattr(program, "get", lambda c, name, **params: (
            built.append(params), real_get(c, name, **params))[1])
        g.kernel.program(8)
        monkeypatch.setattr(program, "get", real_get)
        assert g.gemv and built[-1]["STAGE"] == 1 and built[-1]["KS"] == round_up(K, 256)
        vectors = {} if kind is None else {"a_norm_weight": t(gpu, gamma)}
        if kind == "layer":
            vectors["a_norm_bias"] = t(gpu, beta_n)
        C = poisoned(gpu, (M, N))
        g(t(gpu, a), dp.Tensor.from_numpy(gpu, w.astype(np.float16)), C, **vectors)
        if kind == "layer":
            d = a - a.mean(axis=1, keepdims=True)
            a = d / np.sqrt((d * d).mean(axis=1, keepdims=True) + eps) * gamma + beta_n
        elif kind == "rms":
            a = a / np.sqrt((a * a).mean(axis=1, keepdims=True) + eps) * gamma
        close(C.numpy(), a @ w.T, K)


def test_choose_names_one_family_per_product(ctx, monkeypatch):
    """``gemm.choose`` is the one place a product's kernel family is decided: few rows
    of a transposed B on GPUs (or an int8 B anywhere) stream B (Gemv); CPUs take their
    few-rows and tiled kernels by M; GPUs the tiled template; each Gemm's flags say the
    same as its family."""
    from dlprim.core import gemm_kernels as kernels
    facts = ctx.facts
    families = {
        (4, True): kernels.Gemv if facts.is_gpu else kernels.CpuFewRows,
        (4, False): kernels.Tiled if facts.is_gpu else kernels.CpuFewRows,
        (tuning.CPU_PACK_MIN_M, True): kernels.Tiled if facts.is_gpu else kernels.CpuTiled,
    }
    for (M, trans_b), family in families.items():
        op = Gemm(ctx, M, 40, 24, trans_b=trans_b)
        if family is kernels.Tiled and tuning.gemm_kernel(op.tile) == "gemm_cpu":
            family = kernels.CpuTiled  # (a GPU table may name the wide CPU tile)
        assert type(op.kernel) is family, (M, trans_b, type(op.kernel).__name__)
        assert op.gemv == (family is kernels.Gemv)
        assert op.small_m == (family is kernels.CpuFewRows)
        assert not op.mma and not op.subgroup_mma
    int8 = Gemm(ctx, 2, 40, 24, trans_b=True, dtypes=("float32", "int8", "float32"),
                b_scale=True)
    assert type(int8.kernel) is kernels.Gemv
    # a tile given by hand keeps the tiled families, never the few-rows ones
    tiled = Gemm(ctx, 4, 40, 24, trans_b=True, tile=dict(tuning.pick_tile(facts, 4, 40)))
    assert type(tiled.kernel) in (kernels.Tiled, kernels.CpuTiled)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_few_rows_decode_16bit_weights_exactly(ctx, dtype):
    # gemv.cl reads a 16-bit B eight values at a time on CPUs (float16: vload_half8,
    # bfloat16: its bits shifted on vectors): subnormals, zeros and the largest
    # value, each picked alone by a one-hot row of A, in the vector part and the
    # tail (K = 19); an inf and a NaN reach their rows' sums
    special = np.array([0.0, -0.0, 6.0e-8, -3.0e-5, 65504.0, -2.5, 1.0 / 3, 7.0], np.float32)
    if dtype == "bfloat16":
        special[2], special[4] = 1.0e-39, 3.0e38
    K, N = 19, 9
    b = layer_check.stored(np.resize(special, (N, K)).astype(np.float32), dtype)
    B = dp.Tensor.from_numpy(ctx, host(b, dtype))
    op = Gemm(ctx, 1, N, K, trans_b=True, dtypes=("float32", dtype, "float32"))
    assert op.gemv
    C = dp.Tensor(ctx, (1, N))
    for n in range(K):
        a = np.zeros((1, K), np.float32)
        a[0, n] = 1.0
        op(t(ctx, a), B, C)
        got, want = C.numpy()[0], b[:, n].astype(np.float32)
        np.testing.assert_array_equal(got, want)  # (a sum of -0 and +0 terms is +0)
    b[3, 5], b[6, 18] = np.inf, np.nan
    op(t(ctx, np.ones((1, K), np.float32)), dp.Tensor.from_numpy(ctx, host(b, dtype)), C)
    got = C.numpy()[0]
    assert got[3] == np.inf and np.isnan(got[6])
    want = b.astype(np.float64).sum(axis=1).astype(np.float32)  # (bfloat16's 3e38s: inf)
    np.testing.assert_allclose(got, want, rtol=1e-6)


@pytest.mark.parametrize("M", [1, 3])
def test_few_rows_gated_pair_in_one_launch(ctx, rng, M):
    """``glu``: C = act(A B^T + bias) * (A B2^T + bias2) + beta C in one launch (a SwiGLU
    MLP's gate and up projections), with a_norm too (GPUs), over float32, float16 and int8 B;
    against float64; refused off the few-rows kernel and without B2."""
    eps = 1e-6
    for N, K, b_type, act, norm in ((33, 129, "float32", "silu", False),
                                    (300, 1024, "float16", "silu", True),
                                    (7, 3, "int8", "gelu", True), (40, 72, "float32", "relu", True)):
        int8 = b_type == "int8"
        if not Gemm(ctx, M, N, K, trans_b=True, dtypes=("float32", b_type, "float32"),
                    b_scale=int8).gemv:
            with pytest.raises(ValueError, match="glu"):
                Gemm(ctx, M, N, K, trans_b=True, glu=True)
            continue
        norm = norm and Gemm.normalizes_a(ctx, M, b_type)  # (GPUs only)
        a = rng.standard_normal((M, K))
        gamma = rng.standard_normal(K)
        ws, stored_bs, scales = [], [], []
        for _ in range(2):
            w = rng.standard_normal((N, K))
            scale = rng.uniform(0.01, 0.02, N)
            q = np.round(w / scale[:, None] / 100).clip(-127, 127)
            stored_bs.append(dp.Tensor.from_numpy(ctx, q.astype(np.int8) if int8 else host(w, b_type)))
            ws.append(q * scale[:, None] if int8 else host(w, b_type).astype(np.float64))
            scales.append(t(ctx, scale) if int8 else None)
        bias, bias2, c_old = rng.standard_normal(N), rng.standard_normal(N), rng.standard_normal((M, N))
        g = Gemm(ctx, M, N, K, trans_b=True, bias="col", activation=act, glu=True,
                 a_norm=eps if norm else None, dtypes=("float32", b_type, "float32"), b_scale=int8)
        C = t(ctx, c_old)
        launches = g.launches(t(ctx, a), stored_bs[0], C, bias=t(ctx, bias), alpha=0.5, beta=0.25,
                              b_scale=scales[0], a_norm_weight=t(ctx, gamma) if norm else None,
                              b2=stored_bs[1], bias2=t(ctx, bias2), b2_scale=scales[1])
        assert len(launches) == 1
        for launch in launches:
            launch(ctx.queue)
        x = a / np.sqrt((a * a).mean(axis=1, keepdims=True) + eps) * gamma if norm else a
        gate = reference(x, ws[0].T, None, 0.5, 0.0, bias, "col", act)
        up = reference(x, ws[1].T, None, 0.5, 0.0, bias2, "col")
        close(C.numpy(), gate * up + 0.25 * c_old, K)
        with pytest.raises(ValueError, match="b2"):
            g.launches(t(ctx, a), stored_bs[0], C, bias=t(ctx, bias), b_scale=scales[0],
                       a_norm_weight=t(ctx, gamma) if norm else None)
    with pytest.raises(ValueError, match="glu"):
        Gemm(ctx, tuning.GEMV_MAX_ROWS + 1, 8, 8, trans_b=True, glu=True)
