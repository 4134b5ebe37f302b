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


def _train_graph(second="sigmoid"):
    conv = lambda name, src, out, c, **o: dict(name=name, type="Convolution2D", inputs=[src],
                                               outputs=[out], options=dict(channels_out=c,
                                                                           kernel=3, pad=1, **o))
    act = lambda name, src, out, a: dict(name=name, type="Activation", inputs=[src],
                                         outputs=[out], options=dict(activation=a))
    bn = lambda name, src, out, **o: dict(name=name, type="BatchNorm", inputs=[src],
                                          outputs=[out], options=o)
    return {"inputs": [{"name": "data", "shape": [4, 3, 8, 8]},
                       {"name": "label", "shape": [4], "dtype": "int32"}],
            "outputs": ["loss", "b3"],
            "operators": [
                conv("c1", "data", "x1", 8, bias=False), bn("bn1", "x1", "b1"),
                act("relu1", "b1", "b1", "relu"),                              # folds
                conv("c2", "b1", "x2", 6), bn("bn2", "x2", "b2", affine=False),
                act("sig", "b2", "b2", second),                                # folds
                conv("c3", "b2", "x3", 6), bn("bn3", "x3", "b3"),               # a net output
                act("relu3", "b3", "r3", "relu"),
                conv("c4", "r3", "x4", 5), bn("bn4", "x4", "b4"),
                act("leaky", "b4", "b4", "leaky_relu"),                        # has an option
                conv("c5", "b4", "x5", 5), bn("bn5", "x5", "b5"),
                act("relu6", "b5", "b5", "relu6"),                             # folds
                dict(name="pool", type="GlobalPooling", inputs=["b5"], outputs=["p"],
                     options=dict(mode="avg")),
                dict(name="fc", type="InnerProduct", inputs=["p"], outputs=["f"],
                     options=dict(outputs=3)),
                dict(name="loss", type="SoftmaxWithLoss", inputs=["f", "label"],
                     outputs=["loss"])]}


def _train_step(ctx, monkeypatch, enabled, precision, second):
    monkeypatch.setattr(fusion, "ENABLED", enabled)
    net = dp.Net(ctx, _train_graph(second), mode="train", seed=1, precision=precision)
    rng = np.random.default_rng(6)
    net.tensor("data").to_device(rng.standard_normal((4, 3, 8, 8)).astype(np.float32))
    net.tensor("label").to_device(np.array([0, 2, 1, 2], np.int32))
    net.forward()
    net.backward()
    grads = {name: net.param_diff(name).to_host() for name in net.get_parameters()
             if net.param_diff(name) is not None}
    return net, dict(grads, loss=net.tensor("loss").to_host(), b3=net.tensor("b3").to_host())


# fp16: relu and relu6 commute with rounding to half, so the folded net gives the same
# bits; a sigmoid computed before rounding (folded) or after (apart) would not
@pytest.mark.parametrize("kernels", ["channels", "pointwise"])
@pytest.mark.parametrize("precision, second, tol", [("fp32", "sigmoid", 1e-4),
                                                    ("fp16", "relu", 0.0)])
def test_train_folds_match_the_operators(ctx, monkeypatch, precision, second, tol, kernels):
    # BatchNorm's channel kernels (GPUs') and the generator (CPUs') run the activation in
    # train mode
    from dlprim.core import batchnorm
    monkeypatch.setattr(batchnorm, "default_kernels", lambda facts: kernels)
    plain, want = _train_step(ctx, monkeypatch, False, precision, second)
    net, got = _train_step(ctx, monkeypatch, True, precision, second)
    names = {net.graph.ops[i].name: f.activation for i, f in net.plan.act_folds.items()}
    assert names == {"bn1": "relu", "bn2": second, "bn5": "relu6"}
    assert not plain.plan.act_folds
    counts = dict(zip((op.name for op in net.graph.ops), net.plan.op_forward))
    assert counts["relu1"] == counts["sig"] == counts["relu6"] == 0
    assert counts["relu3"] > 0 and counts["leaky"] > 0
    assert want.keys() == got.keys() and len(want) > 10
    for name in want:
        scale = max(np.abs(want[name]).max(), 1e-3)
        np.testing.assert_allclose(got[name], want[name], rtol=0, atol=tol * scale, err_msg=name)
