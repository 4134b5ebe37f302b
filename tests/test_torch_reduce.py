"""Reductions and scans on PyTorch's ``ocl`` device against PyTorch CPU: every dtype that
applies, shapes at work-group edges, empty and 0-d tensors, NaN, the out= overloads,
float32 gradients through PyTorch's autograd, the errors; and the scan kernel's
local-memory path (GPUs') run on this device."""
import time

import numpy as np
import pytest

torch = pytest.importorskip("torch")
dt = pytest.importorskip("dlprim.torch")

DEV = "ocl"
DTYPES = (torch.float32, torch.float16, torch.int64, torch.int32, torch.uint8, torch.bool)


def _make(shape, dtype, seed=0, nan=False):
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.rand(shape, generator=g) > 0.5
    if not dtype.is_floating_point:
        return torch.randint(0 if dtype == torch.uint8 else -9, 9, shape, generator=g).to(dtype)
    x = torch.randn(shape, generator=g).to(dtype)
    if nan and x.numel() > 2:
        x.view(-1)[1::7] = float("nan")
    return x


def _close(got, want, what):
    if isinstance(want, (tuple, list)):
        assert len(got) == len(want), what
        for g, w in zip(got, want):
            _close(g, w, what)
        return
    got = got.detach().cpu()
    assert got.dtype == want.dtype and got.shape == want.shape, (what, got.dtype, want.dtype,
                                                                 got.shape, want.shape)
    tol = 2e-2 if want.dtype == torch.float16 else 1e-4
    torch.testing.assert_close(got, want.detach(), rtol=tol, atol=tol, equal_nan=True,
                               msg=lambda m: "%s: %s" % (what, m))


def _both(fn, x, what):
    """fn on CPU and on ocl: the same values, or the same exception type."""
    try:
        want = fn(x)
    except (RuntimeError, IndexError) as err:
        with pytest.raises(type(err)):
            fn(x.to(DEV))
        return
    got = fn(x.to(DEV))
    _close(got, want, what)


SHAPES = [((33, 65), 1), ((31, 2, 3), 0), ((1,), 0), ((), 0), ((3, 0, 4), 1), ((2, 5), -1)]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_reductions_match_cpu(dtype):
    for shape, dim in SHAPES:
        x = _make(shape, dtype, nan=True)
        cases = {
            "sum": lambda t: t.sum(), "sum_dim": lambda t: t.sum(dim, keepdim=True),
            "prod": lambda t: t.prod(dim) if dtype != torch.float16 else t.prod(),
            "any": lambda t: t.any(dim), "all": lambda t: t.all(),
            "count_nonzero": lambda t: t.count_nonzero(dim),
            "amax": lambda t: t.amax(dim), "amin": lambda t: t.amin(dim),
            "nansum": lambda t: t.nansum(dim),
        }
        if x.numel():
            cases.update({"max": lambda t: t.max(), "min": lambda t: t.min(),
                          "argmax": lambda t: t.argmax(), "argmin": lambda t: t.argmin(),
                          "aminmax": lambda t: torch.aminmax(t)})
        if not x.dim() or x.shape[dim]:
            cases.update({"max_dim": lambda t: t.max(dim), "min_dim": lambda t: t.min(dim, True),
                          "argmax_dim": lambda t: t.argmax(dim),
                          "aminmax_dim": lambda t: torch.aminmax(t, dim=dim)})
        if dtype in (torch.float32, torch.float16):
            cases.update({
                "mean": lambda t: t.mean(dim), "nanmean": lambda t: t.nanmean(dim),
                "var": lambda t: t.var(dim), "std0": lambda t: t.std(dim, correction=0),
                "var_mean": lambda t: torch.var_mean(t, dim, keepdim=True),
                "std_mean": lambda t: torch.std_mean(t),
                "logsumexp": lambda t: t.logsumexp(dim)})
        for name, fn in cases.items():
            _both(fn, x, "%s %s %s" % (name, shape, dtype))


def test_sum_dtypes_follow_pytorch():
    x = _make((5, 7), torch.int32)
    _both(lambda t: t.sum(1), x, "int32 sums in int64")
    _both(lambda t: t.sum(1, dtype=torch.float32), x, "sum dtype=")
    _both(lambda t: t.prod(1), _make((5, 7), torch.bool), "bool prod")
    # a half running sum stops at 2048 (2048 + 1 rounds back to 2048)
    got = torch.ones(5000, dtype=torch.float16, device=DEV).sum()
    assert got.item() == 5000.0, "float16 sums accumulate in float"


