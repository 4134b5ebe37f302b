"""Pooling2D and GlobalPooling against float64 numpy references."""
import json

import numpy as np
import pytest

from dlprim.core.pooling import pool_output_size
from dlprim.layers import LayerError, create
from layer_check import assert_close, check_reference_grads, run_layer


def windows(h, w, k, s, p, ceil_mode):
    """(oh, ow, rows, cols, divisor_with_pad) of every output, PyTorch's rules."""
    oh = pool_output_size(h, k[0], s[0], p[0], ceil_mode)
    ow = pool_output_size(w, k[1], s[1], p[1], ceil_mode)
    out = []
    for i in range(oh):
        for j in range(ow):
            hs, ws = i * s[0] - p[0], j * s[1] - p[1]
            he, we = min(hs + k[0], h + p[0]), min(ws + k[1], w + p[1])
            rows = range(max(hs, 0), min(hs + k[0], h))
            cols = range(max(ws, 0), min(ws + k[1], w))
            out.append((i, j, rows, cols, (he - hs) * (we - ws)))
    return oh, ow, out


def pool_ref(x, mode, k, s, p, cip=False, ceil_mode=False):
    n, c, h, w = x.shape
    oh, ow, wins = windows(h, w, k, s, p, ceil_mode)
    y = np.zeros((n, c, oh, ow))
    for i, j, rows, cols, div in wins:
        patch = x[:, :, rows.start:rows.stop, cols.start:cols.stop]
        if mode == "max":
            y[:, :, i, j] = patch.max(axis=(2, 3))
        else:
            y[:, :, i, j] = patch.sum(axis=(2, 3)) / (div if cip else len(rows) * len(cols))
    return y


def pool_grad_ref(x, dy, mode, k, s, p, cip=False, ceil_mode=False):
    n, c, h, w = x.shape
    _, _, wins = windows(h, w, k, s, p, ceil_mode)
    dx = np.zeros_like(x, dtype=np.float64)
    for i, j, rows, cols, div in wins:
        if mode == "max":
            for a in range(n):
                for b in range(c):
                    patch = x[a, b, rows.start:rows.stop, cols.start:cols.stop]
                    r, q = np.unravel_index(np.argmax(patch), patch.shape)  # first maximum
                    dx[a, b, rows.start + r, cols.start + q] += dy[a, b, i, j]
        else:
            d = div if cip else len(rows) * len(cols)
            dx[:, :, rows.start:rows.stop, cols.start:cols.stop] += dy[:, :, i, j][:, :, None, None] / d
    return dx


def distinct(rng, shape):
    """A random permutation of well-separated values: no max-pool ties."""
    return (rng.permutation(int(np.prod(shape))).reshape(shape) * 0.01 - 1.0).astype(np.float64)


CASES = [  # shape, mode, kernel, stride, pad, count_include_pad, ceil_mode
    ((2, 3, 8, 8), "max", (2, 2), (2, 2), (0, 0), False, False),
    ((1, 2, 7, 9), "max", (3, 3), (2, 2), (1, 1), False, False),
    ((1, 2, 7, 9), "max", (3, 3), (2, 2), (1, 1), False, True),
    ((2, 1, 6, 5), "max", (3, 2), (1, 2), (1, 0), False, True),
    ((1, 33, 5, 5), "max", (2, 2), (2, 2), (0, 0), False, True),
    ((2, 3, 7, 9), "avg", (3, 3), (2, 2), (1, 1), False, False),
    ((2, 3, 7, 9), "avg", (3, 3), (2, 2), (1, 1), True, False),
    ((1, 2, 8, 6), "avg", (3, 3), (2, 2), (1, 1), True, True),
    ((1, 2, 8, 6), "avg", (3, 3), (2, 2), (1, 1), False, True),
    ((1, 1, 65, 33), "avg", (2, 2), (2, 2), (0, 0), False, False),
    ((1, 1, 31, 64), "max", (5, 5), (3, 3), (2, 2), False, True),
]


@pytest.mark.parametrize("case", CASES[:5] + CASES[5:9])
def test_reference_backward_matches_finite_differences(case):
    shape, mode, k, s, p, cip, cm = case
    x = distinct(np.random.default_rng(0), shape)
    check_reference_grads(lambda xs, ps: [pool_ref(xs[0], mode, k, s, p, cip, cm)],
                          lambda xs, ps, ys, dys: ([pool_grad_ref(xs[0], dys[0], mode, k, s, p, cip, cm)], []),
                          [x], eps=1e-4)


