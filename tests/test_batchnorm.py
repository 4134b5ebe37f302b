"""BatchNorm in train and predict modes against float64 numpy references, on inputs of
rank 2 to 5 ((N, C), (N, C, L), (N, C, H, W), (N, C, D, H, W): DLPrimitives takes any rank
from 2), running statistics after several steps against PyTorch's update rule."""
import json

import numpy as np
import pytest

from dlprim import Tensor
from dlprim.layers import LayerError, TensorSpec, create, run
from layer_check import (assert_close, check_reference_grads, host, layer_memory, place, run_layer,
                         stored)

EPS = 1e-5


@pytest.fixture(params=["pointwise", "channels"])
def kernels(request, monkeypatch):
    """Both BatchNorm paths on any device: the pointwise generator (CPUs) and
    kernels/batchnorm.cl (GPUs)."""
    from dlprim.core import batchnorm
    monkeypatch.setattr(batchnorm, "default_kernels", lambda facts: request.param)
    return request.param


def axes(x):
    return (0,) + tuple(range(2, x.ndim))


def ch(v, x):
    """A per-channel vector shaped to broadcast against x."""
    return v.reshape((1, -1) + (1,) * (x.ndim - 2))


def bn_ref(x, gamma, beta, mean=None, var=None):
    """Forward; with mean/var None uses the batch's (biased) statistics."""
    if mean is None:
        mean, var = x.mean(axis=axes(x)), x.var(axis=axes(x))
    return (x - ch(mean, x)) / np.sqrt(ch(var, x) + EPS) * ch(gamma, x) + ch(beta, x)


def bn_grad_ref(x, gamma, dy, mean=None, var=None):
    """(dx, dgamma, dbeta); batch statistics when mean/var are None:
    dx = gamma istd / M (M dy - sum dy - xhat sum(dy xhat))."""
    batch = mean is None
    if batch:
        mean, var = x.mean(axis=axes(x)), x.var(axis=axes(x))
    m = x.size // x.shape[1]
    istd = 1 / np.sqrt(ch(var, x) + EPS)
    xhat = (x - ch(mean, x)) * istd
    s_dy = dy.sum(axis=axes(x))
    s_dyx = (dy * xhat).sum(axis=axes(x))
    if batch:
        dx = ch(gamma, x) * istd / m * (m * dy - ch(s_dy, x) - xhat * ch(s_dyx, x))
    else:
        dx = ch(gamma, x) * istd * dy
    return dx, s_dyx, s_dy


@pytest.mark.parametrize("shape", [(4, 3), (3, 2, 5), (2, 3, 4, 5)])
@pytest.mark.parametrize("batch", [True, False])
def test_reference_backward_matches_finite_differences(shape, batch):
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape)
    gamma, beta = rng.uniform(0.5, 1.5, shape[1]), rng.standard_normal(shape[1])
    mean, var = (None, None) if batch else (rng.standard_normal(shape[1]), rng.uniform(0.5, 2, shape[1]))

    def fwd(xs, ps):
        return [bn_ref(xs[0], ps[0], ps[1], mean, var)]

    def bwd(xs, ps, ys, dys):
        dx, dg, db = bn_grad_ref(xs[0], ps[0], dys[0], mean, var)
        return [dx], [dg, db]
    check_reference_grads(fwd, bwd, [x], [gamma, beta])


def params_for(rng, c):
    return [rng.standard_normal(c) * 0.1, rng.uniform(0.5, 1.5, c),
            rng.uniform(0.5, 1.5, c), rng.standard_normal(c)]


SHAPES = [(2, 3, 4, 5), (16, 3, 40, 40), (8, 33), (1, 65, 3, 3), (4, 1, 1, 31), (2, 64, 2, 2), (3, 2, 63, 1), (5, 32),
          (4, 3, 7), (2, 33, 5), (1, 2, 65), (3, 4, 1), (2, 3, 2, 3, 4)]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("accumulate", [False, True])
