"""dlprim.torch's random operators: draws made on the device, checked by their moments
and ranges over large draws, reproducibility under torch.manual_seed and generators,
fresh draws on consecutive calls, every float dtype, multinomial frequencies, randperm
permutations, and PyTorch's errors."""
import math

import pytest

torch = pytest.importorskip("torch")
dt = pytest.importorskip("dlprim.torch")

DEV = "ocl"
N = 200_000
FLOATS = (torch.float32, torch.float16)


def host(t):
    assert t.device.type == "ocl"
    return t.cpu().double()


def moments(t):
    x = host(t)
    return x.mean().item(), x.var().item()


def near(got, want, tol):
    assert abs(got - want) <= tol, (got, want)


@pytest.mark.parametrize("dtype", FLOATS)
def test_uniform_range_and_moments(dtype):
    x = torch.empty(N, device=DEV, dtype=dtype).uniform_(-2.0, 3.0)
    assert x.dtype == dtype and x.shape == (N,)
    h = host(x)
    assert h.min() >= -2.0 and h.max() < 3.0
    mean, var = moments(x)
    near(mean, 0.5, 0.03)
    near(var, 25 / 12, 0.05)
    u = torch.rand(N, device=DEV, dtype=dtype)
    assert host(u).max() < 1.0 and host(u).min() >= 0.0


@pytest.mark.parametrize("dtype", FLOATS)
def test_normal_moments(dtype):
    mean, var = moments(torch.empty(N, device=DEV, dtype=dtype).normal_(1.5, 2.0))
    near(mean, 1.5, 0.03)
    near(var, 4.0, 0.08)
    mean, var = moments(torch.randn(N, device=DEV, dtype=dtype))
    near(mean, 0.0, 0.02)
    near(var, 1.0, 0.03)


@pytest.mark.parametrize("dtype", FLOATS)
def test_other_distributions(dtype):
    x = torch.empty(N, device=DEV, dtype=dtype)
    mean, var = moments(x.exponential_(2.0))
    near(mean, 0.5, 0.01)
    near(var, 0.25, 0.02)
    assert host(x).min() >= 0
    mean, var = moments(x.geometric_(0.25))
    near(mean, 4.0, 0.06)
    near(var, 12.0, 0.5)
    assert host(x).min() >= 1 and torch.equal(host(x), host(x).round())
    mean, _ = moments(x.log_normal_(0.0, 0.5))
    near(mean, math.exp(0.125), 0.02)
    median = host(x.cauchy_(1.0, 2.0)).median().item()
    near(median, 1.0, 0.05)
    frac = (host(x.cauchy_(0.0, 1.0)).abs() < 1).double().mean().item()
    near(frac, 0.5, 0.01)  # the quartiles of the standard Cauchy are -1 and 1


@pytest.mark.parametrize("dtype", (torch.float32, torch.float16, torch.int64, torch.bool))
def test_bernoulli(dtype):
    x = torch.empty(N, device=DEV, dtype=dtype).bernoulli_(0.3)
    assert x.dtype == dtype
    assert set(host(x).unique().tolist()) <= {0.0, 1.0}
    near(host(x).mean().item(), 0.3, 0.01)
    p = torch.linspace(0, 1, 65).repeat(3000).to(DEV)
    draws = host(torch.bernoulli(p)).view(3000, 65).mean(0)
    assert torch.allclose(draws, torch.linspace(0, 1, 65).double(), atol=0.04)
    assert draws[0] == 0 and draws[-1] == 1
    y = torch.zeros(3000, 65, device=DEV, dtype=dtype).bernoulli_(p.view(3000, 65)[:1])
    assert torch.allclose(host(y).mean(0), torch.linspace(0, 1, 65).double(), atol=0.04)


