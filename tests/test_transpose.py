"""Transpose (any permutation) and channel shuffle as Reshape + Transpose + Reshape."""
import json

import numpy as np
import pytest

from dlprim.layers import LayerError, TensorSpec, create
from layer_check import assert_close, run_layer

CASES = [((3, 65), [1, 0]), ((2, 31, 33), [2, 0, 1]), ((2, 3, 4, 5), [0, 2, 3, 1]),
         ((2, 3, 4, 5), [3, 2, 1, 0]), ((1, 64, 1, 2), [0, 1, 2, 3]), ((4, 5, 6), [-1, 0, 1])]


@pytest.mark.parametrize("shape,dims", CASES)
def test_forward_backward(ctx, rng, shape, dims):
    x = rng.standard_normal(shape).astype(np.float32)
    y_ref = np.transpose(x, dims)
    dy = rng.standard_normal(y_ref.shape).astype(np.float32)
    layer = create(ctx, "Transpose", "t", {"dims": dims})
    for acc in (False, True):
        r = run_layer(ctx, layer, [x], dy=[dy], accumulate=acc)
        assert_close(r.y[0], y_ref, rtol=0, atol=0, what="y")
        assert_close(r.dx[0], np.transpose(dy, np.argsort(np.array(dims) % len(shape))),
                     rtol=1e-6, atol=1e-6, what="dx")


def test_channel_shuffle(ctx, rng):
    n, c, h, w, g = 2, 6, 3, 4, 3
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    steps = [("Reshape", {"dims": [0, g, c // g, h, w]}), ("Transpose", {"dims": [0, 2, 1, 3, 4]}),
             ("Reshape", {"dims": [0, -1, h, w]})]
    t = x
    for type_name, opts in steps:
        t = run_layer(ctx, create(ctx, type_name, "s", opts), [t]).y[0]
    expected = x.reshape(n, g, c // g, h, w).transpose(0, 2, 1, 3, 4).reshape(n, c, h, w)
    assert_close(t, expected, rtol=0, atol=0, what="shuffled")
    assert not np.array_equal(t, x)


def test_config_and_errors(ctx):
    layer = create(ctx, "Transpose", "t", {"dims": [0, 2, 1]})
    again = create(ctx, "Transpose", "t", json.loads(json.dumps(layer.config())))
    assert again.config() == layer.config() == {"dims": [0, 2, 1]}
    with pytest.raises(LayerError, match="Transpose 't': option 'dims' is required"):
        create(ctx, "Transpose", "t", {})
    with pytest.raises(LayerError, match="Transpose 't': option 'dims' must be a list"):
        create(ctx, "Transpose", "t", {"dims": "0,1"})
    with pytest.raises(LayerError, match="Transpose 't': option 'dims' \\[0, 0, 1\\] is not a permutation"):
        create(ctx, "Transpose", "t", {"dims": [0, 0, 1]}).setup([TensorSpec((2, 3, 4))])
    with pytest.raises(LayerError, match="Transpose 't': option 'dims' \\[1, 0\\] is not a permutation"):
        create(ctx, "Transpose", "t", {"dims": [1, 0]}).setup([TensorSpec((2, 3, 4))])


@pytest.mark.parametrize("mode", ["predict", "train"])
def test_a_permutation_of_unit_axes_is_a_view(ctx, rng, mode):
    # (N, H, 1, D) -> (N, 1, H, D) moves no element: no launch of its own, in a net that
    # trains too (the gradient passes back through the shared memory)
    import dlprim as dp
    cfg = dp.NetConfig()
    cfg.add_input("x", [2, 3, 1, 4])
    cfg.add("Elementwise", name="twice", inputs=["x", "x"], outputs=["h"],
            options={"operation": "sum"})
    cfg.add("Transpose", name="merge", inputs=["h"], outputs=["t"],
            options={"dims": [0, 2, 1, 3]})
    cfg.add("Reshape", name="rows", inputs=["t"], outputs=["r"], options={"dims": [2, 12]})
    cfg.add("InnerProduct", name="fc", inputs=["r"], outputs=["y"], options={"outputs": 5})
    cfg.set_outputs(["y"])
    net = dp.Net(ctx, cfg, mode=mode)
    x = rng.standard_normal((2, 3, 1, 4)).astype(np.float32)
    p = net.get_parameters()
    r = (2 * x).transpose(0, 2, 1, 3).reshape(2, 12)
    np.testing.assert_allclose(net(x=x)["y"], r @ p["fc.0"].T + p["fc.1"], rtol=1e-5,
                               atol=1e-5)
    assert "strided_copy" not in [launch.name for launch in net.plan.forward]
    moved = create(ctx, "Transpose", "t", {"dims": [0, 2, 1, 3]})
    moved.setup([TensorSpec((2, 3, 2, 4))])
    assert moved.moves and not moved.flags.view
