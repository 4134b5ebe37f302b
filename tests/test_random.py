import numpy as np
import pytest

import dlprim as dp
from dlprim.core import random as rnd


def test_philox_known_answers():
    # Random123 known-answer vectors for philox4x32-10
    cases = [
        ((0, 0, 0, 0), (0, 0), (0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8)),
        ((0xffffffff,) * 4, (0xffffffff,) * 2, (0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd)),
        ((0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344), (0xa4093822, 0x299f31d0),
         (0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1)),
    ]
    for counter, key, expected in cases:
        got = rnd.philox4x32(np.array([counter], np.uint32), key)[0]
        assert [int(v) for v in got] == list(expected)


def placed(ctx, shape, dtype, offset=5):
    whole = dp.Tensor.from_numpy(ctx, np.full(int(np.prod(shape)) + offset + 4, -7, dtype))
    return whole, whole.view(shape, offset=offset)


@pytest.mark.parametrize("n", [1, 3, 4, 5, 31, 33, 65, 1029])
def test_bits_bit_exact(ctx, n):
    seed, offset = 0x1234567890abcdef, 2 ** 33 + 7  # both halves of seed and counter used
    whole, t = placed(ctx, (n,), np.int32)
    rnd.RandomFill(ctx, (n,), "bits", dtype="int32")(t, seed, offset)
    np.testing.assert_array_equal(t.numpy().view(np.uint32), rnd.philox_bits(n, seed, offset))
    rest = whole.numpy()
    assert np.all(rest[:5] == -7) and np.all(rest[5 + n:] == -7)  # nothing written outside


@pytest.mark.parametrize("shape", [(33,), (4, 65), (129, 7)])
def test_uniform_bit_exact(ctx, shape):
    _, t = placed(ctx, shape, np.float32)
    rnd.uniform(ctx, t, -2.0, 3.0, seed=42, offset=11)
    ref = rnd.philox_uniform(t.size, -2.0, 3.0, seed=42, offset=11).reshape(shape)
    np.testing.assert_array_equal(t.numpy(), ref)


def test_normal_matches_reference_and_moments(ctx):
    n = 200001  # odd, so the last Box-Muller pair is cut
    t = dp.Tensor(ctx, (n,))
    rnd.normal(ctx, t, mean=1.5, std=2.0, seed=7)
    got = t.numpy()
    np.testing.assert_allclose(got, rnd.philox_normal(n, 1.5, 2.0, seed=7), rtol=1e-5, atol=1e-5)
    assert abs(got.mean() - 1.5) < 0.02 and abs(got.std() - 2.0) < 0.02
    u = rnd.uniform(ctx, dp.Tensor(ctx, (n,)), seed=7).numpy()
    assert 0 <= u.min() and u.max() < 1 and abs(u.mean() - 0.5) < 0.005
    assert abs(u.std() - np.sqrt(1 / 12)) < 0.005


def test_half_storage(ctx):
    t = dp.Tensor(ctx, (65,), "float16")
    rnd.uniform(ctx, t, seed=3)
    np.testing.assert_array_equal(t.numpy(), rnd.philox_uniform(65, seed=3).astype(np.float16))


def test_streams_differ_and_advance(ctx):
    n = 37
    fill = rnd.RandomFill(ctx, (n,), "uniform")
    a, b, c = (dp.Tensor(ctx, (n,)) for _ in range(3))
    fill(a, seed=1, offset=0)
    fill(b, seed=1, offset=rnd.counters(n))
    fill(c, seed=2, offset=0)
    assert not np.any(a.numpy() == b.numpy()) and not np.any(a.numpy() == c.numpy())
    # consecutive fills continue one stream: two fills of n == one fill of 2n (n % 4 == 0)
    big = rnd.philox_uniform(2 * 40, seed=1)
    np.testing.assert_array_equal(big[40:], rnd.philox_uniform(40, seed=1, offset=rnd.counters(40)))
    # an advancing launch draws a new block each call, a re-pointed one repeats
    (adv,) = fill.launches(a, seed=1, offset=0, advance=True)
    for k in range(3):
        adv(ctx.queue)
        np.testing.assert_array_equal(a.numpy(), rnd.philox_uniform(n, seed=1, offset=k * rnd.counters(n)))
    (fixed,) = fill.launches(b, seed=1, offset=0)
    rnd.RandomFill.set_counter(fixed, 9, 100)
    fixed(ctx.queue)
    np.testing.assert_array_equal(b.numpy(), rnd.philox_uniform(n, seed=9, offset=100))


def test_errors(ctx):
    with pytest.raises(ValueError, match="unknown dist 'gauss'"):
        rnd.RandomFill(ctx, (3,), "gauss")
    with pytest.raises(ValueError, match="needs dtype int"):
        rnd.RandomFill(ctx, (3,), "bits")
    with pytest.raises(ValueError, match="needs dtype float or half"):
        rnd.RandomFill(ctx, (3,), "normal", dtype="int32")
    with pytest.raises(ValueError, match="expected shape"):
        rnd.RandomFill(ctx, (3,), "uniform").launches(dp.Tensor(ctx, (4,)))
