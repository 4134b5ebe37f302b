"""Parameters stored in other types than float32 (net/parameters.py) and the InnerProduct
that reads them (option ``weights``: float16, bfloat16, int8 with a scale per output):
against float64 on the weights as stored, for a few rows (kernels/gemv.cl) and many (the
tiled GEMM; int8 widened first), the arena's layout and round trips, and the refusals."""
import numpy as np
import pytest

import dlprim as dp
from dlprim.core.quantize import dequantize_q4, quantize_q4, quantize_rows
from dlprim.errors import ParameterError
from dlprim.layers.base import LayerError
from dlprim.net.graph import GraphError
from dlprim.net.netconfig import NetConfig


def _net(ctx, rows, inputs, outputs, weights, bias=True, mode="predict"):
    cfg = NetConfig()
    cfg.add_input("x", [rows, inputs])
    params = ["fc.weight"] + (["fc.bias"] if bias else []) + \
        (["fc.weight_scale"] if weights in ("int8", "q4") else [])
    cfg.add("InnerProduct", name="fc", inputs=["x"], outputs=["y"], params=params,
            options={"outputs": outputs, "inputs": inputs, "bias": bias, "weights": weights})
    cfg.add("InnerProduct", name="fc2", inputs=["y"], outputs=["z"],
            options={"outputs": 3, "inputs": outputs})  # a float32 neighbour in the arena
    cfg.set_outputs(["z", "y"])
    return dp.Net(ctx, cfg, mode=mode)


@pytest.mark.parametrize("rows", [1, 5, 8, 9, 70])
@pytest.mark.parametrize("weights", ["float16", "bfloat16", "int8", "q4"])
def test_stored_weights_match_float64(ctx, rng, rows, weights):
    inputs, outputs = 67, 45
    net = _net(ctx, rows, inputs, outputs, weights)
    w = rng.standard_normal((outputs, inputs)).astype(np.float32)
    b = rng.standard_normal(outputs).astype(np.float32)
    if weights == "int8":
        q, scale = quantize_rows(w)
        given = {"fc.weight": q, "fc.weight_scale": scale}
        stored = q.astype(np.float64) * scale[:, None]
    elif weights == "q4":
        q, scale = quantize_q4(w)
        given = {"fc.weight": q, "fc.weight_scale": scale}
        stored = dequantize_q4(q, scale, inputs).astype(np.float64)
        np.testing.assert_allclose(stored, w, atol=np.abs(w).max() / 7)
    else:
        given = {"fc.weight": w}
        kept = dp.dtypes.bfloat16_values(dp.dtypes.to_bfloat16(w)) if weights == "bfloat16" \
            else w.astype(np.float16)
        stored = kept.astype(np.float64)
    net.set_parameters(dict(given, **{"fc.bias": b}), strict=False)
    got = net.get_parameters()
    assert got["fc.weight"].dtype == net.param("fc.weight").dtype != np.float32
    fc2 = got["fc2.0"].copy()  # the float32 neighbour is untouched by the typed writes
    x = rng.standard_normal((rows, inputs)).astype(np.float32)
    y = net(x=x)["y"]
    np.testing.assert_allclose(y, x @ stored.T + b, rtol=1e-4, atol=1e-4)
    if weights == "int8":
        np.testing.assert_allclose(stored, w, atol=np.abs(w).max() / 127)
        assert np.array_equal(got["fc.weight"], q)
    np.testing.assert_array_equal(net.get_parameters()["fc2.0"], fc2)


def test_stored_weights_refusals(ctx, rng):
    net = _net(ctx, 2, 8, 4, "int8")
    with pytest.raises(ParameterError, match="int8"):
        net.set_parameters({"fc.weight": np.full((4, 8), 200)}, strict=False)
    with pytest.raises(ParameterError, match="not integers"):
        net.set_parameters({"fc.weight": np.full((4, 8), 0.5)}, strict=False)
    net16 = _net(ctx, 2, 8, 4, "float16")
    with pytest.raises(ParameterError, match="float16"):
        net16.set_parameters({"fc.weight": np.full((4, 8), 1e6)}, strict=False)
    with pytest.raises(LayerError, match="inference"):
        _net(ctx, 2, 8, 4, "bfloat16", mode="train")
    with pytest.raises(LayerError, match="weights"):
        _net(ctx, 2, 8, 4, "int4")
    net4 = _net(ctx, 2, 8, 4, "q4")
    assert net4.param("fc.weight").shape == (4, 4) and net4.param("fc.weight_scale").shape == (4, 1)
    with pytest.raises(ParameterError, match="uint8"):
        net4.set_parameters({"fc.weight": np.full((4, 4), -1)}, strict=False)


def test_arena_layout_of_stored_weights(ctx):
    """A typed parameter takes the float32 slots its bytes fill, whole ALIGN blocks."""
    from dlprim.net.parameters import ALIGN, _slots
    assert _slots((64, 8), np.dtype(np.int8)) == ALIGN * 2
    assert _slots((3,), np.dtype(np.float16)) == ALIGN
    net = _net(ctx, 2, 256, 64, "int8", bias=False)
    layout = net.store.layout
    assert net.store.total_size == sum(_slots(s, net.store.dtypes[n])
                                       for n, (_, s, _) in layout.items())
    assert net.param("fc.weight").dtype == np.int8
    with pytest.raises(GraphError, match="must be float32"):
        from dlprim.layers.base import ParamSpec
        from dlprim.net.parameters import ParamStore

        class Op:
            name, frozen = "op", False

            def param_names(self, n, names):
                return ["w"]
        ParamStore(ctx, [Op()], [[ParamSpec((2,), np.float16, trainable=True)]])
