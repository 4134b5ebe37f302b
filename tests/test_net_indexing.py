"""Index and layout layers on tensors of every dtype (layers/gather.py, order.py,
broadcast.py) against numpy, forward and float gradients, with tensors placed inside
poisoned buffers (layer_check.run_layer); then int tensors flowing through a Net."""
import numpy as np
import pytest

import dlprim as dp
from dlprim.layers import create
from dlprim.layers.base import LayerError

from layer_check import assert_close, run_layer

INTS = [np.int8, np.int16, np.int32, np.int64, np.uint8]
ALL = INTS + [np.float32, np.float64, np.float16, np.bool_]


def values(rng, shape, dtype):
    if dtype == np.bool_:
        return rng.random(shape) < 0.5
    if np.dtype(dtype).kind in "iu":
        return rng.integers(0, 100, shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def layer(ctx, type_name, **options):
    return create(ctx, type_name, name="t", options=options)


def skip_fp64(ctx, *dtypes):
    if np.float64 in dtypes and not ctx.facts.fp64:
        pytest.skip("the device has no fp64")


@pytest.mark.parametrize("dtype", ALL)
def test_gather_every_dtype_negative_indices(ctx, dtype):
    skip_fp64(ctx, dtype)
    rng = np.random.default_rng(1)
    x = values(rng, (3, 33, 2), dtype)
    idx = np.array([[0, -1, 5], [32, -33, 7]], np.int64)
    y = run_layer(ctx, layer(ctx, "Gather", axis=1), [x, idx]).y[0]
    np.testing.assert_array_equal(y, np.take(x, idx, axis=1))


@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
def test_gather_gradient_sums_repeated_rows(ctx, index_dtype):
    rng = np.random.default_rng(2)
    x = rng.standard_normal((65, 3)).astype(np.float32)
    idx = np.array([1, -64, 64, 0, 1], index_dtype)  # -64 is row 1 again
    dy = rng.standard_normal((5, 3)).astype(np.float32)
    for acc in (False, True):
        r = run_layer(ctx, layer(ctx, "Gather", axis=0), [x, idx], dy=[dy], accumulate=acc,
                      want_dx=[True, False])
        want = np.zeros_like(x, np.float64)
        np.add.at(want, idx.astype(np.int64) % 65, dy)
        assert_close(r.y[0], x[idx])
        assert_close(r.dx[0], want)


@pytest.mark.parametrize("dtype", [np.int64, np.float32, np.uint8])
@pytest.mark.parametrize("idx_shape,axis", [((3, 4), 0), ((2, 3), 1), ((2, 2), 0)])
def test_gather_elements(ctx, dtype, idx_shape, axis):
    rng = np.random.default_rng(3)
    x = values(rng, (3, 4), dtype)
    idx = rng.integers(-x.shape[axis], x.shape[axis], idx_shape)
    dy = rng.standard_normal(idx_shape).astype(np.float32)
    is_f = dtype == np.float32
    r = run_layer(ctx, layer(ctx, "GatherElements", axis=axis), [x, idx],
                  dy=[dy] if is_f else None, want_dx=[True, False])
    want, grad = np.zeros(idx_shape, dtype), np.zeros(x.shape)
    for pos in np.ndindex(*idx_shape):
        src = list(pos)
        src[axis] = idx[pos] % x.shape[axis]
        want[pos] = x[tuple(src)]
        grad[tuple(src)] += dy[pos]
    np.testing.assert_array_equal(r.y[0], want)
    if is_f:
        assert_close(r.dx[0], grad)


def gather_nd(x, idx, b):
    """ONNX's reference GatherND."""
    batch = x.shape[:b]
    out = []
    for bi in np.ndindex(*batch):
        xb, ib = x[bi], idx[bi]
        rows = ib.reshape(-1, ib.shape[-1])
        out.append(np.stack([xb[tuple(r)] for r in rows]).reshape(ib.shape[:-1] + xb.shape[ib.shape[-1]:]))
    return np.stack(out).reshape(idx.shape[:-1] + x.shape[b + idx.shape[-1]:])


@pytest.mark.parametrize("dtype", [np.int32, np.float32])
@pytest.mark.parametrize("x_shape,idx_shape,b", [((4, 5, 3), (6, 2), 0), ((4, 5, 3), (2, 1), 0),
                                                 ((2, 5, 3), (2, 4, 1), 1), ((2, 3, 4), (2, 3, 2), 1)])
def test_gather_nd(ctx, dtype, x_shape, idx_shape, b):
    rng = np.random.default_rng(4)
    x = values(rng, x_shape, dtype)
    k = idx_shape[-1]
    sizes = x_shape[b:b + k]
    idx = np.stack([rng.integers(-n, n, idx_shape[:-1]) for n in sizes], -1).astype(np.int64)
    want = gather_nd(x, idx, b)
    is_f = dtype == np.float32
    dy = rng.standard_normal(want.shape).astype(np.float32)
    r = run_layer(ctx, layer(ctx, "GatherND", batch_dims=b), [x, idx],
                  dy=[dy] if is_f else None, want_dx=[True, False])
    np.testing.assert_array_equal(r.y[0], want)
    if is_f:  # the gradient is the adjoint: <dy, gather(x)> = <scatter(dy), x>
        assert_close(np.sum(r.dx[0] * x), np.sum(dy * want.astype(np.float64)), rtol=1e-4)


def scatter_ref(x, idx, u, axis, reduction):
    y = x.copy()
    for pos in np.ndindex(*idx.shape):
        dst = list(pos)
        dst[axis] = idx[pos] % x.shape[axis]
        dst = tuple(dst)
        y[dst] = {"none": lambda a, b: b, "add": np.add, "mul": np.multiply,
                  "max": np.maximum, "min": np.minimum}[reduction](y[dst], u[pos])
    return y


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
@pytest.mark.parametrize("dtype", [np.int64, np.float32])
def test_scatter_elements(ctx, reduction, dtype):
    rng = np.random.default_rng(5)
    x = values(rng, (4, 5), dtype)
    idx = np.array([[1, -1], [3, 0], [-4, 2]], np.int64)  # distinct per column: "none" is exact
    u = values(rng, (3, 2), dtype)
    r = run_layer(ctx, layer(ctx, "ScatterElements", axis=0, reduction=reduction), [x, idx, u])
    assert_close(r.y[0], scatter_ref(x, idx, u, 0, reduction))


@pytest.mark.parametrize("reduction", ["none", "add", "max"])
def test_scatter_nd(ctx, reduction):
    rng = np.random.default_rng(6)
    x = values(rng, (4, 3, 2), np.int32)
    idx = np.array([[0, 1], [3, -1], [-2, 0]], np.int64)
    u = values(rng, (3, 2), np.int32)
    want = x.copy()
    for row, up in zip(idx, u):
        at = tuple(int(i) % n for i, n in zip(row, x.shape))
        want[at] = {"none": up, "add": want[at] + up, "max": np.maximum(want[at], up)}[reduction]
    r = run_layer(ctx, layer(ctx, "ScatterND", reduction=reduction), [x, idx, u])
    np.testing.assert_array_equal(r.y[0], want)


def test_scatter_reduction_of_narrow_ints_is_refused(ctx):
    lay = layer(ctx, "ScatterElements", reduction="add")
    with pytest.raises(LayerError, match="reduction 'add' of int8"):
        lay.setup([dp.layers.TensorSpec((3,), np.int8), dp.layers.TensorSpec((3,), np.int64),
                   dp.layers.TensorSpec((3,), np.int8)])


def cumsum_ref(x, axis, exclusive, reverse):
    x = np.flip(x, axis) if reverse else x
    y = np.cumsum(x, axis=axis, dtype=np.float64 if x.dtype.kind == "f" else np.int64)
    if exclusive:
        y = y - x
    y = y.astype(x.dtype)
    return np.flip(y, axis) if reverse else y


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.float32, np.int8])
@pytest.mark.parametrize("exclusive,reverse", [(False, False), (True, False), (False, True),
                                               (True, True)])
