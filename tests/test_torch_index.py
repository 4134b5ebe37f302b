"""The ocl device's indexing operators (dlprim/torch/ops_index.py, ops_index_put.py) against
PyTorch on the CPU: gathers and scatters in every dtype, advanced indexing with several
index tensors and boolean masks, the data-sized outputs (nonzero, masked_select), repeated
indices that must all accumulate, gradients, and PyTorch's errors for bad indices."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("dlprim.torch")

DEV = "ocl"
DTYPES = [torch.float32, torch.float16, torch.int64, torch.int32, torch.uint8, torch.bool]
SIZES = [1, 31, 33, 65]


def values(shape, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.rand(shape, generator=g) > 0.5
    if dtype.is_floating_point:
        return torch.randn(shape, generator=g).to(dtype)
    return torch.randint(0, 100, shape, generator=g).to(dtype)


def indices(shape, n, seed=1):
    return torch.randint(0, n, shape, generator=torch.Generator().manual_seed(seed))


def ocl(x):
    return x.to(DEV) if isinstance(x, torch.Tensor) else x


def same(fn, *args, tol=1e-3):
    """fn on CPU tensors and on ocl copies (args may be non-tensors): equal results."""
    want = fn(*[a.clone() if isinstance(a, torch.Tensor) else a for a in args])
    got = fn(*[ocl(a) for a in args])
    if isinstance(want, (tuple, list)):
        for w, g in zip(want, got):
            _close(g, w, tol)
    else:
        _close(got, want, tol)
    return got


def _close(got, want, tol):
    assert got.device.type == "ocl"
    got = got.cpu()
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, got.shape,
                                                                 want.dtype, want.shape)
    if want.dtype.is_floating_point:
        torch.testing.assert_close(got, want, rtol=tol, atol=tol, equal_nan=True)
    else:
        assert torch.equal(got, want), (got, want)


# ----- gathers
@pytest.mark.parametrize("dtype", DTYPES)
def test_index_select_gather_take_every_dtype(dtype):
    for n in SIZES:
        x = values((3, n, 2), dtype)
        idx = indices((n + 2,), n)
        same(lambda x, i: x.index_select(1, i), x, idx)
        same(lambda x, i: x.index_select(1, i), x, idx.int())
        same(lambda x, i: torch.gather(x, 1, i), x, indices((3, 5, 2), n))
        same(lambda x, i: torch.gather(x, 0, i), x, indices((2, n, 1), 3))  # smaller index
        same(lambda x, i: torch.take(x, i), x, indices((4, 5), 3 * n * 2) - 3 * n)  # negative
        same(lambda x, i: torch.take_along_dim(x, i, 1), x, indices((3, 4, 1), n))
    same(lambda x, i: x.index_select(0, i), values((4, 3), dtype), torch.tensor(2))  # 0-d index


def test_index_tensor_forms():
    x = values((4, 5, 6, 7), torch.float32)
    a, b = indices((3, 1), 4, 2), indices((2,), 6, 3) - 6
    same(lambda x, a: x[a], x, a)
    same(lambda x, a: x[:, a], x, indices((2, 3), 5))
    same(lambda x, a, b: x[a, :, b], x, a, b)            # not adjacent: indexed axes first
    same(lambda x, b: x[:, :, b, 1:3], x, b)
    same(lambda x, a, c: x[:, a, c], x, indices((3,), 5), indices((3,), 6))  # adjacent
    same(lambda x, a: x[a.int()], x, a)
    same(lambda x, m: x[m], x, values((4, 5), torch.bool))  # boolean masks
    same(lambda x, m: x[:, m], x, values((5,), torch.bool))
    same(lambda x, m: x[m, 2], x, values((4,), torch.bool))


def test_index_out_of_range_raises_as_pytorch():
    x = torch.arange(12.).reshape(3, 4).to(DEV)
    bad = torch.tensor([0, 4]).to(DEV)
    with pytest.raises(IndexError, match="out of bounds for dimension 1 with size 4"):
        x[:, bad]
    with pytest.raises(IndexError):
        x[bad, bad.clamp(max=3)]
    with pytest.raises(IndexError):
        x.index_select(1, bad)
    with pytest.raises(IndexError):
        x.index_select(1, -bad - 1)  # index_select does not wrap
    with pytest.raises(RuntimeError, match="index 4 is out of bounds for dimension 1"):
        x.gather(1, bad.view(1, 2))
    with pytest.raises(IndexError):
        torch.take(x, torch.tensor([12]).to(DEV))
    with pytest.raises(RuntimeError):
        x.clone().scatter_(1, bad.view(1, 2), 1.0)
    with pytest.raises(RuntimeError):
        x.clone().index_add_(0, torch.tensor([3]).to(DEV), x[:1])
    with pytest.raises(IndexError):
        x.clone().index_copy_(0, torch.tensor([-1]).to(DEV), x[:1])
    with pytest.raises(IndexError):
        torch.nn.functional.embedding(torch.tensor([3]).to(DEV), x)
    with pytest.raises(IndexError, match="too many indices"):
        x[bad, bad, bad]
    with pytest.raises(IndexError):
        x[torch.tensor([1.0]).to(DEV)]
    with pytest.raises(RuntimeError, match="same device"):
        x.index_select(0, torch.tensor([1]))
    with pytest.raises(RuntimeError, match="same device"):
        x.clone().scatter_add_(0, torch.tensor([[1]]), x)
    x[:, bad.clamp(max=3)]  # the fault was cleared: a good index runs again
    with pytest.raises(RuntimeError, match="dtypes match"):
        x.index_put_((bad,), torch.tensor([1, 2]).to(DEV))


# ----- data-sized outputs
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int64, torch.bool])
def test_nonzero_masked_select_scatter(dtype):
    for shape in [(1,), (31,), (5, 33), (3, 65, 7), (), (0, 3)]:
        x = values(shape, dtype) if dtype != torch.float32 else \
            values(shape, dtype) * (values(shape, torch.bool, 3))
        same(torch.nonzero, x)
        same(torch.argwhere, x)
        same(lambda x: torch.where(x), x)
        same(lambda x: torch.nonzero_static(x, size=4, fill_value=-7), x)
        m = values(shape, torch.bool, 4)
        same(torch.masked_select, x, m)
        same(lambda x, m, s: x.masked_scatter(m, s), x, m, values((max(x.numel(), 1),), dtype))
    big = values((70000,), torch.bool, 5)  # more blocks than one work-group scans at once
    same(torch.nonzero, big)
    same(lambda x, m: torch.masked_select(x, m), values((2, 70000), torch.float32), big)
    same(torch.masked_select, values((3, 4), dtype), values((4,), torch.bool))  # broadcast


def test_empty_mask_selects_nothing_whatever_memory_held_before():
    for _ in range(3):
        garbage = torch.full((4096,), 7, dtype=torch.int64).to(DEV)  # freed to the pool
        del garbage
        x = torch.empty(0, 3).to(DEV)
        assert torch.masked_select(x, x > 0).shape == (0,)


def test_masked_scatter_short_source_raises():
    x = torch.zeros(4).to(DEV)
    with pytest.raises(RuntimeError):
        x.masked_scatter_(torch.ones(4, dtype=torch.bool).to(DEV), torch.ones(2).to(DEV))


# ----- writes
@pytest.mark.parametrize("dtype", DTYPES)
def test_scatter_index_writes_every_dtype(dtype):
    for n in (1, 33):
        x = values((4, n, 3), dtype)
        src = values((4, 6, 3), dtype, 2)
        perm = torch.randperm(n, generator=torch.Generator().manual_seed(3))[:min(n, 6)]
        idx = perm.view(1, -1, 1).expand(4, -1, 3).contiguous()  # no repeats: one answer
        same(lambda x, i, s: x.scatter(1, i, s), x, idx, src)
        same(lambda x, i: x.scatter(1, i, 1), x, idx)
        same(lambda x, i, s: x.index_copy(1, i, s), x, perm, src[:, :perm.numel()])
        same(lambda x, i: x.index_fill(1, i - n, True if dtype == torch.bool else 5), x, perm)
        dup = indices((4, 9, 3), n)  # repeated indices: every contribution must land
        s9 = values((4, 9, 3), dtype, 4)
        same(lambda x, i, s: x.scatter_add(1, i, s), x, dup, s9, tol=1e-2)
        same(lambda x, i, s: x.index_add(1, i, s), x, dup[0, :, 0], s9, tol=1e-2)
        same(lambda x, i, s: x.index_put((i,), s, accumulate=True), x, dup[:, 0, 0] % 4,
             s9[:, :1], tol=1e-2)
        same(lambda x, i, s: x.put(i, s, accumulate=True), x, dup.view(-1)[:20] - 2,
             s9.view(-1)[:20], tol=1e-2)
        same(lambda x, i, s: x.put_(i, s), x, perm[:1], s9.view(-1)[:1])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int64, torch.int32,
                                   torch.uint8])
@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
def test_scatter_reduce_and_index_reduce(dtype, reduce):
    x = values((5, 33), dtype)
    src = values((5, 40), dtype, 2)
    if reduce == "prod" and dtype.is_floating_point:
        x, src = x.sign() + x / 8, src.sign() + src / 8  # near 1: products stay finite
    if reduce == "prod" and not dtype.is_floating_point:
        x, src = x % 3, src % 3
    idx = indices((5, 40), 33)
    tol = 2e-2 if dtype == torch.float16 else 1e-4
    for include_self in (True, False):
        same(lambda x, i, s: x.scatter_reduce(1, i, s, reduce, include_self=include_self), x,
             idx, src, tol=tol)
        if reduce != "sum":
            same(lambda x, i, s: x.index_reduce(1, i, s, reduce, include_self=include_self), x,
                 idx[0], src, tol=tol)
    if reduce in ("sum", "prod"):
        same(lambda x, i, s: x.scatter(1, i, s, reduce="add" if reduce == "sum" else "multiply"),
             x, idx, src, tol=tol)


def test_index_put_forms():
    x = values((4, 5, 6), torch.float32)
    a, b = indices((3, 1), 4, 2), indices((2,), 6, 3)
    same(lambda x, a, b, v: torch.ops.aten.index_put_(x, [a, None, b], v), x, a, b,
         values((3, 2, 5), torch.float32))
    same(lambda x, a, v: torch.ops.aten.index_put(x, [None, a], v), x, indices((2,), 5),
         torch.tensor(3.0))
    same(lambda x, m, v: x.index_put_((m,), v), x, values((4, 5), torch.bool), torch.tensor(2.0))
    same(lambda x, m, v: x.index_put_((m,), v, accumulate=True), x, values((4, 5, 6), torch.bool),
         torch.tensor(2.0))
    xt = values((6, 4), torch.float32).t()  # a non-contiguous target
    same(lambda x, a, v: x.index_put_((a, a), v, accumulate=True), xt, indices((50,), 4),
         values((50,), torch.float32))
    same(lambda x, a: x.__setitem__((slice(None), a), 7.0) or x, x, indices((3,), 5))
    with pytest.raises(RuntimeError, match="shape mismatch"):
        x.to(DEV).index_put_((a.to(DEV),), torch.ones(2, 2).to(DEV))


def test_isin():
    x, t = values((7, 33), torch.int64), values((17,), torch.int64, 2)
    for invert in (False, True):
        same(lambda x, t: torch.isin(x, t, invert=invert), x, t)
        same(lambda x: torch.isin(x, 5, invert=invert), x)
        same(lambda t: torch.isin(5, t, invert=invert), t)
    same(torch.isin, values((9,), torch.float16), values((4,), torch.float32))
    same(torch.isin, torch.tensor([float("nan"), -0.0, 1.0]), torch.tensor([float("nan"), 0.0]))


def test_out_overloads():
    x, i = values((4, 6), torch.float32), indices((3,), 6)
    same(lambda x, i: torch.index_select(x, 1, i, out=torch.empty(0, device=x.device)), x, i)
    same(lambda x, i: torch.take(x, i, out=torch.empty(0, device=x.device)), x, i)
    same(lambda x: torch.nonzero(x > 0, out=torch.empty(0, dtype=torch.int64,
                                                        device=x.device)), x)
    same(lambda x, i: torch.scatter(x, 1, i.view(1, 3), 2.0, out=torch.empty_like(x)), x, i)
    same(lambda x, i: torch.isin(x, x[0], out=torch.empty(4, 6, dtype=torch.bool,
                                                          device=x.device)), x, i)


# ----- gradients (float32, through PyTorch's autograd)
def test_gradients():
    def grads(fn, x, *rest):
        out = []
        for dev in ("cpu", DEV):
            leaf = x.clone().to(dev).requires_grad_()
            y = fn(leaf, *[ocl(r) if dev == DEV else r for r in rest])
            y.backward(torch.ones_like(y))
            out.append(leaf.grad.cpu())
        torch.testing.assert_close(out[1], out[0])
    x = values((6, 33), torch.float32)
    i = indices((40,), 6)
    grads(lambda x, i: x[i], x, i)
    grads(lambda x, i: x.index_select(1, i % 33), x, i)
    grads(lambda x, i: x.gather(0, i.view(4, 10).repeat(1, 3)[:, :33] % 6), x, i)
    grads(lambda x, m: x[m], x, values((6, 33), torch.bool))
    grads(lambda x, m: torch.masked_select(x, m), x, values((33,), torch.bool))
    grads(lambda x, i: x.scatter_add(0, i.view(4, 10) % 6, torch.ones(4, 10).to(x.device)) * x,
          x, i)
    grads(lambda w, i: torch.nn.functional.embedding(i, w, padding_idx=2), x, i)
    grads(lambda w, i: torch.nn.functional.embedding(i, w, scale_grad_by_freq=True), x, i)
    half = []
    for dev in ("cpu", DEV):
        w = values((6, 5), torch.float16).to(dev).requires_grad_()
        torch.nn.functional.embedding(ocl(i) if dev == DEV else i, w).sum().backward()
        half.append(w.grad.cpu())
    torch.testing.assert_close(half[1], half[0])


def test_embedding_dtypes():
    for dtype in (torch.float32, torch.float16, torch.int64):
        same(lambda w, i: torch.nn.functional.embedding(i, w), values((10, 3), dtype),
             indices((4, 5), 10))


def test_duplicates_accumulate_exactly():
    n = 4097  # many work-items meet on few elements
    idx = torch.zeros(n, dtype=torch.int64)
    ones = torch.ones(n, dtype=torch.int64)
    got = torch.zeros(2, dtype=torch.int64).to(DEV).index_put_((idx.to(DEV),), ones.to(DEV),
                                                                accumulate=True)
    assert got.cpu().tolist() == [n, 0]
    got = torch.zeros(2).to(DEV).index_add_(0, idx.to(DEV), torch.ones(n).to(DEV))
    assert got.cpu().tolist() == [n, 0]
    b = torch.zeros(2, dtype=torch.bool).to(DEV).index_put_((idx.to(DEV),),
                                                           ones.bool().to(DEV), accumulate=True)
    assert b.cpu().tolist() == [True, False]
    assert np.isclose(float(torch.zeros(1, dtype=torch.float16).to(DEV).index_add_(
        0, idx[:3000].to(DEV), torch.ones(3000, dtype=torch.float16).to(DEV)).cpu()), 3000)
