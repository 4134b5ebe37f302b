"""Parameter layer: no inputs, output = the parameter, gradient added into it."""
import json

import numpy as np
import pytest

from dlprim.layers import LayerError, create
from layer_check import assert_close, run_layer


@pytest.mark.parametrize("shape", [(1,), (33,), (2, 65), (3, 4, 5)])
def test_forward_backward(ctx, rng, shape):
    p = rng.standard_normal(shape).astype(np.float32)
    dy = rng.standard_normal(shape).astype(np.float32)
    layer = create(ctx, "Parameter", "p", {"shape": list(shape)})
    r = run_layer(ctx, layer, [], params=[p], dy=[dy])
    assert_close(r.y[0], p, rtol=0, atol=0, what="y")
    assert_close(r.dparams[0], dy, rtol=1e-6, atol=1e-6, what="dparam")  # added onto 0.25


def test_init_is_zero_and_not_trainable(ctx, rng):
    layer = create(ctx, "Parameter", "p", {"shape": [4], "dtype": "int", "is_trainable": False})
    r = run_layer(ctx, layer, [], rng=rng)
    assert r.y[0].dtype == np.int32 and np.all(r.y[0] == 0)
    params = layer.setup([]).params
    assert not params[0].trainable
    r = run_layer(ctx, create(ctx, "Parameter", "p", {"shape": [3]}), [], dy=[np.ones(3, np.float32)])
    assert np.all(r.y[0] == 0) and r.dparams[0] is not None


def test_config_and_errors(ctx):
    layer = create(ctx, "Parameter", "p", {"shape": [2, 3]})
    assert layer.config() == {"shape": [2, 3], "dtype": "float", "is_trainable": True}
    again = create(ctx, "Parameter", "p", json.loads(json.dumps(layer.config())))
    assert again.config() == layer.config()
    for opts, match in (({}, "'shape' is required"), ({"shape": [2, -1]}, "'shape' must be"),
                        ({"shape": [2], "dtype": "complex64"}, "'dtype'"),
                        ({"shape": [2], "dtype": "int"}, "cannot be trainable"),
                        ({"shape": [2], "init": "ones"}, "unknown option 'init'")):
        with pytest.raises(LayerError, match="Parameter 'p': .*" + match):
            create(ctx, "Parameter", "p", opts)
    with pytest.raises(LayerError, match="Parameter 'p'.*no inputs"):
        from dlprim.layers import TensorSpec
        layer.setup([TensorSpec((2, 3))])
