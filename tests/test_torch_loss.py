"""dlprim.torch: losses, normalisations and embedding_bag on ``ocl`` against PyTorch's CPU,
forward and (float32, through PyTorch's autograd) backward, float16 where the CPU has it,
on sizes around work-group edges; the CPU's own oddities (an overflowing float16
soft_margin_loss, empty bags) included, and the errors."""
import itertools
import math

import pytest

torch = pytest.importorskip("torch")
dt = pytest.importorskip("dlprim.torch")
F = torch.nn.functional
aten = torch.ops.aten

DEV = "ocl"
REDUCTIONS = ("none", "mean", "sum")


def _to(t, dev):
    return t.to(dev) if isinstance(t, torch.Tensor) else t


def close(got, want, tol):
    assert got.dtype == want.dtype and got.shape == want.shape, \
        (got.dtype, want.dtype, got.shape, want.shape)
    if want.dtype.is_floating_point:
        torch.testing.assert_close(got.cpu(), want, atol=tol, rtol=tol, equal_nan=True)
    else:
        assert torch.equal(got.cpu(), want)


def both(fn, *args, grad=(0,), tol=None):
    """fn on CPU arguments and on ocl copies: the values compared, and for float32 the
    gradients of the arguments numbered in ``grad``."""
    half = any(isinstance(a, torch.Tensor) and a.dtype == torch.float16 for a in args)
    tol = tol or (2e-2 if half else 1e-4)
    want_grad = [not half and i in grad and isinstance(a, torch.Tensor)
                 and a.is_floating_point() for i, a in enumerate(args)]
    cpu = [a.detach().clone().requires_grad_(w) if isinstance(a, torch.Tensor) else a
           for a, w in zip(args, want_grad)]
    ocl = [a.detach().to(DEV).requires_grad_(w) if isinstance(a, torch.Tensor) else a
           for a, w in zip(args, want_grad)]
    want, got = fn(*cpu), fn(*ocl)
    close(got, want, tol)
    if any(want_grad):
        g = torch.randn(want.shape, generator=torch.Generator().manual_seed(3))
        want.backward(g)
        got.backward(g.to(DEV))
        for c, o, w in zip(cpu, ocl, want_grad):
            if w:
                close(o.grad, c.grad, tol)
    return got


def randn(*shape, dtype=torch.float32, seed=0):
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


def labels(n, c, seed=1):
    return torch.randint(0, c, (n,), generator=torch.Generator().manual_seed(seed))


# ----- the pointwise losses (PyTorch's decompositions of the ATen ones)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_pointwise_losses(dtype, reduction):
    x, y = randn(33, 31, dtype=dtype), randn(33, 31, dtype=dtype, seed=1)
    p = torch.rand(33, 31).clamp(0.01, 0.99).to(dtype)
    q = torch.rand(33, 31).to(dtype)
    both(lambda a, b: F.mse_loss(a, b, reduction=reduction), x, y, grad=(0, 1))
    both(lambda a, b: F.l1_loss(a, b, reduction=reduction), x, y, grad=(0, 1))
    both(lambda a, b: F.smooth_l1_loss(a, b, reduction=reduction, beta=0.5), x, y, grad=(0, 1))
    both(lambda a, b: F.huber_loss(a, b, reduction=reduction, delta=0.7), x, y, grad=(0, 1))
    both(lambda a, b, w: F.binary_cross_entropy(a, b, weight=w, reduction=reduction), p, q,
         torch.rand(31).to(dtype))
    both(lambda a, b, w: F.binary_cross_entropy_with_logits(a, b, pos_weight=w,
                                                           reduction=reduction),
         x, q, torch.rand(31).to(dtype), grad=(0, 1))
    both(lambda a, b: F.soft_margin_loss(a, b, reduction=reduction), x, y.sign())
    both(lambda a, b: F.kl_div(a, b, reduction=reduction, log_target=True), x, y, grad=(0, 1))
    both(lambda a, b: F.poisson_nll_loss(a, b, reduction=reduction), x, q)
    both(lambda a, b, v: F.gaussian_nll_loss(a, b, v, reduction=reduction), x, y,
         torch.rand(33, 31).to(dtype) + 0.1, grad=(0, 2))


