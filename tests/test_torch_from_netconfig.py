"""benchmarks/torch_from_netconfig.py, the PyTorch side of the CPU benchmarks, runs a
dlprim NetConfig as dlprim does: same weights -> same logits, loss and BatchNorm running
statistics, so that the timings beside dlprim's are of the same net."""
import os
import sys

import numpy as np
import pytest

import dlprim as dp
from dlprim import models

torch = pytest.importorskip("torch")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "benchmarks"))
from torch_from_netconfig import TorchNet  # noqa: E402


def randomize_batchnorm(cfg, arrays, rng):
    """BatchNorm statistics and affine parameters away from their identity init, so a
    mix-up of their order or a lost BatchNorm shows in the outputs."""
    for op in cfg.operators:
        if op["type"] == "BatchNorm":
            mean, var, weight, bias = op["params"]
            c = arrays[mean].shape
            arrays[mean] = 0.1 * rng.standard_normal(c)
            arrays[var] = 0.5 + rng.random(c)
            arrays[weight] = 0.8 + 0.4 * rng.random(c)
            arrays[bias] = 0.1 * rng.standard_normal(c)
    return {k: np.asarray(v, np.float32) for k, v in arrays.items()}


def close(got, want, what, tol=1e-4):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert got.shape == want.shape, "%s: shape %s, torch %s" % (what, got.shape, want.shape)
    scale = max(np.abs(want).max(), 1e-6)
    err = np.abs(got - want).max() / scale
    assert err < tol, "%s: max error %.3g relative to max %.3g" % (what, err, scale)


def compare(ctx, cfg, inputs, mode, rng, outputs):
    """Run ``cfg`` on both sides with dlprim's (BatchNorm-randomized) weights; compare
    ``outputs`` and, in train mode, the updated running statistics."""
    cfg.set_outputs(outputs)
    net = dp.Net(ctx, cfg, mode=mode)
    arrays = randomize_batchnorm(cfg, net.get_parameters(), rng)
    net.set_parameters(arrays)
    model = TorchNet(cfg)
    model.load_parameters(arrays)
    model.train(mode == dp.TRAIN)
    got = net(**inputs)
    with torch.set_grad_enabled(mode == dp.TRAIN):
        want = model(**{k: torch.from_numpy(v) for k, v in inputs.items()})
    for name in outputs:
        close(got[name], want[name].detach().numpy(), "%s of %s" % (name, mode))
    if mode == dp.TRAIN:
        for name, t in model.tensors.items():
            if "running" in name:
                close(net.param(name).to_host(), t.numpy(), name)
    return got, want


def test_lenet_logits_and_loss(ctx, rng):
    x = rng.standard_normal((3, 1, 28, 28)).astype(np.float32)
    compare(ctx, models.lenet(batch=3, train=False), {"data": x}, dp.PREDICT, rng, ["fc2", "prob"])
    labels = np.array([1, 7, 3], np.int32)
    compare(ctx, models.lenet(batch=3, train=True), {"data": x, "label": labels}, dp.TRAIN, rng,
            ["loss", "fc2"])


@pytest.mark.parametrize("mode", [dp.PREDICT, dp.TRAIN])
def test_resnet18_at_64x64(ctx, rng, mode):
    # 64x64 keeps 2x2 values per channel in the last stage: batch statistics over fewer
    # would amplify float32 rounding
    x = rng.standard_normal((2, 3, 64, 64)).astype(np.float32)
    train = mode == dp.TRAIN
    cfg = models.resnet18(batch=2, image_size=64, classes=10, train=train)
    inputs = {"data": x, "label": np.array([3, 7], np.int32)} if train else {"data": x}
    compare(ctx, cfg, inputs, mode, rng, ["fc", "loss" if train else "prob"])


