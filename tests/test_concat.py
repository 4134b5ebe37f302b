"""Concat and Slice along an axis: forward, backward (accumulate), bounds and errors.

Slice's ``begin``/``end`` are DLPrimitives' (``end`` -1 is the end of the axis, no other
negative value), ``start``/``stop`` Python's."""
import json

import numpy as np
import pytest

from dlprim.layers import LayerError, TensorSpec, create
from layer_check import assert_close, run_layer


def slice_grad_ref(shape, axis, b, e, dy):
    g = np.zeros(shape)
    idx = [slice(None)] * len(shape)
    idx[axis] = slice(b, e)
    g[tuple(idx)] = dy
    return g


CONCAT_CASES = [  # shapes, dim
    ([(2, 3, 4), (2, 5, 4)], 1),
    ([(2, 31, 2), (2, 1, 2), (2, 33, 2)], 1),
    ([(3, 4), (1, 4)], 0),
    ([(2, 63), (2, 65)], -1),
    ([(1, 64, 1, 1), (1, 64, 1, 1)], 1),
    ([(5, 7)], 1),
]


@pytest.mark.parametrize("shapes,dim", CONCAT_CASES)
def test_concat(ctx, rng, shapes, dim):
    xs = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    y_ref = np.concatenate(xs, axis=dim)
    dy = rng.standard_normal(y_ref.shape).astype(np.float32)
    layer = create(ctx, "Concat", "c", {"dim": dim})
    splits = np.cumsum([s[dim] for s in shapes])[:-1]
    parts = np.split(dy, splits, axis=dim)
    for acc in (False, True):
        want = [True] * len(xs)
        if len(xs) > 1:
            want[1] = acc  # a missing gradient is skipped
        r = run_layer(ctx, layer, xs, dy=[dy], accumulate=acc, want_dx=want)
        assert_close(r.y[0], y_ref, rtol=0, atol=0, what="y")
        for i, w in enumerate(want):
            if w:
                assert_close(r.dx[i], parts[i], rtol=1e-6, atol=1e-6, what="dx%d" % i)
            else:
                assert r.dx[i] is None


SLICE_CASES = [  # shape, options, (axis, begin, end)
    ((2, 65, 3), {"dim": 1, "begin": 1, "end": 64}, (1, 1, 64)),
    ((2, 65, 3), {"begin": 32}, (1, 32, 65)),
    ((2, 65, 3), {"begin": 32, "end": -1}, (1, 32, 65)),     # DLPrimitives: -1 is the end
    ((33, 4), {"dim": -1, "begin": 1, "end": -1}, (1, 1, 4)),
    ((33, 4), {"dim": 0, "end": None}, (0, 0, 33)),          # null: the end too
    ((4, 63), {"dim": 1, "begin": 0, "end": 31}, (1, 0, 31)),
    ((2, 3, 4, 5), {"dim": 3, "begin": 4, "end": 5}, (3, 4, 5)),
    ((15, 2), {"dim": 0, "begin": 1, "end": 3}, (0, 1, 3)),   # DLPrimitives' own test cases
    ((5, 10, 1), {"dim": 1, "begin": 2, "end": 7}, (1, 2, 7)),
    ((33, 4), {"dim": 0, "start": -31}, (0, 2, 33)),          # Python: x[-31:]
    ((33, 4), {"dim": -1, "start": 1, "stop": -1}, (1, 1, 3)),  # x[..., 1:-1]
    ((6, 5), {"stop": 3}, (1, 0, 3)),                          # x[:, :3]
    ((6, 5), {"start": -2, "stop": None}, (1, 3, 5)),
]


@pytest.mark.parametrize("shape,opts,bounds", SLICE_CASES)
def test_slice(ctx, rng, shape, opts, bounds):
    axis, b, e = bounds
    x = rng.standard_normal(shape).astype(np.float32)
    y_ref = np.take(x, np.arange(b, e), axis=axis)
    dy = rng.standard_normal(y_ref.shape).astype(np.float32)
    layer = create(ctx, "Slice", "s", opts)
    for acc in (False, True):
        r = run_layer(ctx, layer, [x], dy=[dy], accumulate=acc)
        assert_close(r.y[0], y_ref, rtol=0, atol=0, what="y")
        assert_close(r.dx[0], slice_grad_ref(shape, axis, b, e, dy), rtol=1e-6, atol=1e-6, what="dx")


def test_config_round_trip(ctx):
    for type_name, opts in (("Concat", {}), ("Concat", {"dim": 0}), ("Slice", {"begin": 2}),
                            ("Slice", {"dim": 2, "begin": 3, "end": -1}),
                            ("Slice", {"dim": 2, "start": -3, "stop": -1}), ("Slice", {"stop": 2})):
        layer = create(ctx, type_name, "l", opts)
        again = create(ctx, type_name, "l", json.loads(json.dumps(layer.config())))
        assert again.config() == layer.config()
        if type_name == "Slice":
            assert again.bounds(9) == layer.bounds(9)
    # each spelling writes only its own bounds, so a written net says what it means
    assert create(ctx, "Slice", "l", {}).config() == {"dim": 1, "begin": 0, "end": -1}
    assert create(ctx, "Slice", "l", {"start": -3}).config() == {"dim": 1, "start": -3, "stop": None}


