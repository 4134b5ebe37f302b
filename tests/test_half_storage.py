"""Precision "fp16": layers on float16 activations against their float32 selves, the
Net's Casts, and the loss scale (net/mixed_precision.py).

Each layer runs twice on the same values: once stored as half, once as float32 (the
half values widened), so the only difference is the rounding of what the half run
stores; the float32 layers are checked against float64 elsewhere. Half keeps 11
significant bits: outputs and input gradients must agree within a few units of 2^-11
of the largest value, parameter gradients (float32 sums of half products) likewise.
"""
import numpy as np
import pytest

import dlprim as dp
from dlprim.layers import LayerError, create
from dlprim.net.mixed_precision import LossScale
from dlprim.dtypes import bfloat16, to_bfloat16
from layer_check import host, run_layer, stored

H, F = np.float16, np.float32


def near(actual, expected, tol, what, floor=0.0):
    """Within ``tol`` of the largest expected value (or of ``floor``, if larger)."""
    actual, expected = np.asarray(actual, np.float64), np.asarray(expected, np.float64)
    assert actual.shape == expected.shape, what
    scale = max(np.abs(expected).max(), floor, 1e-6)
    err = np.abs(actual - expected).max() / scale
    assert err <= tol, "%s: error %.3g of the largest value, allowed %.3g" % (what, err, tol)


LAYERS = [
    ("Convolution2D", dict(channels_out=5, kernel=3, pad=1, activation="relu"), [(3, 3, 7, 9)]),
    ("Convolution2D", dict(channels_out=6, kernel=3, stride=2, pad=1, groups=2, bias=False),
     [(2, 4, 9, 8)]),
    ("Convolution2D", dict(channels_out=16, kernel=1), [(2, 8, 5, 5)]),
    # CPUs take im2col for the layers above; the implicit GEMM's 16-bit kernels, forced
    ("Convolution2D", dict(channels_out=5, kernel=3, stride=2, pad=1, fwd_algo="gemm",
                           bwd_data_algo="gemm", bwd_filter_algo="gemm"), [(2, 3, 9, 8)]),
    ("Convolution2D", dict(channels_out=7, kernel=3, pad=1, fwd_algo="winograd",
                           bwd_data_algo="winograd", bwd_filter_algo="winograd"),
     [(2, 5, 9, 11)]),
    ("Convolution2D", dict(channels_out=6, kernel=5, pad=2, fwd_algo="winograd4",
                           bwd_data_algo="winograd2", bwd_filter_algo="winograd4"),
     [(2, 4, 9, 8)]),
    ("Convolution2D", dict(channels_out=12, kernel=3, stride=2, pad=1, groups=6, bias=False,
                           activation="relu6"), [(2, 6, 9, 10)]),  # depthwise
    ("TransposedConvolution2D", dict(channels_out=4, kernel=3, stride=2, pad=1), [(2, 6, 5, 4)]),
    ("BatchNorm", {}, [(3, 5, 4, 6)]),
    ("Activation", dict(activation="relu"), [(3, 5, 7)]),
    ("Activation", dict(activation="tanh"), [(3, 5, 7)]),
    ("Elementwise", dict(operation="sum", coef1=0.5), [(2, 6, 5, 5), (1, 6, 1, 1)]),
    ("Elementwise", dict(operation="prod"), [(2, 3, 17), (2, 3, 17)]),
    ("Pooling2D", dict(mode="max", kernel=3, stride=2, pad=1), [(2, 3, 11, 13)]),
    ("Pooling2D", dict(mode="avg", kernel=2, stride=2), [(2, 3, 12, 16)]),
    ("GlobalPooling", dict(mode="avg"), [(2, 5, 6, 7)]),
    ("GlobalPooling", dict(mode="max"), [(2, 5, 6, 7)]),
    ("Flatten", {}, [(2, 3, 4, 5)]),
    ("Concat", dict(dim=1), [(2, 3, 5), (2, 4, 5)]),
    ("Transpose", dict(dims=[0, 2, 1]), [(2, 3, 5)]),
    ("InnerProduct", dict(outputs=37, activation="relu"), [(19, 3, 5, 5)]),
    ("InnerProduct", dict(outputs=6, bias=False), [(70, 300)]),
    ("MatMul", dict(transpose_b=True, alpha=0.5), [(2, 3, 17, 9), (2, 3, 13, 9)]),
    ("MatMul", {}, [(4, 17, 9), (9, 5)]),  # B's gradient summed over the batch
    ("LayerNorm", {}, [(2, 5, 33)]),
    ("RMSNorm", dict(normalized_dims=2), [(2, 5, 33)]),
    ("GroupNorm", dict(groups=2), [(2, 6, 5, 3)]),
    # q, k, v and an additive mask over (batch, key); the gradients added through the
    # layer's 16-bit workspace
    ("ScaledDotProductAttention", dict(causal=True),
     [(2, 2, 9, 8), (2, 2, 12, 8), (2, 2, 12, 4), (2, 1, 1, 12)]),
]


