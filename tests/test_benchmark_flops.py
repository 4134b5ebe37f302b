"""dlprim-benchmark flops at tiny sizes: the kernels do the work they are counted for
(checked against numpy), every section reports, the command line prints its table."""
import numpy as np
import pytest

import dlprim as dp
from dlprim.benchmarks import flops
from dlprim.cli import benchmark


@pytest.fixture(scope="module")
def pctx(ctx):
    return dp.Context(ctx.device_string, profiling=True)


@pytest.mark.parametrize("width", [1, 4, 16])
def test_chains_compute_what_is_counted(ctx, width):
    items, iters, m, c = 37, 50, 0.99, 0.01
    y = dp.Tensor(ctx, (items,))
    flops.chain_launch(ctx, y, "float", width, iters, m, c)(ctx.queue)
    i = np.arange(items)
    start = (np.arange(flops.CHAINS)[:, None] + 1) * 0.01 + (i % 7)[None, :]  # chains x items
    a = start.astype(np.float64)
    for _ in range(iters):
        a = a * m + c
    expected = width * a.sum(axis=0)   # every lane of a chain starts alike
    np.testing.assert_allclose(y.numpy(), expected, rtol=1e-4)


@pytest.mark.parametrize("width", [1, 2, 8])
def test_memory_kernels_move_every_element(ctx, width):
    n = 1024
    x = dp.Tensor.from_numpy(ctx, np.arange(n, dtype=np.float32))
    y = dp.Tensor.from_numpy(ctx, np.full(n, 7.0, np.float32))
    launches = flops.memory_launches(ctx, x, y, width)
    launches["read"][0](ctx.queue)
    np.testing.assert_array_equal(y.numpy(), 7.0)       # read writes nothing
    launches["write"][0](ctx.queue)
    np.testing.assert_array_equal(y.numpy(), 1.0)
    launches["copy"][0](ctx.queue)
    np.testing.assert_array_equal(y.numpy(), np.arange(n))
    assert [p for _, p in launches.values()] == [1, 1, 2]


def test_every_section_reports(pctx):
    rows = flops.run(pctx, "tiny", repeat=1)
    sections = [r["section"] for r in rows]
    widths = len(flops.WIDTHS) * (2 if pctx.facts.fp16 else 1)
    assert sections.count("peak") == widths
    assert sections.count("memory") == 3
    assert sections.count("gemm") == 4 * len(flops.SIZES["tiny"]["gemm"])
    assert sections.count("conv") == 3 * len(flops.SIZES["tiny"]["conv"])
    assert sections.count("broadcast") == 3 * 6
    for r in rows:
        assert r["ms"] > 0 and np.isfinite(r["gflops"]) and np.isfinite(r["gbs"])
        assert (r["gflops"] > 0) == (r["section"] != "memory")
        assert (r["gbs"] > 0) == (r["section"] != "peak")
    best = max(r["gflops"] for r in rows if r["section"] == "peak")
    assert any(r["limit"] == "compute 100%" for r in rows if r["gflops"] == best)
    gemm = next(r for r in rows if r["section"] == "gemm")
    assert gemm["case"] == "NN 17x9x5"
    np.testing.assert_allclose(gemm["gflops"] * gemm["ms"] * 1e6, 2 * 17 * 9 * 5, rtol=1e-9)
    assert {r["note"] for r in rows if r["section"] == "conv"} <= {
        "gemm", "winograd2", "winograd4", "depthwise", "direct", "im2col"}


def test_command_line(ctx, capsys):
    assert benchmark.main(["flops", "--size", "tiny", "--repeat", "1", "--only", "peak",
                           "memory", "--device", ctx.device_string]) == 0
    out = capsys.readouterr().out
    assert "sizes tiny" in out and "| section | case | ms |" in out
    assert "| peak | float x16 |" in out and "| memory | copy 16 KiB |" in out
    assert "| gemm |" not in out
    with pytest.raises(SystemExit):
        benchmark.main(["flops", "--repeat", "0"])
    with pytest.raises(SystemExit):
        benchmark.main(["flops", "--only", "fft"])
