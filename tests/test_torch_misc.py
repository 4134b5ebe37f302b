"""mode, histc, histogram, bincount, frexp, F.bilinear, unbind_copy, cdist, pdist and dist on
the ocl device against the CPU (dlprim/torch/ops_misc.py, ops_distance.py)."""
import math

import pytest

torch = pytest.importorskip("torch")
import dlprim.torch  # noqa: E402,F401

OCL = "ocl"


def _same(got, want, tol=1e-5):
    assert got.device.type == OCL
    got = got.cpu()
    assert got.shape == want.shape and got.dtype == want.dtype
    if want.is_floating_point():
        torch.testing.assert_close(got, want, rtol=tol, atol=tol, equal_nan=True)
    else:
        assert torch.equal(got, want)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int64, torch.int32,
                                   torch.uint8, torch.bool])
@pytest.mark.parametrize("n", [1, 31, 33, 65])
def test_mode_matches_cpu(dtype, n):
    g = torch.Generator().manual_seed(n)
    x = torch.randint(0, 4 if dtype != torch.bool else 2, (3, n, 2), generator=g).to(dtype)
    for dim, keepdim in ((1, False), (-1, True), (0, False)):
        want = torch.mode(x, dim, keepdim)
        got = torch.mode(x.to(OCL), dim, keepdim)
        _same(got.values, want.values)
        if x.shape[dim] <= 16:  # the CPU's sort is stable (insertion sort) only this short
            _same(got.indices, want.indices)
        # longer, PyTorch names some occurrence of the mode; each one here is one
        index = got.indices.cpu() if keepdim else got.indices.cpu().unsqueeze(dim)
        picked = x.gather(dim, index)
        assert torch.equal(picked if keepdim else picked.squeeze(dim), want.values)


def test_mode_ties_scalars_empty_and_nan():
    x = torch.tensor([3., 1, 2, 2, 1, 3])  # three values twice each: the smallest, last index
    _same(torch.mode(x.to(OCL)).indices, torch.mode(x).indices)
    _same(torch.mode(x.to(OCL)).values, torch.mode(x).values)
    _same(torch.mode(torch.tensor(5.).to(OCL)).values, torch.tensor(5.))
    _same(torch.mode(torch.zeros(0, 3).to(OCL), 1).indices, torch.zeros(0, dtype=torch.int64))
    with pytest.raises(NotImplementedError, match="mode"):
        torch.mode(torch.tensor([1., math.nan]).to(OCL))
    with pytest.raises(IndexError):
        torch.mode(torch.zeros(2).to(OCL), 3)


def test_mode_gradient():
    x = torch.tensor([[1., 2, 2, 3], [4, 4, 5, 5]], requires_grad=True)
    xo = x.detach().to(OCL).requires_grad_()
    torch.mode(x, 1).values.sum().backward()
    torch.mode(xo, 1).values.sum().backward()
    _same(xo.grad, x.grad)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("bins,lo,hi", [(1, 0, 0), (31, -1, 1), (65, 0, 0), (7, 0.5, 0.5)])
def test_histc_matches_cpu(dtype, bins, lo, hi):
    x = torch.cat([torch.randn(333), torch.tensor([-1., 1, 0, math.nan])]).to(dtype)
    if lo == hi:
        x = x[:-1]  # the data's range: NaN would make it undefined
    _same(torch.histc(x.to(OCL), bins, lo, hi), torch.histc(x, bins, lo, hi))


def test_histc_bins_by_linear_estimate():
    # PyTorch bins by (x - lo) * bins / (hi - lo), not by the edges: 63 lands in bin 153
    x = torch.tensor([-327., 63, 63, 323])
    _same(torch.histc(x.to(OCL), 255), torch.histc(x, 255))
    h = torch.randn(999).mul(20).round().half()
    _same(torch.histc(h.to(OCL), 31), torch.histc(h, 31))


def test_histc_errors_and_out():
    with pytest.raises(RuntimeError, match="max must be larger than min"):
        torch.histc(torch.ones(3).to(OCL), 4, 2, 1)
    with pytest.raises(NotImplementedError, match="histc"):  # float16 overflows on the CPU
        torch.histc(torch.tensor([-300., 300], dtype=torch.float16).to(OCL), 255)
    with pytest.raises(NotImplementedError, match="histc"):  # its CPU counts stop at 256
        torch.histc(torch.ones(3, dtype=torch.bfloat16).to(OCL), 4)
    out = torch.empty(1).to(OCL)
    torch.histc(torch.arange(10.).to(OCL), 5, out=out)
    _same(out, torch.histc(torch.arange(10.), 5))


