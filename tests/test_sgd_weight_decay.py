"""SGD's weight_decay_mode="dlprimitives" against a numpy transcription of DLPrimitives'
SGD update (include/dlprim/solvers/sgd.hpp: two AXPBY calls, z = a x + b y):

    v <- 1 * g + momentum * v          (v starts at zero)
    p <- (1 - wd) * p + (-lr) * v
"""
import json

import numpy as np
import pytest

import dlprim as dp
from dlprim import solvers
from dlprim.train.config import ConfigError, validate_config

SHAPES = {"fc.weight": (5, 7), "fc.bias": (5,)}


class ArenaNet:
    """What a solver reads of a Net: flat parameter and gradient arenas, a layout."""

    def __init__(self, ctx, init):
        self.ctx = ctx
        self.param_layout, offset = {}, 0
        for name, shape in SHAPES.items():
            self.param_layout[name] = (offset, shape, True)
            offset += int(np.prod(shape))
        self.trainable_size = offset
        self.param_arena = dp.Tensor.from_numpy(ctx, init)
        self.grad_arena = dp.Tensor.zeros(ctx, (offset,))

    def zero_grad(self):
        self.grad_arena.zero_()


def dlprimitives_sgd(p, grads, lr, momentum, wd, decay_mask=None):
    """DLPrimitives' SGD::apply per step, in float32 as its kernels compute."""
    p, v = p.copy(), np.zeros_like(p)
    f = np.float32
    shrink = f(1) - f(wd) * (np.ones_like(p) if decay_mask is None else decay_mask)
    for g in grads:
        v = f(1.0) * g + f(momentum) * v
        p = shrink * p + f(-lr) * v
    return p


def torch_rule_sgd(p, grads, lr, momentum, wd):
    """PyTorch's rule (decay through the gradient), to show the two differ."""
    p, v = p.copy(), np.zeros_like(p)
    for g in grads:
        v = momentum * v + (g + wd * p)
        p = p - lr * v
    return p


def run_dlprim(ctx, init, grads, **kw):
    net = ArenaNet(ctx, init)
    opt = dp.SGD(net, weight_decay_mode="dlprimitives", **kw)
    for g in grads:
        net.grad_arena.to_device(g)
        opt.step()
    return net.param_arena.numpy()


@pytest.mark.parametrize("kw", [dict(lr=0.1, momentum=0.9, weight_decay=0.0005),
                                dict(lr=0.05, momentum=0.0, weight_decay=0.02),
                                dict(lr=0.01, momentum=0.5, weight_decay=0.1)],
                         ids=["dlprimitives-defaults", "no-momentum", "strong-decay"])
def test_dlprimitives_decay_matches_its_update(ctx, kw):
    rng = np.random.default_rng(0)
    n = sum(int(np.prod(s)) for s in SHAPES.values())
    init = rng.standard_normal(n).astype(np.float32)
    grads = [rng.standard_normal(n).astype(np.float32) for _ in range(30)]
    got = run_dlprim(ctx, init, grads, **kw)
    lr, momentum, wd = kw["lr"], kw["momentum"], kw["weight_decay"]
    expected = dlprimitives_sgd(init, grads, lr, momentum, wd)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    # the test can tell the rules apart: PyTorch's ends elsewhere
    other = torch_rule_sgd(init, grads, lr, momentum, wd)
    assert np.abs(other - expected).max() > 100 * np.abs(got - expected).max() + 1e-4


def test_no_decay_rule_and_a_live_mode_switch(ctx):
    rng = np.random.default_rng(1)
    n = sum(int(np.prod(s)) for s in SHAPES.values())
    init = rng.standard_normal(n).astype(np.float32)
    grads = [rng.standard_normal(n).astype(np.float32) for _ in range(10)]
    net = ArenaNet(ctx, init)
    opt = dp.SGD(net, lr=0.1, momentum=0.9, weight_decay=0.05, no_decay=solvers.no_decay_1d)
    opt.weight_decay_mode = "dlprimitives"  # a scalar of the launch: no rebuild needed
    for g in grads:
        net.grad_arena.to_device(g)
        opt.step()
    mask = np.zeros(n, np.float32)
    mask[:35] = 1.0  # fc.weight decays, fc.bias (1-D) does not
    expected = dlprimitives_sgd(init, grads, 0.1, 0.9, 0.05, mask)
    np.testing.assert_allclose(net.param_arena.numpy(), expected, rtol=1e-5, atol=1e-6)