def test_mobilenet_v2_grouped_convs_and_relu6(ctx, rng):
    x = rng.standard_normal((2, 3, 32, 32)).astype(np.float32)
    compare(ctx, models.mobilenet_v2(batch=2, image_size=32, classes=10, train=False),
            {"data": x}, dp.PREDICT, rng, ["classifier.1"])


def test_the_remaining_operators_and_options(ctx, rng):
    """Options the model builders leave at their defaults: asymmetric pad, dilation,
    average pooling with and without the padding counted, ceil mode, Elementwise other
    than sum, Concat, activations with parameters, log-softmax, a bias-free InnerProduct."""
    cfg = dp.NetConfig()
    cfg.add_input("data", [2, 4, 11, 9])
    a = cfg.add("Convolution2D", name="asym", options={
        "channels_out": 6, "kernel": [3, 2], "pad": [1, 0, 2, 1], "dilate": [2, 1],
        "activation": "sigmoid"})
    b = cfg.add("Convolution2D", name="grouped", inputs=["data"], options={
        "channels_out": 6, "kernel": 3, "pad": 1, "stride": [2, 1], "groups": 2, "bias": False})
    b = cfg.add("Pooling2D", name="avg_in", options={"mode": "avg", "kernel": 3, "stride": 1,
                                                     "pad": 1, "count_include_pad": True})
    cfg.add("Pooling2D", name="avg_ceil", inputs=[a], options={
        "mode": "avg", "kernel": 3, "stride": 2, "pad": 1, "ceil_mode": True})
    a = cfg.add("Pooling2D", name="max_ceil", inputs=[a], options={"mode": "max", "kernel": 3,
                                                                   "stride": 2, "ceil_mode": True})
    pooled = cfg.add("Pooling2D", name="pool_b", inputs=[b], options={"mode": "max", "kernel": 2,
                                                                      "stride": [1, 2]})
    p = cfg.add("Elementwise", name="prod", inputs=[a, pooled],
                options={"operation": "prod", "coef1": 1.5, "activation": "tanh"})
    m = cfg.add("Elementwise", name="max", inputs=[a, pooled],
                options={"operation": "max", "coef1": 0.2, "coef2": -3.0})  # picks from both
    s = cfg.add("Elementwise", name="sub", inputs=[p, m], options={"operation": "sub"})
    c = cfg.add("Concat", name="cat", inputs=[s, m], options={"dim": 1})
    cfg.add("Activation", name="leaky", options={"activation": "leaky_relu",
                                                 "negative_slope": 0.2})
    cfg.add("Activation", name="softplus", options={"activation": "softplus", "beta": 2.0})
    cfg.add("Dropout", name="drop", options={"ratio": 0.3})
    g = cfg.add("GlobalPooling", name="gmax", inputs=[c], options={"mode": "max"})
    cfg.add("Flatten", name="flat")
    cfg.add("InnerProduct", name="fc", options={"outputs": 5, "bias": False, "activation": "relu6"})
    cfg.add("Softmax", name="logp", options={"log": True})
    x = rng.standard_normal((2, 4, 11, 9)).astype(np.float32)
    got, _ = compare(ctx, cfg, {"data": x}, dp.PREDICT, rng,
                     ["avg_in", "avg_ceil", "max_ceil", "cat", "drop", g, "logp"])
    assert got["avg_ceil"].shape == (2, 6, 6, 5)   # ceil mode kept a window the floor drops


def test_unknown_operator_is_named():
    cfg = dp.NetConfig()
    cfg.add_input("data", [1, 3])
    cfg.add("Frobnicate", name="frob")
    with pytest.raises(ValueError, match="'frob'.*'Frobnicate'"):
        TorchNet(cfg)


def test_unknown_option_is_named():
    cfg = dp.NetConfig()
    cfg.add_input("data", [1, 3])
    cfg.add("InnerProduct", name="fc", options={"outputs": 2, "bais": False})
    with pytest.raises(ValueError, match="InnerProduct 'fc': unknown options bais"):
        TorchNet(cfg)
