"""Multi-tensor launches (core/multi_tensor.py, kernels/multi_tensor.cl) against numpy:
more groups than one launch holds, single-element inputs, half storage, sizes at the
work-group edges; the plans dlprim.torch keeps per tensor list (hits, a tensor replaced
or collected, elements that alias); ``_foreach_`` operators and fused optimizers over
more parameters than a launch holds; compiled graphs' gradients left in ``.grad``."""
import gc
import warnings

import numpy as np
import pytest

import dlprim as dp
from dlprim.core.multi_tensor import MultiTensorPlan, MultiTensorPointwise


def _tensor(ctx, a):
    t = dp.Tensor(ctx, a.shape, a.dtype)
    t.to_device(a)
    return t


SIZES = [1, 255, 256, 257, 4099, 3, 0, 70001, 17] * 4  # 36 groups: several launches


def test_groups_across_launches_match_numpy(ctx):
    rng = np.random.default_rng(0)
    op = MultiTensorPointwise(ctx, ["float32", "float32", "float32"], ["float32", "float32"],
                              "y0 = x0 * w0 + x1 * x2; y1 = x0 - x2;", params=["float32"],
                              one=[False, False, True])
    assert op.groups_per_launch < len(SIZES)
    host, groups = [], []
    for n in SIZES:
        a, b, c = (rng.standard_normal(m).astype(np.float32) for m in (n, n, 1))
        ys = [dp.Tensor(ctx, (n,), np.float32) for _ in range(2)] if n else \
            [dp.Tensor(ctx, (1,), np.float32).view((0,)) for _ in range(2)]
        groups.append(([_tensor(ctx, a), _tensor(ctx, b), _tensor(ctx, c)], ys))
        host.append((a, b, c))
    plan = MultiTensorPlan(op, groups, [2.0])
    assert len(plan.launches) == -(-sum(1 for n in SIZES if n) // op.groups_per_launch)
    for w in (2.0, -0.5):  # a new scalar re-binds the prepared launches
        plan.run([w])
        for (xs, ys), (a, b, c) in zip(groups, host):
            if a.size:
                np.testing.assert_allclose(ys[0].to_host(), a * w + b * c, rtol=1e-6, atol=1e-6)
                np.testing.assert_allclose(ys[1].to_host(), a - c, rtol=1e-6, atol=1e-6)


def test_half_storage_and_in_place(ctx):
    rng = np.random.default_rng(1)
    op = MultiTensorPointwise(ctx, ["float16", "float32"], ["float16"], "y0 = x0 + x1;")
    hs, groups = [], []
    for n in (5, 300, 1):
        a = rng.standard_normal(n).astype(np.float16)
        b = rng.standard_normal(n).astype(np.float32)
        ta = _tensor(ctx, a)
        groups.append(([ta, _tensor(ctx, b)], [ta]))  # in place: y0 is x0
        hs.append((a, b))
    op(groups)
    for (xs, ys), (a, b) in zip(groups, hs):
        np.testing.assert_array_equal(ys[0].to_host(), (a.astype(np.float32) + b).astype(np.float16))


def test_bad_groups_and_code_are_named_errors(ctx):
    op = MultiTensorPointwise(ctx, ["float32"], ["float32"], "y0 = x0;")
    a, b = dp.Tensor(ctx, (4,), np.float32), dp.Tensor(ctx, (5,), np.float32)
    with pytest.raises(ValueError, match="group 0's x0 is float32 of 4 elements, the op takes "
                                         "float32 of 5"):
        op([([a], [b])])
    with pytest.raises(ValueError, match="group 0 has 2 inputs"):
        op([([a, a], [a])])
    with pytest.raises(ValueError, match="x1 is unknown"):
        MultiTensorPointwise(ctx, ["float32"], ["float32"], "y0 = x1;")
    with pytest.raises(ValueError, match="do not compile"):
        MultiTensorPointwise(ctx, ["float32"], ["float32"], "y0 = nonsense(x0);")([([a], [a])])


# ----- through dlprim.torch
torch = pytest.importorskip("torch")
dt = pytest.importorskip("dlprim.torch")
from dlprim.torch import multi_tensor as mt  # noqa: E402


def _lists(seed, sizes):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(n, generator=g) for n in sizes]


