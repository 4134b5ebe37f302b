"""Index gathers and scatter-adds (core/gather.py) against numpy in float64, over sizes
that cross work-group edges, with tensors placed at offsets inside larger buffers."""
import numpy as np
import pytest

import dlprim as dp
from dlprim.core.gather import index_ops


def placed(ctx, array, offset=5):
    array = np.asarray(array)
    whole = np.zeros(array.size + offset + 3, array.dtype)
    whole[offset:offset + array.size] = array.ravel()
    return dp.Tensor.from_numpy(ctx, whole).view(array.shape, offset=offset)


@pytest.mark.parametrize("index_dtype", [np.int64, np.int32])
@pytest.mark.parametrize("outer,n,m,inner", [(1, 7, 300, 1), (3, 5, 33, 5), (2, 300, 4, 65)])
def test_index_select_and_its_adjoint(ctx, rng, index_dtype, outer, n, m, inner):
    src = rng.standard_normal((outer, n, inner)).astype(np.float32)
    idx = rng.integers(0, n, m).astype(index_dtype)  # repeats: the adjoint must sum them
    ops = index_ops(ctx, np.float32, index_dtype)
    dst = dp.Tensor(ctx, (outer, m, inner))
    for launch in ops.launches("index_select", placed(ctx, src), placed(ctx, idx), dst,
                               outer, n, m, inner):
        launch(ctx.queue)
    np.testing.assert_array_equal(dst.to_host(), src[:, idx, :])
    grad = rng.standard_normal((outer, m, inner)).astype(np.float32)
    base = rng.standard_normal((outer, n, inner)).astype(np.float32)
    acc = placed(ctx, base)
    for launch in ops.launches("index_add", placed(ctx, grad), placed(ctx, idx), acc,
                               outer, n, m, inner, alpha=0.5, skip=int(idx[0])):
        launch(ctx.queue)
    want = base.astype(np.float64)
    keep = idx != idx[0]
    np.add.at(want, (slice(None), idx[keep], slice(None)), 0.5 * grad[:, keep, :].astype(np.float64))
    np.testing.assert_allclose(acc.to_host(), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("outer,n,m,inner", [(2, 9, 13, 20), (1, 4, 600, 1)])
def test_gather_and_scatter_add(ctx, rng, outer, n, m, inner):
    src = rng.standard_normal((outer, n, inner)).astype(np.float32)
    idx = rng.integers(0, n, (outer, m, inner)).astype(np.int64)
    ops = index_ops(ctx, np.float32, np.int64)
    dst = dp.Tensor(ctx, (outer, m, inner))
    for launch in ops.launches("gather", placed(ctx, src), placed(ctx, idx), dst, outer, n, m, inner):
        launch(ctx.queue)
    np.testing.assert_array_equal(dst.to_host(), np.take_along_axis(src, idx, 1))
    grad = rng.standard_normal((outer, m, inner)).astype(np.float32)
    acc = dp.Tensor.zeros(ctx, (outer, n, inner))
    for launch in ops.launches("scatter_add", placed(ctx, grad), placed(ctx, idx), acc,
                               outer, n, m, inner):
        launch(ctx.queue)
    want = np.zeros((outer, n, inner))
    o, _, k = np.meshgrid(np.arange(outer), np.arange(m), np.arange(inner), indexing="ij")
    np.add.at(want, (o, idx, k), grad.astype(np.float64))
    np.testing.assert_allclose(acc.to_host(), want, rtol=1e-5, atol=1e-5)


def test_out_of_range_indices_read_nan_or_zero_and_add_nothing(ctx):
    idx = np.array([1, -1, 3, 0], np.int64)
    src = np.arange(3 * 2, dtype=np.float32).reshape(1, 3, 2)
    ops = index_ops(ctx, np.float32, np.int64)
    dst = dp.Tensor(ctx, (1, 4, 2))
    for launch in ops.launches("index_select", placed(ctx, src), placed(ctx, idx), dst, 1, 3, 4, 2):
        launch(ctx.queue)
    got = dst.to_host()
    assert np.isnan(got[0, 1:3]).all()
    np.testing.assert_array_equal(got[0, [0, 3]], src[0, [1, 0]])
    ints = index_ops(ctx, np.int32, np.int64)
    dst_i = dp.Tensor(ctx, (1, 4, 2), np.int32)
    for launch in ints.launches("index_select", placed(ctx, src.astype(np.int32)),
                                placed(ctx, idx), dst_i, 1, 3, 4, 2):
        launch(ctx.queue)
    assert (dst_i.to_host()[0, 1:3] == 0).all()
    acc = dp.Tensor.zeros(ctx, (1, 3, 2))
    for launch in ops.launches("index_add", placed(ctx, np.ones((1, 4, 2), np.float32)),
                               placed(ctx, idx), acc, 1, 3, 4, 2):
        launch(ctx.queue)
    np.testing.assert_array_equal(acc.to_host()[0], [[1, 1], [1, 1], [0, 0]])


def test_bad_arguments_are_errors(ctx):
    with pytest.raises(TypeError, match="int64 or int32"):
        index_ops(ctx, np.float32, np.float32)
    with pytest.raises(TypeError, match="float32"):
        index_ops(ctx, np.int32, np.int64).launches("index_add", None, None, None, 1, 1, 1, 1)
    with pytest.raises(ValueError, match="kind"):
        index_ops(ctx, np.float32, np.int64).launches("scatter", None, None, None, 1, 1, 1, 1)