def test_normal_tensor_overloads():
    mean = torch.tensor([0.0, 10.0, -5.0]).to(DEV)
    std = torch.tensor([1.0, 0.5, 2.0]).to(DEV)
    x = torch.normal(mean.expand(N // 3, 3), std)
    assert x.shape == (N // 3, 3)
    h = host(x)
    assert torch.allclose(h.mean(0), torch.tensor([0.0, 10.0, -5.0]).double(), atol=0.05)
    assert torch.allclose(h.std(0), torch.tensor([1.0, 0.5, 2.0]).double(), atol=0.05)
    assert torch.normal(mean, 2.0).shape == (3,)
    assert torch.normal(1.0, std).shape == (3,)
    assert torch.normal(2.0, 3.0, (4, 5), device=DEV).device.type == "ocl"


@pytest.mark.parametrize("dtype", (torch.int64, torch.int32, torch.uint8, torch.float32,
                                   torch.float16))
def test_random_and_randint(dtype):
    x = torch.empty(N, device=DEV, dtype=dtype).random_(-3 if dtype != torch.uint8 else 2, 9)
    h = host(x)
    lo = -3 if dtype != torch.uint8 else 2
    assert h.min() == lo and h.max() == 8
    assert torch.equal(h, h.round())
    counts = torch.bincount((h - lo).long()).double() / N
    assert torch.allclose(counts, torch.full_like(counts, 1 / (9 - lo)), atol=0.01)
    r = torch.randint(5, 17, (1000,), device=DEV, dtype=dtype)
    assert r.dtype == dtype and host(r).min() >= 5 and host(r).max() < 17
    big = torch.empty(N, device=DEV, dtype=torch.int64).random_(0, 2 ** 40)
    near(host(big).mean().item() / 2 ** 40, 0.5, 0.01)
    every = host(torch.empty(N, device=DEV, dtype=torch.int64).random_(-2 ** 63, None))
    assert (every < 0).any() and (every > 2 ** 62).any()
    full = torch.empty(N, device=DEV, dtype=torch.int64).random_()
    near(host(full).mean().item() / 2 ** 63, 0.5, 0.01)
    assert host(torch.randint_like(x, 3, 4)).eq(3).all()


def test_reproducible_and_fresh():
    torch.manual_seed(123)
    a = torch.randn(65, device=DEV).cpu()
    b = torch.randn(65, device=DEV).cpu()
    torch.manual_seed(123)
    assert torch.equal(torch.randn(65, device=DEV).cpu(), a)
    assert torch.equal(torch.randn(65, device=DEV).cpu(), b)
    assert not torch.equal(a, b)
    g = torch.Generator().manual_seed(7)
    c = torch.rand(33, device=DEV, generator=g).cpu()
    d = torch.rand(33, device=DEV, generator=torch.Generator().manual_seed(7)).cpu()
    assert torch.equal(c, d)
    torch.manual_seed(5)
    p1, m1 = torch.randperm(31, device=DEV).cpu(), torch.multinomial(
        torch.ones(4, 9, device=DEV), 5).cpu()
    torch.manual_seed(5)
    assert torch.equal(torch.randperm(31, device=DEV).cpu(), p1)
    assert torch.equal(torch.multinomial(torch.ones(4, 9, device=DEV), 5).cpu(), m1)


def test_strided_and_empty():
    x = torch.zeros(33, 31, device=DEV)
    x.t().uniform_(5.0, 6.0)
    assert host(x).min() >= 5.0
    x[:, 1:4].normal_()
    assert torch.empty(0, device=DEV).normal_().shape == (0,)
    assert torch.rand(0, 3, device=DEV).shape == (0, 3)


@pytest.mark.parametrize("n", (1, 2, 31, 33, 65, 1000))
def test_randperm(n):
    p = torch.randperm(n, device=DEV)
    assert p.dtype == torch.int64 and p.shape == (n,)
    assert torch.equal(p.cpu().sort().values, torch.arange(n))
    if n > 10:
        assert not torch.equal(p.cpu(), torch.arange(n))
    assert torch.randperm(n, device=DEV, dtype=torch.float32).dtype == torch.float32


def test_randperm_uniform_first_place():
    firsts = torch.tensor([torch.randperm(3, device=DEV).cpu()[0].item() for _ in range(600)])
    counts = torch.bincount(firsts, minlength=3).double() / 600
    assert torch.allclose(counts, torch.full((3,), 1 / 3).double(), atol=0.08)


@pytest.mark.parametrize("dtype", FLOATS)
def test_multinomial_frequencies(dtype):
    w = torch.tensor([1.0, 0.0, 6.0, 3.0], dtype=dtype)
    s = torch.multinomial(w.to(DEV), N, replacement=True)
    assert s.dtype == torch.int64 and s.shape == (N,)
    freq = torch.bincount(s.cpu(), minlength=4).double() / N
    assert torch.allclose(freq, torch.tensor([0.1, 0.0, 0.6, 0.3]).double(), atol=0.01)
    rows = torch.multinomial(w.to(DEV).expand(20000, 4).contiguous(), 2)
    rows = rows.cpu()
    assert (rows[:, 0] != rows[:, 1]).all() and (rows != 1).all()
    freq = torch.bincount(rows[:, 0], minlength=4).double() / 20000
    assert torch.allclose(freq, torch.tensor([0.1, 0.0, 0.6, 0.3]).double(), atol=0.02)
    perm = torch.multinomial(torch.ones(3, 65, device=DEV, dtype=dtype), 65).cpu()
    assert torch.equal(perm.sort(1).values, torch.arange(65).expand(3, 65))


def test_errors():
    x = torch.empty(5, device=DEV)
    with pytest.raises(RuntimeError):
        x.uniform_(1.0, 0.0)
    with pytest.raises(RuntimeError):
        x.normal_(0.0, -1.0)
    with pytest.raises(RuntimeError, match="std >= 0"):
        torch.normal(torch.zeros(3, device=DEV), torch.tensor([1.0, -1.0, 1.0]).to(DEV))
    with pytest.raises(RuntimeError):
        x.exponential_(-1.0)
    with pytest.raises(RuntimeError):
        x.geometric_(1.5)
    with pytest.raises(RuntimeError):
        x.bernoulli_(2.0)
    with pytest.raises(RuntimeError):
        x.random_(5, 5)
    with pytest.raises(RuntimeError):
        torch.empty(5, device=DEV, dtype=torch.int64).normal_()
    with pytest.raises(RuntimeError):
        torch.multinomial(torch.ones(3, device=DEV), 4)
    with pytest.raises(RuntimeError):
        torch.multinomial(torch.ones(2, 2, 2, device=DEV), 1)
    for bad in ([1.0, -1.0, 2.0], [1.0, float("nan"), 1.0], [1.0, float("inf"), 1.0],
                [0.0, 0.0, 0.0]):
        with pytest.raises(RuntimeError, match="multinomial|probability"):
            torch.multinomial(torch.tensor([[1.0, 1.0, 1.0], bad]).to(DEV), 1)
    with pytest.raises(RuntimeError, match="not enough"):
        torch.multinomial(torch.tensor([[1.0, 0.0, 1.0]]).to(DEV), 3)
