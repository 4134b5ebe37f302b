"""Shape, softmax, loss and resampling layers inside a Net: the gradient of the loss with
respect to a Parameter agrees with central differences of the whole net."""
import numpy as np
import pytest

import dlprim as dp


def op(name, type_name, inputs, options=None, output=None):
    return {"name": name, "type": type_name, "inputs": inputs, "outputs": [output or name],
            "options": options or {}}


CHAIN = [
    op("w", "Parameter", [], {"shape": [4, 2, 2, 2]}),
    op("cat", "Concat", ["data", "w"], {"dim": 1}),
    op("up", "Interpolation", ["cat"], {"method": "bilinear", "scale_y": 2.0, "scale_x": 2.0}),
    op("tr", "Transpose", ["up"], {"dims": [0, 2, 3, 1]}),
    op("sl", "Slice", ["tr"], {"dim": 1, "begin": 1, "end": 3}),
    op("red", "Reduction", ["sl"], {"dims": [1], "keep_dim": False, "method": "sumsq"}),
    op("fl", "Flatten", ["red"], output="red"),  # in place
    op("sm", "Softmax", ["red"], {"log": True}, output="red"),  # in place
    op("loss", "NLLLoss", ["red", "label"]),
]
XENT = [
    op("w", "Parameter", [], {"shape": [4, 1, 6, 1]}),
    op("sq", "Squeeze", ["w"], {"dims": [1, 3]}),
    op("cat", "Concat", ["sq", "data2"], {"dim": 1}),
    op("rs", "Reshape", ["cat"], {"dims": [0, -1]}),
    op("loss", "SoftmaxWithLoss", ["rs", "label"]),
]


@pytest.mark.parametrize("ops", [CHAIN, XENT], ids=["chain", "xent"])
def test_parameter_gradient_through_layers(ctx, ops):
    rng = np.random.default_rng(7)
    inputs = {}
    specs = [{"name": "label", "shape": [4], "dtype": "int"}]
    if ops is CHAIN:
        inputs["data"] = rng.standard_normal((4, 3, 2, 2)).astype(np.float32)
        specs.append({"name": "data", "shape": [4, 3, 2, 2]})
        inputs["label"] = np.array([0, 3, 5, 19], np.int32)  # classes of the 20 flattened
    else:
        inputs["data2"] = rng.standard_normal((4, 5)).astype(np.float32)
        specs.append({"name": "data2", "shape": [4, 5]})
        inputs["label"] = np.array([0, 10, 5, 7], np.int32)
    net = dp.Net(ctx, {"inputs": specs, "outputs": ["loss"], "operators": ops}, mode="train")
    w = rng.standard_normal(net.params["w.0"].shape).astype(np.float32)

    def loss(value):
        net.params["w.0"].to_device(value)
        return float(net(**inputs)["loss"][0])

    loss(w)
    net.zero_grad()
    net.backward()
    grad = net.grads["w.0"].numpy().astype(np.float64)
    assert np.abs(grad).max() > 1e-3
    eps = 1e-2
    for _ in range(3):
        v = rng.standard_normal(w.shape).astype(np.float32)
        numeric = (loss(w + eps * v) - loss(w - eps * v)) / (2 * eps)
        analytic = float((grad * v).sum())
        assert abs(numeric - analytic) <= 2e-3 * max(abs(numeric), abs(analytic), 1.0), \
            (numeric, analytic)