def test_concat_errors(ctx):
    layer = create(ctx, "Concat", "c", {"dim": 1})
    with pytest.raises(LayerError, match="Concat 'c': input 1 of shape \\(2, 3, 5\\) does not match"):
        layer.setup([TensorSpec((2, 3, 4)), TensorSpec((2, 3, 5))])
    with pytest.raises(LayerError, match="Concat 'c': input 1 of shape \\(2, 3\\) does not match"):
        layer.setup([TensorSpec((2, 3, 4)), TensorSpec((2, 3))])
    with pytest.raises(LayerError, match="Concat 'c': input 1 has dtype int32"):
        layer.setup([TensorSpec((2, 3)), TensorSpec((2, 3), "int32")])
    with pytest.raises(LayerError, match="Concat 'c': option 'dim' 2 is out of range"):
        create(ctx, "Concat", "c", {"dim": 2}).setup([TensorSpec((2, 3))])
    with pytest.raises(LayerError, match="Concat 'c': option 'dim' must be an integer"):
        create(ctx, "Concat", "c", {"dim": "1"})


@pytest.mark.parametrize("opts,shape,match", [
    ({"begin": 3, "end": 3}, (2, 5), "outside or empty"),
    ({"begin": 0, "end": 6}, (2, 5), "outside or empty"),
    ({"begin": 5}, (2, 5), r"\[5:5\], outside or empty"),
    ({"begin": 4, "end": 2}, (2, 5), "outside or empty"),
    ({"begin": 1, "end": 0}, (2, 5), "outside or empty"),
    ({"start": -6}, (2, 5), "'start' -6 and 'stop' None select \\[-1:5\\]"),
    ({"start": 2, "stop": -3}, (2, 5), "outside or empty"),
    ({"stop": 6}, (2, 5), "outside or empty"),
    ({"dim": 2}, (2, 5), "'dim' 2 is out of range"),
])
def test_slice_out_of_range(ctx, opts, shape, match):
    with pytest.raises(LayerError, match="Slice 's': .*" + match):
        create(ctx, "Slice", "s", opts).setup([TensorSpec(shape)])


def test_slice_bad_options(ctx):
    with pytest.raises(LayerError, match="Slice 's': option 'begin'"):
        create(ctx, "Slice", "s", {"begin": 1.5})
    with pytest.raises(LayerError, match="Slice 's': option 'begin' must be an integer, got None"):
        create(ctx, "Slice", "s", {"begin": None})
    with pytest.raises(LayerError, match="Slice 's': option 'end'"):
        create(ctx, "Slice", "s", {"end": "2"})
    with pytest.raises(LayerError, match="Slice 's': option 'stop'"):
        create(ctx, "Slice", "s", {"stop": 2.0})
    with pytest.raises(LayerError, match="Slice 's': unknown option 'step'"):
        create(ctx, "Slice", "s", {"step": 2})


@pytest.mark.parametrize("opts, bad", [({"begin": -3}, "'begin' -3 is negative"),
                                      ({"begin": 1, "end": -2}, "'end' -2: the only negative")])
def test_slice_negative_dlprimitives_bounds_point_to_python_spelling(ctx, opts, bad):
    """DLPrimitives refuses these; Python would count them from the end: never guess."""
    with pytest.raises(LayerError, match="Slice 's': option " + bad + ".*'start' and 'stop'"):
        create(ctx, "Slice", "s", opts)


def test_slice_spellings_do_not_mix(ctx):
    with pytest.raises(LayerError, match="Slice 's': option 'end' .*cannot go with 'start'/'stop'"):
        create(ctx, "Slice", "s", {"start": 1, "end": -1})


def test_dlprimitives_json_slice_in_a_net(ctx, rng):
    """A DLPrimitives net file's Slice with end -1 keeps the axis to its end, forward and
    backward, as DLPrimitives runs it (and a Python-style Slice beside it stops before)."""
    import dlprim as dp
    net_json = {
        "inputs": [{"name": "data", "shape": [3, 7, 2], "requires_grad": True}],
        "outputs": ["loss_a", "loss_b"],
        "operators": [
            {"name": "a", "type": "Slice", "inputs": ["data"], "outputs": ["loss_a"],
             "options": {"dim": 1, "begin": 2, "end": -1}},
            {"name": "b", "type": "Slice", "inputs": ["data"], "outputs": ["loss_b"],
             "options": {"dim": 1, "start": 2, "stop": -1}}]}
    net = dp.Net(ctx, net_json)
    x = rng.standard_normal((3, 7, 2)).astype(np.float32)
    out = net(data=x)
    assert np.array_equal(out["loss_a"], x[:, 2:]) and np.array_equal(out["loss_b"], x[:, 2:-1])
    net.backward()   # each loss's gradient is ones
    want = np.zeros_like(x)
    want[:, 2:] += 1
    want[:, 2:-1] += 1
    assert np.array_equal(net.tensor_diff("data").numpy(), want)
