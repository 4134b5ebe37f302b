"""Dropout: masks from the Philox stream (numpy twin), scaling, new mask per step,
reproducible from the seed, identity in predict mode."""
import json
import zlib

import numpy as np
import pytest

from dlprim import Tensor
from dlprim.core.random import counters, philox_uniform
from dlprim.layers import LayerError, TensorSpec, create, run
from layer_check import assert_close, layer_memory, place, run_layer


def expected_mask(layer_name, seed, n, step):
    key = (zlib.crc32(layer_name.encode()) << 32) | seed
    return philox_uniform(n, seed=key, offset=step * counters(n)) >= np.float32(0.3)


@pytest.mark.parametrize("shape", [(1,), (31,), (32,), (33,), (63,), (64,), (65,), (2, 3, 5, 7)])
@pytest.mark.parametrize("accumulate", [False, True])
def test_train_mask_and_scale(ctx, shape, accumulate):
    rng = np.random.default_rng(shape[0])
    x = rng.uniform(0.5, 1.5, shape).astype(np.float32)   # no zeros: the mask shows in y
    dy = rng.standard_normal(shape).astype(np.float32)
    layer = create(ctx, "Dropout", "drop", {"ratio": 0.3, "seed": 5})
    r = run_layer(ctx, layer, [x], dy=[dy], accumulate=accumulate)
    keep = expected_mask("drop", 5, x.size, 0).reshape(shape)
    assert_close(r.y[0], np.where(keep, x / 0.7, 0), what="y")
    assert_close(r.dx[0], np.where(keep, dy / 0.7, 0), what="dx")


def test_keep_fraction_and_mean(ctx):
    n = 20000
    layer = create(ctx, "Dropout", "d", {"ratio": 0.5})
    r = run_layer(ctx, layer, [np.ones(n, np.float32)])
    kept = np.count_nonzero(r.y[0])
    assert abs(kept / n - 0.5) < 0.02
    assert abs(r.y[0].mean() - 1.0) < 0.04   # inverted dropout keeps the expectation


def _plan(ctx, layer, shape):
    layer.mode = "train"
    ws, saved = layer_memory(ctx, layer.setup([TensorSpec(shape)]))
    x = place(ctx, np.ones(shape, np.float32))
    y = Tensor(ctx, shape)
    return layer.forward([x], [y], [], ws, saved), y


def test_new_mask_every_step_and_reproducible_from_seed(ctx):
    shape = (257,)
    masks = []
    for _ in range(2):   # two layers, same name and seed: the same sequence of masks
        layer = create(ctx, "Dropout", "drop", {"ratio": 0.3, "seed": 9})
        plan, y = _plan(ctx, layer, shape)
        seq = []
        for step in range(3):
            run(plan, ctx.queue)
            seq.append(y.numpy() != 0)
            assert np.array_equal(seq[-1], expected_mask("drop", 9, 257, step))
        assert not np.array_equal(seq[0], seq[1]) and not np.array_equal(seq[1], seq[2])
        masks.append(seq)
    assert all(np.array_equal(a, b) for a, b in zip(*masks))
    other_seed, _ = _plan(ctx, create(ctx, "Dropout", "drop", {"ratio": 0.3, "seed": 10}), shape)
    other_name, _ = _plan(ctx, create(ctx, "Dropout", "drop2", {"ratio": 0.3, "seed": 9}), shape)
    for plan in (other_seed, other_name):
        run(plan, ctx.queue)
    # re-planning continues the stream instead of repeating the first mask
    layer = create(ctx, "Dropout", "drop", {"ratio": 0.3, "seed": 9})
    plan, y = _plan(ctx, layer, shape)
    run(plan, ctx.queue)
    plan, y = _plan(ctx, layer, shape)
    run(plan, ctx.queue)
    assert np.array_equal(y.numpy() != 0, expected_mask("drop", 9, 257, 1))


def test_different_seed_or_name_gives_another_mask(ctx):
    a = expected_mask("drop", 9, 257, 0)
    assert not np.array_equal(a, expected_mask("drop", 10, 257, 0))
    assert not np.array_equal(a, expected_mask("drop2", 9, 257, 0))
    r = run_layer(ctx, create(ctx, "Dropout", "drop2", {"ratio": 0.3, "seed": 9}),
                  [np.ones(257, np.float32)])
    assert np.array_equal(r.y[0] != 0, expected_mask("drop2", 9, 257, 0))


@pytest.mark.parametrize("accumulate", [False, True])
def test_predict_mode_is_identity(ctx, rng, accumulate):
    x = rng.standard_normal((3, 33)).astype(np.float32)
    dy = rng.standard_normal((3, 33)).astype(np.float32)
    r = run_layer(ctx, create(ctx, "Dropout", "d", {}), [x], dy=[dy], mode="predict",
                  accumulate=accumulate)
    assert_close(r.y[0], x)
    assert_close(r.dx[0], dy)


def test_ratio_zero_is_identity(ctx, rng):
    x = rng.standard_normal(65).astype(np.float32)
    r = run_layer(ctx, create(ctx, "Dropout", "d", {"ratio": 0}), [x], dy=[x])
    assert_close(r.y[0], x)
    assert_close(r.dx[0], x)


def test_in_place(ctx, rng):
    x = rng.uniform(0.5, 1.5, 64).astype(np.float32)
    layer = create(ctx, "Dropout", "drop", {"ratio": 0.3, "seed": 5})
    ws, saved = layer_memory(ctx, layer.setup([TensorSpec((64,))]))
    t = place(ctx, x)
    run(layer.forward([t], [t], [], ws, saved), ctx.queue)
    assert_close(t.numpy(), np.where(expected_mask("drop", 5, 64, 0), x / 0.7, 0))


def test_config_round_trips():
    options = {"ratio": 0.25, "seed": 42}
    cfg = json.loads(json.dumps(create(None, "Dropout", "d", options).config()))
    assert cfg == options
    assert create(None, "Dropout", "d", cfg).config() == cfg


@pytest.mark.parametrize("options, option", [
    ({"ratio": 1.0}, "ratio"), ({"ratio": -0.1}, "ratio"), ({"ratio": "half"}, "ratio"),
    ({"seed": -1}, "seed"), ({"seed": 1.5}, "seed"), ({"p": 0.5}, "p"),
])
def test_bad_options_name_layer_and_option(options, option):
    with pytest.raises(LayerError) as err:
        create(None, "Dropout", "bad", options)
    assert "Dropout 'bad'" in str(err.value) and option in str(err.value)


def test_mask_is_saved_only_in_train_mode(ctx):
    """Predict mode keeps no mask; a Net sets its layers up again when it switches mode."""
    layer = create(ctx, "Dropout", "drop", {"ratio": 0.3, "seed": 5})
    layer.mode = "predict"
    assert layer.setup([TensorSpec((40,))]).saved == []
    layer.mode = "train"
    x = place(ctx, np.ones(40, np.float32))
    y = Tensor(ctx, (40,))
    with pytest.raises(LayerError, match="Dropout 'drop'.*train mode"):
        layer.forward([x], [y], [], None, [])
    setup = layer.setup([TensorSpec((40,))])
    assert setup.saved == [TensorSpec((40,))]
    run(layer.forward([x], [y], [], *layer_memory(ctx, setup)), ctx.queue)
    assert np.array_equal(y.numpy() != 0, expected_mask("drop", 5, 40, 0))