def _same(ocl, cpu, tol=1e-6):
    for o, c in zip(ocl, cpu):
        np.testing.assert_allclose(o.cpu().numpy(), c.numpy(), rtol=tol, atol=tol)


def test_foreach_in_place_keeps_its_launches_per_tensor_list():
    sizes = [3, 1000, 17, 1, 65] * 8
    # (a stays at 1 or more, so dividing by it keeps the sums well conditioned)
    a, b = [t.abs() + 1.0 for t in _lists(0, sizes)], [t.abs() for t in _lists(1, sizes)]
    ao, bo = [t.to("ocl") for t in a], [t.to("ocl") for t in b]
    hits = mt.plans.hits
    for step in range(3):
        torch._foreach_add_(a, b, alpha=0.5)
        torch._foreach_add_(ao, bo, alpha=0.5)
        torch._foreach_addcdiv_(a, b, a, [0.25 * (step + 1)] * len(a))  # scalars that move
        torch._foreach_addcdiv_(ao, bo, ao, [0.25 * (step + 1)] * len(a))
    _same(ao, a, 1e-5)
    assert mt.plans.hits - hits == 4  # the second and third steps' two calls
    # a tensor given new memory is not run through the old launches
    ao[3].data = torch.full((1,), 7.0).to("ocl")
    a[3].data = torch.full((1,), 7.0)
    torch._foreach_mul_(ao, 2.0)
    torch._foreach_mul_(ao, 2.0)
    torch._foreach_mul_(a, 4.0)
    _same(ao, a, 1e-5)


def test_foreach_out_of_place_aliasing_and_per_element_scalars():
    sizes = [5, 300, 2] * 7
    a = _lists(2, sizes)
    ao = [t.to("ocl") for t in a]
    _same(torch._foreach_sqrt(torch._foreach_abs(ao)), torch._foreach_sqrt(torch._foreach_abs(a)))
    _same(torch._foreach_mul(ao, [float(i) for i in range(len(a))]),
          torch._foreach_mul(a, [float(i) for i in range(len(a))]))  # a scalar per element
    x, y = torch.zeros(4), torch.zeros(4).to("ocl")
    torch._foreach_add_([x, x, x], 1.0)  # one tensor three times: three additions
    torch._foreach_add_([y, y, y], 1.0)
    _same([y], [x])
    base = torch.arange(8.0).to("ocl")
    lo, hi = base[:4], base[2:6]  # overlapping views: one element reads what another writes
    torch._foreach_add_([lo, hi], [torch.ones(4).to("ocl"), lo])
    # element by element: lo += 1 -> 1 2 3 4 4 5 6 7, then hi += lo (read whole first)
    _same([base], [torch.tensor([1.0, 2, 4, 6, 7, 9, 6, 7])])


def test_foreach_lists_that_are_not_one_kernel_each_time_they_come_back():
    # each list's facts (one dtype, contiguous, its shapes) are kept while its tensors
    # are: a list that fails them must fail them on every call, a new list that passes
    # must not inherit another's verdict, and an out-of-place result's list (made
    # contiguous, of one dtype) passes through the in-place operators after it
    g = torch.Generator().manual_seed(5)
    a = [torch.randn(4, 3, generator=g) for _ in range(20)]
    b = [torch.randn(4, 3, generator=g) for _ in range(20)]
    b[7] = torch.randn(3, 4, generator=g).t()  # not contiguous
    rows = [torch.randn(3, generator=g) for _ in range(20)]  # broadcast against a
    ao, bo, ro = ([t.to("ocl") for t in x] for x in (a, b, rows))
    bo[7] = bo[7].contiguous().t().contiguous().t()  # the same values, not contiguous
    assert not bo[7].is_contiguous()
    for _ in range(3):
        _same(torch._foreach_add(ao, bo), torch._foreach_add(a, b))
        _same(torch._foreach_mul(ao, ro), torch._foreach_mul(a, rows))
        mixed = ao[:19] + [ao[19].double()]
        _same(torch._foreach_abs(mixed), torch._foreach_abs(a[:19] + [a[19].double()]))
        sq, want = torch._foreach_sqrt(torch._foreach_abs(ao)), \
            torch._foreach_sqrt(torch._foreach_abs(a))
        for x, y in ((sq, want),):
            torch._foreach_div_(x, [2.0] * 20)
            torch._foreach_div_(y, [2.0] * 20)
            torch._foreach_addcmul_(x, ao, bo, 0.5)
            torch._foreach_addcmul_(y, a, b, 0.5)
        _same(sq, want)
    c = [t.clone() for t in ao]  # contiguous, one dtype: one kernel, after b's refusal
    _same(torch._foreach_add(c, ao), torch._foreach_add(a, a))


