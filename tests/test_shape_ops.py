"""Reshape, Flatten, Squeeze: shapes, copies forward and backward, option errors."""
import json

import numpy as np
import pytest

from dlprim.layers import LayerError, TensorSpec, create
from layer_check import assert_close, run_layer

CASES = [  # type, options, input shape, expected output shape
    ("Reshape", {"dims": [0, -1]}, (2, 3, 4, 5), (2, 60)),
    ("Reshape", {"dims": [-1]}, (65,), (65,)),
    ("Reshape", {"dims": [0, 2, -1, 1]}, (3, 4, 33), (3, 2, 66, 1)),
    ("Reshape", {"dims": [4, 0, 1]}, (2, 32, 2), (4, 32, 1)),
    ("Flatten", {}, (2, 3, 4, 5), (2, 60)),
    ("Flatten", {}, (63, 1), (63, 1)),
    ("Flatten", {}, (5,), (5, 1)),
    ("Squeeze", {}, (2, 1, 31, 1), (2, 31)),
    ("Squeeze", {"all": True}, (1, 64, 1), (64,)),
    ("Squeeze", {"dims": [-1]}, (1, 33, 1), (1, 33)),
    ("Squeeze", {"dims": [0, 2]}, (1, 33, 1), (33,)),
]


@pytest.mark.parametrize("type_name,opts,shape,out_shape", CASES)
def test_forward_backward(ctx, rng, type_name, opts, shape, out_shape):
    x = rng.standard_normal(shape).astype(np.float32)
    dy = rng.standard_normal(out_shape).astype(np.float32)
    layer = create(ctx, type_name, "v", opts)
    for acc in (False, True):
        r = run_layer(ctx, layer, [x], dy=[dy], accumulate=acc)
        assert r.y[0].shape == out_shape
        assert_close(r.y[0], x.reshape(out_shape), rtol=0, atol=0, what="y")
        assert_close(r.dx[0], dy.reshape(shape), rtol=1e-6, atol=1e-6, what="dx")
        again = create(ctx, type_name, "v", json.loads(json.dumps(layer.config())))
        assert again.config() == layer.config()


def test_int_tensors_copy(ctx):
    x = np.arange(24, dtype=np.int32).reshape(2, 3, 4)
    r = run_layer(ctx, create(ctx, "Flatten", "f", {}), [x])
    assert np.array_equal(r.y[0], x.reshape(2, 12))


@pytest.mark.parametrize("type_name,opts,shape,match", [
    ("Reshape", {"dims": [5, -1]}, (2, 3), "cannot hold the 6 elements"),
    ("Reshape", {"dims": [4, 2]}, (2, 3), "gives shape \\(4, 2\\) of 8 elements"),
    ("Reshape", {"dims": [0, 0, 0]}, (2, 3), "0 at index 2"),
    ("Squeeze", {"dims": [1]}, (2, 3), "axis 1 of input \\(2, 3\\) has size 3"),
    ("Squeeze", {"dims": [4]}, (2, 1), "out of range"),
])
def test_bad_shapes(ctx, type_name, opts, shape, match):
    with pytest.raises(LayerError, match="%s 'v': .*%s" % (type_name, match)):
        create(ctx, type_name, "v", opts).setup([TensorSpec(shape)])


@pytest.mark.parametrize("type_name,opts,match", [
    ("Reshape", {}, "'dims' is required"),
    ("Reshape", {"dims": [-1, -1]}, "only one"),
    ("Reshape", {"dims": [2, -3]}, "'dims' must be a list"),
    ("Reshape", {"dims": "2,3"}, "'dims' must be a list"),
    ("Squeeze", {"all": "yes"}, "'all'"),
    ("Squeeze", {"dims": 1}, "'dims'"),
    ("Flatten", {"axis": 1}, "unknown option 'axis'"),
])
def test_bad_options(ctx, type_name, opts, match):
    with pytest.raises(LayerError, match="%s 'v': .*%s" % (type_name, match)):
        create(ctx, type_name, "v", opts)


def test_in_place_is_free(ctx, rng):
    from layer_check import place
    layer = create(ctx, "Flatten", "f", {})
    assert layer.INPLACE
    layer.setup([TensorSpec((2, 3, 4))])
    t = place(ctx, rng.standard_normal((2, 3, 4)).astype(np.float32))
    assert layer.forward([t], [t.view((2, 12))], [], None, []) == []
    assert layer.backward([t], [t], [t], [t.view((2, 12))], [], [], None, [], [False]) == []