def test_train_mode(ctx, kernels, shape, accumulate):
    rng = np.random.default_rng(shape[1])
    x = rng.standard_normal(shape) * 2 + 0.5
    dy = rng.standard_normal(shape)
    p = params_for(rng, shape[1])
    layer = create(ctx, "BatchNorm", "bn", {})
    r = run_layer(ctx, layer, [x.astype(np.float32)], params=p, dy=[dy.astype(np.float32)],
                  accumulate=accumulate, mode="train")
    assert layer.ops.kernels == kernels
    # float32 statistics on CPUs (but PoCL's) in batchnorm_rows.cl's rows
    assert (layer.ops._rows is not None) == (kernels == "pointwise" and ctx.facts.is_cpu
                                             and ctx.facts.vendor_id != "pocl")
    assert_close(r.y[0], bn_ref(x, p[2], p[3]), rtol=1e-4, atol=1e-4, what="y")
    dx, dg, db = bn_grad_ref(x, p[2], dy)
    assert_close(r.dx[0], dx, rtol=1e-3, atol=1e-4, what="dx")
    assert r.dparams[0] is None and r.dparams[1] is None   # running stats are not trainable
    assert_close(r.dparams[2], dg, rtol=1e-4, atol=1e-4, what="dweight")
    assert_close(r.dparams[3], db, rtol=1e-4, atol=1e-4, what="dbias")
    m = x.size // shape[1]
    assert_close(r.params[0], 0.9 * p[0] + 0.1 * x.mean(axis=axes(x)), what="running_mean")
    assert_close(r.params[1], 0.9 * p[1] + 0.1 * x.var(axis=axes(x)) * m / (m - 1),
                 what="running_var")


@pytest.mark.parametrize("shape", [(2, 3, 4, 5), (8, 33), (1, 65, 3, 3), (3, 5, 4), (1, 2, 1)])
@pytest.mark.parametrize("how", ["predict", "use_global_stats"])
def test_running_statistics_modes(ctx, kernels, shape, how):
    rng = np.random.default_rng(7)
    x = rng.standard_normal(shape)
    dy = rng.standard_normal(shape)
    p = params_for(rng, shape[1])
    options = {"use_global_stats": True} if how == "use_global_stats" else {}
    layer = create(ctx, "BatchNorm", "bn", options)
    r = run_layer(ctx, layer, [x.astype(np.float32)], params=p, dy=[dy.astype(np.float32)],
                  accumulate=True, mode="train" if how == "use_global_stats" else "predict")
    assert_close(r.y[0], bn_ref(x, p[2], p[3], p[0], p[1]), rtol=1e-4, atol=1e-5, what="y")
    dx, dg, db = bn_grad_ref(x, p[2], dy, p[0], p[1])
    assert_close(r.dx[0], dx, rtol=1e-4, atol=1e-5, what="dx")
    assert_close(r.dparams[2], dg, rtol=1e-4, atol=1e-4, what="dweight")
    assert_close(r.dparams[3], db, rtol=1e-4, atol=1e-4, what="dbias")
    assert_close(r.params[0], p[0], what="running_mean unchanged")
    assert_close(r.params[1], p[1], what="running_var unchanged")


def test_not_affine(ctx, kernels, rng):
    x = rng.standard_normal((4, 5, 3, 3))
    dy = rng.standard_normal(x.shape)
    layer = create(ctx, "BatchNorm", "bn", {"affine": False})
    r = run_layer(ctx, layer, [x.astype(np.float32)], dy=[dy.astype(np.float32)])
    assert len(r.params) == 2
    assert_close(r.y[0], bn_ref(x, np.ones(5), np.zeros(5)), rtol=1e-4, atol=1e-4)
    assert_close(r.dx[0], bn_grad_ref(x, np.ones(5), dy)[0], rtol=1e-3, atol=1e-4)


