"""Solvers against torch.optim: 100 steps from the same weights and gradients."""
import numpy as np
import pytest

import dlprim as dp
from dlprim import solvers

torch = pytest.importorskip("torch", reason="PyTorch (test extra) is the reference")

SHAPES = {"conv.weight": (4, 3, 3, 3), "conv.bias": (4,), "fc.weight": (5, 33), "fc.bias": (5,)}


class ArenaNet:
    """The part of a Net that solvers use: flat parameter and gradient arenas."""

    def __init__(self, ctx, rng, frozen_tail=7):
        self.ctx = ctx
        self.param_layout, offset = {}, 0
        for name, shape in SHAPES.items():
            self.param_layout[name] = (offset, shape, True)
            offset += int(np.prod(shape))
        self.trainable_size = offset
        self.tail = rng.standard_normal(frozen_tail).astype(np.float32)  # e.g. running stats
        self.init = rng.standard_normal(offset).astype(np.float32)
        self.param_arena = dp.Tensor.from_numpy(ctx, np.concatenate([self.init, self.tail]))
        self.grad_arena = dp.Tensor.zeros(ctx, (offset + frozen_tail,))

    def zero_grad(self):
        self.grad_arena.zero_()

    def set_grads(self, g):
        full = np.concatenate([g, np.full(len(self.tail), 9.0, np.float32)])
        self.grad_arena.to_device(full)

    def params(self):
        return self.param_arena.numpy()


def torch_params(net):
    out = []
    for name, (offset, shape, _) in net.param_layout.items():
        n = int(np.prod(shape))
        out.append(torch.nn.Parameter(torch.tensor(net.init[offset:offset + n].reshape(shape))))
    return out


def run_both(ctx, make_ours, make_theirs, steps=100, clip_norm=None, clip_value=None, seed=0,
             no_decay=None):
    rng = np.random.default_rng(seed)
    net = ArenaNet(ctx, rng)
    tparams = torch_params(net)
    ours = make_ours(net)
    theirs = make_theirs(tparams) if no_decay is None else make_theirs(
        [{"params": [p for p, n in zip(tparams, SHAPES) if len(SHAPES[n]) > 1]},
         {"params": [p for p, n in zip(tparams, SHAPES) if len(SHAPES[n]) <= 1],
          "weight_decay": 0.0}])
    for _ in range(steps):
        g = rng.standard_normal(net.trainable_size).astype(np.float32)
        net.set_grads(g)
        ours.step()
        for p, (name, (offset, shape, _)) in zip(tparams, net.param_layout.items()):
            p.grad = torch.tensor(g[offset:offset + int(np.prod(shape))].reshape(shape))
        if clip_norm:
            torch.nn.utils.clip_grad_norm_(tparams, clip_norm)
        if clip_value:
            torch.nn.utils.clip_grad_value_(tparams, clip_value)
        theirs.step()
    expected = np.concatenate([p.detach().numpy().ravel() for p in tparams])
    got = net.params()
    # float32 rounding differs in order between the two; parameters are O(1)
    np.testing.assert_allclose(got[:net.trainable_size], expected, rtol=1e-5, atol=1e-5)
    assert np.array_equal(got[net.trainable_size:], net.tail), "a frozen parameter moved"
    return ours, net


SGD_CASES = [dict(), dict(momentum=0.9), dict(momentum=0.9, dampening=0.3),
             dict(momentum=0.9, nesterov=True), dict(momentum=0.5, weight_decay=0.01)]


@pytest.mark.parametrize("kw", SGD_CASES, ids=lambda kw: ",".join(kw) or "plain")
def test_sgd_matches_torch(ctx, kw):
    run_both(ctx, lambda n: dp.solvers.SGD(n, lr=0.01, **kw),
             lambda p: torch.optim.SGD(p, lr=0.01, **kw))


ADAM_CASES = [dict(), dict(weight_decay=0.01), dict(amsgrad=True), dict(beta1=0.5, beta2=0.9, eps=1e-6)]


@pytest.mark.parametrize("kw", ADAM_CASES, ids=lambda kw: ",".join(kw) or "plain")
@pytest.mark.parametrize("kind", ["Adam", "AdamW"])
def test_adam_matches_torch(ctx, kind, kw):
    tkw = {k: v for k, v in kw.items() if k not in ("beta1", "beta2")}
    if "beta1" in kw:
        tkw["betas"] = (kw["beta1"], kw["beta2"])
    run_both(ctx, lambda n: getattr(solvers, kind)(n, lr=1e-2, **kw),
             lambda p: getattr(torch.optim, kind)(p, lr=1e-2, **tkw))


def test_clipping_by_norm_and_value(ctx):
    run_both(ctx, lambda n: dp.solvers.SGD(n, lr=0.01, momentum=0.9, clip_norm=0.5),
             lambda p: torch.optim.SGD(p, lr=0.01, momentum=0.9), clip_norm=0.5, steps=20)
    run_both(ctx, lambda n: dp.solvers.Adam(n, lr=0.01, clip_value=0.3),
             lambda p: torch.optim.Adam(p, lr=0.01), clip_value=0.3, steps=20)


def test_no_decay_group(ctx):
    run_both(ctx, lambda n: dp.solvers.AdamW(n, lr=0.01, weight_decay=0.1,
                                             no_decay=solvers.no_decay_1d),
             lambda groups: torch.optim.AdamW(groups, lr=0.01, weight_decay=0.1),
             steps=20, no_decay=True)