def test_a_tensor_restrided_in_place_is_not_run_through_its_lists_old_facts():
    # t_() keeps the storage and the shape of a square tensor but not its layout: the
    # kept plan and the list's kept facts must see it (as PyTorch adds element (i, j))
    g = torch.Generator().manual_seed(6)
    a = [torch.randn(5, 5, generator=g) for _ in range(18)]
    b = [torch.randn(5, 5, generator=g) for _ in range(18)]
    ao, bo = [t.to("ocl") for t in a], [t.to("ocl") for t in b]
    for _ in range(3):  # kept by now
        torch._foreach_add_(ao, bo)
        torch._foreach_add_(a, b)
        _same(torch._foreach_mul(ao, bo), torch._foreach_mul(a, b))
    ao[4].t_()
    a[4].t_()
    assert not ao[4].is_contiguous()
    torch._foreach_add_(ao, bo)
    torch._foreach_add_(a, b)
    _same(ao, a)
    _same(torch._foreach_mul(ao, bo), torch._foreach_mul(a, b))
    bo[2].unsqueeze_(0)  # (1, 5, 5): the lists' shapes differ now, as PyTorch refuses
    with pytest.raises(RuntimeError):
        torch._foreach_add_(ao, bo)


def test_plans_go_with_their_tensors():
    a = [t.to("ocl") for t in _lists(3, [10, 20])]
    for _ in range(2):  # kept by the first call, or by the second where it replayed
        torch._foreach_mul_(a, 3.0)  # another list's recording
    gc.collect()  # plans of earlier tests' tensors left in garbage cycles go first
    before = len(mt.plans)
    del a
    gc.collect()
    assert len(mt.plans) == before - 1


@pytest.mark.parametrize("make", [
    lambda p: torch.optim.Adam(p, lr=0.01, weight_decay=1e-2, fused=True),
    lambda p: torch.optim.AdamW(p, lr=0.01, amsgrad=True, fused=True),
    lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, fused=True),
    lambda p: torch.optim.Adam(p, lr=0.01)])  # foreach
def test_optimizers_over_many_parameters_match_cpu(make):
    torch.manual_seed(0)
    layers = [torch.nn.Linear(7, 7) for _ in range(20)]  # 40 parameters: several launches
    cpu = torch.nn.Sequential(*layers)
    ocl = torch.nn.Sequential(*[torch.nn.Linear(7, 7) for _ in range(20)])
    ocl.load_state_dict(cpu.state_dict())
    ocl.to("ocl")
    opts = make(cpu.parameters()), make(ocl.parameters())
    x = torch.randn(5, 7)
    sched = [torch.optim.lr_scheduler.StepLR(o, 1, gamma=0.5) for o in opts]
    for _ in range(3):
        for model, opt, xx, s in ((cpu, opts[0], x, sched[0]), (ocl, opts[1], x.to("ocl"), sched[1])):
            opt.zero_grad()
            model(xx).square().mean().backward()
            opt.step()
            s.step()  # a learning rate that moves: the kept launches take it
    for (name, c), o in zip(cpu.state_dict().items(), ocl.state_dict().values()):
        np.testing.assert_allclose(o.cpu().numpy(), c.numpy(), rtol=1e-4, atol=1e-5, err_msg=name)


