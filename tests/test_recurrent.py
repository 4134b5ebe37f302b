"""LSTM and GRU against torch.nn.LSTM / torch.nn.GRU run in float64 with the same weights:
outputs, final states, input, initial-state and every parameter gradient over the option
combinations; finite differences of dlprim's own gradients; dropout between layers
against masks drawn from the numpy Philox stream; PyTorch's state dict loaded into a Net;
option and shape errors; and a sequence classifier that learns."""
import json
import zlib

import numpy as np
import pytest

import dlprim as dp
from dlprim.core import recurrent as recurrent_core
from dlprim.core.random import counters, philox_uniform
from dlprim.layers import LayerError, TensorSpec, create
import layer_check
from layer_check import assert_close, run_layer

torch = pytest.importorskip("torch")

L, N, I, H = 5, 3, 7, 33  # H = 33 crosses a work-group edge of 32


def torch_module(cell, opts, params=None):
    """The float64 torch twin of a layer with options ``opts`` (dlprim's names), holding
    ``params`` (a list in the layer's order) or its own initial weights."""
    m = getattr(torch.nn, cell)(opts.get("input_size", I), opts["hidden_size"],
                                num_layers=opts.get("num_layers", 1), bias=opts.get("bias", True),
                                batch_first=opts.get("batch_first", False),
                                bidirectional=opts.get("bidirectional", False)).double()
    if params is not None:
        with torch.no_grad():
            for p, a in zip(m.parameters(), params):
                p.copy_(torch.from_numpy(np.asarray(a, np.float64)))
    return m


def torch_outputs(m, cell, xs, count):
    """The module's first ``count`` outputs (y, h_n, c_n) for inputs x[, h_0[, c_0]]."""
    if len(xs) == 1:
        y, state = m(xs[0])
    else:
        y, state = m(xs[0], tuple(xs[1:]) if cell == "LSTM" else xs[1])
    states = list(state) if cell == "LSTM" else [state]
    return ([y] + states)[:count]


def reference(cell, opts, params, xs, dys):
    """(outputs, input gradients, parameter gradients) of the float64 torch twin for the
    loss sum(output * dy)."""
    m = torch_module(cell, opts, params)
    tx = [torch.tensor(np.asarray(x, np.float64), requires_grad=True) for x in xs]
    outs = torch_outputs(m, cell, tx, len(dys))
    loss = sum((o * torch.from_numpy(np.asarray(d, np.float64))).sum() for o, d in zip(outs, dys))
    loss.backward()
    return ([o.detach().numpy() for o in outs], [t.grad.numpy() for t in tx],
            [p.grad.numpy() for p in m.parameters()])


def random_case(rng, cell, opts, states, outputs):
    """Inputs, float32 parameters (torch's initialisation) and output gradients."""
    layers = opts.get("num_layers", 1) * (2 if opts.get("bidirectional") else 1)
    hidden = opts["hidden_size"]
    shape = (N, L, I) if opts.get("batch_first") else (L, N, I)
    xs = [rng.standard_normal(shape).astype(np.float32)]
    for _ in range(states):
        xs.append(rng.standard_normal((layers, N, hidden)).astype(np.float32))
    params = [p.detach().numpy().astype(np.float32) for p in torch_module(cell, opts).parameters()]
    y_shape = shape[:2] + (hidden * (2 if opts.get("bidirectional") else 1),)
    dys = [rng.standard_normal(y_shape).astype(np.float32)]
    dys += [rng.standard_normal((layers, N, hidden)).astype(np.float32)
            for _ in range(outputs - 1)]
    return xs, params, dys


# (num_layers, bidirectional, batch_first, bias, initial states given, outputs, accumulate)
CASES = [(1, False, False, True, False, 1, False),
         (1, True, False, True, True, 2, True),
         (1, False, True, False, True, 3, False),
         (2, False, False, True, True, 3, True),
         (2, True, True, True, False, 2, False),
         (2, True, False, False, True, 1, True),
         (3, False, True, True, False, 3, False),
         (2, True, True, True, True, 3, True)]


def one_launch_groups(ctx):
    """Work-groups of the one-launch time loop under test: 1 anywhere (a CPU runtime may
    run work-groups one after another), 3 on GPUs (H = 33: 11 units each, crossing
    work-groups at every barrier)."""
    return 3 if ctx.facts.is_gpu and not ctx.facts.is_cpu else 1