def test_soft_margin_float16_overflows_as_the_cpu():
    """The CPU computes float16 step by step: exp(-y x) is inf past ~11, and so is the
    loss; float32 inside would give ~30.6 and disagree."""
    x, y = torch.tensor([-30.6, 0.5], dtype=torch.float16), torch.tensor([1.0, 1.0]).half()
    got = both(lambda a, b: F.soft_margin_loss(a, b, reduction="none"), x, y)
    assert torch.isinf(got.cpu()[0])


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_margin_and_embedding_losses(reduction):
    x1, x2, x3 = randn(33, 7), randn(33, 7, seed=1), randn(33, 7, seed=2)
    y = randn(33, seed=3).sign()
    both(lambda a, b, y: F.margin_ranking_loss(a, b, y, margin=0.3, reduction=reduction),
         x1[:, 0], x2[:, 0], y, grad=(0, 1))
    both(lambda a, y: F.hinge_embedding_loss(a, y, margin=0.5, reduction=reduction),
         x1[:, 0], y)
    both(lambda a, b, y: F.cosine_embedding_loss(a, b, y, margin=0.1, reduction=reduction),
         x1, x2, y, grad=(0, 1))
    both(lambda a, b, c: F.triplet_margin_loss(a, b, c, reduction=reduction), x1, x2, x3,
         grad=(0, 1, 2))
    both(lambda a, b: F.multilabel_soft_margin_loss(a, b, reduction=reduction), x1,
         (x2 > 0).float())


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("p", [1, 2])
def test_multi_margin_loss(reduction, p):
    x, t, w = randn(33, 7), labels(33, 7), torch.rand(7)
    both(lambda a, t, w: F.multi_margin_loss(a, t, p=p, margin=0.8, weight=w,
                                             reduction=reduction), x, t, w)
    both(lambda a, t: F.multi_margin_loss(a, t, p=p, reduction=reduction), x, t)
    both(lambda a, t: F.multi_margin_loss(a, t, p=p, reduction=reduction), x[0], t[0])
    both(lambda a, t: F.multi_margin_loss(a, t, p=p, reduction=reduction), x[:1], t[:1])


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_multilabel_margin_loss(reduction):
    """Labels end at the first -1 (what follows is not counted: PyTorch's reference
    decomposition counts it, the CPU does not); repeated labels count twice."""
    t = torch.tensor([[3, 0, -1, 1, 2, 2, 2], [1, 2, 3, -1, 0, 0, 0], [2, -1, 0, 0, 0, 0, 0],
                      [6, 6, -1, 0, 0, 0, 0], [-1, 1, 1, 1, 1, 1, 1], [0, 1, 2, 3, 4, 5, 6]])
    x = randn(6, 7)
    both(lambda a, t: F.multilabel_margin_loss(a, t, reduction=reduction), x, t)
    both(lambda a, t: F.multilabel_margin_loss(a, t, reduction=reduction), x[0], t[0])
    got = aten.multilabel_margin_loss_forward(x.to(DEV), t.to(DEV), 1)[1]
    close(got, aten.multilabel_margin_loss_forward(x, t, 1)[1], 0)


# ----- nll_loss and cross_entropy
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_nll_loss_weights_ignore_index(reduction):
    x = torch.log_softmax(randn(65, 33), 1)
    t, w = labels(65, 33), torch.rand(33)
    t[::5] = 4
    both(lambda a, t, w: F.nll_loss(a, t, weight=w, reduction=reduction, ignore_index=4),
         x, t, w)
    both(lambda a, t: F.nll_loss(a, t, reduction=reduction, ignore_index=4), x, t)
    both(lambda a, t, w: F.nll_loss(a, t, weight=w, reduction=reduction), x[0], t[0], w)
    x4, t4 = randn(2, 5, 3, 4), torch.randint(0, 5, (2, 3, 4))
    both(lambda a, t, w: F.nll_loss(a, t, weight=w, reduction=reduction), x4, t4,
         torch.rand(5))
    both(lambda a, t: F.nll_loss(a, t, reduction=reduction, ignore_index=1), x4[..., 0],
         t4[..., 0])


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_nll_loss_label_out_of_range_is_nan(reduction):
    """The CPU raises; the device shows NaN (in that row, or in the reduced loss)."""
    t = torch.tensor([0, 7, 2, -100, -3]).to(DEV)
    for x in (randn(5, 7), randn(5, 7, 1, 1)):
        got = F.nll_loss(x.to(DEV), t.reshape((5,) + x.shape[2:]), reduction=reduction).cpu()
        assert got.isnan().sum() == (2 if reduction == "none" else 1)
        if reduction == "none":
            assert got.flatten()[[1, 4]].isnan().all()