# the activation after the BatchNorm (value, derivative) for the channel kernels' fold
ACT_REFS = {"identity": (lambda z: z, lambda z: 1.0),
            "relu": (lambda z: np.maximum(z, 0), lambda z: (z > 0) * 1.0),
            "relu6": (lambda z: np.clip(z, 0, 6), lambda z: ((z > 0) & (z < 6)) * 1.0),
            "sigmoid": (lambda z: 1 / (1 + np.exp(-z)),
                        lambda z: np.exp(-z) / (1 + np.exp(-z)) ** 2)}


def _channel_kernels_match_float64(ctx, monkeypatch, shape, dtype, mode, activation,
                                   kernels="channels"):
    """kernels/batchnorm.cl (or the generator) with ``dtype`` storage (vector rows where
    S % 4 == 0, else scalar) against float64 on the values the storage holds; with an
    ``activation`` after it (net/fusion.py train_folds): y = act(z), z the BatchNorm's
    output, and backward takes act's dy to dz = act'(z) dy."""
    from functools import partial
    from dlprim.core import batchnorm
    monkeypatch.setattr(batchnorm, "default_kernels", lambda facts: kernels)
    rng = np.random.default_rng(11)
    x = stored(rng.standard_normal(shape) * 2 + 0.5, dtype)
    dy = stored(rng.standard_normal(shape), dtype)
    p = params_for(rng, shape[1])
    layer = create(ctx, "BatchNorm", "bn", {})
    if activation != "identity":
        layer.mode = mode
        layer.setup([TensorSpec(shape, host(x, dtype).dtype)])
        assert layer.fuses_activation(activation) and not layer.fuses_activation("leaky_relu")
        layer.forward = partial(layer.forward, activation=activation)
        layer.backward = partial(layer.backward, activation=activation)
    r = run_layer(ctx, layer, [host(x, dtype)], params=p, dy=[dy.astype(np.float32)], mode=mode)
    assert layer.ops.kernels == kernels
    stats = (None, None) if mode == "train" else (p[0], p[1])
    act, grad = ACT_REFS[activation]
    z = bn_ref(x, p[2], p[3], *stats)
    dx, dg, db = bn_grad_ref(x, p[2], dy * grad(z), *stats)
    # the outputs' rounding: 2^-11, 2^-8 relative
    tol = {"float32": 1e-4, "float16": 4e-3, "bfloat16": 3.2e-2}[dtype]
    for got, want, what in ((r.y[0], act(z), "y"), (r.dx[0], dx, "dx"),
                            (r.dparams[2], dg, "dweight"), (r.dparams[3], db, "dbias")):
        got = np.asarray(got, np.float64)
        assert np.abs(got - want).max() <= tol * np.abs(want).max(), what


@pytest.mark.parametrize("shape", [(4, 3, 6, 8), (3, 5, 7), (16, 2, 12)])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("mode", ["train", "predict"])
def test_channel_kernels_in_16_bit_match_float64(ctx, monkeypatch, shape, dtype, mode):
    _channel_kernels_match_float64(ctx, monkeypatch, shape, dtype, mode, "identity")


@pytest.mark.parametrize("shape", [(4, 3, 6, 8), (3, 5, 7)])
@pytest.mark.parametrize("dtype, activation, mode", [
    ("float32", "relu", "train"), ("float32", "sigmoid", "predict"),
    ("float16", "relu6", "train"), ("bfloat16", "relu", "train")])
def test_channel_kernels_run_the_activation(ctx, monkeypatch, shape, dtype, activation, mode):
    _channel_kernels_match_float64(ctx, monkeypatch, shape, dtype, mode, activation)


@pytest.mark.parametrize("shape", [(4, 3, 6, 8), (3, 5, 7)])
@pytest.mark.parametrize("dtype, activation, mode", [
    ("float32", "relu6", "train"), ("float32", "relu", "train"), ("float32", "sigmoid", "predict"),
    ("float16", "relu", "train")])
def test_pointwise_kernels_run_the_activation(ctx, monkeypatch, shape, dtype, activation, mode):
    """The generator's apply, sums and dx with the activation inline (CPUs)."""
    _channel_kernels_match_float64(ctx, monkeypatch, shape, dtype, mode, activation,
                                   kernels="pointwise")


