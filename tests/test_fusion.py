"""Predict-mode folds (net/fusion.py): convolution + BatchNorm (+ activation) run as one
convolution give what the three operators give, and only where the chain is private."""
import numpy as np
import pytest

import dlprim as dp
from dlprim.net import fusion


def _graph():
    conv = lambda name, src, out, k, **o: dict(name=name, type="Convolution2D", inputs=[src],
                                               outputs=[out], options=dict(channels_out=out_c[name],
                                                                           kernel=k, pad=k // 2, **o))
    out_c = {"c1": 8, "c4": 4, "c3": 5, "dw": 8}
    return {"inputs": [{"name": "data", "shape": [2, 3, 9, 9]}],
            "outputs": ["y2", "b3", "r3", "x4", "b4"],
            "operators": [
                conv("c1", "data", "x1", 3, bias=False),                      # -> BN -> relu
                dict(name="bn1", type="BatchNorm", inputs=["x1"], outputs=["b1"]),
                dict(name="relu1", type="Activation", inputs=["b1"], outputs=["b1"],
                     options=dict(activation="relu")),
                conv("dw", "b1", "xd", 3, groups=8),                          # grouped, bias
                dict(name="bnd", type="BatchNorm", inputs=["xd"], outputs=["bd"],
                     options=dict(affine=False)),
                dict(name="sig", type="Activation", inputs=["bd"], outputs=["y2"],
                     options=dict(activation="sigmoid")),
                conv("c3", "b1", "x3", 1),                                    # BN output is
                dict(name="bn3", type="BatchNorm", inputs=["x3"], outputs=["b3"]),  # a net output
                dict(name="relu3", type="Activation", inputs=["b3"], outputs=["r3"],
                     options=dict(activation="relu")),
                conv("c4", "b1", "x4", 3),                                    # conv output is
                dict(name="bn4", type="BatchNorm", inputs=["x4"], outputs=["b4"])]}  # an output


def _run(ctx, monkeypatch, enabled, params=None):
    monkeypatch.setattr(fusion, "ENABLED", enabled)
    net = dp.Net(ctx, _graph(), mode="predict", seed=1)
    rng = np.random.default_rng(4)
    if params is None:
        params = {}
        for name, array in net.get_parameters().items():
            shape = array.shape
            # BatchNorm's parameters: .0 running mean, .1 running variance, .2/.3 affine
            var = name.startswith("bn") and name.endswith(".1")
            params[name] = (rng.uniform(0.5, 2.0, shape) if var
                            else rng.standard_normal(shape)).astype(np.float32)
    net.set_parameters(params)
    data = np.random.default_rng(5).standard_normal((2, 3, 9, 9)).astype(np.float32)
    net.tensor("data").to_device(data)
    net.forward()
    return net, params, {o: net.tensor(o).to_host() for o in ("y2", "b3", "r3", "x4", "b4")}


def test_folds_match_the_operators(ctx, monkeypatch):
    plain, params, want = _run(ctx, monkeypatch, False)
    net, _, got = _run(ctx, monkeypatch, True, params)
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-4, atol=1e-5, err_msg=name)
    folds = net.plan.folds
    names = {net.graph.ops[i].name: (net.graph.ops[f.bn].name, f.activation)
             for i, f in folds.items()}
    # bn3's output is a net output: relu3 stays apart; c4's output is one: no fold
    assert names == {"c1": ("bn1", "relu"), "dw": ("bnd", "sigmoid"), "c3": ("bn3", "identity")}
    counts = dict(zip((op.name for op in net.graph.ops), net.plan.op_forward))
    assert counts["bn1"] == counts["relu1"] == counts["bnd"] == counts["sig"] == counts["bn3"] == 0
    assert counts["relu3"] > 0 and counts["bn4"] > 0 and not plain.plan.folds
    # the folded output is written while the convolution's input is read: apart in memory
    plan = net.plan

    def span(t):
        return t.byte_offset, t.byte_offset + t.nbytes
    for i, f in folds.items():
        out = span(plan.acts[f.out])
        for vid in net.graph.ops[i].in_values:
            x = span(plan.acts[vid])
            assert out[1] <= x[0] or x[1] <= out[0], (net.graph.ops[i].name, out, x)
    # new parameters reach the folded weights at the next forward
    params2 = dict(params, **{"bn1.0": params["bn1.0"] + 1.0})  # its running mean
    _, _, want2 = _run(ctx, monkeypatch, False, params2)
    net.set_parameters(params2)
    net.forward()
    np.testing.assert_allclose(net.tensor("y2").to_host(), want2["y2"], rtol=1e-4, atol=1e-5)


def test_no_folds_in_train_mode(ctx, monkeypatch):
    monkeypatch.setattr(fusion, "ENABLED", True)
    net = dp.Net(ctx, _graph(), mode="train", seed=1)
    assert not net.plan.folds