@pytest.mark.parametrize("ord", [0, 1, 2, 3, -1.5, float("inf"), float("-inf")])
def test_vector_norms(ord):
    x = _make((6, 33), torch.float32)
    x[0, :5] = 0
    _both(lambda t: torch.linalg.vector_norm(t, ord, dim=1), x, "vector_norm %s" % ord)
    _both(lambda t: torch.linalg.vector_norm(t.half(), ord), x, "half vector_norm %s" % ord)
    if ord not in (0, float("-inf")):
        _both(lambda t: torch.norm(t, ord, dim=0, keepdim=True), x, "norm %s" % ord)


def test_nan_and_inf():
    x = torch.tensor([[1.0, float("nan"), 3.0], [float("-inf"), float("-inf"), 2.0],
                      [float("inf"), 1.0, float("inf")]])
    for name, fn in {"amax": lambda t: t.amax(1), "argmax": lambda t: t.argmax(1),
                     "max_dim": lambda t: t.max(1), "min_dim": lambda t: t.min(0),
                     "logsumexp": lambda t: t.logsumexp(1), "nanmean": lambda t: t.nanmean(1),
                     "nansum": lambda t: t.nansum(0), "var": lambda t: t.var(1)}.items():
        _both(fn, x, name)
    one = torch.randn(4, 1)
    _both(lambda t: t.var(1), one, "var of one sample is NaN")
    _both(lambda t: t.sum(0), torch.empty(0, 3), "sum over an empty dim")
    _both(lambda t: t.mean(0), torch.empty(0, 3), "mean over an empty dim")


SCANS = {"cumsum": lambda t, d: t.cumsum(d), "cumprod": lambda t, d: t.cumprod(d),
         "cummax": lambda t, d: t.cummax(d), "cummin": lambda t, d: t.cummin(d),
         "logcumsumexp": lambda t, d: t.logcumsumexp(d)}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_scans_match_cpu(dtype):
    for shape, dim in SHAPES + [((3, 1000), 1), ((700, 3), 0)]:
        x = _make(shape, dtype, nan=True)
        if dtype.is_floating_point and x.numel() > 1:
            x.view(-1)[::5] = 1.0  # ties: cummax keeps the last index
            x = x / 4 + 1 if shape[0] == 3 and x.dim() == 2 else x
        for name, fn in SCANS.items():
            if name == "logcumsumexp" and not dtype.is_floating_point:
                continue
            if name == "cumprod" and x.numel() > 200 and dtype != torch.float32:
                continue
            _both(lambda t: fn(t, dim), x, "%s %s %s" % (name, shape, dtype))


def test_scan_dtype_inplace_and_out():
    x = _make((4, 9), torch.float32)
    _both(lambda t: t.cumsum(1, dtype=torch.float16), x, "cumsum dtype=")
    o = x.to(DEV)
    o.cumsum_(0)
    _close(o, x.cumsum(0), "cumsum_")
    out = torch.empty(0, device=DEV)
    torch.cumprod(x.to(DEV), 1, out=out)
    _close(out, x.cumprod(1), "cumprod out=")
    values = torch.empty(4, 9, device=DEV)
    indices = torch.empty(4, 9, dtype=torch.int64, device=DEV)
    torch.cummax(x.to(DEV), 1, out=(values, indices))
    _close((values, indices), tuple(x.cummax(1)), "cummax out=")


def test_reduction_out_overloads():
    x = _make((5, 6), torch.float32)
    o = x.to(DEV)
    out = torch.empty(0, device=DEV)
    torch.sum(o, 1, out=out)
    _close(out, x.sum(1), "sum out= (resized)")
    out = torch.empty(5, device=DEV)
    torch.var(o, 1, out=out)
    _close(out, x.var(1), "var out=")
    m, i = torch.empty(6, device=DEV), torch.empty(6, dtype=torch.int64, device=DEV)
    torch.max(o, 0, out=(m, i))
    _close((m, i), tuple(x.max(0)), "max out=")
    out = torch.empty((), dtype=torch.bool, device=DEV)
    torch.any(o > 2, out=out)
    _close(out, (x > 2).any(), "any out=")