@pytest.mark.parametrize("density", [False, True])
def test_histogram_matches_cpu(density):
    x = torch.randn(65)
    w = torch.rand(65)
    for kwargs in ({}, {"weight": w}, {"range": (-1.0, 2.0)}):
        want = torch.histogram(x, 33, density=density, **kwargs)
        kw = {k: (v.to(OCL) if torch.is_tensor(v) else v) for k, v in kwargs.items()}
        got = torch.histogram(x.to(OCL), 33, density=density, **kw)
        _same(got.hist, want.hist)
        _same(got.bin_edges, want.bin_edges)
    edges = torch.tensor([-2., -0.5, 0, 0.1, 3])
    want = torch.histogram(x, edges, weight=w, density=density)
    got = torch.histogram(x.to(OCL), edges.to(OCL), weight=w.to(OCL), density=density)
    _same(got.hist, want.hist)
    _same(got.bin_edges, want.bin_edges)
    with pytest.raises(RuntimeError):
        torch.histogram(x.to(OCL), 4, weight=torch.rand(3).to(OCL))


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.uint8])
def test_bincount_matches_cpu(dtype):
    x = torch.randint(0, 40, (65,)).to(dtype)
    _same(torch.bincount(x.to(OCL)), torch.bincount(x))
    _same(torch.bincount(x.to(OCL), minlength=70), torch.bincount(x, minlength=70))
    w = torch.rand(65)
    _same(torch.bincount(x.to(OCL), w.to(OCL)), torch.bincount(x, w))
    _same(torch.bincount(x[:0].to(OCL), minlength=3), torch.bincount(x[:0], minlength=3))
    with pytest.raises(RuntimeError, match="non-negative"):
        torch.bincount(torch.tensor([1, -1]).to(OCL))
    with pytest.raises(RuntimeError):
        torch.bincount(torch.zeros(2, 2, dtype=torch.int64).to(OCL))
    with pytest.raises(RuntimeError):
        torch.bincount(torch.zeros(2).to(OCL))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.float64])
def test_frexp_matches_cpu(dtype):
    special = [0., -0., math.inf, -math.inf, math.nan, 1., -3., 0.5, 1e-40, -3e-45, 6e-8, 65504.]
    if dtype == torch.float64:
        special += [1e-310, -5e-324, 1e300]
    x = torch.cat([torch.randn(65) * 1e3, torch.tensor(special)]).to(dtype)
    got, want = torch.frexp(x.to(OCL)), torch.frexp(x)
    _same(got.mantissa, want.mantissa, tol=0)
    _same(got.exponent, want.exponent)
    with pytest.raises(RuntimeError):
        torch.frexp(torch.ones(2, dtype=torch.int64).to(OCL))


def test_bilinear_and_gradients():
    x1, x2 = torch.randn(5, 3, requires_grad=True), torch.randn(5, 4, requires_grad=True)
    w, b = torch.randn(6, 3, 4, requires_grad=True), torch.randn(6, requires_grad=True)
    leaves = [x1, x2, w, b]
    dev = [t.detach().to(OCL).requires_grad_() for t in leaves]
    want = torch.nn.functional.bilinear(*leaves)
    got = torch.nn.functional.bilinear(*dev)
    _same(got, want, tol=1e-4)
    want.square().sum().backward()
    got.square().sum().backward()
    for d, c in zip(dev, leaves):
        _same(d.grad, c.grad, tol=1e-4)


@pytest.mark.parametrize("dtype", [torch.int32, torch.uint8, torch.int64])
def test_bilinear_integers_keep_their_dtype(dtype):
    x1, x2 = torch.randint(0, 5, (3, 2)).to(dtype), torch.randint(0, 5, (3, 4)).to(dtype)
    w = torch.randint(0, 5, (2, 2, 4)).to(dtype)
    want = torch.nn.functional.bilinear(x1, x2, w)
    _same(torch.nn.functional.bilinear(x1.to(OCL), x2.to(OCL), w.to(OCL)), want)


def test_unbind_copy():
    x = torch.randn(3, 33)
    for got, want in zip(torch.unbind_copy(x.to(OCL), 1), torch.unbind_copy(x, 1)):
        _same(got, want)
    outs = [torch.empty(0).to(OCL) for _ in range(3)]
    torch.unbind_copy(x.to(OCL), 0, out=outs)
    for o, want in zip(outs, x):
        _same(o, want)


_PS = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, math.inf]


@pytest.mark.parametrize("p", _PS)
def test_cdist_forward_and_gradients(p):
    g = torch.Generator().manual_seed(1)
    a = torch.randn(2, 31, 5, generator=g).requires_grad_()
    b = torch.randn(2, 33, 5, generator=g).requires_grad_()
    b.data[0, 0] = a.data[0, 0]  # a zero distance: its gradient is 0
    ad, bd = (t.detach().to(OCL).requires_grad_() for t in (a, b))
    mode = "donot_use_mm_for_euclid_dist"
    want = torch.cdist(a, b, p, compute_mode=mode)
    got = torch.cdist(ad, bd, p, compute_mode=mode)
    _same(got, want, tol=1e-4)
    cot = torch.randn(want.shape, generator=g)
    (want * cot).sum().backward()
    (got * cot.to(OCL)).sum().backward()
    _same(ad.grad, a.grad, tol=1e-4)
    _same(bd.grad, b.grad, tol=1e-4)