def test_compiled_gradients_land_in_grad_without_copies():
    nn = torch.nn

    def make():
        torch.manual_seed(0)
        return nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(),
                             nn.Linear(4 * 6 * 6, 5))
    ref, model = make(), make().to("ocl")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fast = dt.compile(model)
    x, y = torch.randn(2, 3, 8, 8), torch.tensor([1, 3])

    def backward(m, dev):
        nn.functional.cross_entropy(m(x.to(dev)), y.to(dev)).backward()

    def check():
        for p, r in zip(model.parameters(), ref.parameters()):
            np.testing.assert_allclose(p.grad.cpu().numpy(), r.grad.numpy(), rtol=1e-4, atol=1e-5)
    backward(ref, "cpu"), backward(fast, "ocl")
    check()
    grads = [p.grad for p in model.parameters()]
    backward(ref, "cpu"), backward(fast, "ocl")  # no zero_grad: the second adds up
    check()
    assert all(p.grad is g for p, g in zip(model.parameters(), grads))  # the same views
    ref.zero_grad(set_to_none=False), model.zero_grad(set_to_none=False)
    backward(ref, "cpu"), backward(fast, "ocl")
    check()
    # torch.autograd.grad returns the gradients and leaves .grad alone
    held = [p.grad.cpu().clone() for p in model.parameters()]
    got = torch.autograd.grad(nn.functional.cross_entropy(fast(x.to("ocl")), y.to("ocl")),
                              list(model.parameters()))
    want = torch.autograd.grad(nn.functional.cross_entropy(ref(x), y), list(ref.parameters()))
    for g, w, p, h in zip(got, want, model.parameters(), held):
        np.testing.assert_allclose(g.cpu().numpy(), w.numpy(), rtol=1e-4, atol=1e-5)
        np.testing.assert_array_equal(p.grad.cpu().numpy(), h.numpy())
    # a parameter with a hook gets its gradient through autograd, hook called
    ref.zero_grad(), model.zero_grad()
    seen = []
    next(model.parameters()).register_hook(lambda g: seen.append(tuple(g.shape)))
    backward(ref, "cpu"), backward(fast, "ocl")
    check()
    assert seen == [(4, 3, 3, 3)]


def test_foreach_over_fresh_tensors_replays_the_first_calls_launches():
    """An optimizer's gradients are new tensors every step: the launches recorded by the
    first call of a signature are replayed over each step's own tensors with that step's
    scalars; a call whose tensors repeat in another pattern (an element reading another
    element's output) does not take that recording."""
    sizes = [7, 130, 1, 65]
    state, cpu_state = [t.to("ocl") for t in _lists(4, sizes)], _lists(4, sizes)
    for step in range(4):
        grads = _lists(10 + step, sizes)
        torch._foreach_lerp_(state, [g.to("ocl") for g in grads], 0.1 * (step + 1))
        torch._foreach_lerp_(cpu_state, grads, 0.1 * (step + 1))
        _same(state, cpu_state, 1e-6)
    # the same sizes, but x of element i is y of element i + 1: one element reads what
    # another writes, which the recorded pattern never had
    ys = [t.to("ocl") for t in _lists(20, [4, 4])]
    cpu = _lists(20, [4, 4])
    others = _lists(21, [4, 4])
    torch._foreach_add_(ys, [t.to("ocl") for t in others])  # recorded: four tensors apart
    torch._foreach_add_(cpu, others)
    torch._foreach_add_(ys, [ys[1], ys[0]])
    torch._foreach_add_(cpu, [cpu[1], cpu[0]])
    _same(ys, cpu, 1e-6)


