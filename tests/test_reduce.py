import itertools

import numpy as np
import pytest

import dlprim as dp
from dlprim.core.reduction import ArgMax, Reduce, argmax, reduce

SHAPE = (3, 33, 5, 4)
_ops = {}


def cached(cls, ctx, *args, **kw):
    key = (cls, args, tuple(sorted(kw.items())))
    if key not in _ops:
        _ops[key] = cls(ctx, *args, **kw)
    return _ops[key]


def placed(ctx, array, offset=7):
    array = np.asarray(array)
    whole = np.full(array.size + offset + 2, np.nan if array.dtype.kind == "f" else 55, array.dtype)
    whole[offset:offset + array.size] = array.ravel()
    return dp.Tensor.from_numpy(ctx, whole).view(array.shape, offset=offset)


REFS = {"sum": np.sum, "mean": np.mean, "max": np.max, "min": np.min,
        "sumsq": lambda a, axis, keepdims: np.sum(a * a, axis=axis, keepdims=keepdims),
        "abssum": lambda a, axis, keepdims: np.sum(np.abs(a), axis=axis, keepdims=keepdims)}


@pytest.mark.parametrize("axes", [a for r in range(1, 5) for a in itertools.combinations(range(4), r)])
def test_sum_every_axis_subset(ctx, rng, axes):
    a = rng.standard_normal(SHAPE).astype(np.float32)
    r = cached(Reduce, ctx, SHAPE, axes, "sum")
    y = placed(ctx, np.full(r.out_shape, np.nan, np.float32))
    r(placed(ctx, a), y)
    np.testing.assert_allclose(y.numpy(), a.astype(np.float64).sum(axis=axes), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("op", ["mean", "sumsq", "abssum", "max", "min"])
@pytest.mark.parametrize("axes", [(0, 2, 3), (3,), (1,)])
def test_ops(ctx, rng, op, axes):
    a = rng.standard_normal(SHAPE).astype(np.float32)
    r = cached(Reduce, ctx, SHAPE, axes, op, keepdims=True)
    y = placed(ctx, np.full(r.out_shape, np.nan, np.float32))
    r(placed(ctx, a), y)
    ref = REFS[op](a.astype(np.float64), axis=axes, keepdims=True)
    np.testing.assert_allclose(y.numpy(), ref, rtol=1e-5, atol=1e-5)


def test_alpha_beta_and_large(ctx, rng):
    a = rng.standard_normal((2, 4, 129, 65)).astype(np.float32)
    r = cached(Reduce, ctx, a.shape, (0, 2, 3), "mean")
    prev = rng.standard_normal(4).astype(np.float32)
    y = placed(ctx, prev)
    r(placed(ctx, a), y, alpha=2.0, beta=1.0)
    ref = 2 * a.astype(np.float64).mean(axis=(0, 2, 3)) + prev
    np.testing.assert_allclose(y.numpy(), ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", ["int32", "int64", "uint8"])
def test_int_max_sum(ctx, rng, dtype):
    a = rng.integers(0, 100 if dtype == "uint8" else 10 ** 6, (65, 31)).astype(dtype)
    r = cached(Reduce, ctx, a.shape, 1, "max", dtype=dtype)
    y = dp.Tensor(ctx, (65,), dtype)
    r(placed(ctx, a), y)
    np.testing.assert_array_equal(y.numpy(), a.max(axis=1))
    if dtype != "uint8":
        s = reduce(ctx, placed(ctx, a), 0, "sum")
        np.testing.assert_array_equal(s.numpy(), a.sum(axis=0))
    neg = -a.astype(np.int64).astype(dtype) if dtype != "uint8" else a
    m = reduce(ctx, placed(ctx, neg), (0, 1), "max", keepdims=True)
    np.testing.assert_array_equal(m.numpy(), neg.max(keepdims=True))


def test_half_storage(ctx, rng):
    a = rng.standard_normal((31, 65)).astype(np.float16)
    y = reduce(ctx, placed(ctx, a), 1, "sum")
    assert y.dtype == np.float16 and y.shape == (31,)
    np.testing.assert_allclose(y.numpy().astype(np.float64), a.astype(np.float64).sum(1),
                               rtol=2e-3, atol=3e-3)


@pytest.mark.parametrize("shape,axis", [((7, 1000), 1), ((129, 3), 0), ((2, 65, 3), 1), ((33,), 0)])
def test_argmax(ctx, rng, shape, axis):
    a = rng.standard_normal(shape).astype(np.float32)
    a.flat[::3] = 0.5  # many ties: the first index wins, as numpy
    a = np.where(a > 0.5, 0.5, a).astype(np.float32)
    y = argmax(ctx, placed(ctx, a), axis)
    assert y.dtype == np.int32
    np.testing.assert_array_equal(y.numpy(), np.argmax(a, axis=axis))


def test_argmax_int64_keepdims(ctx, rng):
    a = rng.standard_normal((4, 300)).astype(np.float32)
    op = ArgMax(ctx, a.shape, -1, keepdims=True, index_dtype="int64")
    y = placed(ctx, np.full((4, 1), -3, np.int64))
    op(placed(ctx, a), y)
    np.testing.assert_array_equal(y.numpy(), np.argmax(a, axis=1)[:, None])


def test_errors(ctx):
    with pytest.raises(ValueError, match="unknown op 'median'"):
        Reduce(ctx, (3, 4), 0, "median")
    with pytest.raises(ValueError, match="axis 2 is out of range"):
        Reduce(ctx, (3, 4), 2)
    with pytest.raises(ValueError, match="repeated axis"):
        Reduce(ctx, (3, 4), (1, -1))
    with pytest.raises(ValueError, match="'mean' needs a float"):
        Reduce(ctx, (3, 4), 0, "mean", dtype="int32")
    r = cached(Reduce, ctx, SHAPE, (1,), "sum")
    with pytest.raises(ValueError, match=r"y is \(3, 1, 5, 4\) float32, expected \(3, 5, 4\)"):
        r.launches(dp.Tensor(ctx, SHAPE), dp.Tensor(ctx, (3, 1, 5, 4)))
    with pytest.raises(ValueError, match="x is"):
        r.launches(dp.Tensor(ctx, SHAPE, "int32"), dp.Tensor(ctx, (3, 5, 4)))
    with pytest.raises(ValueError, match="index_dtype must be int32 or int64"):
        ArgMax(ctx, (3, 4), 1, index_dtype="float")