@pytest.fixture(params=["default", "one launch", "two launches a step"])
def time_loop(request, ctx, monkeypatch):
    """Each case runs with the device's own choice of time loop (on CPUs a launch a step,
    the hidden product inside the gate kernel), with the whole loop in one launch
    (``core/recurrent_persistent.py``) and with a GEMM and a gate launch a step, forced."""
    if request.param == "one launch":
        real = recurrent_core.persistent_plan
        groups = one_launch_groups(ctx)
        monkeypatch.setattr(recurrent_core, "persistent_plan",
                            lambda c, cell, n, h, g=None: real(c, cell, n, h, groups))
    if request.param == "two launches a step":
        monkeypatch.setattr(recurrent_core, "persistent_plan", lambda *a: None)
        monkeypatch.setattr(recurrent_core, "fuses_steps", lambda ctx, hidden: False)
    return request.param


def check_time_loop(layer, time_loop):
    """The passes take the loop asked for (a forced loop that fell back to another would
    test nothing)."""
    passes = [p for ps in layer.passes for p in ps]
    if time_loop == "one launch":
        assert all(p.persistent is not None for p in passes)
        # nothing of the step-per-launch loop is built beside it
        assert all(p.recur is None and p.recur_back is None and not p.fused for p in passes)
    elif time_loop == "two launches a step":
        assert all(p.persistent is None and not p.fused and p.recur is not None for p in passes)
    elif layer.ctx.facts.is_cpu:  # fused where the units fill whole vectors
        fused = passes[0].H % recurrent_core.fused_vector(layer.ctx) == 0
        assert all(p.fused == fused and (p.recur is None) == fused for p in passes)


def run_case(ctx, rng, cell, hidden, layers, bidir, batch_first, bias, given, outputs, acc):
    """A layer of the options run forward and backward on a random case: (opts, inputs,
    parameters, output gradients, outputs taken, layer, run)."""
    opts = {"hidden_size": hidden, "num_layers": layers, "bidirectional": bidir,
            "batch_first": batch_first, "bias": bias}
    states = (2 if cell == "LSTM" else 1) if given else 0
    outputs = min(outputs, 3 if cell == "LSTM" else 2)
    xs, params, dys = random_case(rng, cell, opts, states, outputs)
    layer = create(ctx, cell, "rnn", opts, num_outputs=outputs)
    r = run_layer(ctx, layer, xs, params=params, dy=dys, accumulate=acc)
    return opts, xs, params, dys, outputs, layer, r


def check_against_reference(cell, opts, params, xs, dys, r):
    """A layer run ``r``'s outputs and every gradient against the float64 torch twin's;
    returns the twin's outputs."""
    want_y, want_dx, want_dp = reference(cell, opts, params, xs, dys)
    for i, (got, want) in enumerate(zip(r.y, want_y)):
        assert_close(got, want, rtol=1e-4, atol=2e-5, what="output %d" % i)
    for i, (got, want) in enumerate(zip(r.dx, want_dx)):
        assert_close(got, want, rtol=1e-3, atol=1e-4, what="input %d gradient" % i)
    names = [n for n, _ in torch_module(cell, opts).named_parameters()]
    for name, got, want in zip(names, r.dparams, want_dp):
        assert_close(got, want, rtol=1e-3, atol=1e-4, what=name)
    return want_y


@pytest.mark.parametrize("cell", ["LSTM", "GRU"])
@pytest.mark.parametrize("layers,bidir,batch_first,bias,given,outputs,acc", CASES)
def test_matches_pytorch(ctx, rng, time_loop, cell, layers, bidir, batch_first, bias, given,
                         outputs, acc):
    opts, xs, params, dys, outputs, layer, r = run_case(
        ctx, rng, cell, H, layers, bidir, batch_first, bias, given, outputs, acc)
    check_time_loop(layer, time_loop)
    want_y = check_against_reference(cell, opts, params, xs, dys, r)
    # predict mode gives the same outputs and saves nothing
    p = run_layer(ctx, create(ctx, cell, "rnn", opts, num_outputs=outputs), xs, params=params,
                  mode="predict")
    assert not p.layer.setup([TensorSpec(x.shape) for x in xs]).saved
    for i, (got, want) in enumerate(zip(p.y, want_y)):
        assert_close(got, want, rtol=1e-4, atol=2e-5, what="predict output %d" % i)


