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
    # CPUs move the swaps in register blocks (alpha 1, beta 0): whole blocks and edges here
    assert (op._blocks is not None) == (tiled and ctx.facts.is_cpu)
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


@pytest.mark.parametrize("src_t, dst_t", [("float32", "float16"), ("float16", "float32"),
                                          ("float32", "bfloat16"), ("bfloat16", "float32")])
def test_strided_copy_converts_float_storage(ctx, rng, src_t, dst_t):
    """A strided copy between float32 and a 16-bit storage rounds to nearest even into
    16 bits, widens exactly out of them, and with beta reads dst in its own type."""
    from dlprim.dtypes import bfloat16, bfloat16_values, to_bfloat16
    store = lambda a, t: to_bfloat16(a) if t == "bfloat16" else a.astype(t)  # noqa: E731
    value = lambda a, t: bfloat16_values(a) if t == "bfloat16" else a.astype(np.float32)  # noqa: E731
    a = store(rng.standard_normal((3, 5, 7)).astype(np.float32), src_t)
    old = store(rng.standard_normal((3, 7)).astype(np.float32), dst_t)
    # src's (.., 5, 7) rows 2 and 4 of each matrix, into a (3, 7) dst's rows
    op = cp.StridedCopy(ctx, (3, 7), (35, 1), (7, 1), src_t, dst_t)
    src = dp.Tensor.from_numpy(ctx, a).view((3 * 35,), 14)
    dst = dp.Tensor.from_numpy(ctx, old)
    op(src, dst, alpha=1.0, beta=0.5)
    want = value(a, src_t)[:, 2].astype(np.float64) + 0.5 * value(old, dst_t)
    got = dst.numpy().astype(np.float64)
    assert dst.dtype == (bfloat16 if dst_t == "bfloat16" else np.dtype(dst_t))
    np.testing.assert_array_equal(got, value(store(want.astype(np.float32), dst_t), dst_t))
    with pytest.raises(ValueError, match="converts between float32, float16 and bfloat16 only"):
        cp.StridedCopy(ctx, (3,), (1,), (1,), "int32", "float32")
    with pytest.raises(ValueError, match="dst has dtype int32, expected %s" % dst_t):
        op(src, dp.Tensor(ctx, (3, 7), "int32"))


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
