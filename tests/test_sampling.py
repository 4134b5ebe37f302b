"""core.sampling.TokenSampler against a float64 reference of HuggingFace generate's
processors (itself checked against transformers' own where it is installed): greedy
choices and the kept sets exactly, draws by a chi-square test, at vocabularies around the
work-group's edges."""
import math

import numpy as np
import pytest

import dlprim as dp
from dlprim.core import sampling
from dlprim.core.sampling import TokenSampler


def reference(logits, seen=None, temperature=1.0, top_k=0, top_p=1.0, penalty=1.0):
    """(probabilities over the vocabulary, float64; the greedy token) of one row: the
    penalty, the temperature, top-k (ties at the k-th kept), top-p (HF's cumulative sum
    over ascending scores, ties at the boundary kept)."""
    x = np.asarray(logits, np.float64).copy()
    if seen is not None and penalty != 1.0:
        s = np.asarray(seen, bool)
        x[s] = np.where(x[s] < 0, x[s] * penalty, x[s] / penalty)
    greedy = int(np.argmax(x))
    if temperature == 0:
        p = np.zeros_like(x)
        p[greedy] = 1
        return p, greedy
    x = x / temperature
    keep = np.ones(x.shape, bool)
    if 0 < top_k < x.size:
        keep &= x >= np.sort(x)[::-1][top_k - 1]
    e = np.where(keep, np.exp(x - x.max()), 0.0)
    if top_p < 1.0:
        order = np.argsort(x, kind="stable")
        cum = np.cumsum(e[order]) / e.sum()
        below = np.zeros(x.shape, np.float64)
        below[order] = cum  # the mass at and below each score (ties: the last one's)
        for v in np.unique(x):
            below[x == v] = below[x == v].max()
        keep &= below > 1.0 - top_p
    p = np.where(keep, e, 0.0)
    return p / p.sum(), greedy


@pytest.fixture(params=[256, 1024], ids=["wg256", "wg1024"])
def wg(request, monkeypatch):
    """The work-group a row (CPUs take 256, GPUs 1024: both run on every device)."""
    monkeypatch.setattr(sampling, "WG_GPU", request.param)
    monkeypatch.setattr(sampling, "WG_CPU", request.param)
    return request.param


def _sampler(ctx, x, dtype=np.float32, **settings):
    rows, vocab = x.shape
    t = dp.Tensor(ctx, x.shape, dtype)
    t.to_device(dp.dtypes.to_bfloat16(x) if dtype == dp.dtypes.bfloat16 else x.astype(dtype))
    s = TokenSampler(ctx, rows, vocab, dtype)
    s.configure(**settings)
    return s, t