def test_fused_step_rows_and_gate_passes():
    """The fused step's rows a work-item (up to 8, the power of two that holds the batch)
    and gates a pass (16 sums live with 16-float vectors, 8 with 8-float ones)."""
    assert [recurrent_core.fused_rows(n) for n in (1, 2, 3, 6, 8, 11, 64)] == [1, 2, 4, 8, 8, 8, 8]
    assert recurrent_core.fused_gates("lstm", 8, 16) == 2
    assert recurrent_core.fused_gates("gru", 8, 16) == 2
    assert recurrent_core.fused_gates("lstm", 4, 16) == 4
    assert recurrent_core.fused_gates("gru", 2, 16) == 3
    assert recurrent_core.fused_gates("lstm", 8, 8) == 1
    assert recurrent_core.fused_gates("lstm", 4, 8) == 2


@pytest.mark.parametrize("cell", ["LSTM", "GRU"])
@pytest.mark.parametrize("layers,bidir,batch_first,bias,given,outputs,acc",
                         [CASES[1], CASES[3], CASES[7], CASES[2]])
# a part of a block of rows (4 rows, every gate a pass with vectors of 16); a part of 8
# rows (the gates in passes of 2 or 1); a block of 8 and a part
@pytest.mark.parametrize("batch", [3, 6, 11])
@pytest.mark.parametrize("vec", [8, 16])  # AVX2's vectors and AVX-512's, on any CPU
def test_fused_step_matches_pytorch(ctx, rng, monkeypatch, cell, layers, bidir, batch_first,
                                    bias, given, outputs, acc, batch, vec):
    # one launch a step, the hidden product inside the gate kernel on vectors of units
    # (CPUs' default where the units fill whole vectors; forced here on any device):
    # 32 units are whole vectors of 8 and of 16
    if vec > ctx.facts.max_float_vector:
        pytest.skip("this device's compiler takes vectors of up to %d floats"
                    % ctx.facts.max_float_vector)
    monkeypatch.setattr(recurrent_core, "persistent_plan", lambda *a: None)
    monkeypatch.setattr(recurrent_core, "fuses_steps", lambda ctx, hidden: True)
    monkeypatch.setattr(recurrent_core, "fused_vector", lambda ctx: vec)
    monkeypatch.setitem(globals(), "N", batch)  # random_case's batch
    opts, xs, params, dys, outputs, layer, r = run_case(
        ctx, rng, cell, 32, layers, bidir, batch_first, bias, given, outputs, acc)
    passes = [p for ps in layer.passes for p in ps]
    assert all(p.fused and p.recur is None and p.vec == vec for p in passes)
    check_against_reference(cell, opts, params, xs, dys, r)
    with pytest.raises(ValueError, match="multiples of"):  # forced on units that do not
        recurrent_core.RecurrentPass(ctx, cell.lower(), 3, 2, 4, 33, fused=True)


@pytest.mark.parametrize("cell", ["LSTM", "GRU"])
def test_gradients_match_finite_differences(ctx, time_loop, cell):
    """dlprim's backward against central differences of its own float32 forward along
    random directions, for the input, the initial state and one weight per kind."""
    rng = np.random.default_rng(5)
    opts = {"hidden_size": 4, "num_layers": 2, "bidirectional": True, "input_size": 3}
    x = rng.standard_normal((3, 2, 3)).astype(np.float32)
    h0 = rng.standard_normal((4, 2, 4)).astype(np.float32)
    xs = [x, h0] + ([0.5 * h0] if cell == "LSTM" else [])
    params = [rng.uniform(-0.5, 0.5, p.shape).astype(np.float32)
              for p in torch_module(cell, opts).parameters()]
    dy = [rng.standard_normal((3, 2, 8)).astype(np.float32),
          rng.standard_normal((4, 2, 4)).astype(np.float32)]

    def loss(xs_, ps_):
        r = run_layer(ctx, create(ctx, cell, "rnn", opts, num_outputs=2), xs_, params=ps_)
        return sum(float(np.sum(y.astype(np.float64) * d)) for y, d in zip(r.y, dy))

    r = run_layer(ctx, create(ctx, cell, "rnn", opts, num_outputs=2), xs, params=params, dy=dy)
    eps = 1e-2
    checks = [("x", 0, None), ("h_0", 1, None), ("weight_ih_l1", None, 4), ("bias_hh_l0", None, 3),
              ("weight_hh_l0_reverse", None, 5)]
    for what, i, j in checks:
        group, grads, k = (xs, r.dx, i) if i is not None else (params, r.dparams, j)
        v = rng.standard_normal(group[k].shape).astype(np.float32)
        plus, minus = list(group), list(group)
        plus[k], minus[k] = group[k] + eps * v, group[k] - eps * v
        if i is not None:
            numeric = (loss(plus, params) - loss(minus, params)) / (2 * eps)
        else:
            numeric = (loss(xs, plus) - loss(xs, minus)) / (2 * eps)
        analytic = float(np.sum(grads[k].astype(np.float64) * v))
        assert abs(numeric - analytic) <= 2e-3 * max(abs(numeric), 1.0), (what, numeric, analytic)