# the 16-bit storages and their tolerances (output, input gradient, parameter gradient):
# bfloat16 keeps 8 significant bits, 3 fewer than half, so 8x half's
HALVES = {"float16": (np.dtype(H), (2e-3, 4e-3, 2e-3)),
          "bfloat16": (bfloat16, (1.6e-2, 3.2e-2, 1.6e-2))}


def representable(values, half):
    """``values`` (float32) rounded to what ``half`` holds, so both runs see the same."""
    return stored(values, half).astype(F)


@pytest.mark.parametrize("half", sorted(HALVES))
@pytest.mark.parametrize("type_name, options, shapes", LAYERS,
                         ids=["%s-%d" % (t, i) for i, (t, _, _) in enumerate(LAYERS)])
def test_layer_in_half_matches_float32(ctx, type_name, options, shapes, half):
    half, (tol_y, tol_dx, tol_dp) = HALVES[half]
    if half == bfloat16 and options.get("activation") == "relu6":
        # relu6's gradient is cut where the stored output is 6: bfloat16's step there
        # (2^-5) puts values just below 6 on the cut; relu's cut at 0 keeps its sign
        options = dict(options, activation="relu")
    rng = np.random.default_rng(3)
    xs = [representable(rng.standard_normal(s), half) for s in shapes]
    runs, out_types = {}, {}
    for dtype in (half, np.dtype(F)):
        layer = create(ctx, type_name, "layer", dict(options))
        setup = layer.setup([dp.layers.TensorSpec(x.shape, dtype) for x in xs])
        out_types[dtype] = [o.dtype for o in setup.outputs]
        dy = [representable(np.random.default_rng(4).standard_normal(o.shape), half)
              for o in setup.outputs]
        params = None
        if setup.params:
            prng = np.random.default_rng(5)
            params = [prng.uniform(0.5, 1.5, o.shape).astype(F) for o in setup.params]
        layer = create(ctx, type_name, "layer", dict(options))
        runs[dtype] = run_layer(ctx, layer, [host(x, dtype) for x in xs], params=params,
                                dy=dy, accumulate=True)
    short, full = runs[half], runs[np.dtype(F)]
    assert all(t == half for t in out_types[half])
    for p in short.params:
        assert p.dtype == F
    for i, (a, b) in enumerate(zip(short.y, full.y)):
        near(a, b, tol_y, "%s output %d" % (type_name, i))
    for i, (a, b) in enumerate(zip(short.dx, full.dx)):
        if b is None:
            continue
        what = "%s input gradient %d" % (type_name, i)
        if half == bfloat16 and type_name == "GlobalPooling" and options["mode"] == "max":
            # bfloat16's steps make near-equal maxima equal: those few elements' gradients
            # go to another one; the rest agree
            off = np.abs(a - b) > tol_dx * np.abs(b).max()
            assert off.mean() <= 0.05, "%s: %d of %d off" % (what, off.sum(), off.size)
        else:
            # bfloat16 holds the accumulated dx (0.5 + the gradient) to 2^-9 of 0.5
            near(a, b, tol_dx, what, floor=0.5 if half == bfloat16 else 0)
    for i, (a, b) in enumerate(zip(short.dparams or [], full.dparams or [])):
        if b is not None:
            assert a.dtype == F
            near(a, b, tol_dp, "%s parameter gradient %d" % (type_name, i))


def test_half_input_to_a_float32_only_layer_is_named(ctx):
    layer = create(ctx, "Softmax", "prob")
    with pytest.raises(LayerError, match="prob.*float16.*float32 only"):
        layer.setup([dp.layers.TensorSpec((2, 4), H)])


