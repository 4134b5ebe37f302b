"""Sorting on PyTorch's ``ocl`` device against PyTorch CPU: sort / argsort / msort (stable,
descending, NaN placement), topk, kthvalue, median / nanmedian, unique (inverse, counts),
unique_consecutive, searchsorted / bucketize; every dtype that applies, rows at
work-group edges and longer than local memory, empty and 0-d tensors, float32 gradients,
the errors; and the bitonic network (GPUs') run on this device."""
import time

import numpy as np
import pytest

torch = pytest.importorskip("torch")
dt = pytest.importorskip("dlprim.torch")

DEV = "ocl"
DTYPES = (torch.float32, torch.float16, torch.int64, torch.int32, torch.uint8, torch.bool)


def _make(shape, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.rand(shape, generator=g) > 0.5
    if not dtype.is_floating_point:
        return torch.randint(0 if dtype == torch.uint8 else -20, 20, shape, generator=g).to(dtype)
    x = torch.randn(shape, generator=g).to(dtype)
    if x.numel() > 3:
        x.view(-1)[::9] = float("nan")
        x.view(-1)[1::5] = 0.5  # ties
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
    torch.testing.assert_close(got, want.detach(), rtol=1e-6, atol=1e-6, equal_nan=True,
                               msg=lambda m: "%s: %s" % (what, m))


def _both(fn, x, what):
    try:
        want = fn(x)
    except (RuntimeError, IndexError) as err:
        with pytest.raises(type(err)):
            fn(x.to(DEV))
        return
    _close(fn(x.to(DEV)), want, what)


SHAPES = [((5, 33), 1), ((65, 3), 0), ((2, 3000), 1), ((1,), 0), ((), 0), ((3, 0), 1),
          ((4, 9000), -1)]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_stable_sort_matches_cpu(dtype):
    for shape, dim in SHAPES:
        x = _make(shape, dtype)
        for descending in (False, True):
            _both(lambda t: torch.sort(t, dim=dim, descending=descending, stable=True), x,
                  "sort %s %s desc=%s" % (shape, dtype, descending))
        _both(lambda t: torch.argsort(t, dim=dim, stable=True), x, "argsort %s" % (shape,))
    _both(lambda t: torch.msort(t), _make((7, 4), dtype), "msort")


def test_unstable_sort_gives_sorted_values():
    # ties may come in any order without stable=True; the values and what the indices
    # point at must still agree
    x = _make((6, 50), torch.float32)
    values, indices = torch.sort(x.to(DEV), 1, descending=True)
    want = torch.sort(x, 1, descending=True).values
    _close(values, want, "values")
    _close(torch.take_along_dim(x, indices.cpu(), 1), want, "indices point at the values")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int64], ids=str)
def test_topk_kthvalue_median(dtype):
    g = torch.Generator().manual_seed(1)
    # distinct values: the index of a tie is not specified for these
    x = torch.randperm(4 * 67, generator=g).reshape(4, 67).to(dtype)
    for largest in (True, False):
        _both(lambda t: torch.topk(t, 5, 1, largest=largest), x, "topk largest=%s" % largest)
    _both(lambda t: torch.topk(t, 2, 0), x, "topk dim 0")
    _both(lambda t: torch.kthvalue(t, 7, 1), x, "kthvalue")
    _both(lambda t: torch.kthvalue(t, 2, 0, keepdim=True), x, "kthvalue keepdim")
    _both(lambda t: torch.median(t, 1), x, "median dim")
    _both(lambda t: torch.median(t), x, "median")
    if dtype.is_floating_point:
        x[0, 3] = x[2, 10] = x[2, 20] = float("nan")
        _both(lambda t: torch.median(t, 1, keepdim=True), x, "median: the first NaN")
        _both(lambda t: torch.topk(t[:1], 3, 1), x, "topk: NaN as the largest")
        _both(lambda t: torch.nanmedian(t, 1), x, "nanmedian skips NaN")
        _both(lambda t: torch.nanmedian(t), x, "nanmedian")
        x[1, :] = float("nan")  # (which index a row of NaNs answers is not specified)
        _both(lambda t: torch.nanmedian(t, 1).values, x, "nanmedian of NaNs")
    _both(lambda t: torch.median(t), torch.tensor([], dtype=dtype), "median of nothing")
    _both(lambda t: torch.topk(t, 0, 0), x[0], "topk k=0")


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool, torch.uint8], ids=str)
def test_unique(dtype):
    for shape in [(5, 33), (1,), (), (0,), (300,)]:
        x = _make(shape, dtype)
        if dtype.is_floating_point and x.numel():
            x = torch.round(x.nan_to_num() * 2)  # repeats, no NaN (their order is unspecified)
        for inverse in (False, True):
            for counts in (False, True):
                _both(lambda t: torch.unique(t, return_inverse=inverse, return_counts=counts),
                      x, "unique %s inverse=%s counts=%s" % (shape, inverse, counts))
                _both(lambda t: torch.unique_consecutive(t, return_inverse=inverse,
                                                         return_counts=counts),
                      x, "unique_consecutive %s" % (shape,))
    x = _make((40,), dtype)
    x = torch.round(x.nan_to_num() * 2) if dtype.is_floating_point else x
    _both(lambda t: torch.unique(t, dim=0), x, "unique dim=0 of 1-d")
    g = torch.Generator().manual_seed(4)
    x = torch.randint(0, 2, (9, 3, 2), generator=g).to(dtype)
    for dim in (0, 1, -1):
        _both(lambda t: torch.unique(t, dim=dim, return_inverse=True, return_counts=True), x,
              "unique dim=%d" % dim)
        _both(lambda t: torch.unique_consecutive(t, dim=dim, return_inverse=True,
                                                 return_counts=True), x,
              "unique_consecutive dim=%d" % dim)