@pytest.mark.parametrize("cell", ["LSTM", "GRU"])
@pytest.mark.parametrize("batch,hidden,weights", [(40, 33, "local"), (40, 33, "local/staged"),
                                                 (3, 70, "stream"), (5, 36, "stream"),
                                                 (6, 70, "stream"), (1, 9, "local"),
                                                 (6, 36, "local/async"), (65, 7, "local/split"),
                                                 (65, 7, "stream/split")])
def test_one_launch_time_loop_at_its_edges(ctx, rng, monkeypatch, cell, batch, hidden,
                                           weights):
    """The one-launch loop against float64 where its work-items take several batch rows
    (40 rows of 33 units: 8 a work-item), with the backward's dh_prev summed from every
    work-group's share ("local") or staged as the forward does ("local/staged"), with
    W_hh's slices staged round by round beside the rows ("stream": 70 and 36 columns,
    a multiple of 4 and not), at one row, and with the forward's rounds copied ahead
    into three stages ("local/async": cp.async on NVIDIA GPUs, emulated elsewhere; rounds
    of 8 columns, so that the stages turn over), and with the forward taking 4 rows a
    work-item where the backward takes 2 ("local/split", "stream/split": 65 rows, two
    plans)."""
    from dlprim.core import recurrent_persistent as rp
    real = recurrent_core.persistent_plan
    groups = one_launch_groups(ctx)

    def forced(c, cell_, n, h, g=None):
        p = real(c, cell_, n, h, groups)
        for q in {p, p.backward_plan}:
            q.use_weights(weights.split("/")[0])
            if weights.endswith("/staged"):
                q.sums = False
        if weights.endswith("/async"):
            p.stages, p.kc = 3, 8
        return p
    monkeypatch.setattr(recurrent_core, "persistent_plan", forced)
    build, stages = rp.program.get, set()

    def get(c, name, **params):
        stages.add(params.get("ASYNC", 0))
        return build(c, name, **params)
    monkeypatch.setattr(rp.program, "get", get)
    if weights.endswith("/async"):  # rows of h on 16 bytes, as a Net's arena places them
        monkeypatch.setattr(layer_check, "PAD", 8)
    opts = {"hidden_size": hidden, "bidirectional": True, "input_size": 6}
    states = 2 if cell == "LSTM" else 1
    xs = [rng.standard_normal((4, batch, 6)).astype(np.float32)]
    xs += [rng.standard_normal((2, batch, hidden)).astype(np.float32) for _ in range(states)]
    params = [p.detach().numpy().astype(np.float32) for p in torch_module(cell, opts).parameters()]
    outputs = 1 + states
    dys = [rng.standard_normal((4, batch, 2 * hidden)).astype(np.float32)]
    dys += [rng.standard_normal((2, batch, hidden)).astype(np.float32) for _ in range(states)]
    layer = create(ctx, cell, "rnn", opts, num_outputs=outputs)
    r = run_layer(ctx, layer, xs, params=params, dy=dys)
    plans = [p.persistent for ps in layer.passes for p in ps]
    assert all(p is not None and p.weights == weights.split("/")[0] for p in plans)
    # the backward sums every work-group's share where W_hh is local, unless told to stage
    assert all(p.backward_plan.sums == (weights in ("local", "local/async", "local/split"))
               for p in plans)
    split = [(p.rows, p.backward_plan.rows) for p in plans if p.backward_plan is not p]
    assert split == ([(4, 2)] * len(plans) if weights.endswith("/split") else [])
    assert (3 in stages) == weights.endswith("/async")
    if batch == 40 and groups == 1:
        assert plans[0].rows > 1
    want_y, want_dx, want_dp = reference(cell, opts, params, xs, dys)
    for i, (got, want) in enumerate(zip(r.y, want_y)):
        assert_close(got, want, rtol=1e-4, atol=2e-5, what="output %d" % i)
    for i, (got, want) in enumerate(zip(r.dx, want_dx)):
        assert_close(got, want, rtol=1e-3, atol=1e-4, what="input %d gradient" % i)
    for i, (got, want) in enumerate(zip(r.dparams, want_dp)):
        assert_close(got, want, rtol=1e-3, atol=1e-4, what="parameter %d gradient" % i)