def test_pytorch_mode_is_the_default(ctx):
    rng = np.random.default_rng(2)
    n = sum(int(np.prod(s)) for s in SHAPES.values())
    init = rng.standard_normal(n).astype(np.float32)
    grads = [rng.standard_normal(n).astype(np.float32) for _ in range(10)]
    net = ArenaNet(ctx, init)
    opt = dp.SGD(net, lr=0.05, momentum=0.9, weight_decay=0.1)
    assert opt.weight_decay_mode == "pytorch"
    for g in grads:
        net.grad_arena.to_device(g)
        opt.step()
    np.testing.assert_allclose(net.param_arena.numpy(),
                               torch_rule_sgd(init, grads, 0.05, 0.9, 0.1), rtol=1e-5, atol=1e-5)


def test_bad_mode_is_named(ctx):
    with pytest.raises(ValueError, match=r'weight_decay_mode must be "pytorch" or "dlprimitives"'):
        dp.SGD(ctx, weight_decay_mode="caffe")
    with pytest.raises(TypeError, match="unknown hyperparameter weight_decay_mode"):
        dp.Adam(ctx, weight_decay_mode="dlprimitives")


def test_training_config_accepts_the_mode(tmp_path):
    net = {"inputs": [{"name": "data", "shape": [4, 3]}, {"name": "label", "shape": [4], "dtype": "int"}],
           "outputs": ["loss"],
           "operators": [{"name": "fc", "type": "InnerProduct", "inputs": ["data"], "outputs": ["fc"],
                          "options": {"outputs": 3}},
                         {"name": "loss", "type": "SoftmaxWithLoss", "inputs": ["fc", "label"],
                          "outputs": ["loss"]}]}
    np.savez(str(tmp_path / "d.npz"), x=np.zeros((8, 3), np.float32), y=np.arange(8) % 3)
    raw = {"net": {"graph": net}, "data": {"train": {"type": "npz", "path": "d.npz", "num_classes": 3}},
           "solver": {"type": "sgd", "lr": 0.1, "momentum": 0.9, "weight_decay": 5e-4,
                      "weight_decay_mode": "dlprimitives"}}
    cfg = validate_config(json.loads(json.dumps(raw)), str(tmp_path))
    assert cfg["solver"]["weight_decay_mode"] == "dlprimitives"
    raw["solver"]["weight_decay_mode"] = "other"
    with pytest.raises(ConfigError, match="solver.weight_decay_mode"):
        validate_config(raw, str(tmp_path))
    raw["solver"] = {"type": "adam", "weight_decay_mode": "dlprimitives"}
    with pytest.raises(ConfigError, match="weight_decay_mode"):
        validate_config(raw, str(tmp_path))
    # and create_solver (what the trainer calls) passes it on
    ctx = dp.Context()
    opt = solvers.create_solver(ArenaNet(ctx, np.zeros(40, np.float32)),
                                {"type": "sgd", "weight_decay_mode": "dlprimitives"})
    assert opt.weight_decay_mode == "dlprimitives"


def test_states_keep_the_mode_and_older_ones_resume(ctx, tmp_path):
    net = ArenaNet(ctx, np.ones(40, np.float32))
    opt = dp.SGD(net, momentum=0.9, weight_decay=0.1, weight_decay_mode="dlprimitives")
    opt.save_state(str(tmp_path / "sgd.npz"))
    other = dp.SGD(net)
    other.load_state(str(tmp_path / "sgd.npz"))
    assert other.weight_decay_mode == "dlprimitives"
    state = opt.state_dict()
    del state["hyper"]["weight_decay_mode"]  # as saved before the mode existed
    other.load_state_dict(state)
    assert other.weight_decay_mode == "pytorch" and other.weight_decay == 0.1
    state["hyper"]["weight_decay_mode"] = "caffe"
    with pytest.raises(ValueError, match="weight_decay_mode"):
        other.load_state_dict(state)