GRADS = {"sum": lambda t: t.sum(1), "mean": lambda t: t.mean(0), "prod": lambda t: t.prod(1),
         "var": lambda t: t.var(1), "std_mean": lambda t: torch.std_mean(t, 0)[0],
         "norm": lambda t: torch.linalg.vector_norm(t, 3, dim=1), "amax": lambda t: t.amax(1),
         "logsumexp": lambda t: t.logsumexp(1), "max_dim": lambda t: t.max(1).values,
         "cumsum": lambda t: t.cumsum(1), "cumprod": lambda t: t.cumprod(1),
         "cummax": lambda t: t.cummax(0).values, "logcumsumexp": lambda t: t.logcumsumexp(1)}


@pytest.mark.parametrize("name", sorted(GRADS))
def test_float32_gradients(name):
    fn = GRADS[name]
    x = _make((4, 33), torch.float32, seed=3)
    cpu = x.clone().requires_grad_()
    ocl = x.to(DEV).requires_grad_()
    want, got = fn(cpu), fn(ocl)
    _close(got, want, name)
    g = torch.randn(want.shape, generator=torch.Generator().manual_seed(1))
    (gw,) = torch.autograd.grad(want, cpu, g)
    (gg,) = torch.autograd.grad(got, ocl, g.to(DEV))
    _close(gg, gw, name + " gradient")


def test_errors_match_pytorch():
    o = torch.empty(0, 3, device=DEV)
    with pytest.raises(RuntimeError):
        o.max()
    with pytest.raises((IndexError, RuntimeError)):
        o.argmax(0)
    with pytest.raises((IndexError, RuntimeError)):
        o.amax(0)
    with pytest.raises(RuntimeError):
        torch.ones(3, dtype=torch.int64, device=DEV).mean()
    with pytest.raises(RuntimeError):
        torch.ones(3, dtype=torch.int64, device=DEV).var()
    with pytest.raises(IndexError):
        torch.ones(3, device=DEV).sum(2)
    with pytest.raises(RuntimeError):
        torch.linalg.vector_norm(o, float("inf"))


@pytest.mark.parametrize("wg", [4, 32])
@pytest.mark.parametrize("op", ["sum", "max", "logsumexp"])
def test_scan_local_memory_path(op, wg):
    """The work-group scan that GPUs run (CPU drivers get one item per row)."""
    from dlprim.core.scan import Scan
    from dlprim.tensor import Tensor
    ctx = dt.context(0)
    rng = np.random.default_rng(0)
    scan = Scan(ctx, op, np.float32, wg)
    for outer, n, inner in [(3, 1, 2), (2, 31, 3), (1, 65, 1), (2, 1000, 1)]:
        x = rng.standard_normal((outer, n, inner)).astype(np.float32)
        x[:, ::13] = np.round(x[:, ::13])
        X = Tensor.from_numpy(ctx, x)
        Y, I = Tensor(ctx, x.shape, np.float32), Tensor(ctx, x.shape, np.int64)
        for launch in scan.launches(X, Y, I, outer, n, inner):
            launch(ctx.queue)
        if op == "sum":
            want = np.cumsum(x.astype(np.float64), 1)
        elif op == "logsumexp":
            want = np.logaddexp.accumulate(x.astype(np.float64), 1)
        else:
            want = np.maximum.accumulate(x, 1)
            t = torch.from_numpy(x).cummax(1)
            np.testing.assert_array_equal(I.to_host(), t.indices.numpy())
        np.testing.assert_allclose(Y.to_host(), want, rtol=1e-4, atol=1e-4)


def test_cumsum_64x4096_takes_milliseconds():
    x = torch.randn(64, 4096).to(DEV)
    x.cumsum(1)
    dt.synchronize()
    start = time.perf_counter()
    y = x.cumsum(1)
    dt.synchronize()
    took = time.perf_counter() - start
    _close(y, x.cpu().cumsum(1), "cumsum 64x4096")
    assert took < 1.0, took  # tens of ms on a loaded 2-core CPU runtime


def test_float64_keeps_double():
    x = torch.randn(5, 33, dtype=torch.float64, generator=torch.Generator().manual_seed(6))
    for name, fn in {"norm3": lambda t: torch.linalg.vector_norm(t, 3, dim=1),
                     "var": lambda t: t.var(1), "logsumexp": lambda t: t.logsumexp(0),
                     "nanmean": lambda t: t.nanmean(1), "cumsum": lambda t: t.cumsum(1),
                     "sum": lambda t: t.sum()}.items():
        got, want = fn(x.to(DEV)).cpu(), fn(x)
        assert got.dtype == torch.float64, name
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12, msg=name)
