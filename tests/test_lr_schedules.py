"""Each schedule's learning-rate sequence matches PyTorch's scheduler of the same name."""
import numpy as np
import pytest

from dlprim import lr_schedules as schedules

torch = pytest.importorskip("torch", reason="PyTorch (test extra) is the reference")


class FakeSolver:
    def __init__(self, lr=0.1, momentum=0.9, beta1=None):
        self.lr, self.momentum = lr, momentum
        if beta1 is not None:
            self.beta1 = beta1


def torch_sequence(make, steps, lr=0.1, optim="sgd", metrics=None):
    p = torch.nn.Parameter(torch.zeros(1))
    opt = (torch.optim.SGD([p], lr=lr, momentum=0.9) if optim == "sgd"
           else torch.optim.Adam([p], lr=lr))
    sched = make(opt)
    out = [opt.param_groups[0]["lr"]]
    moms = [opt.param_groups[0].get("momentum", opt.param_groups[0].get("betas", (None,))[0])]
    for i in range(steps):
        opt.step()
        sched.step(metrics[i]) if metrics is not None else sched.step()
        g = opt.param_groups[0]
        out.append(g["lr"])
        moms.append(g.get("momentum", g.get("betas", (None,))[0]))
    return np.array(out), moms


def ours_sequence(make, steps, solver, metrics=None):
    sched = make(solver)
    out = [solver.lr]
    moms = [getattr(solver, "beta1", getattr(solver, "momentum", None))]
    for i in range(steps):
        sched.step(metrics[i]) if metrics is not None else sched.step()
        out.append(solver.lr)
        moms.append(getattr(solver, "beta1", getattr(solver, "momentum", None)))
    return np.array(out), moms


CASES = [
    ("step", lambda o: torch.optim.lr_scheduler.StepLR(o, 3, 0.5),
     lambda s: schedules.StepLR(s, 3, 0.5)),
    ("multistep", lambda o: torch.optim.lr_scheduler.MultiStepLR(o, [2, 5, 9], 0.3),
     lambda s: schedules.MultiStepLR(s, [2, 5, 9], 0.3)),
    ("exponential", lambda o: torch.optim.lr_scheduler.ExponentialLR(o, 0.9),
     lambda s: schedules.ExponentialLR(s, 0.9)),
    ("cosine", lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, 7, 0.001),
     lambda s: schedules.CosineLR(s, 7, 0.001)),
]


@pytest.mark.parametrize("name,theirs,ours", CASES, ids=[c[0] for c in CASES])
def test_matches_torch(name, theirs, ours):
    steps = 12 if name != "cosine" else 7
    expected, _ = torch_sequence(theirs, steps)
    got, _ = ours_sequence(ours, steps, FakeSolver())
    np.testing.assert_allclose(got, expected, rtol=1e-9)


@pytest.mark.parametrize("optim", ["sgd", "adam"])
def test_onecycle_matches_torch_with_momentum(optim):
    total = 20
    expected, exp_m = torch_sequence(
        lambda o: torch.optim.lr_scheduler.OneCycleLR(o, max_lr=0.5, total_steps=total), total - 1,
        optim=optim)
    solver = FakeSolver() if optim == "sgd" else FakeSolver(beta1=0.9)
    got, got_m = ours_sequence(lambda s: schedules.OneCycleLR(s, 0.5, total), total - 1, solver)
    np.testing.assert_allclose(got, expected, rtol=1e-9)
    np.testing.assert_allclose(np.array(got_m, float), np.array(exp_m, float), rtol=1e-9)


def test_plateau_matches_torch():
    metrics = [1.0, 0.9, 0.95, 0.95, 0.95, 0.95, 0.8, 0.8, 0.8, 0.8, 0.8, 0.8, 0.8]
    expected, _ = torch_sequence(
        lambda o: torch.optim.lr_scheduler.ReduceLROnPlateau(o, factor=0.5, patience=2, cooldown=1),
        len(metrics), metrics=metrics)
    got, _ = ours_sequence(lambda s: schedules.ReduceLROnPlateau(s, factor=0.5, patience=2, cooldown=1),
                           len(metrics), FakeSolver(), metrics=metrics)
    np.testing.assert_allclose(got, expected, rtol=1e-12)
    assert got[-1] < got[0]


def test_cosine_warmup_rises_then_anneals():
    s = FakeSolver(lr=1.0)
    sched = schedules.CosineLR(s, T_max=10, warmup=5)
    lrs = [s.lr] + [sched.step() for _ in range(15)]
    assert lrs[0] == 0.0 and abs(lrs[5] - 1.0) < 1e-12 and abs(lrs[15]) < 1e-12
    assert all(a < b for a, b in zip(lrs[:5], lrs[1:6]))


def test_state_round_trip_resumes_the_sequence():
    a = FakeSolver()
    sa = schedules.ReduceLROnPlateau(a, patience=0)
    for m in (1.0, 2.0, 3.0):
        sa.step(m)
    b = FakeSolver()
    sb = schedules.ReduceLROnPlateau(b, patience=0)
    sb.load_state_dict(sa.state_dict())
    assert sb.step(4.0) == sa.step(4.0) and b.lr == a.lr


def test_create_schedule_and_errors():
    s = FakeSolver()
    assert isinstance(schedules.create_schedule(s, {"type": "step", "step_size": 2}), schedules.StepLR)
    with pytest.raises(ValueError, match="unknown 'nope'"):
        schedules.create_schedule(s, {"type": "nope"})
    with pytest.raises(ValueError, match="step_size must be > 0"):
        schedules.StepLR(s, 0)
    with pytest.raises(ValueError, match="metric"):
        schedules.ReduceLROnPlateau(s).step()