def test_one_launch_plan_is_for_gpus(ctx):
    """CPUs keep a launch per step (their runtimes may run work-groups one after another:
    a grid barrier would wait for ever); a forced single work-group runs anywhere."""
    from dlprim.core import recurrent_persistent as rp
    auto = rp.plan(ctx, "lstm", 4, 16)
    if ctx.facts.is_cpu:
        assert auto is None
    forced = rp.plan(ctx, "lstm", 4, 16, groups=1)
    assert forced is not None and forced.groups == 1 and forced.units == 16
    assert rp.plan(ctx, "gru", 4096, 16, groups=1) is None  # rows beyond a work-group
    ps = dp.core.recurrent.RecurrentPass(ctx, "lstm", 3, 4, 5, 16, persistent=False)
    assert ps.persistent is None



def test_one_launch_plan_tries_the_larger_local_memory_first(ctx, monkeypatch):
    """On NVIDIA GPUs a plan first takes the local memory their kernels may really hold
    (more than the 48 KiB the driver reports: hidden 1024's W_hh slices then stay in it),
    and falls back to the reported size where that plan's probe fails."""
    from dlprim.core import recurrent_persistent as rp
    reported = 48 * 1024
    small = rp.PersistentPlan(ctx, "lstm", 64, 1024, groups=128, local_bytes=reported)
    large = rp.PersistentPlan(ctx, "lstm", 64, 1024, groups=128,
                              local_bytes=rp.LARGE_LOCAL_BYTES)
    assert (small.weights, large.weights) == ("stream", "local")
    monkeypatch.setattr(ctx.facts, "vendor_id", "nvidia")
    monkeypatch.setattr(ctx.facts, "local_mem", reported)
    monkeypatch.setattr(ctx.facts, "compute_units", 132)  # (an H200's)
    monkeypatch.setattr(rp, "_real_gpu", lambda c: True)
    monkeypatch.setattr(rp, "_async_copies", lambda c: False)
    monkeypatch.setitem(ctx.__dict__, "_persistent_rnn", {})  # (the probes' memo, faked)
    probed = []

    def probe(c, p):
        probed.append(p.local_bytes)
        return p.local_bytes == reported  # the larger plan does not build here
    monkeypatch.setattr(rp, "_probe", probe)
    got = rp.plan(ctx, "lstm", 64, 1024)
    assert probed[:2] == [rp.LARGE_LOCAL_BYTES, reported] and got.local_bytes == reported
    assert got.weights == "stream"
    monkeypatch.setattr(rp, "_probe", lambda c, p: True)
    assert rp.plan(ctx, "gru", 64, 1024).local_bytes == rp.LARGE_LOCAL_BYTES
    # forced work-groups (tests) and other vendors keep the reported size
    assert rp._local_sizes(ctx, 1) == (reported,)
    monkeypatch.setattr(ctx.facts, "vendor_id", "amd")
    assert rp._local_sizes(ctx, None) == (reported,)

def dropout_reference(opts, params, x, keep_masks, p):
    """A stack of one-layer torch LSTMs with the given masks on the inputs of layers 1..;
    returns (y, dx, parameter gradients) for the loss sum(y * dy) with dy = cos(y index)."""
    tx = torch.tensor(x.astype(np.float64), requires_grad=True)
    per, grads, h = 2 + 2 * opts.get("bias", True), [], tx
    mods = []
    for l in range(opts["num_layers"]):
        sub = dict(opts, num_layers=1, input_size=h.shape[-1])
        m = torch_module("LSTM", sub, params[l * per:(l + 1) * per])
        mods.append(m)
        if l:
            h = h * torch.from_numpy(keep_masks[l - 1].astype(np.float64)) / (1 - p)
        h = m(h)[0]
    dy = np.cos(np.arange(h.numel())).reshape(h.shape)
    (h * torch.from_numpy(dy)).sum().backward()
    for m in mods:
        grads += [q.grad.numpy() for q in m.parameters()]
    return h.detach().numpy(), tx.grad.numpy(), grads, dy.astype(np.float32)


