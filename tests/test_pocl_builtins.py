"""The CPU kernels' inner loops as PoCL gets them (common.h's FMA and VLOAD_GLOBAL): no
call of a builtin multiply-add or vector read, which PoCL may leave out of line (pip's
PoCL 3.0 on a CPU its kernel library was not built for called every fma() and vload8()),
and the same products as float64 whichever driver compiles that source."""
import copy
import re

import numpy as np
import pytest

import dlprim as dp
from dlprim.core.gemm import Gemm
from dlprim.kernels import program

# the builtins of the hot loops; vloadN/vstoreN of private arrays (a tile's epilogue) stay
OUT_OF_LINE = re.compile(r"\b(fma|mad)\s*\(")
GLOBAL_READ = re.compile(r"\bvload(2|4|8|16)\s*\(\s*\w+\s*,\s*(b_ptr|b_row|a_row|rows|wc|drow|"
                         r"g|x\d|d\d|row|c_row|bias|w)\b")


def _reporting(ctx, vendor_id):
    """A context on ``ctx``'s CPU device whose kernels are rendered as for ``vendor_id``."""
    if not ctx.facts.is_cpu:
        pytest.skip("CPU kernels")
    c = dp.Context(ctx.device_string)
    c.facts = copy.copy(c.facts)
    c.facts.vendor_id = vendor_id
    return c


@pytest.fixture
def pocl_ctx(ctx):
    return _reporting(ctx, "pocl")


def _rendered(monkeypatch):
    sources = []
    real = program.render

    def recording(name, facts=None, **params):
        source = real(name, facts=facts, **params)
        sources.append((name, source))
        return source
    monkeypatch.setattr(program, "render", recording)
    return sources


@pytest.mark.parametrize("M, N, K, trans_b", [(70, 45, 37, False), (33, 100, 129, True),
                                               (1, 300, 1024, True), (1, 70, 1291, True)])
def test_cpu_products_rendered_for_pocl(pocl_ctx, rng, monkeypatch, M, N, K, trans_b):
    """gemm_cpu's tiles and few-row kernels, and gemv_cpu (one row, B^T), rendered as for
    PoCL: no fma/mad call and no vloadN of global rows in their source, and the product of
    float64 (edges of every tile and turn: K not a multiple of 8, N past a block)."""
    sources = _rendered(monkeypatch)
    a, b = rng.standard_normal((M, K)), rng.standard_normal((N, K) if trans_b else (K, N))
    bias = rng.standard_normal(N)
    g = Gemm(pocl_ctx, M, N, K, trans_b=trans_b, bias="col", activation="relu")
    C = dp.Tensor(pocl_ctx, (M, N), np.float32)
    g(dp.Tensor.from_numpy(pocl_ctx, a.astype(np.float32)),
      dp.Tensor.from_numpy(pocl_ctx, b.astype(np.float32)), C,
      bias=dp.Tensor.from_numpy(pocl_ctx, bias.astype(np.float32)))
    want = np.maximum(a @ (b.T if trans_b else b) + bias, 0.0)
    np.testing.assert_allclose(C.numpy(), want, rtol=1e-4, atol=1e-4 * np.sqrt(K))
    built = [(name, src) for name, src in sources if name in ("gemm_cpu", "gemv")]
    assert built, "no CPU product was rendered"
    for name, src in built:
        assert "float8_any" in src, name  # (common.h's PoCL branch)
        src = re.sub(r"//[^\n]*|/\*.*?\*/", "", src, flags=re.S)  # (code, not comments)
        assert not OUT_OF_LINE.search(src), (name, OUT_OF_LINE.search(src).group(0))
        assert not GLOBAL_READ.search(src), (name, GLOBAL_READ.search(src).group(0))


def test_other_drivers_keep_the_builtins(ctx, monkeypatch):
    """Elsewhere FMA is fma() (one rounding wherever the driver takes it) and
    VLOAD_GLOBAL vloadN: the PoCL branch is PoCL's alone."""
    intel = _reporting(ctx, "intel")
    sources = _rendered(monkeypatch)
    a = dp.Tensor.from_numpy(intel, np.ones((70, 37), np.float32))
    b = dp.Tensor.from_numpy(intel, np.ones((37, 45), np.float32))
    C = dp.Tensor(intel, (70, 45), np.float32)
    Gemm(intel, 70, 45, 37)(a, b, C)
    assert np.all(C.numpy() == 37.0)
    src = dict(sources)["gemm_cpu"]
    assert "#define FMA(a, b, c) fma(a, b, c)" in src and "float8_any" not in src