@pytest.mark.parametrize("vocab", [1, 7, 255, 256, 257, 1000, 1023, 1024, 1025])
def test_greedy_is_the_first_largest_score_with_the_penalty(ctx, rng, vocab, wg):
    x = rng.normal(size=(3, vocab)).astype(np.float32)
    x[1, vocab // 2:] = x[1].max()  # equal largest scores: the lowest index wins
    s, t = _sampler(ctx, x)
    assert list(s.next(t).to_host()) == [int(np.argmax(r)) for r in x]
    if vocab > 1:
        # the penalty on the prompt's tokens moves the choice, as HF's processor does
        prompt = np.argsort(-x, axis=1)[:, :1]
        s.configure(penalty=1e6)
        s.start(prompt)
        seen = np.zeros_like(x, bool)
        np.put_along_axis(seen, prompt, True, axis=1)
        want = [reference(r, m, temperature=0, penalty=1e6)[1] for r, m in zip(x, seen)]
        got = s.next(t).to_host()
        assert list(got) == want
        assert all(w != p for w, p in zip(want, prompt[:, 0]))
        # the chosen token is seen now: the next choice avoids it too
        seen[np.arange(3), got] = True
        want = [reference(r, m, temperature=0, penalty=1e6)[1] for r, m in zip(x, seen)]
        assert list(s.next(t).to_host()) == want


def test_rows_with_nan_or_no_finite_score_give_minus_one(ctx, rng):
    x = rng.normal(size=(4, 300)).astype(np.float32)
    x[1, 17] = np.nan
    x[2] = -np.inf
    for settings in ({}, {"temperature": 0.8, "top_k": 10, "top_p": 0.9}):
        s, t = _sampler(ctx, x, **settings)
        got = s.next(t).to_host()
        assert got[1] == -1 and got[2] == -1 and got[0] >= 0 and got[3] >= 0


# (96 and 50: fewer tokens than the work-group's items, where PoCL once drew tokens
# outside the top k)
@pytest.mark.parametrize("vocab,top_k,top_p", [(257, 1, 1.0), (257, 256, 1.0), (1000, 17, 1.0),
                                               (1000, 0, 0.5), (1000, 40, 0.9),
                                               (300, 300, 0.05), (5, 0, 0.999),
                                               (96, 30, 1.0), (50, 7, 0.9)])
def test_draws_only_kept_tokens_and_follow_the_reference(ctx, rng, vocab, top_k, top_p, wg):
    rows, steps = 64, 60
    row = (rng.normal(size=vocab) * 2).astype(np.float32)
    x = np.tile(row, (rows, 1))
    s, t = _sampler(ctx, x, temperature=0.7, top_k=top_k, top_p=top_p, seed=5)
    counts = np.zeros(vocab)
    for step in range(steps):
        np.add.at(counts, s.next(t).to_host(), 1)
    p, _ = reference(row, temperature=0.7, top_k=top_k, top_p=top_p)
    assert counts[p == 0].sum() == 0, "drew tokens the filters remove"
    _chi_square_fits(counts, p)


def _chi_square_fits(counts, p):
    """Pearson's test of the counts against p (cells under 5 expected draws pooled), at a
    1e-4 false-alarm rate (Wilson-Hilferty's approximation of the critical value)."""
    n = counts.sum()
    expected = p * n
    small = (expected < 5) & (p > 0)
    obs = list(counts[(p > 0) & ~small]) + [counts[small].sum()]
    exp = list(expected[(p > 0) & ~small]) + [expected[small].sum()]
    obs, exp = np.array(obs), np.array(exp)
    obs, exp = obs[exp > 0], exp[exp > 0]
    df = len(exp) - 1
    if df < 1:
        assert obs.sum() == n
        return
    stat = ((obs - exp) ** 2 / exp).sum()
    z = 3.719  # the standard normal's 1 - 1e-4 quantile
    critical = df * (1 - 2 / (9 * df) + z * math.sqrt(2 / (9 * df))) ** 3
    assert stat < critical, "chi-square %.1f over %d degrees of freedom (critical %.1f)" % (
        stat, df, critical)


def test_a_stream_is_its_seed_and_lane_wherever_the_row_sits(ctx, rng):
    x = np.tile(rng.normal(size=500).astype(np.float32), (16, 1))
    s, t = _sampler(ctx, x, temperature=1.0, seed=3)
    a = [s.next(t).to_host().copy() for _ in range(3)]
    assert not np.array_equal(a[0], a[1])  # each draw moves the stream on
    assert len(set(a[0])) > 4  # each row its own lane
    s.start(np.zeros((16, 0)))
    assert np.array_equal(s.next(t).to_host(), a[0])  # start: the draws begin again
    # row 5 given row 2's lane draws row 2's tokens; other seeds draw others
    s.configure(temperature=1.0, seed=3, lane=2, rows=[5])
    s.configure(temperature=1.0, seed=4, rows=[0])
    s.start(np.zeros((16, 0)))
    b = np.array([s.next(t).to_host().copy() for _ in range(3)])
    assert list(b[:, 5]) == [r[2] for r in a] and list(b[:, 2]) == [r[2] for r in a]
    assert list(b[:, 0]) != [r[0] for r in a]
    # a row restarted alone restarts its stream alone
    s.start(np.zeros((1, 0)), rows=[5])
    c = s.next(t).to_host()
    assert c[5] == a[0][2]


@pytest.mark.parametrize("dtype", [np.float16, dp.dtypes.bfloat16])
def test_16_bit_logits(ctx, rng, dtype):
    x = rng.normal(size=(2, 333)).astype(np.float32)
    s, t = _sampler(ctx, x, dtype=dtype)
    stored = dp.dtypes.bfloat16_values(t.to_host()) if dtype == dp.dtypes.bfloat16 else \
        t.to_host().astype(np.float32)
    assert list(s.next(t).to_host()) == [int(np.argmax(r)) for r in stored]


def test_rows_apart_and_prompt_lengths(ctx, rng):
    x = rng.normal(size=(3, 50)).astype(np.float32)  # rows 0 and 2 of a (3, 50) view
    t = dp.Tensor(ctx, x.shape, np.float32)
    t.to_device(x)
    s = TokenSampler(ctx, 2, 50)
    assert list(s.next(t, row_stride=100).to_host()) == [x[0].argmax(), x[2].argmax()]
    s.configure(penalty=1e9)
    first = [x[0].argmax(), x[2].argmax()]
    s.start(np.array([first, first]), lengths=[1, 0])  # row 1's prompt is empty
    got = s.next(t, row_stride=100).to_host()
    assert got[0] != first[0] and got[1] == first[1]
    s.start(np.array([[got[1]]]), rows=[1])  # row 1 alone: row 0 keeps what it saw
    again = s.next(t, row_stride=100).to_host()
    assert again[0] not in (first[0], got[0]) and again[1] != got[1]


def test_bad_settings_are_named(ctx):
    s = TokenSampler(ctx, 2, 10)
    for kw, word in (({"temperature": -1}, "temperature"), ({"top_p": 0}, "top_p"),
                     ({"top_k": 1.5}, "top_k"), ({"penalty": [1, 0]}, "penalty"),
                     ({"seed": -1}, "seed")):
        with pytest.raises(ValueError, match=word):
            s.configure(**kw)
    with pytest.raises(TypeError, match="float64"):
        TokenSampler(ctx, 1, 10, np.float64)


def test_reference_is_transformers_processors(rng):
    torch = pytest.importorskip("torch")
    gen = pytest.importorskip("transformers.generation.logits_process")
    x = rng.normal(size=(1, 200)) * 3
    ids = torch.tensor([[3, 3, 50, 199]])
    seen = np.zeros(200, bool)
    seen[[3, 50, 199]] = True
    for temperature, top_k, top_p, penalty in ((0.7, 20, 0.9, 1.3), (1.3, 0, 0.6, 1.0),
                                               (1.0, 5, 1.0, 0.8)):
        procs = [gen.RepetitionPenaltyLogitsProcessor(penalty),
                 gen.TemperatureLogitsWarper(temperature)]
        if top_k:
            procs.append(gen.TopKLogitsWarper(top_k))
        if top_p < 1:
            procs.append(gen.TopPLogitsWarper(top_p))
        scores = torch.tensor(x, dtype=torch.float64)
        for proc in procs:
            scores = proc(ids, scores)
        want = torch.softmax(scores, -1)[0].numpy()
        got, _ = reference(x[0], seen, temperature, top_k, top_p, penalty)
        np.testing.assert_allclose(got, want, atol=1e-12)


def test_a_row_without_a_token_keeps_its_stream(ctx, rng):
    """A row whose logits are NaN (a row the decoder left alone that pass) draws nothing
    and its stream stays where it was: its next draw is the one it would have made."""
    x = np.tile(rng.normal(size=300).astype(np.float32), (2, 1))
    s, t = _sampler(ctx, x, temperature=1.0, seed=9)
    want = s.next(t).to_host().copy()
    s.start(np.zeros((2, 0)))
    skipped = x.copy()
    skipped[1] = np.nan
    t.to_device(skipped)
    assert s.next(t).to_host()[1] == -1
    t.to_device(x)
    assert s.next(t).to_host()[1] == want[1]


@pytest.mark.parametrize("rows", [1, 3, 65])
def test_feed_gives_the_next_one_token_pass_its_inputs(ctx, rng, rows):
    # each row's chosen token into the decoder's tokens, its position one on, and the
    # rotary row clamped to the table's last (a row at the end of the context)
    vocab, context = 50, 9
    sampler = TokenSampler(ctx, rows, vocab)
    logits = rng.standard_normal((rows, vocab)).astype(np.float32)
    chosen = sampler.next(dp.Tensor.from_numpy(ctx, logits)).numpy()
    pos = rng.integers(0, context, rows)
    pos[0] = context - 1
    tokens, positions = dp.Tensor.zeros(ctx, (rows, 1), "int64"), dp.Tensor.zeros(
        ctx, (rows, 1), "int64")
    pos_t = dp.Tensor.from_numpy(ctx, pos.astype(np.int64))
    sampler.feed(tokens, pos_t, positions, context)
    np.testing.assert_array_equal(tokens.numpy()[:, 0], logits.argmax(1))
    np.testing.assert_array_equal(chosen, logits.argmax(1))
    np.testing.assert_array_equal(pos_t.numpy(), pos + 1)
    np.testing.assert_array_equal(positions.numpy()[:, 0], np.minimum(pos + 1, context - 1))
    with pytest.raises(ValueError, match="int64 values, one a row"):
        sampler.feed(dp.Tensor.zeros(ctx, (rows + 1, 1), "int64"), pos_t, positions, context)
    with pytest.raises(ValueError, match="int64 values, one a row"):
        sampler.feed(tokens, dp.Tensor.zeros(ctx, (rows,), "float32"), positions, context)