def test_cast_rejects_a_non_float_type(ctx):
    with pytest.raises(LayerError, match="Cast 'c'.*dtype.*float32, float16 or bfloat16"):
        create(ctx, "Cast", "c", dict(dtype="int32"))
    with pytest.raises(LayerError, match="Cast 'c'.*dtype"):
        create(ctx, "Cast", "c", dict(dtype="float8"))


def small_cnn(batch=4, pool="avg"):
    return {"inputs": [{"name": "data", "shape": [batch, 3, 10, 10]},
                       {"name": "label", "shape": [batch], "dtype": "int"}],
            "outputs": ["loss", "fc"],
            "operators": [
                {"name": "c1", "type": "Convolution2D", "inputs": ["data"], "outputs": ["c1"],
                 "options": {"channels_out": 8, "kernel": 3, "pad": 1}},
                {"name": "bn1", "type": "BatchNorm", "inputs": ["c1"], "outputs": ["c1"]},
                {"name": "r1", "type": "Activation", "inputs": ["c1"], "outputs": ["c1"],
                 "options": {"activation": "relu"}},
                {"name": "c2", "type": "Convolution2D", "inputs": ["c1"], "outputs": ["c2"],
                 "options": {"channels_out": 8, "kernel": 3, "pad": 1}},
                {"name": "add", "type": "Elementwise", "inputs": ["c1", "c2"], "outputs": ["s"]},
                {"name": "p", "type": "Pooling2D", "inputs": ["s"], "outputs": ["p"],
                 "options": {"mode": pool, "kernel": 2, "stride": 2}},
                {"name": "gp", "type": "GlobalPooling", "inputs": ["p"], "outputs": ["gp"],
                 "options": {"mode": "avg"}},
                {"name": "fl", "type": "Flatten", "inputs": ["gp"], "outputs": ["fl"]},
                {"name": "fc", "type": "InnerProduct", "inputs": ["fl"], "outputs": ["fc"],
                 "options": {"outputs": 5}},
                {"name": "loss", "type": "SoftmaxWithLoss", "inputs": ["fc", "label"],
                 "outputs": ["loss"]}]}


def test_net_casts_where_storage_changes(ctx):
    net = dp.Net(ctx, small_cnn(), mode="train", precision="fp16")
    g = net.graph
    kinds = [(op.type, op.inputs, g.values[op.out_values[0]].dtype.name) for op in g.ops]
    assert kinds[0] == ("Cast", ["data"], "float16")        # into the first convolution
    assert kinds[1] == ("Convolution2D", ["data"], "float16")
    casts = [k for k in kinds if k[0] == "Cast"]
    assert casts == [("Cast", ["data"], "float16")]
    assert kinds[-2] == ("InnerProduct", ["fl"], "float16")
    # the loss reads the half logits as they are (HALF_STORAGE "reads"), its output float32
    assert kinds[-1] == ("SoftmaxWithLoss", ["fc", "label"], "float32")
    # what users write and read keeps its type: the input buffer, the labels, the loss
    assert net.tensor("data").dtype == F and net.tensor("label").dtype == np.int32
    assert net.tensor("loss").dtype == F
    assert all(p.dtype == F for p in net.params.values())
    # a rewritten graph loads again unchanged (the predict copy does this)
    again = dp.Net(ctx, net.graph.to_dict(), mode="train", precision="fp16")
    assert [op.name for op in again.graph.ops] == [op.name for op in g.ops]


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_loss_reading_half_logits_equals_the_cast_before_it(ctx, monkeypatch, precision):
    """SoftmaxWithLoss widens 16-bit logits as it loads them and rounds their gradient once
    as it stores it: the loss and every gradient are those of the float32 Cast around it,
    bit for bit, without the Cast's passes (a net whose loss takes only float32 compared)."""
    from dlprim.layers.loss import SoftmaxWithLoss
    rng = np.random.default_rng(3)
    x = rng.standard_normal((4, 3, 10, 10)).astype(F)
    y = rng.integers(0, 5, 4).astype(np.int32)
    runs = {}
    for storage in ("reads", "none"):
        monkeypatch.setattr(SoftmaxWithLoss, "HALF_STORAGE", storage)
        net = dp.Net(ctx, small_cnn(), mode="train", precision=precision, seed=1)
        casts = [op.name for op in net.graph.ops if op.type == "Cast"]
        assert ("loss.fc_to_float" in casts) == (storage == "none")
        loss = net(data=x, label=y)["loss"]
        net.backward()
        runs[storage] = (loss, {k: v.to_host() for k, v in net.grads.items()})
    assert np.array_equal(runs["reads"][0], runs["none"][0])
    for k, g in runs["none"][1].items():
        assert np.array_equal(runs["reads"][1][k], g), k