def test_output_size_rules():
    assert pool_output_size(7, 3, 2, 1, False) == 4
    assert pool_output_size(6, 3, 2, 1, True) == 4    # (6+2-3)/2 = 2.5 -> 3, +1
    assert pool_output_size(5, 2, 2, 0, True) == 3
    assert pool_output_size(5, 2, 2, 0, False) == 2
    # ceil would add a window that starts in the right padding: dropped
    assert pool_output_size(5, 2, 2, 1, True) == 3   # not 4


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("accumulate", [False, True])
def test_pooling2d(ctx, case, accumulate):
    shape, mode, k, s, p, cip, cm = case
    rng = np.random.default_rng(len(shape) + k[0])
    x = distinct(rng, shape)
    options = {"mode": mode, "kernel": list(k), "stride": list(s), "pad": list(p),
               "count_include_pad": cip, "ceil_mode": cm}
    layer = create(ctx, "Pooling2D", "pool", options)
    y_ref = pool_ref(x, mode, k, s, p, cip, cm)
    dy = rng.standard_normal(y_ref.shape)
    r = run_layer(ctx, layer, [x.astype(np.float32)], dy=[dy.astype(np.float32)], accumulate=accumulate)
    assert_close(r.y[0], y_ref, what="y")
    assert_close(r.dx[0], pool_grad_ref(x, dy, mode, k, s, p, cip, cm), what="dx")