def test_state_save_and_resume(ctx, tmp_path):
    rng = np.random.default_rng(5)
    grads = [rng.standard_normal(sum(int(np.prod(s)) for s in SHAPES.values())).astype(np.float32)
             for _ in range(10)]

    def train(net, opt, gs):
        for g in gs:
            net.set_grads(g)
            opt.step()

    whole = ArenaNet(ctx, np.random.default_rng(1))
    opt = dp.solvers.Adam(whole, lr=0.01)
    train(whole, opt, grads)

    first = ArenaNet(ctx, np.random.default_rng(1))
    opt1 = dp.solvers.Adam(first, lr=0.01)
    train(first, opt1, grads[:4])
    opt1.save_state(tmp_path / "solver.npz")
    second = ArenaNet(ctx, np.random.default_rng(1))
    second.param_arena.to_device(first.params())
    opt2 = dp.solvers.Adam(second, lr=0.5)
    opt2.load_state(tmp_path / "solver.npz")
    assert opt2.lr == 0.01 and opt2.step_count == 4
    train(second, opt2, grads[4:])
    assert np.array_equal(second.params(), whole.params())


@pytest.mark.parametrize("kind,kw,msg", [
    ("SGD", dict(lr=-1), "lr must be >= 0, got -1"),
    ("Adam", dict(beta1=1.0), "beta1 must be < 1, got 1.0"),
    ("Adam", dict(beta2=-0.1), "beta2 must be >= 0, got -0.1"),
    ("AdamW", dict(eps=0), "eps must be > 0"),
    ("SGD", dict(nesterov=True), "nesterov"),
    ("SGD", dict(lr=0.1, momentum=-1), "momentum must be >= 0"),
])
def test_invalid_hyperparameters(ctx, kind, kw, msg):
    with pytest.raises(ValueError, match=msg):
        getattr(solvers, kind)(ctx, **kw)
    with pytest.raises(TypeError, match="unknown hyperparameter"):
        solvers.SGD(ctx, learning_rate=0.1)


def test_dlprimitives_style_attributes(ctx):
    sgd = dp.solvers.SGD(ctx)
    sgd.lr, sgd.momentum = 0.5, 0.9
    net = ArenaNet(ctx, np.random.default_rng(3))
    sgd.init(net)
    g = np.ones(net.trainable_size, np.float32)
    net.set_grads(g)
    sgd.apply(net)
    np.testing.assert_allclose(net.params()[:net.trainable_size], net.init - 0.5, rtol=1e-6)


def test_dlprimitives_style_step_on_a_real_net(ctx):
    from dlprim import models
    net = dp.Net(ctx, models.mlp(batch=4, inputs=12, hidden=(8,), classes=3), mode="train")
    e = ctx.make_execution_context()
    adam = dp.Adam(ctx)
    adam.lr = 0.05
    adam.init(net, e)
    rng = np.random.default_rng(0)
    net.tensor("data").to_device(rng.standard_normal((4, 12)).astype(np.float32))
    net.tensor("label").to_device(np.array([0, 1, 2, 1], net.tensor("label").dtype))
    losses = []
    for _ in range(20):
        adam.step(net, e)          # zero_grad + forward + backward + apply
        losses.append(float(net.tensor("loss").numpy()[0]))
    assert losses[-1] < 0.5 * losses[0]
    assert adam.step_count == 20


RESUME_SCRIPT = r"""
import sys, numpy as np, dlprim as dp
from dlprim import models
ctx = dp.Context(sys.argv[1])
net = dp.Net(ctx, models.mlp(batch=4, inputs=12, hidden=(8,), classes=3), mode="train", seed=1)
opt = dp.AdamW(net, lr=0.01)
if sys.argv[2] != "-":
    net.load_parameters(sys.argv[2] + "/w.dlp")
    opt.load_state(sys.argv[2] + "/s.npz")
rng = np.random.default_rng(int(sys.argv[3]))
for _ in range(int(sys.argv[4])):
    net.tensor("data").to_device(rng.standard_normal((4, 12)).astype(np.float32))
    net.tensor("label").to_device(rng.integers(0, 3, 4).astype(net.tensor("label").dtype))
    opt.zero_grad(); net.forward(); net.backward(); opt.step()
net.save_parameters(sys.argv[5] + "/w.dlp")
opt.save_state(sys.argv[5] + "/s.npz")
"""


def test_resume_in_a_fresh_process_matches_an_uninterrupted_run(ctx, tmp_path):
    import subprocess
    import sys
    from dlprim.net import weights

    def run(*args):
        out = subprocess.run([sys.executable, "-c", RESUME_SCRIPT, ctx.device_string] +
                             [str(a) for a in args], capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr

    for d in ("whole", "a", "b"):
        (tmp_path / d).mkdir()
    run("-", 7, 6, tmp_path / "whole")
    # the same stream of batches cut in two: the second process skips what the first used
    run("-", 7, 3, tmp_path / "a")
    script_b = RESUME_SCRIPT.replace("rng = np.random.default_rng(int(sys.argv[3]))",
                                     "rng = np.random.default_rng(int(sys.argv[3]))\n"
                                     "[(rng.standard_normal((4, 12)), rng.integers(0, 3, 4)) for _ in range(3)]")
    out = subprocess.run([sys.executable, "-c", script_b, ctx.device_string, str(tmp_path / "a"),
                          "7", "3", str(tmp_path / "b")], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    whole, resumed = weights.load(tmp_path / "whole" / "w.dlp"), weights.load(tmp_path / "b" / "w.dlp")
    for k in whole:
        assert np.array_equal(whole[k], resumed[k]), k