def test_foreach_over_fresh_views_of_one_buffer_replays_and_checks_overlap(monkeypatch):
    """Gradients that are views of one buffer (a Net's gradient memory) and change objects
    every step replay the first call's launches, each view at its own place; views that
    overlap in a later call are not run at once."""
    sizes = [6, 40, 3]
    ends = np.cumsum([0] + sizes)
    flat_cpu = torch.randn(int(ends[-1]), generator=torch.Generator().manual_seed(5))
    flat = flat_cpu.to("ocl")
    state_cpu = _lists(6, sizes)
    state = [t.to("ocl") for t in state_cpu]
    built = []
    plan = mt.MultiTensorPlan
    monkeypatch.setattr(mt, "MultiTensorPlan", lambda *a: built.append(1) or plan(*a))
    for step in range(3):
        views = [flat[ends[i]:ends[i + 1]] for i in range(len(sizes))]  # new objects
        views_cpu = [flat_cpu[ends[i]:ends[i + 1]] for i in range(len(sizes))]
        torch._foreach_addcmul_(state, views, views, 0.5)
        torch._foreach_addcmul_(state_cpu, views_cpu, views_cpu, 0.5)
        _same(state, state_cpu, 1e-6)
        flat.mul_(1.5)
        flat_cpu.mul_(1.5)
    assert len(built) == 1  # prepared by the first step, replayed by the others
    # the outputs as views of one buffer, the second shifted onto the first from the
    # next call on: a replay must not run them at once
    base = torch.arange(12.0).to("ocl")
    base_cpu = torch.arange(12.0)
    for shift in (6, 3):
        ys = [base[0:6], base[shift:shift + 6]]
        ys_cpu = [base_cpu[0:6], base_cpu[shift:shift + 6]]
        torch._foreach_add_(ys, [torch.ones(6).to("ocl")] * 2)
        for y in ys_cpu:
            y.add_(torch.ones(6))
        _same([base], [base_cpu])


def test_a_replayed_recording_is_kept_for_its_tensors():
    """Tensors of sizes recorded before (by other tensors) replay that recording; a list
    that comes back is kept, and later calls over these very tensors take the kept replay."""
    sizes = [4, 9, 30]
    first = [t.to("ocl") for t in _lists(30, sizes)]
    torch._foreach_mul_(first, 1.5)  # records the launches over these sizes
    mine, cpu = [t.to("ocl") for t in _lists(31, sizes)], _lists(31, sizes)
    hits = mt.plans.hits
    for _ in range(4):
        torch._foreach_mul_(mine, 1.5)
        torch._foreach_mul_(cpu, 1.5)
    assert mt.plans.hits - hits == 2  # kept at the second call, taken by the third and fourth
    _same(mine, cpu)


def test_out_of_place_temporaries_replay_in_place_and_free_their_memory(monkeypatch):
    """AdamW's pattern: ``_foreach_sqrt`` makes new tensors every step, which in-place
    operators then change. They are views of one allocation, which the pool hands back
    to the next step, so from the third step on a step replays on kernels that keep
    their arguments and sets none of them; none of their memory outlives them."""
    import pyopencl as cl
    from dlprim.torch import device as ocl_device
    sizes = [5, 70, 1, 300]
    state_cpu = [t.abs() for t in _lists(40, sizes)]
    state = [t.to("ocl") for t in state_cpu]
    memory = ocl_device.context(0).memory
    calls = []
    for name in ("set_arg", "set_args"):
        real = getattr(cl.Kernel, name)
        monkeypatch.setattr(cl.Kernel, name,
                            lambda self, *a, _real=real, _name=name: calls.append(_name) or
                            _real(self, *a))
    for step in range(5):
        calls.clear()
        gc.collect()
        before = memory.bytes_in_use
        roots = torch._foreach_sqrt(state)
        assert len({r.untyped_storage().data_ptr() for r in roots}) == 1  # one allocation
        torch._foreach_add_(roots, 0.5 + step)
        got = [r.cpu() for r in roots]
        want = torch._foreach_add(torch._foreach_sqrt(state_cpu), 0.5 + step)
        _same(got, want, 1e-6)
        if step >= 2:
            assert calls.count("set_args") == 0, calls  # only the changed scalar, if any
        del roots, got
        gc.collect()
        assert memory.bytes_in_use == before, (step, before, memory.bytes_in_use)


def _params(dtype=torch.float32):
    torch.manual_seed(0)
    sizes = [(7, 9), (9,), (5, 7), (5,), (3, 5), (3,)]
    cpu = [torch.randn(s, dtype=dtype, requires_grad=True) for s in sizes]
    return cpu, [p.detach().to("ocl").requires_grad_() for p in cpu]


def _steps(make, params, device, steps=3):
    opt = make(params)
    g = torch.Generator().manual_seed(1)
    for _ in range(steps):
        for p in params:
            p.grad = torch.randn(p.shape, generator=g, dtype=p.dtype).to(device)
        opt.step()
    return [p.detach().cpu() for p in params]