def test_float64_and_activations_with_options_are_refused(ctx, monkeypatch):
    from dlprim.core import batchnorm
    monkeypatch.setattr(batchnorm, "default_kernels", lambda facts: "pointwise")
    layer = create(ctx, "BatchNorm", "bn", {})
    layer.setup([TensorSpec((2, 3, 4), np.float32)])
    assert layer.fuses_activation("relu") and not layer.fuses_activation("leaky_relu")
    wide = batchnorm.BatchNormOps(ctx, (2, 3, 4), 1e-5, True, dtype=np.float64)
    assert not wide.fuses("relu")
    with pytest.raises(ValueError, match="pointwise kernels cannot run activation 'relu'"):
        wide.apply_launches(*[Tensor(ctx, (2, 3, 4), np.float64)] * 2,
                            *[Tensor(ctx, (3,), np.float64)] * 2, activation="relu")


def test_init_params(ctx):
    r = run_layer(ctx, create(ctx, "BatchNorm", "bn", {}), [np.array([[1, 2, 3], [2, 3, 5]], np.float32)],
                  mode="predict")
    for got, want in zip(r.params, (0, 1, 1, 0)):
        assert_close(got, np.full(3, want))


@pytest.mark.parametrize("shape", [(4, 6, 5, 5), (4, 6, 7)])
def test_running_statistics_after_several_steps_match_pytorch(ctx, shape):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(11)
    layer = create(ctx, "BatchNorm", "bn", {"momentum": 0.3})
    layer.mode = "train"
    ws, saved = layer_memory(ctx, layer.setup([TensorSpec(shape)]))
    module = torch.nn.BatchNorm2d if len(shape) == 4 else torch.nn.BatchNorm1d
    ref = module(6, eps=EPS, momentum=0.3).double()
    params = [place(ctx, np.full(6, v, np.float32)) for v in (0, 1, 1, 0)]
    x_t, y_t = place(ctx, np.zeros(shape, np.float32)), Tensor(ctx, shape)
    plan = layer.forward([x_t], [y_t], params, ws, saved)   # one plan, re-run every step
    for step in range(5):
        x = rng.standard_normal(shape) * (step + 1) + step
        x_t.to_device(x.astype(np.float32))
        run(plan, ctx.queue)
        with torch.no_grad():
            y_ref = ref(torch.from_numpy(x)).numpy()
        assert_close(y_t.numpy(), y_ref, rtol=1e-4, atol=1e-4, what="y step %d" % step)
    assert_close(params[0].numpy(), ref.running_mean.numpy(), rtol=1e-5, atol=1e-5)
    assert_close(params[1].numpy(), ref.running_var.numpy(), rtol=1e-5, atol=1e-5)
    layer.mode = "predict"
    setup = layer.setup([TensorSpec(shape)])
    assert setup.saved == []   # the running statistics are parameters
    run(layer.forward([x_t], [y_t], params, None, []), ctx.queue)
    ref.eval()
    with torch.no_grad():
        assert_close(y_t.numpy(), ref(torch.from_numpy(x)).numpy(), rtol=1e-4, atol=1e-4)


def test_config_round_trips():
    options = {"eps": 9.999999747378752e-06, "momentum": 0.10000002384185791, "features": 64}
    cfg = json.loads(json.dumps(create(None, "BatchNorm", "bn", options).config()))
    assert {k: cfg[k] for k in options} == options
    assert create(None, "BatchNorm", "bn", cfg).config() == cfg


@pytest.mark.parametrize("options, option", [
    ({"eps": 0}, "eps"), ({"eps": "small"}, "eps"), ({"momentum": 1.5}, "momentum"),
    ({"features": 0}, "features"), ({"affine": "yes"}, "affine"), ({"fused": "relu"}, "fused"),
])
def test_bad_options_name_layer_and_option(options, option):
    with pytest.raises(LayerError) as err:
        create(None, "BatchNorm", "bad", options)
    assert "BatchNorm 'bad'" in str(err.value) and option in str(err.value)