def test_nll_loss_float16_and_byte_labels():
    x = torch.log_softmax(randn(33, 7), 1)
    both(lambda a, t, w: F.nll_loss(a, t, weight=w), x.half(), labels(33, 7),
         torch.rand(7).half())
    both(lambda a, t: F.nll_loss(a, t), x, labels(33, 7).to(torch.uint8))
    with pytest.raises(RuntimeError, match="Long or Byte"):
        F.nll_loss(x.to(DEV), labels(33, 7).int().to(DEV))


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_cross_entropy(reduction):
    x, t, w = randn(33, 7), labels(33, 7), torch.rand(7)
    both(lambda a, t, w: F.cross_entropy(a, t, weight=w, reduction=reduction,
                                         label_smoothing=0.2, ignore_index=3), x, t, w)
    both(lambda a, p: F.cross_entropy(a, p, reduction=reduction, label_smoothing=0.1), x,
         torch.softmax(randn(33, 7, seed=4), 1), grad=(0, 1))
    x4, t4 = randn(2, 3, 4, 5), torch.randint(0, 3, (2, 4, 5))
    both(lambda a, t, w: F.cross_entropy(a, t, weight=w, reduction=reduction), x4, t4,
         torch.rand(3))
    both(lambda a, t: F.cross_entropy(a, t, reduction=reduction), x4[..., 0], t4[..., 0])


def test_empty_inputs():
    """No elements: a mean is NaN, a gradient empty. (The CPU's multi-margin losses return
    uninitialised memory there: NaN is the rule of every other mean.)"""
    x, y = randn(0, 3), randn(0, 3)
    both(lambda a, b: F.mse_loss(a, b), x, y, grad=(0, 1))
    both(lambda a, b: F.smooth_l1_loss(a, b, reduction="sum"), x, y, grad=(0, 1))
    both(lambda a, t: F.nll_loss(a, t), x, labels(0, 3))
    both(lambda a, t: F.cross_entropy(a, t), x, labels(0, 3))
    for loss, t in ((F.multilabel_margin_loss, torch.zeros(0, 3, dtype=torch.long)),
                    (F.multi_margin_loss, labels(0, 3))):
        assert loss(x.to(DEV), t.to(DEV)).cpu().isnan()
    both(lambda a, t: F.nll_loss(a, t, ignore_index=1), randn(4, 3), torch.ones(4).long())


# ----- errors
def test_errors():
    x = randn(4, 5).to(DEV)
    with pytest.raises(RuntimeError):
        aten.multi_margin_loss(x, labels(4, 5).to(DEV), 3, 1.0, None, 1)
    with pytest.raises(RuntimeError):
        aten.multi_margin_loss(x, labels(3, 5).to(DEV), 1, 1.0, None, 1)
    with pytest.raises(RuntimeError):
        F.multilabel_margin_loss(x, labels(4, 5).to(DEV))
    for p, t in ((torch.tensor([1.5, 0.5]), torch.tensor([1.0, 0.0])),
                 (torch.tensor([0.5, 0.5]), torch.tensor([1.0, float("nan")]))):
        with pytest.raises(RuntimeError, match="should be between 0 and 1"):
            F.binary_cross_entropy(p.to(DEV), t.to(DEV))
    w, i, o = randn(5, 3).to(DEV), labels(4, 5).to(DEV), torch.tensor([0, 2]).to(DEV)
    with pytest.raises(RuntimeError, match="per_sample_weights"):
        aten._embedding_bag(w, i, o, False, 1, False, torch.ones(4).to(DEV))
    with pytest.raises(NotImplementedError, match="sparse"):
        F.embedding_bag(i, w.requires_grad_(), o, sparse=True).sum().backward()


# ----- normalisations
_AFFINE = list(itertools.product((True, False), repeat=2))  # (weight, bias) given


@pytest.mark.parametrize("dtype, param_dtype, has_weight, has_bias",
                         [(torch.float32, torch.float32) + a for a in _AFFINE]
                         + [(torch.float16, torch.float16) + a for a in _AFFINE]
                         + [(torch.float16, torch.float32, True, True),
                            (torch.float16, torch.float32, False, True)])
