"""core/ctc.py against a float64 reference of the CTC recursions written here (no torch):
the negative log-likelihoods and the gradient of the log-probabilities, over sequences
shorter than the longest, empty targets, repeated labels and sequences with no
alignment; PyTorch's own checks of the lengths."""
import numpy as np
import pytest

import dlprim as dp
from dlprim.core.ctc import CTC, check_lengths


def reference(lp, targets, input_lengths, blank):
    """(nll (N,), grad (T, N, C)) of log-probabilities lp (T, N, C): grad is PyTorch's,
    exp(lp) - exp(log(sum of alpha beta per label) + nll - lp) for steps within the
    sequence, 0 past it."""
    T, N, C = lp.shape
    nll, grad = np.zeros(N), np.zeros_like(lp)
    for n in range(N):
        ext = [blank]
        for c in targets[n]:
            ext += [c, blank]
        S, length = len(ext), input_lengths[n]
        if length == 0:
            nll[n] = 0.0 if S == 1 else np.inf
            continue
        alpha, beta = np.full((length, S), -np.inf), np.full((length, S), -np.inf)
        alpha[0, 0] = lp[0, n, ext[0]]
        if S > 1:
            alpha[0, 1] = lp[0, n, ext[1]]
        for t in range(1, length):
            for s in range(S):
                a = alpha[t - 1, s]
                if s > 0:
                    a = np.logaddexp(a, alpha[t - 1, s - 1])
                if s > 1 and ext[s] != ext[s - 2]:
                    a = np.logaddexp(a, alpha[t - 1, s - 2])
                alpha[t, s] = a + lp[t, n, ext[s]]
        ll = alpha[length - 1, S - 1] if S == 1 else \
            np.logaddexp(alpha[length - 1, S - 1], alpha[length - 1, S - 2])
        nll[n] = -ll
        beta[length - 1, S - 1] = lp[length - 1, n, ext[S - 1]]
        if S > 1:
            beta[length - 1, S - 2] = lp[length - 1, n, ext[S - 2]]
        for t in range(length - 2, -1, -1):
            for s in range(S):
                b = beta[t + 1, s]
                if s < S - 1:
                    b = np.logaddexp(b, beta[t + 1, s + 1])
                if s < S - 2 and ext[s] != ext[s + 2]:
                    b = np.logaddexp(b, beta[t + 1, s + 2])
                beta[t, s] = b + lp[t, n, ext[s]]
        for t in range(length):
            lcab = np.full(C, -np.inf)
            for s in range(S):
                lcab[ext[s]] = np.logaddexp(lcab[ext[s]], alpha[t, s] + beta[t, s])
            grad[t, n] = np.exp(lp[t, n]) - np.exp(lcab + nll[n] - lp[t, n])
    return nll, grad


def run(ctx, lp, targets, input_lengths, blank, dtype, grad_out, zero_infinity=False):
    T, N, C = lp.shape
    flat = np.array([c for row in targets for c in row] or [0], np.int64)
    info, W = check_lengths(T, C, flat.shape, input_lengths, [len(r) for r in targets], blank)
    ops = CTC(ctx, dtype, np.int64)
    x = dp.Tensor.from_numpy(ctx, lp.astype(dtype))
    tg, inf = dp.Tensor.from_numpy(ctx, flat), dp.Tensor.from_numpy(ctx, info)
    la, nll = dp.Tensor(ctx, (N, T, W), dtype), dp.Tensor(ctx, (N,), dtype)
    lb, out = dp.Tensor(ctx, (N, T, W), dtype), dp.Tensor(ctx, (T, N, C), dtype)
    for launch in ops.forward_launches(x, (N * C, C), tg, inf, W, blank, la, nll):
        launch(ctx.queue)
    g = dp.Tensor.from_numpy(ctx, grad_out.astype(dtype))
    for launch in ops.backward_launches(g, 1, x, (N * C, C), tg, inf, W, blank, zero_infinity,
                                        la, nll, lb, out):
        launch(ctx.queue)
    return nll.numpy().astype(np.float64), out.numpy().astype(np.float64)


def case(rng, T=9, C=5):
    # sequences: full length, shorter, a repeated label (needs a blank between), an
    # empty target, and one with no alignment (4 labels with a repeat in 4 steps)
    targets = [[1, 2, 3], [2, 2], [4, 1, 1, 3], [], [1, 1, 2, 3]]
    input_lengths = [T, 7, 9, 3, 4]
    x = rng.standard_normal((T, len(targets), C))
    lp = x - np.log(np.exp(x).sum(axis=2, keepdims=True))
    return lp, targets, input_lengths


@pytest.mark.parametrize("dtype, tol", [(np.float64, 1e-10), (np.float32, 2e-5)])
def test_ctc_matches_the_float64_reference(ctx, rng, dtype, tol):
    if dtype == np.float64 and not ctx.facts.fp64:
        pytest.skip("no float64 on %s" % ctx.facts.name)
    lp, targets, lengths = case(rng)
    grad_out = np.arange(1.0, len(targets) + 1)
    want_nll, want_grad = reference(lp, targets, lengths, blank=0)
    want_grad *= grad_out[None, :, None]
    nll, grad = run(ctx, lp, targets, lengths, 0, dtype, grad_out)
    assert np.isinf(nll[4]) and np.isinf(want_nll[4])
    np.testing.assert_allclose(nll[:4], want_nll[:4], rtol=tol, atol=tol)
    finite = np.isfinite(want_grad).all(axis=(0, 2))  # the impossible one: NaN, as PyTorch
    np.testing.assert_allclose(grad[:, finite], want_grad[:, finite], rtol=tol, atol=tol)
    assert np.isnan(grad[0, 4]).all()
    # zero_infinity: that sequence's gradient is 0, the others' unchanged
    nll_z, grad_z = run(ctx, lp, targets, lengths, 0, dtype, grad_out, zero_infinity=True)
    assert np.isinf(nll_z[4]) and not grad_z[:, 4].any()
    np.testing.assert_allclose(grad_z[:, :4], grad[:, :4])


def test_ctc_blank_elsewhere_than_zero(ctx, rng):
    lp, targets, lengths = case(rng)
    targets = [[c - 1 for c in row] for row in targets]  # labels 0..3, the blank is 4
    want_nll, want_grad = reference(lp, targets, lengths, blank=4)
    nll, grad = run(ctx, lp, targets, lengths, 4, np.float32, np.ones(len(targets)))
    np.testing.assert_allclose(nll[:4], want_nll[:4], rtol=2e-5)
    np.testing.assert_allclose(grad[:, :4], want_grad[:, :4], rtol=2e-5, atol=2e-5)


def test_ctc_lengths_are_checked_as_pytorch_does():
    with pytest.raises(RuntimeError, match="input_lengths to have value at most 5"):
        check_lengths(5, 4, (2, 3), [6, 5], [1, 1], 0)
    with pytest.raises(RuntimeError, match="size at least 4"):
        check_lengths(5, 4, (2, 3), [5, 5], [4, 1], 0)
    with pytest.raises(RuntimeError, match="size at least 5"):
        check_lengths(5, 4, (4,), [5, 5], [3, 2], 0)  # concatenated: 5 labels, 4 given
    with pytest.raises(RuntimeError, match="blank must be in label range"):
        check_lengths(5, 4, (2, 3), [5, 5], [1, 1], 4)
    info, W = check_lengths(5, 4, (5,), [5, 2], [3, 2], 0)
    assert W == 7 and info.tolist() == [[5, 3, 0], [2, 2, 3]]