def test_bad_inputs(ctx):
    with pytest.raises(LayerError, match="BatchNorm 'bn'.*'features' is 4.*3 channels"):
        create(ctx, "BatchNorm", "bn", {"features": 4}).setup([TensorSpec((2, 3, 4, 4))])
    with pytest.raises(LayerError, match=r"BatchNorm 'bn'.*rank 2 or more, got shape \(3,\)"):
        create(ctx, "BatchNorm", "bn", {}).setup([TensorSpec((3,))])
    with pytest.raises(LayerError, match="BatchNorm 'bn'.*'features' is 4.*3 channels"):
        create(ctx, "BatchNorm", "bn", {"features": 4}).setup([TensorSpec((2, 3, 5))])
    with pytest.raises(LayerError, match="more than one value per channel"):
        create(ctx, "BatchNorm", "bn", {}).setup([TensorSpec((1, 3))])
    with pytest.raises(LayerError, match="more than one value per channel"):
        create(ctx, "BatchNorm", "bn", {}).setup([TensorSpec((1, 3, 1))])


def test_train_forward_after_predict_setup_checks_the_batch(ctx):
    layer = create(ctx, "BatchNorm", "bn", {})
    layer.mode = "predict"
    layer.setup([TensorSpec((1, 3))])
    layer.mode = "train"
    p = [place(ctx, np.ones(3, np.float32)) for _ in range(4)]
    with pytest.raises(LayerError, match="more than one value per channel"):
        layer.forward([place(ctx, np.ones((1, 3), np.float32))], [Tensor(ctx, (1, 3))], p, None, [])


def test_batch_variance_accurate_when_mean_is_large(ctx, kernels):
    """E[x^2] - mean^2 in float32 would lose about 3 digits here."""
    rng = np.random.default_rng(5)
    x = (rng.standard_normal((8, 4, 16, 16)) + 30).astype(np.float32)
    r = run_layer(ctx, create(ctx, "BatchNorm", "bn", {}), [x],
                  params=[np.zeros(4), np.ones(4), np.ones(4), np.zeros(4)])
    assert_close(r.y[0], bn_ref(x.astype(np.float64), np.ones(4), np.zeros(4)), rtol=0, atol=1e-5)


def test_sequence_batchnorm_in_a_net_matches_pytorch(ctx):
    """(N, C, L) through a Net in train mode: output, input gradient and parameter
    gradients against BatchNorm1d in float64 (the loss is the output times fixed random
    weights, so the input gradient is not zero), and the updated running statistics."""
    torch = pytest.importorskip("torch")
    import dlprim as dp
    rng = np.random.default_rng(3)
    shape = (3, 4, 6)
    x = rng.standard_normal(shape).astype(np.float32)
    dy = rng.standard_normal(shape).astype(np.float32)
    cfg = dp.NetConfig()
    cfg.add_input("data", list(shape), requires_grad=True)
    cfg.add("BatchNorm", name="bn", inputs="data", outputs="bn")
    cfg.add("Parameter", name="dy", inputs=[], outputs="dy",
            options={"shape": list(shape), "is_trainable": False})
    cfg.add("Elementwise", name="weigh", inputs=["bn", "dy"], outputs="loss",
            options={"operation": "prod"})
    cfg.set_outputs(["loss"])
    net = dp.Net(ctx, cfg, mode="train")
    weight, bias = rng.uniform(0.5, 1.5, 4), rng.standard_normal(4)
    net.set_parameters({"bn.0": np.zeros(4), "bn.1": np.ones(4), "bn.2": weight, "bn.3": bias,
                        "dy.0": dy})
    net(data=x)
    net.backward()   # the loss gradient is ones, so d loss / d bn is dy
    ref = torch.nn.BatchNorm1d(4, eps=EPS).double()
    with torch.no_grad():
        ref.weight[:], ref.bias[:] = torch.from_numpy(weight), torch.from_numpy(bias)
    xt = torch.from_numpy(x.astype(np.float64)).requires_grad_()
    yt = ref(xt)
    (yt * torch.from_numpy(dy.astype(np.float64))).sum().backward()
    assert_close(net.tensor("bn").numpy(), yt.detach().numpy(), rtol=1e-4, atol=1e-4, what="y")
    assert_close(net.tensor_diff("data").numpy(), xt.grad.numpy(), rtol=1e-3, atol=1e-4, what="dx")
    assert_close(net.grads["bn.2"].numpy(), ref.weight.grad.numpy(), rtol=1e-4, atol=1e-4)
    assert_close(net.grads["bn.3"].numpy(), ref.bias.grad.numpy(), rtol=1e-4, atol=1e-4)
    assert_close(net.params["bn.0"].numpy(), ref.running_mean.numpy(), rtol=1e-5, atol=1e-5)
    assert_close(net.params["bn.1"].numpy(), ref.running_var.numpy(), rtol=1e-5, atol=1e-5)