def test_norms(dtype, param_dtype, has_weight, has_bias):
    x = randn(4, 6, 33, dtype=dtype)

    def param(n, seed):
        return randn(n, dtype=param_dtype, seed=seed)
    w = param(6, 1) if has_weight else None
    b = param(6, 2) if has_bias else None
    w33, b33 = (param(33, 3) if has_weight else None), (param(33, 4) if has_bias else None)
    # (the CPU's own group norm backward fails for a bias without a weight)
    gn_grad = (0, 1, 2) if has_weight or not has_bias else ()
    both(lambda a, w, b: F.group_norm(a, 3, w, b), x, w, b, grad=gn_grad)
    both(lambda a, w, b: F.layer_norm(a, (33,), w, b), x, w33, b33, grad=(0, 1, 2))
    both(lambda a, w, b: F.batch_norm(a, None, None, w, b, True), x, w, b, grad=(0, 1, 2))
    both(lambda a, w, b: F.instance_norm(a, weight=w, bias=b), x, w, b, grad=(0, 1, 2))
    for training in (True, False):
        rm, rv = param(6, 5), param(6, 6).abs()
        rm_o, rv_o = rm.to(DEV), rv.to(DEV)
        both(lambda a, w, b: F.batch_norm(a, rm_o if a.device.type == DEV else rm,
                                          rv_o if a.device.type == DEV else rv, w, b,
                                          training, 0.3), x, w, b, grad=(0, 1, 2))
        close(rm_o, rm, 2e-3)  # the running statistics, updated in place in their dtype
        close(rv_o, rv, 2e-3)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_native_norm_statistics(dtype):
    """The mean / rstd outputs: their dtype is the CPU's (float16 without float32
    parameters), their values the CPU's."""
    x = randn(3, 6, 65, dtype=dtype)
    for dev_out, cpu_out in [
            (aten.native_group_norm(x.to(DEV), None, None, 3, 6, 65, 2, 1e-5),
             aten.native_group_norm(x, None, None, 3, 6, 65, 2, 1e-5)),
            (aten.native_layer_norm(x.to(DEV), [65], None, None, 1e-5),
             aten.native_layer_norm(x, [65], None, None, 1e-5)),
            (aten.native_batch_norm(x.to(DEV), None, None, None, None, True, 0.1, 1e-5),
             aten.native_batch_norm(x, None, None, None, None, True, 0.1, 1e-5))]:
        for got, want in zip(dev_out, cpu_out):
            close(got, want, 2e-2 if dtype == torch.float16 else 1e-4)


@pytest.mark.skipif("aten.unsqueeze_.default" not in dt.implemented(),
                    reason="autograd's group norm backward with mean / rstd gradients runs "
                           "unsqueeze_ on ocl")
def test_group_norm_statistics_gradients():
    x, w, b = randn(2, 6, 5), randn(6, seed=1), randn(6, seed=2)

    def fn(a, w, b):
        y, mean, rstd = aten.native_group_norm(a, w, b, 2, 6, 5, 3, 1e-5)
        return (y * 0.5).sum() + (mean * 0.3).sum() + (rstd * rstd.detach()).sum()
    both(fn, x, w, b, grad=(0, 1, 2))


def test_local_response_norm_and_rms_norm():
    x = randn(2, 7, 5, 4)
    both(lambda a: F.local_response_norm(a, 3), x)
    both(lambda a, w: F.rms_norm(a, (4,), w), x, randn(4, seed=1), grad=(0, 1))


# ----- embedding_bag
IDX = torch.tensor([1, 2, 4, 5, 4, 3, 2, 0, 12, 7, 7, 2])
OFFSETS = torch.tensor([0, 2, 2, 5, 11])  # bag 1 is empty


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_embedding_bag(dtype, mode):
    w = randn(13, 33, dtype=dtype)
    for pad, last in itertools.product((None, 2), (False, True)):
        offsets = torch.cat([OFFSETS, torch.tensor([len(IDX)])]) if last else OFFSETS
        both(lambda a, i, o: F.embedding_bag(i, a, o, mode=mode, padding_idx=pad,
                                             include_last_offset=last), w, IDX, offsets)
    both(lambda a, i, o: F.embedding_bag(i, a, o, mode=mode), w, IDX.int(), OFFSETS.int())
    # the raw outputs: offset2bag, bag sizes and max_indices as the CPU has them
    for pad in (-1, 2):
        m = ["sum", "mean", "max"].index(mode)
        got = aten._embedding_bag(w.to(DEV), IDX.to(DEV), OFFSETS.to(DEV), False, m, False,
                                  None, False, pad)
        for g, want in zip(got, aten._embedding_bag(w, IDX, OFFSETS, False, m, False, None,
                                                    False, pad)):
            close(g, want, 2e-2 if dtype == torch.float16 else 1e-5)