@pytest.mark.parametrize("p", _PS)
def test_pdist_forward_and_gradients(p):
    g = torch.Generator().manual_seed(2)
    x = torch.randn(33, 4, generator=g).requires_grad_()
    xd = x.detach().to(OCL).requires_grad_()
    want, got = torch.nn.functional.pdist(x, p), torch.nn.functional.pdist(xd, p)
    _same(got, want, tol=1e-4)
    cot = torch.randn(want.shape, generator=g)
    (want * cot).sum().backward()
    (got * cot.to(OCL)).sum().backward()
    _same(xd.grad, x.grad, tol=1e-4)
    _same(torch.nn.functional.pdist(xd[:1], p), torch.nn.functional.pdist(x[:1], p))
    with pytest.raises(RuntimeError):
        torch.nn.functional.pdist(xd, -1.0)


@pytest.mark.parametrize("p", [0.0, 1.0, 2.0, math.inf])
def test_dist_matches_cpu(p):
    a, b = torch.randn(4, 33), torch.randn(33)
    _same(torch.dist(a.to(OCL), b.to(OCL), p), torch.dist(a, b, p), tol=1e-4)
    h = a.half()
    _same(torch.dist(h.to(OCL), h.to(OCL) * 0, p), torch.dist(h, h * 0, p), tol=1e-2)
    with pytest.raises(RuntimeError):
        torch.dist(a.to(OCL), torch.randn(5).to(OCL))


@pytest.mark.parametrize("reduce", ["sum", "mean", "max", "min", "prod"])
@pytest.mark.parametrize("initial", [None, 2.0])
def test_segment_reduce_forward_and_gradients(reduce, initial):
    g = torch.Generator().manual_seed(3)
    lengths = torch.tensor([[3, 0, 31, 1], [0, 33, 1, 1]])
    data = torch.randn(2, 35, 3, generator=g)
    data[0, 1, 0] = 0.0  # prod's gradient where an element is zero
    data[1, 5] = data[1, 6]  # max/min ties share the gradient
    data.requires_grad_()
    dd = data.detach().to(OCL).requires_grad_()
    offsets = torch.cat([torch.zeros(2, 1, dtype=torch.int64), lengths.cumsum(1)], 1)
    for kw, kwd in (({"lengths": lengths}, {"lengths": lengths.to(OCL)}),
                    ({"offsets": offsets}, {"offsets": offsets.to(OCL)})):
        want = torch.segment_reduce(data, reduce, axis=1, initial=initial, **kw)
        got = torch.segment_reduce(dd, reduce, axis=1, initial=initial, **kwd)
        _same(got, want, tol=1e-4)
        cot = torch.randn(want.shape, generator=g)
        data.grad = dd.grad = None
        (want * cot).sum().backward()
        (got * cot.to(OCL)).sum().backward()
        _same(dd.grad, data.grad, tol=1e-4)


def test_segment_reduce_float16_and_errors():
    data = torch.randn(65).half()
    lengths = torch.tensor([1, 31, 33, 0])
    _same(torch.segment_reduce(data.to(OCL), "sum", lengths=lengths.to(OCL)),
          torch.segment_reduce(data, "sum", lengths=lengths), tol=1e-2)
    with pytest.raises(RuntimeError):  # the lengths do not cover the data
        torch.segment_reduce(data.to(OCL), "sum", lengths=torch.tensor([1, 2]).to(OCL))
    with pytest.raises(RuntimeError):
        torch.segment_reduce(data.to(OCL), "median", lengths=lengths.to(OCL))


def test_cdist_broadcast_batches_gradients():
    a = torch.randn(2, 1, 4, 3, requires_grad=True)
    b = torch.randn(3, 33, 3, requires_grad=True)
    ad, bd = (t.detach().to(OCL).requires_grad_() for t in (a, b))
    want, got = torch.cdist(a, b, 1.5), torch.cdist(ad, bd, 1.5)
    _same(got, want, tol=1e-4)
    cot = torch.randn(want.shape)
    for w, d in zip(torch.autograd.grad((want * cot).sum(), [a, b]),
                    torch.autograd.grad((got * cot.to(OCL)).sum(), [ad, bd])):
        _same(d, w, tol=1e-4)


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.uint8])
def test_histc_of_integers_as_cuda_counts_them(dtype):
    """PyTorch's CUDA histc takes integers (a mixture-of-experts router counts its experts
    so; the CPU kernel refuses them): the bin (x - min) * bins / (max - min) in integer
    arithmetic, max in the last bin, values outside [min, max] left out, counts in x's
    dtype; min == max == 0 takes the data's range."""
    x = torch.tensor([0, 1, 1, 3, 3, 3, 2, 7, 9], dtype=dtype).to("ocl")
    assert torch.histc(x, bins=4, min=0, max=3).cpu().tolist() == [1, 2, 1, 3]
    assert torch.histc(x, bins=3).cpu().tolist() == [4, 3, 2]
    assert torch.histc(x, bins=5, min=0, max=9).cpu().tolist() == [3, 4, 0, 1, 1]
    assert torch.histc(x, bins=2, min=0, max=9).dtype == dtype
    with pytest.raises(RuntimeError, match="bins must be > 0"):
        torch.histc(x, bins=0)