@pytest.mark.parametrize("width", [4, 20])   # 20: rows the CPU kernel takes four windows at a time
def test_max_pool_ties_route_to_first_index(ctx, width):
    x = np.zeros((1, 1, 4, width), np.float32)
    x[0, 0, 1, 1] = x[0, 0, 1, 0] = 2.0     # tie inside the first window
    if width > 4:
        x[0, 0, 0, 13] = x[0, 0, 1, 12] = 3.0   # and inside a later one
    layer = create(ctx, "Pooling2D", "pool", {"kernel": 2, "stride": 2})
    dy = np.ones((1, 1, 2, width // 2), np.float32)
    r = run_layer(ctx, layer, [x], dy=[dy])
    expected = np.zeros((4, width))
    expected[0::2, 0::2] = 1   # all-zero windows: first element
    expected[1, 0] = 1       # first maximum in row-major order
    expected[0, 0] = 0
    if width > 4:
        expected[0, 13], expected[0, 12] = 1, 0
    assert_close(r.dx[0][0, 0], expected)


def test_defaults_follow_dlprimitives(ctx):
    """kernel 1, stride 1: the identity for max pooling."""
    layer = create(ctx, "Pooling2D", "pool", {})
    x = distinct(np.random.default_rng(1), (1, 2, 3, 4)).astype(np.float32)
    r = run_layer(ctx, layer, [x])
    assert_close(r.y[0], x)


@pytest.mark.parametrize("shape", [(2, 3, 5, 7), (1, 65, 1, 1), (2, 2, 8, 8), (1, 1, 33, 31)])
@pytest.mark.parametrize("mode", ["max", "avg"])
def test_global_pooling(ctx, shape, mode):
    rng = np.random.default_rng(shape[1])
    x = distinct(rng, shape)
    dy = rng.standard_normal(shape[:2] + (1, 1))
    layer = create(ctx, "GlobalPooling", "gp", {"mode": mode})
    for acc in (False, True):
        r = run_layer(ctx, layer, [x.astype(np.float32)], dy=[dy.astype(np.float32)], accumulate=acc)
        k = shape[2:]
        assert_close(r.y[0], pool_ref(x, mode, k, (1, 1), (0, 0)), what="y")
        assert_close(r.dx[0], pool_grad_ref(x, dy, mode, k, (1, 1), (0, 0)), what="dx")


def test_global_max_ties_route_to_first_index(ctx):
    x = np.zeros((1, 2, 3, 3), np.float32)
    r = run_layer(ctx, create(ctx, "GlobalPooling", "gp", {"mode": "max"}), [x],
                  dy=[np.ones((1, 2, 1, 1), np.float32)])
    expected = np.zeros((1, 2, 3, 3))
    expected[:, :, 0, 0] = 1
    assert_close(r.dx[0], expected)


@pytest.mark.parametrize("type_name, options", [
    ("Pooling2D", {"kernel": [3, 3], "stride": [2, 2], "pad": [1, 1], "count_include_pad": 0,
                   "mode": "max"}),
    ("Pooling2D", {"mode": "avg", "kernel": 2, "stride": 2, "ceil_mode": True}),
    ("GlobalPooling", {"mode": "avg"}),
])
def test_config_round_trips(type_name, options):
    cfg = json.loads(json.dumps(create(None, type_name, "p", options).config()))
    for k, v in options.items():
        assert cfg[k] == v
    assert create(None, type_name, "p", cfg).config() == cfg


@pytest.mark.parametrize("type_name, options, option", [
    ("Pooling2D", {"mode": "median"}, "mode"),
    ("Pooling2D", {"kernel": -2}, "kernel"),
    ("Pooling2D", {"kernel": 0}, "kernel"),
    ("Pooling2D", {"kernel": [2, 2, 2]}, "kernel"),
    ("Pooling2D", {"stride": 0}, "stride"),
    ("Pooling2D", {"kernel": 2, "pad": 2}, "pad"),
    ("Pooling2D", {"ceil_mode": "yes"}, "ceil_mode"),
    ("Pooling2D", {"dilation": 2}, "dilation"),
    ("GlobalPooling", {"mode": "sum"}, "mode"),
])
def test_bad_options_name_layer_and_option(type_name, options, option):
    with pytest.raises(LayerError) as err:
        create(None, type_name, "bad", options)
    assert "%s 'bad'" % type_name in str(err.value) and option in str(err.value)


def test_input_smaller_than_kernel_is_an_error(ctx):
    from dlprim.layers import TensorSpec
    layer = create(ctx, "Pooling2D", "p", {"kernel": 5})
    with pytest.raises(LayerError, match="Pooling2D 'p'.*smaller than kernel"):
        layer.setup([TensorSpec((1, 1, 3, 3))])


def test_max_backward_uses_the_kept_argmax_not_x(ctx):
    """Backward reads neither x nor y (the planner may reuse them): overwrite both."""
    from dlprim import Tensor
    from dlprim.layers import TensorSpec, run
    from layer_check import layer_memory, place
    rng = np.random.default_rng(4)
    shape, k, s, p = (2, 3, 9, 9), (3, 3), (2, 2), (1, 1)
    x, x2 = distinct(rng, shape), distinct(rng, shape)
    layer = create(ctx, "Pooling2D", "pool", {"kernel": 3, "stride": 2, "pad": 1})
    layer.mode = "train"
    setup = layer.setup([TensorSpec(shape)])
    assert not setup.flags.backward_reads_inputs and not setup.flags.backward_reads_outputs
    (out,) = setup.outputs
    assert setup.saved == [TensorSpec(out.shape, "int32")]   # the argmax
    ws, saved = layer_memory(ctx, setup)
    x_t, y_t = place(ctx, x.astype(np.float32)), place(ctx, np.zeros(out.shape, np.float32))
    run(layer.forward([x_t], [y_t], [], ws, saved), ctx.queue)
    x_t.to_device(x2.astype(np.float32))
    y_t.to_device(np.full(out.shape, np.nan, np.float32))
    dy = rng.standard_normal(out.shape)
    dx_t = Tensor(ctx, shape)
    run(layer.backward([x_t], [dx_t], [y_t], [place(ctx, dy.astype(np.float32))], [], [], ws,
                       saved, [False]), ctx.queue)
    assert_close(dx_t.numpy(), pool_grad_ref(x, dy, "max", k, s, p))


def test_max_backward_without_a_train_forward_is_an_error(ctx):
    from dlprim import Tensor
    from dlprim.layers import TensorSpec
    layer = create(ctx, "Pooling2D", "pool", {"kernel": 2, "stride": 2})
    layer.mode = "predict"
    assert layer.setup([TensorSpec((1, 1, 4, 4))]).saved == []
    layer.forward([Tensor(ctx, (1, 1, 4, 4))], [Tensor(ctx, (1, 1, 2, 2))], [], None, [])
    with pytest.raises(LayerError, match="Pooling2D 'pool'.*train mode"):
        layer.backward([None], [Tensor(ctx, (1, 1, 4, 4))], [None], [Tensor(ctx, (1, 1, 2, 2))],
                       [], [], None, [], [False])