def test_searchsorted_and_bucketize():
    g = torch.Generator().manual_seed(2)
    seq = torch.sort(torch.randn(4, 33, generator=g), 1).values
    seq[0, 5] = seq[0, 4]
    values = torch.randn(4, 7, generator=g)
    values[0, 0] = seq[0, 4]
    values[1, 1] = float("nan")
    unsorted = torch.randn(4, 33, generator=g)
    order = unsorted.argsort(1)
    for right in (False, True):
        side = "right" if right else "left"
        _both(lambda s: torch.searchsorted(s, values.to(s.device), right=right), seq, "rows")
        _both(lambda s: torch.searchsorted(s[0], values.to(s.device), side=side,
                                           out_int32=True), seq, "one row, int32")
        _both(lambda s: torch.searchsorted(s[1], 0.25, right=right), seq, "scalar")
        _both(lambda s: torch.bucketize(values.to(s.device), s[2], right=right), seq,
              "bucketize")
        _both(lambda s: torch.searchsorted(s, values.to(s.device), side=side,
                                           sorter=order.to(s.device)), unsorted, "sorter")
    ints = torch.arange(0, 40, 3)
    _both(lambda s: torch.bucketize(torch.arange(-2, 45).to(s.device), s), ints, "int64")


GRADS = {"sort": lambda t: torch.sort(t, dim=1, stable=True).values,
         "topk": lambda t: torch.topk(t, 4, 1).values,
         "kthvalue": lambda t: torch.kthvalue(t, 3, 1).values,
         "median": lambda t: torch.median(t, 0).values,
         "msort": lambda t: torch.msort(t)}


@pytest.mark.parametrize("name", sorted(GRADS))
def test_float32_gradients(name):
    fn = GRADS[name]
    x = torch.randn(5, 33, generator=torch.Generator().manual_seed(3))
    cpu, ocl = x.clone().requires_grad_(), x.to(DEV).requires_grad_()
    want, got = fn(cpu), fn(ocl)
    _close(got, want, name)
    g = torch.randn(want.shape, generator=torch.Generator().manual_seed(1))
    (gw,) = torch.autograd.grad(want, cpu, g)
    (gg,) = torch.autograd.grad(got, ocl, g.to(DEV))
    torch.testing.assert_close(gg.cpu(), gw, rtol=1e-5, atol=1e-5)


def test_errors_match_pytorch():
    x = torch.randn(3, 4)
    for fn in (lambda t: torch.topk(t, 5, 1), lambda t: torch.kthvalue(t, 0, 1),
               lambda t: torch.kthvalue(t, 5, 1), lambda t: torch.sort(t, 2),
               lambda t: torch.median(t[:, :0], 1), lambda t: torch.searchsorted(t, t[:2])):
        _both(fn, x, "error")
    for fn in (lambda t: torch.unique(t[0, 0], dim=0), lambda t: torch.unique(t[:, :0], dim=0),
               lambda t: torch.unique(t[:0], dim=0, return_counts=True)):
        _both(fn, x, "unique_dim's edges")


@pytest.mark.parametrize("n", [1, 31, 33, 65, 1000, 9000])
def test_bitonic_network_path(n):
    """The network GPUs run (CPU drivers sort a row per work-item), on this device."""
    from dlprim.core.sort import Sort
    from dlprim.tensor import Tensor
    ctx = dt.context(0)
    s = Sort(ctx, np.float32)
    s.serial, s.local_n = False, 1024  # long rows take the global steps too
    rng = np.random.default_rng(n)
    x = rng.integers(-50, 50, (3, n, 2)).astype(np.float32)
    x[0, ::7, 0] = np.nan
    X = Tensor.from_numpy(ctx, x)
    Y, I = Tensor(ctx, x.shape, np.float32), Tensor(ctx, x.shape, np.int64)
    for descending in (False, True):
        for launch in s.launches(X, Y, I, 3, n, 2, descending):
            launch(ctx.queue)
        want = torch.sort(torch.from_numpy(x), dim=1, descending=descending,
                          stable=True)
        np.testing.assert_array_equal(Y.to_host(), want.values.numpy())
        np.testing.assert_array_equal(I.to_host(), want.indices.numpy())


def test_sort_64x4096_takes_milliseconds():
    x = torch.randn(64, 4096).to(DEV)
    x.sort(1)
    dt.synchronize()
    start = time.perf_counter()
    values, indices = x.sort(1)
    dt.synchronize()
    took = time.perf_counter() - start
    _close(values, x.cpu().sort(1).values, "sort 64x4096")
    assert took < 2.0, took  # tens of ms on a 2-core CPU runtime, more when it is loaded