@pytest.mark.parametrize("pad", [None, 2])
def test_embedding_bag_per_sample_weights(pad):
    psw = randn(len(IDX), seed=4)
    both(lambda a, p, i, o: F.embedding_bag(i, a, o, mode="sum", per_sample_weights=p,
                                            padding_idx=pad), randn(13, 33), psw, IDX,
         OFFSETS, grad=(0, 1))
    both(lambda a, p, i, o: F.embedding_bag(i, a, o, mode="sum", per_sample_weights=p),
         randn(13, 33).half(), psw.half(), IDX, OFFSETS)


@pytest.mark.parametrize("mode", ["sum", "mean"])
def test_embedding_bag_scale_grad_by_freq(mode):
    """Each occurrence of a row's gradient divided by how often the row occurs. (PyTorch's
    CPU divides by the count of a neighbouring index: it is not the reference here.)"""
    w = randn(13, 33).to(DEV).requires_grad_()
    g = randn(5, 33, seed=2).to(DEV)
    grads = []
    for scale in (False, True):
        w.grad = None
        F.embedding_bag(IDX.to(DEV), w, OFFSETS.to(DEV), mode=mode,
                        scale_grad_by_freq=scale).backward(g)
        grads.append(w.grad.cpu())
    counts = torch.bincount(IDX, minlength=13).clamp(min=1).float().unsqueeze(1)
    torch.testing.assert_close(grads[1], grads[0] / counts, atol=1e-5, rtol=1e-5)


def test_embedding_bag_bad_index_is_nan():
    out = F.embedding_bag(torch.tensor([0, 13]).to(DEV), randn(13, 3).to(DEV),
                          torch.tensor([0, 1]).to(DEV)).cpu()
    assert not out[0].isnan().any() and out[1].isnan().all()


@pytest.mark.parametrize("classes", [5, 300, 5000])
def test_softmax_and_cross_entropy_rows_with_infinities_and_nan(classes):
    # rows with -inf entries (masked classes: finite results), every entry -inf, a +inf
    # entry (NaN rows, as PyTorch gives) or a NaN, in rows of a few to thousands of values
    # (one work-group a row: its items' running maxima and sums). A NaN makes its whole
    # softmax row and its loss NaN, as the sum it enters (PyTorch's CPU softmax leaves the
    # other values of such a row as if the NaN were not there)
    g = torch.Generator().manual_seed(3)
    x = torch.randn(6, classes, generator=g) * 4
    x[0, ::3] = -math.inf
    x[1, :] = -math.inf
    x[2, classes // 2] = math.inf
    x[3, classes - 1] = math.nan
    x[4, 1:] = -math.inf  # only the first value finite: it is the whole sum
    labels = torch.tensor([1, 0, 0, 0, 0, classes - 1])
    rows = [0, 1, 2, 4, 5]
    want, got = torch.softmax(x, -1), torch.softmax(x.to("ocl"), -1).cpu()
    torch.testing.assert_close(got[rows], want[rows], rtol=1e-5, atol=1e-6, equal_nan=True)
    assert got[3].isnan().all()
    want, got = torch.log_softmax(x, -1), torch.log_softmax(x.to("ocl"), -1).cpu()
    torch.testing.assert_close(got[rows], want[rows], rtol=1e-5, atol=1e-5, equal_nan=True)
    want = F.cross_entropy(x, labels, reduction="none")
    got = F.cross_entropy(x.to("ocl"), labels.to("ocl"), reduction="none").cpu()
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5, equal_nan=True)
    assert torch.isfinite(got[[0, 4, 5]]).all() and got[[1, 2, 3]].isnan().all()


