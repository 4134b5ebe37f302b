import numpy as np
import pytest

import dlprim as dp
from dlprim.core import copy as cp


def placed(ctx, array, offset=6):
    array = np.asarray(array)
    whole = np.full(array.size + offset + 3, np.nan if array.dtype.kind == "f" else 88, array.dtype)
    whole[offset:offset + array.size] = array.ravel()
    return dp.Tensor.from_numpy(ctx, whole).view(array.shape, offset=offset)


_ops = {}


def cached(cls, ctx, *args):
    key = (cls,) + tuple(tuple(a) if isinstance(a, list) else a for a in args)
    if key not in _ops:
        _ops[key] = cls(ctx, *args)
    return _ops[key]


@pytest.mark.parametrize("shape,perm", [
    ((31, 65), (1, 0)), ((1, 129), (1, 0)), ((2, 3, 33, 5), (0, 2, 3, 1)),
    ((2, 3, 33, 5), (3, 1, 0, 2)), ((4, 63, 64), (0, 2, 1)), ((7,), (0,)),
    ((2, 33, 5, 7), (0, 2, 3, 1)), ((2, 5, 7, 33), (0, 3, 1, 2)), ((1, 129, 1, 65), (3, 1, 2, 0))])
def test_transpose(ctx, rng, shape, perm):
    a = rng.standard_normal(shape).astype(np.float32)
    op = cached(cp.TransposeCopy, ctx, shape, perm)
    y = placed(ctx, np.full(op.out_shape, np.nan, np.float32))
    op(placed(ctx, a), y)
    np.testing.assert_array_equal(y.numpy(), a.transpose(perm))
    tiled = shape in ((31, 65), (4, 63, 64), (2, 33, 5, 7), (2, 5, 7, 33), (1, 129, 1, 65))
    assert (op._tiled is not None) == tiled
    if tiled:  # the tiled kernel honours alpha/beta too
        prev = y.numpy()
        op(placed(ctx, a), y, alpha=2.0, beta=-1.0)
        np.testing.assert_allclose(y.numpy(), 2 * a.transpose(perm) - prev, rtol=1e-6, atol=1e-6)


def test_strided_alpha_beta_accumulate(ctx, rng):
    # the gradient of a slice: add 0.5 * dy into the window [2:35, 1:4] of a (40, 6) buffer
    dy = rng.standard_normal((33, 3)).astype(np.float32)
    dx = rng.standard_normal((40, 6)).astype(np.float32)
    t = placed(ctx, dx)
    op = cached(cp.StridedCopy, ctx, (33, 3), (3, 1), (6, 1))
    op(placed(ctx, dy), t.view((t.size - 13,), offset=2 * 6 + 1), alpha=0.5, beta=1.0)
    ref = dx.copy()
    ref[2:35, 1:4] += 0.5 * dy
    np.testing.assert_allclose(t.numpy(), ref, rtol=1e-6)
    # beta = 0 ignores NaN garbage in dst
    g = placed(ctx, np.full((40, 6), np.nan, np.float32))
    op(placed(ctx, dy), g.view((g.size - 13,), offset=13), alpha=2.0)
    got = g.numpy()
    np.testing.assert_array_equal(got[2:35, 1:4], 2 * dy)
    assert np.isnan(got[0]).all() and np.isnan(got[:, 0]).all()  # outside untouched


@pytest.mark.parametrize("dtype", ["int32", "int64", "uint8", "float16"])
@pytest.mark.parametrize("shape", [(33, 5), (33, 65)])  # strided and tiled
def test_dtypes(ctx, rng, dtype, shape):
    a = (rng.standard_normal(shape) * 50).astype(dtype)
    op = cached(cp.TransposeCopy, ctx, shape, (1, 0), dtype)
    y = dp.Tensor(ctx, shape[::-1], dtype)
    op(placed(ctx, a), y)
    np.testing.assert_array_equal(y.numpy(), a.T)
    acc = placed(ctx, a.T.copy())
    op(placed(ctx, a), acc, beta=1.0)  # integer accumulate stays exact
    np.testing.assert_array_equal(acc.numpy(), (a.T + a.T).astype(dtype))


@pytest.mark.parametrize("dtype", ["float32", "int64", "float16", "uint8"])
def test_fill_and_copy(ctx, rng, dtype):
    t = placed(ctx, np.zeros((65,), dtype))
    cp.fill(ctx, t, 3)
    np.testing.assert_array_equal(t.numpy(), np.full(65, 3, dtype))
    a = (rng.standard_normal(65) * 9).astype(dtype)
    dst = placed(ctx, np.zeros((65,), dtype), offset=1)
    cp.copy(ctx, placed(ctx, a), dst)
    np.testing.assert_array_equal(dst.numpy(), a)


def test_concat_and_slice(ctx, rng):
    parts = [rng.standard_normal((2, n, 5)).astype(np.float32) for n in (1, 31, 33)]
    out = cp.concat(ctx, [placed(ctx, p) for p in parts], axis=1)
    whole = np.concatenate(parts, axis=1)
    np.testing.assert_array_equal(out.numpy(), whole)
    s = cp.slice_copy(ctx, out, 1, 3, 40)
    np.testing.assert_array_equal(s.numpy(), whole[:, 3:40])
    last = cp.concat(ctx, [placed(ctx, p) for p in (whole, whole[:1])], axis=-3)
    np.testing.assert_array_equal(last.numpy(), np.concatenate([whole, whole[:1]], 0))


def test_errors(ctx):
    with pytest.raises(ValueError, match="not a permutation"):
        cp.TransposeCopy(ctx, (3, 4), (0, 0))
    with pytest.raises(ValueError, match="src_strides"):
        cp.StridedCopy(ctx, (3, 4), (1,), (4, 1))
    op = cached(cp.StridedCopy, ctx, (33, 3), (3, 1), (6, 1))
    small = dp.Tensor(ctx, (20,))
    with pytest.raises(ValueError, match="dst at offset 0 needs 195 elements"):
        op.launches(dp.Tensor(ctx, (99,)), small)
    with pytest.raises(ValueError, match="dtype int32, expected float32"):
        op.launches(dp.Tensor(ctx, (99,), "int32"), dp.Tensor(ctx, (200,)))
    with pytest.raises(ValueError, match="concat: tensor 1"):
        cp.concat(ctx, [dp.Tensor(ctx, (2, 3)), dp.Tensor(ctx, (3, 3))], axis=1)
    with pytest.raises(ValueError, match="outside axis"):
        cp.slice_copy(ctx, dp.Tensor(ctx, (2, 3)), 1, 2, 4)
    with pytest.raises(ValueError, match="Fill: tensor"):
        cp.Fill(ctx, (3,)).launches(dp.Tensor(ctx, (4,)), 1.0)


def test_64bit_index_path(ctx, rng, monkeypatch):
    import dlprim.core.pointwise as pw
    monkeypatch.setattr(pw, "_UINT_LIMIT", 1)
    a = rng.standard_normal((3, 33, 5)).astype(np.float32)
    op = cp.TransposeCopy(ctx, a.shape, (2, 0, 1))
    assert op._it is np.uint64
    y = dp.Tensor(ctx, (5, 3, 33))
    op(placed(ctx, a), y)
    np.testing.assert_array_equal(y.numpy(), a.transpose(2, 0, 1))