def test_fp16_gradients_match_fp32(ctx):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 3, 10, 10)).astype(H).astype(F)  # both nets see the same data
    y = rng.integers(0, 5, 4).astype(np.int32)
    grads, losses = {}, {}
    for precision in ("fp32", "fp16"):
        net = dp.Net(ctx, small_cnn(), mode="train", precision=precision, seed=1)
        losses[precision] = net(data=x, label=y)["loss"]
        net.backward()
        scale = net.loss_scale.scale if net.loss_scale else 1.0
        grads[precision] = {k: v.to_host() / scale for k, v in net.grads.items()}
    np.testing.assert_allclose(losses["fp16"], losses["fp32"], rtol=2e-3)
    for name, ref in grads["fp32"].items():
        if name == "c1.1":  # the bias before a BatchNorm: its gradient is 0 up to rounding
            continue
        got = grads["fp16"][name]
        err = np.linalg.norm(got - ref) / max(np.linalg.norm(ref), 1e-12)
        assert err < 5e-3, "%s: relative error %.3g" % (name, err)


def test_overflow_skips_the_step_and_halves_the_scale(ctx):
    net = dp.Net(ctx, small_cnn(), mode="train", precision="fp16", seed=1)
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((4, 3, 10, 10)).astype(F), rng.integers(0, 5, 4).astype(np.int32)
    opt = dp.Adam(net, lr=1e-2)
    n = net.trainable_size  # the running statistics after it move in every forward
    before = net.param_arena.to_host()[:n].copy()
    net.loss_scale.scale = 2.0 ** 40  # the gradients overflow half
    opt.zero_grad()
    net(data=x, label=y)
    net.backward()
    opt.step()
    np.testing.assert_array_equal(net.param_arena.to_host()[:n], before)
    assert opt.step_count == 0 and net.loss_scale.skipped == 1
    assert net.loss_scale.scale == 2.0 ** 39
    net.loss_scale.scale = 2.0 ** 10
    opt.zero_grad()
    net(data=x, label=y)
    net.backward()
    opt.step()
    assert opt.step_count == 1 and not np.array_equal(net.param_arena.to_host()[:n], before)


def test_scaled_step_equals_the_plain_step(ctx):
    """The update divides the scale out: an fp16 net's first SGD step moves its
    parameters as the fp32 net's does, up to half's rounding."""
    rng = np.random.default_rng(2)
    x = rng.standard_normal((4, 3, 10, 10)).astype(H).astype(F)
    y = rng.integers(0, 5, 4).astype(np.int32)
    moved = {}
    for precision in ("fp32", "fp16"):
        net = dp.Net(ctx, small_cnn(), mode="train", precision=precision, seed=1)
        start = net.param_arena.to_host().copy()
        opt = dp.SGD(net, lr=0.1, momentum=0.9, clip_norm=0.5)
        opt.zero_grad()
        net(data=x, label=y)
        net.backward()
        opt.step()
        moved[precision] = net.param_arena.to_host() - start
    err = np.linalg.norm(moved["fp16"] - moved["fp32"]) / np.linalg.norm(moved["fp32"])
    assert err < 5e-3


def test_loss_scale_grows_after_finite_steps():
    s = LossScale(scale=4.0, growth_interval=2)
    s.update(True)
    assert s.scale == 4.0
    s.update(True)
    assert s.scale == 8.0
    s.update(False)
    assert s.scale == 4.0 and s.good_steps == 0 and s.skipped == 1
    with pytest.raises(ValueError, match="growth_interval"):
        LossScale(growth_interval=0)
    with pytest.raises(ValueError, match="positive finite"):
        LossScale(scale=float("nan"))