def test_cumsum(ctx, dtype, exclusive, reverse):
    rng = np.random.default_rng(7)
    x = values(rng, (3, 65, 2), dtype) if dtype != np.int8 else \
        rng.integers(-3, 4, (3, 65, 2)).astype(np.int8)
    for axis in (1, -1):
        r = run_layer(ctx, layer(ctx, "CumSum", axis=axis, exclusive=exclusive, reverse=reverse), [x])
        assert_close(r.y[0], cumsum_ref(x, axis, exclusive, reverse), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.int32])
@pytest.mark.parametrize("largest", [True, False])
def test_topk(ctx, dtype, largest):
    rng = np.random.default_rng(8)
    x = rng.integers(0, 5, (4, 33)).astype(dtype)  # many ties: lower index first
    for k in (3, 33):
        r = run_layer(ctx, layer(ctx, "TopK", k=k, axis=1, largest=largest), [x])
        order = np.argsort(-x if largest else x, axis=1, kind="stable")[:, :k]
        np.testing.assert_array_equal(r.y[1], order)
        np.testing.assert_array_equal(r.y[0], np.take_along_axis(x, order, 1))


@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.int8, np.uint8, np.float16])
@pytest.mark.parametrize("kind", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("last", [False, True])
def test_arg_extremes(ctx, dtype, kind, last):
    rng = np.random.default_rng(9)
    x = rng.integers(0, 4, (3, 65)).astype(dtype)
    for axis, keep in ((1, True), (0, False)):
        r = run_layer(ctx, layer(ctx, kind, axis=axis, keepdims=keep, select_last_index=last), [x])
        pick = np.argmax if kind == "ArgMax" else np.argmin
        src = np.flip(x, axis) if last else x
        want = pick(src, axis=axis)
        if last:
            want = x.shape[axis] - 1 - want
        if keep:
            want = np.expand_dims(want, axis)
        np.testing.assert_array_equal(r.y[0], want)
        assert r.y[0].dtype == np.int64


@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.bool_])
def test_expand_and_tile(ctx, dtype):
    rng = np.random.default_rng(10)
    x = values(rng, (3, 1), dtype)
    is_f = dtype == np.float32
    r = run_layer(ctx, layer(ctx, "Expand", shape=[2, 1, 33]), [x],
                  dy=[np.ones((2, 3, 33), np.float32)] if is_f else None)
    np.testing.assert_array_equal(r.y[0], np.broadcast_to(x, (2, 3, 33)))
    if is_f:
        assert_close(r.dx[0], np.full((3, 1), 66.0))
    r = run_layer(ctx, layer(ctx, "Tile", repeats=[2, 33]), [x],
                  dy=[np.arange(6 * 33, dtype=np.float32).reshape(6, 33)] if is_f else None)
    np.testing.assert_array_equal(r.y[0], np.tile(x, (2, 33)))
    if is_f:
        g = np.arange(6 * 33, dtype=np.float64).reshape(2, 3, 33).sum((0, 2))[:, None]
        assert_close(r.dx[0], g)


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
@pytest.mark.parametrize("dtype", [np.int64, np.float32, np.uint8])
def test_pad(ctx, mode, dtype):
    rng = np.random.default_rng(11)
    x = values(rng, (2, 3, 5), dtype)
    pads = [0, 1, 2, 1, 2, 1]  # begins, then ends
    want = np.pad(x, [(0, 1), (1, 2), (2, 1)], mode=mode,
                  **({"constant_values": 7} if mode == "constant" else {}))
    dy = rng.standard_normal(want.shape).astype(np.float32)
    grads = mode == "constant" and dtype == np.float32
    r = run_layer(ctx, layer(ctx, "Pad", pads=pads, mode=mode, value=7), [x],
                  dy=[dy] if grads else None)
    np.testing.assert_array_equal(r.y[0], want)
    if grads:
        assert_close(r.dx[0], dy[:2, 1:4, 2:7])