def test_dropout_between_layers_follows_the_philox_stream(ctx, rng):
    p, seed, name = 0.3, 17, "stack"
    opts = {"hidden_size": 9, "num_layers": 3, "dropout": p, "seed": seed}
    x = rng.standard_normal((L, N, I)).astype(np.float32)
    params = [q.detach().numpy().astype(np.float32)
              for q in torch_module("LSTM", opts).parameters()]
    layer = create(ctx, "LSTM", name, opts)
    key = (zlib.crc32(name.encode()) << 32) | seed
    size = L * N * 9

    def keep(step):  # the masks of layers 1 and 2: the step's two fills of the stream
        return [philox_uniform(size, seed=key, offset=(2 * step + k) * counters(size))
                .reshape(L, N, 9) >= np.float32(p) for k in range(2)]
    for step in range(2):  # each training step draws the next masks
        masks = keep(step)
        want_y, want_dx, want_dp, dy = dropout_reference(opts, params, x, masks, p)
        r = run_layer(ctx, layer, [x], params=params, dy=[dy])
        assert_close(r.y[0], want_y, rtol=1e-4, atol=2e-5, what="train output, step %d" % step)
        assert_close(r.dx[0], want_dx, rtol=1e-3, atol=1e-4, what="dx, step %d" % step)
        for i, (got, want) in enumerate(zip(r.dparams, want_dp)):
            assert_close(got, want, rtol=1e-3, atol=1e-4, what="parameter %d" % i)
    # a fresh layer of the same name and seed starts the same stream again
    again = run_layer(ctx, create(ctx, "LSTM", name, opts), [x], params=params)
    first = dropout_reference(opts, params, x, keep(0), p)
    assert_close(again.y[0], first[0], rtol=1e-4, atol=2e-5, what="the first step again")
    # predict mode drops nothing
    pred = run_layer(ctx, create(ctx, "LSTM", name, opts), [x], params=params, mode="predict")
    with torch.no_grad():
        plain = torch_module("LSTM", opts, params).eval()(torch.tensor(x.astype(np.float64)))[0]
    assert_close(pred.y[0], plain.numpy(), rtol=1e-4, atol=2e-5, what="predict output")


def test_a_net_loads_pytorchs_state_dict(ctx, rng):
    opts = {"hidden_size": 6, "num_layers": 2, "bidirectional": True, "batch_first": True}
    twin = torch_module("GRU", dict(opts, input_size=4))
    cfg = dp.NetConfig()
    cfg.add_input("x", [N, L, 4])
    cfg.add("GRU", name="encoder.gru", inputs=["x"], outputs=["y", "h_n"], options=opts)
    cfg.set_outputs(["y", "h_n"])
    net = dp.Net(ctx, cfg, mode=dp.PREDICT)
    state = {"encoder.gru." + k: v.numpy().astype(np.float32) for k, v in twin.state_dict().items()}
    assert list(net.get_parameters()) == list(state)
    net.set_parameters(state)
    x = rng.standard_normal((N, L, 4)).astype(np.float32)
    out = net(x=x)
    with torch.no_grad():
        y, h_n = twin(torch.tensor(x.astype(np.float64)))
    assert_close(out["y"], y.numpy(), rtol=1e-4, atol=2e-5, what="y")
    assert_close(out["h_n"], h_n.numpy(), rtol=1e-4, atol=2e-5, what="h_n")