def train_curve(ctx, precision, x, y, steps, seed=0):
    """(net, losses of ``steps`` Adam steps of the small CNN, its first gradients)."""
    net = dp.Net(ctx, small_cnn(batch=8, pool="max"), mode="train", precision=precision,
                 seed=seed)
    opt = dp.Adam(net, lr=3e-2)
    losses, first = [], None
    for _ in range(steps):
        opt.zero_grad()
        losses.append(float(net(data=x, label=y)["loss"][0]))
        net.backward()
        if first is None:
            first = {k: v.to_host() for k, v in net.grads.items()}
        opt.step()
    return net, losses, first


def test_fp16_training_follows_fp32(ctx):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((8, 3, 10, 10)).astype(F)
    y = rng.integers(0, 5, 8).astype(np.int32)
    curves = {}
    for precision in ("fp32", "fp16"):
        net, curves[precision], _ = train_curve(ctx, precision, x, y, 15)
    assert curves["fp16"][-1] < 0.6 * curves["fp16"][0], curves
    np.testing.assert_allclose(curves["fp16"], curves["fp32"], rtol=0.05, err_msg=str(curves))
    assert net.loss_scale.skipped == 0


def test_precision_is_checked(ctx):
    with pytest.raises(ValueError, match="fp32, tf32, fp16"):
        dp.Net(ctx, small_cnn(), precision="fp8")


def test_solver_state_keeps_the_loss_scale(ctx, tmp_path):
    net = dp.Net(ctx, small_cnn(), mode="train", precision="fp16")
    opt = dp.SGD(net, lr=0.1)
    net.loss_scale.scale = 512.0
    opt.save_state(str(tmp_path / "s.npz"))
    net.loss_scale.scale = 8.0
    opt.load_state(str(tmp_path / "s.npz"))
    assert net.loss_scale.scale == 512.0
    with pytest.raises(ValueError, match="loss_scale"):
        opt.load_state_dict(dict(opt.state_dict(), loss_scale={"scale": -1}))


def test_predict_of_an_fp16_net(ctx):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 3, 10, 10)).astype(H).astype(F)
    out = {p: dp.Net(ctx, small_cnn(), mode="train", precision=p, seed=1).predict(data=x)
           for p in ("fp32", "fp16")}
    near(out["fp16"]["fc"], out["fp32"]["fc"], 2e-3, "logits")


def test_fp16_transformer_gradients_match_fp32(ctx):
    """A small GPT (Embedding, LayerNorm, attention, Linears, residual adds,
    int64 tokens): the Casts around the layers that stay float32 keep its gradients."""
    from dlprim import models
    graph = models.gpt(vocab=17, context=12, layers=2, heads=2, dim=16, batch=3).to_dict()
    rng = np.random.default_rng(0)
    feeds = {i["name"]: rng.integers(0, 17, i["shape"]).astype(np.int64)
             for i in graph["inputs"]}
    grads, losses = {}, {}
    for precision in ("fp32", "fp16"):
        net = dp.Net(ctx, graph, mode="train", precision=precision, seed=0)
        losses[precision] = net(**feeds)["loss"]
        net.backward()
        scale = net.loss_scale.scale if net.loss_scale else 1.0
        grads[precision] = {k: v.to_host() / scale for k, v in net.grads.items()}
    np.testing.assert_allclose(losses["fp16"], losses["fp32"], rtol=1e-3)
    for name, ref in grads["fp32"].items():
        err = np.linalg.norm(grads["fp16"][name] - ref) / max(np.linalg.norm(ref), 1e-12)
        assert err < 5e-3, "%s: relative error %.3g" % (name, err)


# ----- precision "bf16": the same Casts with bfloat16, no loss scale

def test_bf16_net_casts_to_bfloat16_without_a_loss_scale(ctx):
    net = dp.Net(ctx, small_cnn(), mode="train", precision="bf16")
    casts = [(op.name, op.options["dtype"]) for op in net.graph.ops if op.type == "Cast"]
    assert casts == [("c1.data_to_bfloat16", "bfloat16")]
    assert net.tensor("c1").dtype == bfloat16 and net.tensor("data").dtype == F
    assert net.loss_scale is None and net.precision == "bf16"
    assert all(p.dtype == F for p in net.params.values())
    again = dp.Net(ctx, net.graph.to_dict(), mode="train", precision="bf16")
    assert [op.name for op in again.graph.ops] == [op.name for op in net.graph.ops]