def test_pad_negative_crops(ctx):
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    dy = np.ones((2, 3, 3), np.float32)
    r = run_layer(ctx, layer(ctx, "Pad", pads=[0, 1, -1, 0, -1, 0]), [x], dy=[dy])
    want = np.zeros((2, 3, 3), np.float32)
    want[:, 1:, :] = x[:, :2, 1:]
    np.testing.assert_array_equal(r.y[0], want)
    grad = np.zeros_like(x)
    grad[:, :2, 1:] = 1
    assert_close(r.dx[0], grad)


@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.bool_])
@pytest.mark.parametrize("upper,k", [(True, 0), (False, -1), (True, 2)])
def test_trilu(ctx, dtype, upper, k):
    rng = np.random.default_rng(12)
    x = values(rng, (2, 5, 33), dtype)
    r = run_layer(ctx, layer(ctx, "Trilu", upper=upper, k=k), [x])
    np.testing.assert_array_equal(r.y[0], np.triu(x, k) if upper else np.tril(x, k))


@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.float32])
def test_one_hot(ctx, dtype):
    idx = np.array([[0, 3, -1], [9, -10, 10]], dtype) if dtype != np.float32 else \
        np.array([[0.5, 3.9, -1.2]], np.float32)
    r = run_layer(ctx, layer(ctx, "OneHot", depth=10, axis=1, values=[2, 5], dtype="int64"), [idx])
    ints = np.trunc(idx).astype(np.int64)
    ints = np.where(ints < 0, ints + 10, ints)
    want = np.where(np.arange(10)[None, :, None] == ints[:, None, :], 5, 2)
    np.testing.assert_array_equal(r.y[0], want)