def test_a_sequence_classifier_learns(ctx):
    """Whether a sequence's sum is positive, from an LSTM's final state: a few dozen Adam
    steps reach high accuracy on sequences it has not seen."""
    steps, batch, hidden = 12, 32, 16
    cfg = dp.NetConfig()
    cfg.add_input("data", [batch, steps, 1])
    cfg.add_input("label", [batch], "int")
    cfg.add("LSTM", name="lstm", inputs=["data"], outputs=["seq", "h_n"],
            options={"hidden_size": hidden, "batch_first": True})
    cfg.add("Reshape", name="last", inputs=["h_n"], outputs=["feat"],
            options={"dims": [-1, hidden]})
    cfg.add("InnerProduct", name="fc", inputs=["feat"], outputs=["logits"], options={"outputs": 2})
    cfg.add("SoftmaxWithLoss", name="loss", inputs=["logits", "label"], outputs=["loss"])
    cfg.set_outputs(["loss", "logits"])
    net = dp.Net(ctx, cfg, seed=0)
    solver = dp.solvers.Adam(net, lr=0.03)
    data = np.random.default_rng(0)

    def batch_of_sums():
        x = data.standard_normal((batch, steps, 1)).astype(np.float32)
        return x, (x.sum((1, 2)) > 0).astype(np.int32)
    for _ in range(50):
        x, label = batch_of_sums()
        solver.zero_grad(net)
        net(data=x, label=label)
        net.backward()
        solver.apply(net)
    net.mode = dp.PREDICT
    right = 0
    for _ in range(4):
        x, label = batch_of_sums()
        right += int((net(data=x, label=label)["logits"].argmax(1) == label).sum())
    assert right / (4 * batch) > 0.9


def test_errors_name_the_fault(ctx):
    good = {"hidden_size": 4}
    for opts, match in [({}, "option 'hidden_size' must be a positive int"),
                        ({"hidden_size": 4.0}, "'hidden_size' must be a positive int"),
                        ({"hidden_size": 4, "num_layers": 0},
                         "'num_layers' must be a positive int"),
                        ({"hidden_size": 4, "dropout": 1.0}, "'dropout' must be a probability"),
                        ({"hidden_size": 4, "dropout": -0.1}, "'dropout' must be a probability"),
                        ({"hidden_size": 4, "bidirectional": "yes"}, "'bidirectional' must be"),
                        ({"hidden_size": 4, "hiden": 3}, "unknown option 'hiden'")]:
        with pytest.raises(LayerError, match="LSTM 'r': .*" + match):
            create(ctx, "LSTM", "r", opts)
    with pytest.raises(LayerError, match=r"GRU 'r': input must be \(L, N, input_size\), got "
                                         r"shape \(5, 7\)"):
        create(ctx, "GRU", "r", good).setup([TensorSpec((5, 7))])
    with pytest.raises(LayerError, match="input has 7 features .* option 'input_size' is 6"):
        create(ctx, "GRU", "r", dict(good, input_size=6)).setup([TensorSpec((5, 3, 7))])
    with pytest.raises(LayerError, match=r"h_0 must be .* = \(2, 3, 4\), got \(1, 3, 4\)"):
        create(ctx, "GRU", "r", dict(good, num_layers=2)).setup(
            [TensorSpec((5, 3, 7)), TensorSpec((1, 3, 4))])
    with pytest.raises(LayerError, match=r"c_0 must be .* = \(2, 3, 4\), got \(2, 4, 4\)"):
        create(ctx, "LSTM", "r", dict(good, bidirectional=True)).setup(
            [TensorSpec((5, 3, 7)), TensorSpec((2, 3, 4)), TensorSpec((2, 4, 4))])
    with pytest.raises(LayerError, match="x, or x and the initial states h_0 and c_0; got 2"):
        create(ctx, "LSTM", "r", good).setup([TensorSpec((5, 3, 7)), TensorSpec((1, 3, 4))])
    with pytest.raises(LayerError, match="1 to 2 outputs, the graph lists 3"):
        create(ctx, "GRU", "r", good, num_outputs=3).setup([TensorSpec((5, 3, 7))])
    layer = create(ctx, "LSTM", "r", good)
    layer.setup([TensorSpec((5, 3, 7))])
    with pytest.raises(LayerError, match="input has 8 features .* set up for 7"):
        layer.setup([TensorSpec((5, 3, 8))])
    opts = {"hidden_size": 4, "num_layers": 2, "bidirectional": True, "batch_first": True,
            "bias": False, "dropout": 0.25, "seed": 3, "input_size": 7}
    again = create(ctx, "GRU", "r", json.loads(json.dumps(create(ctx, "GRU", "r", opts).config())))
    assert again.config() == dict(opts)