def test_onnx_batchnorm_of_a_sequence_imports(ctx):
    """ONNX BatchNormalization on (N, C, L), as BatchNorm1d exports it, against onnxruntime."""
    ort = pytest.importorskip("onnxruntime")
    onnx = pytest.importorskip("onnx")
    import dlprim.onnx as dox
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(4)
    inits = {"s": rng.uniform(0.5, 1.5, 5), "b": rng.standard_normal(5),
             "m": rng.standard_normal(5), "v": rng.uniform(0.5, 2, 5)}
    g = helper.make_graph(
        [helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"], epsilon=1e-3)],
        "bn1d", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 5, 9])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(a.astype(np.float32), n) for n, a in inits.items()])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 15)])
    model.ir_version = 8
    data = model.SerializeToString()
    x = rng.standard_normal((2, 5, 9)).astype(np.float32)
    want = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert_close(dox.load(data, ctx)(x=x)["y"], want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("affine, activation", [(True, "identity"), (False, "relu6"),
                                                 (True, "sigmoid")])
def test_cpu_row_kernels_give_the_generators_bits(ctx, affine, activation):
    """batchnorm_rows_apply.cl (float32 on CPUs but PoCL) computes in the generator's
    order: the same bits, rows cut mid-vector included; the statistics' rows agree to
    float32's rounding."""
    from dlprim.core.batchnorm import BatchNormOps
    shape = (3, 5, 37)
    ops = BatchNormOps(ctx, shape, 1e-5, affine)
    if ops._rows is None:
        pytest.skip("the row kernels serve float32 on CPUs other than PoCL")
    rng = np.random.default_rng(3)
    x = Tensor.from_numpy(ctx, (rng.standard_normal(shape) * 3 + 2).astype(np.float32))
    c = shape[1]
    stats = [Tensor(ctx, (c,)) for _ in range(3)]
    params = [Tensor.from_numpy(ctx, rng.uniform(0.5, 1.5, c).astype(np.float32)) for _ in range(4)]
    outs = {}
    for rows in (True, False):
        prg = ops._rows
        ops._rows = prg if rows else None
        mean, var, scratch = (Tensor(ctx, (c,)) for _ in range(3))
        for launch in ops.stats_launches(x, mean, var, params[2], params[3], 0.1, scratch):
            launch(ctx.queue)
        outs[rows] = mean.numpy(), var.numpy()
        ops._rows = prg
    for got, want, what in zip(outs[True], outs[False], ("mean", "var")):
        np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-6, err_msg=what)
    # apply alone over the same statistics: the same bits
    mean, var = (Tensor.from_numpy(ctx, a) for a in outs[False][:2])
    ys = []
    for rows in (True, False):
        prg = ops._rows
        ops._rows = prg if rows else None
        y = Tensor(ctx, shape)
        for launch in ops.apply_launches(x, y, mean, var, *((params[0], params[1]) if affine
                                                           else (None, None)), activation):
            launch(ctx.queue)
        ys.append(y.numpy())
        ops._rows = prg
    np.testing.assert_array_equal(ys[0], ys[1])