@pytest.mark.parametrize("make", [
    lambda p: torch.optim.AdamW(p, lr=0.01, weight_decay=0.1, amsgrad=True),
    lambda p: torch.optim.Adam(p, lr=0.01, amsgrad=True, maximize=True),
    lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, nesterov=True, weight_decay=1e-3),
    lambda p: torch.optim.RMSprop(p, lr=0.01, momentum=0.5, centered=True),
    lambda p: torch.optim.Adagrad(p, lr=0.1),
    lambda p: torch.optim.NAdam(p, lr=0.01),
    lambda p: torch.optim.RAdam(p, lr=0.01),
    lambda p: torch.optim.Adamax(p, lr=0.01)], ids=[
    "adamw-amsgrad", "adam-amsgrad-maximize", "sgd-nesterov", "rmsprop-centered", "adagrad",
    "nadam", "radam", "adamax"])
def test_foreach_optimizers_match_the_cpu(make):
    # torch.optim's default (foreach) path over parameters of several shapes; amsgrad's
    # _foreach_maximum_ has no in-place single-tensor operator (maximum into self)
    cpu, ocl = _params()
    for want, got in zip(_steps(make, cpu, "cpu"), _steps(make, ocl, "ocl")):
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=2e-5, atol=2e-6)


def test_foreach_maximum_and_minimum_write_into_self():
    a, b = _lists(2, [5, 300, 2] * 3), _lists(3, [5, 300, 2] * 3)
    ao, bo = [t.to("ocl") for t in a], [t.to("ocl") for t in b]
    torch._foreach_maximum_(ao, bo)
    torch._foreach_maximum_(a, b)
    _same(ao, a)
    torch._foreach_minimum_(bo, [t * 0.5 for t in ao])
    torch._foreach_minimum_(b, [t * 0.5 for t in a])
    _same(bo, b)


@pytest.mark.parametrize("make", [
    lambda p, **k: torch.optim.Adam(p, lr=0.01, **k),
    lambda p, **k: torch.optim.AdamW(p, lr=0.01, amsgrad=True, **k),
    lambda p, **k: torch.optim.NAdam(p, lr=0.01, **k),
    lambda p, **k: torch.optim.RAdam(p, lr=0.01, **k),
    lambda p, **k: torch.optim.ASGD(p, lr=0.01, **k)], ids=["adam", "adamw-amsgrad", "nadam",
                                                            "radam", "asgd"])
def test_capturable_optimizers_keep_their_step_on_the_device(make):
    # capturable=True: the step counts are ocl tensors, the bias corrections
    # _foreach_pow(beta, steps) (a scalar first) and ASGD's _foreach_maximum_(steps, 1.0);
    # the CPU, which takes no capturable step, as reference
    cpu, ocl = _params()
    want = _steps(lambda p: make(p, foreach=True), cpu, "cpu")
    got = _steps(lambda p: make(p, foreach=True, capturable=True), ocl, "ocl")
    for w, g in zip(want, got):
        np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=2e-5, atol=2e-6)


def test_foreach_with_a_scalar_first_or_a_number_to_compare():
    a = _lists(4, [5, 300, 2])
    a[2][0] = float("nan")  # maximum and minimum keep a NaN
    ao = [t.to("ocl") for t in a]
    _same(torch._foreach_pow(0.9, ao), torch._foreach_pow(0.9, a))
    for f in (torch._foreach_maximum, torch._foreach_minimum):
        for other in (0.2, [0.1, -0.3, 0.5]):
            got, want = f(ao, other), f(a, other)
            for g, w in zip(got, want):
                np.testing.assert_allclose(g.cpu().numpy(), w.numpy(), rtol=1e-6)
            ai, aoi = [t.clone() for t in a], [t.clone() for t in ao]
            getattr(torch, f.__name__ + "_")(ai, other)
            getattr(torch, f.__name__ + "_")(aoi, other)
            for g, w in zip(aoi, ai):
                np.testing.assert_allclose(g.cpu().numpy(), w.numpy(), rtol=1e-6)