@pytest.mark.parametrize("dtype,start,delta", [(np.int64, 3, 2), (np.float32, 0.5, -0.25)])
def test_range(ctx, dtype, start, delta):
    r = run_layer(ctx, layer(ctx, "Range", size=65, delta=delta), [np.array(start, dtype)])
    assert_close(r.y[0], start + np.arange(65) * delta)
    assert r.y[0].dtype == dtype


def test_int_tensors_flow_through_a_net(ctx):
    """int64 ids -> Gather of a trained table (its gradient too), CumSum of the ids,
    ArgMax of the rows: int values are planned like any other."""
    cfg = dp.NetConfig()
    cfg.add_input("ids", [2, 33], "int64")
    cfg.add("Parameter", name="table", inputs=[], outputs="table",
            options={"shape": [50, 4], "is_trainable": True})
    cfg.add("Gather", name="tok", inputs=["table", "ids"], outputs="tok", options={"axis": 0})
    cfg.add("CumSum", name="pos", inputs=["ids"], outputs="pos", options={"axis": 1})
    cfg.add("ArgMax", name="best", inputs=["tok"], outputs="best",
            options={"axis": 2, "keepdims": False})
    cfg.add("Reduction", name="loss", inputs=["tok"], outputs="loss",
            options={"method": "sum", "dims": [0, 1, 2]})
    cfg.set_outputs(["loss", "pos", "best", "tok"])
    net = dp.Net(ctx, cfg)
    table = np.random.default_rng(13).standard_normal((50, 4)).astype(np.float32)
    net.param("table.0").to_device(table)
    ids = np.random.default_rng(14).integers(0, 50, (2, 33))
    out = net(ids=ids)
    assert_close(out["tok"], table[ids])
    np.testing.assert_array_equal(out["pos"], np.cumsum(ids, 1))
    np.testing.assert_array_equal(out["best"], np.argmax(table[ids], 2))
    assert out["best"].dtype == np.int64 and out["pos"].dtype == np.int64
    net.zero_grad()
    net.backward()
    counts = np.bincount(ids.ravel(), minlength=50).astype(np.float64)
    assert_close(net.param_diff("table.0").numpy(), np.repeat(counts[:, None], 4, 1))