# ----- CTC (core/ctc.py: the alpha and beta recursions and the gradient on the device)
def _ctc_case(dev, dtype=torch.float32, reduction="mean", zero_infinity=False, flat=False,
              lengths_as="tensor", index=torch.int64):
    g = torch.Generator().manual_seed(0)
    T, N, C = 30, 4, 7
    x = torch.randn(T, N, C, generator=g, dtype=dtype).to(dev).requires_grad_()
    # the third sequence has no alignment (12 random labels in 12 steps): an infinite loss
    il, tl = [30, 25, 12, 3], [10, 7, 12, 0]
    targets = torch.randint(1, C, (N, 12), generator=g).to(index)
    if flat:
        targets = torch.cat([targets[i, :tl[i]] for i in range(N)])
    if lengths_as == "tensor":
        il, tl = torch.tensor(il), torch.tensor(tl)
    elif lengths_as == "device":
        il, tl = torch.tensor(il).to(dev), torch.tensor(tl).to(dev)
    loss = F.ctc_loss(x.log_softmax(2), targets.to(dev), il, tl, blank=0, reduction=reduction,
                      zero_infinity=zero_infinity)
    weights = torch.arange(1, loss.numel() + 1, dtype=dtype).reshape(loss.shape)
    (loss * weights.to(dev)).sum().backward()
    return loss.detach().cpu(), x.grad.cpu()


@pytest.mark.parametrize("kw", [
    dict(reduction="none"), dict(reduction="none", zero_infinity=True),
    dict(reduction="mean", zero_infinity=True), dict(reduction="sum", zero_infinity=True),
    dict(reduction="none", flat=True, lengths_as="list"),
    dict(reduction="none", lengths_as="device", index=torch.int32),
    dict(reduction="mean", zero_infinity=True, dtype=torch.float64)],
    ids=["none", "zero_infinity", "mean", "sum", "flat targets, list lengths",
         "lengths on ocl, int32 targets", "float64"])
def test_ctc_loss_matches_the_cpu(kw):
    (want, want_grad), (got, grad) = _ctc_case("cpu", **kw), _ctc_case("ocl", **kw)
    tol = 1e-10 if kw.get("dtype") == torch.float64 else 1e-5
    assert torch.equal(torch.isinf(got), torch.isinf(want))
    finite = torch.isfinite(want)
    torch.testing.assert_close(got[finite], want[finite], rtol=tol, atol=tol)
    # (an infinite loss without zero_infinity: NaN gradients, as the CPU's)
    torch.testing.assert_close(grad, want_grad, rtol=tol * 10, atol=tol * 10, equal_nan=True)


def test_ctc_loss_gradients_match_finite_differences():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(6, 2, 4, generator=g, dtype=torch.float64).to("ocl").requires_grad_()
    targets = torch.tensor([[1, 1, 2], [3, 2, 0]]).to("ocl")  # a repeat needs a blank between

    def loss(x):
        return F.ctc_loss(x.log_softmax(2), targets, [6, 5], [3, 2], reduction="sum")
    assert torch.autograd.gradcheck(loss, (x,), eps=1e-6, atol=1e-6)


def test_ctc_loss_refuses_bad_lengths_as_pytorch():
    x = torch.randn(5, 1, 4).log_softmax(2)
    targets = torch.tensor([[1, 2]])
    for il, tl, blank, match in (([6], [2], 0, "input_lengths to have value at most 5"),
                                 ([5], [3], 0, "size at least 3"),
                                 ([5], [2], 4, "blank must be in label range")):
        with pytest.raises(RuntimeError, match=match):
            F.ctc_loss(x.to("ocl"), targets.to("ocl"), il, tl, blank=blank)


def test_ctc_loss_of_long_targets_matches_the_cpu():
    # 2 L + 1 = 301 label positions: more than a work-group's items, which then take
    # several positions each (float64, where the long sums' rounding does not hide a slip)
    g = torch.Generator().manual_seed(2)
    x = torch.randn(320, 2, 20, generator=g, dtype=torch.float64)
    targets = torch.randint(1, 20, (2, 150), generator=g)
    out = []
    for dev in ("cpu", "ocl"):
        xx = x.detach().to(dev).requires_grad_()
        loss = F.ctc_loss(xx.log_softmax(2), targets.to(dev), [320, 300], [150, 140],
                          reduction="sum")
        loss.backward()
        out.append((loss.detach().cpu(), xx.grad.cpu()))
    torch.testing.assert_close(out[1][0], out[0][0], rtol=1e-12, atol=1e-9)
    torch.testing.assert_close(out[1][1], out[0][1], rtol=1e-9, atol=1e-9)