def test_bf16_gradients_and_training_follow_fp32(ctx):
    rng = np.random.default_rng(0)
    x = representable(rng.standard_normal((8, 3, 10, 10)), bfloat16)
    y = rng.integers(0, 5, 8).astype(np.int32)
    grads, curves = {}, {}
    for precision in ("fp32", "bf16"):
        _, curves[precision], grads[precision] = train_curve(ctx, precision, x, y, 12, seed=1)
    for name, ref in grads["fp32"].items():
        if name == "c1.1":  # the bias before a BatchNorm: its gradient is 0 up to rounding
            continue
        err = np.linalg.norm(grads["bf16"][name] - ref) / max(np.linalg.norm(ref), 1e-12)
        assert err < 3e-2, "%s: relative error %.3g" % (name, err)  # 8 significant bits
    assert curves["bf16"][-1] < 0.6 * curves["bf16"][0], curves
    np.testing.assert_allclose(curves["bf16"], curves["fp32"], rtol=0.1, err_msg=str(curves))


def test_bfloat16_tensors_round_to_nearest_even(ctx):
    # ties to even (2^-8 and 3 * 2^-8 past 1 are halfway), and past bfloat16's largest
    # finite value (3.3895e38) to infinity
    values = np.array([1.0, 1 + 2 ** -8, 1 + 3 * 2 ** -8, -3.14159, 3.4e38, np.inf, np.nan],
                      np.float32)
    bits = to_bfloat16(values)
    t = dp.Tensor.from_numpy(ctx, bits)
    assert t.dtype == bfloat16 and "bfloat16" in repr(t)
    got = t.numpy()
    assert got.dtype == F
    np.testing.assert_array_equal(got[:6], [1.0, 1.0, 1 + 2 ** -6, -3.140625, np.inf, np.inf])
    assert np.isnan(got[6])
    # the kernels round the same way: float32 -> bfloat16 through a Cast
    cast = create(ctx, "Cast", "c", dict(dtype="bfloat16"))
    out = run_layer(ctx, cast, [values[:6]]).y[0]
    np.testing.assert_array_equal(out, got[:6])


def test_half_bits_round_like_numpy(ctx):
    # common.h's float -> half conversion in integers (store_half4_aligned) against numpy:
    # ties to even, subnormals, overflow to infinity, signed zeros, NaN
    import pyopencl as cl
    from dlprim.kernels import program
    rng = np.random.default_rng(0)
    special = np.array([0.0, -0.0, 1.0, 65504, 65519.99, 65520, 65536, 1e30, np.inf, -np.inf,
                        2.0 ** -14, 2.0 ** -24, 2.0 ** -25, 1.5 * 2 ** -25, 2.0 ** -26, 1e-30,
                        1 + 2 ** -11, 1 + 3 * 2 ** -11, -(1 + 2 ** -11), 2.0 ** -14 - 2.0 ** -25],
                       np.float32)
    values = np.concatenate([special, rng.standard_normal(4096).astype(F) * 10,
                             (rng.standard_normal(4096) * 2.0 ** -16).astype(F),
                             rng.uniform(-7e4, 7e4, 4096).astype(F),
                             rng.integers(0, 2 ** 32, 4096, dtype=np.uint64).astype(np.uint32).view(F)])
    values = values[: len(values) // 4 * 4]
    source = program._lookup.get_template("common.h").render(facts=ctx.facts) + """
    __kernel void to_half(__global const float4 *x, __global half *y)
    {
        const int i = get_global_id(0);
        store_half4_aligned(x[i], y + 4 * i);
    }"""
    prg = cl.Program(ctx.cl_context, source).build()
    x = dp.Tensor.from_numpy(ctx, values)
    y = dp.Tensor(ctx, values.shape, H)
    prg.to_half(ctx.queue, (len(values) // 4,), None, x.buffer, y.buffer)
    got = y.numpy().view(np.uint16)
    with np.errstate(over="ignore"):
        want = values.astype(H).view(np.uint16)
    nan = np.isnan(values)
    np.testing.assert_array_equal(got[~nan], want[~nan])
    assert np.isnan(got[nan].view(H)).all()
