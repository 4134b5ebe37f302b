"""InnerProduct against a float64 numpy reference."""
import numpy as np
import pytest

from dlprim.layers import LayerError, TensorSpec, create
from layer_check import assert_close, check_reference_grads, run_layer

ACT = {"identity": (lambda v: v, lambda y: np.ones_like(y)),
       "relu": (lambda v: np.maximum(v, 0), lambda y: (y > 0) * 1.0),
       "relu6": (lambda v: np.clip(v, 0, 6), lambda y: ((y > 0) & (y < 6)) * 1.0),
       "sigmoid": (lambda v: 1 / (1 + np.exp(-v)), lambda y: y * (1 - y)),
       "tanh": (np.tanh, lambda y: 1 - y * y)}


def ip_ref(x, w, b, act):
    z = x.reshape(x.shape[0], -1) @ w.T
    return ACT[act][0](z + (0 if b is None else b))


def ip_backward_ref(x, w, b, y, dy, act):
    g = dy * ACT[act][1](y)
    x2 = x.reshape(x.shape[0], -1)
    return (g @ w).reshape(x.shape), g.T @ x2, (None if b is None else g.sum(axis=0))


def test_reference_gradients_by_finite_differences():
    rng = np.random.default_rng(0)
    for act in ("identity", "tanh", "sigmoid"):
        check_reference_grads(
            lambda xs, ps: [ip_ref(xs[0], ps[0], ps[1], act)],
            lambda xs, ps, ys, dys: (lambda r: ([r[0]], [r[1], r[2]]))(
                ip_backward_ref(xs[0], ps[0], ps[1], ys[0], dys[0], act)),
            [rng.standard_normal((3, 2, 2, 2))], [rng.standard_normal((5, 8)), rng.standard_normal(5)])


CASES = [
    # (x shape, outputs, bias, activation, accumulate)
    ((3, 17), 1, True, "identity", False),
    ((1, 31), 32, False, "relu", True),
    ((5, 33), 33, True, "sigmoid", False),
    ((2, 3, 7, 3), 63, True, "tanh", True),      # rank 4, flattened from axis 1
    ((64, 129), 65, True, "relu6", False),
    ((65, 127), 64, False, "identity", True),
    ((33, 4, 8), 31, True, "relu", False),
]


@pytest.mark.parametrize("layout", ["outputs_inputs", "inputs_outputs"])
@pytest.mark.parametrize("shape, outputs, bias, act, accumulate", CASES)
def test_inner_product(ctx, shape, outputs, bias, act, accumulate, layout):
    """Both weight layouts: W [outputs, inputs], or [inputs, outputs] (x W, as GPT-2's
    Conv1D), whose dW comes out [inputs, outputs] too."""
    first = layout == "inputs_outputs"
    rng = np.random.default_rng(outputs * 7 + len(shape))
    layer = create(ctx, "InnerProduct", "fc", dict(outputs=outputs, bias=bias, activation=act,
                                                   weight_layout=layout))
    x = rng.standard_normal(shape).astype(np.float32)
    inputs = int(np.prod(shape[1:]))
    w = (rng.standard_normal((outputs, inputs)) / np.sqrt(inputs)).astype(np.float32)
    b = rng.standard_normal(outputs).astype(np.float32) if bias else None
    dy = rng.standard_normal((shape[0], outputs)).astype(np.float32)
    stored = np.ascontiguousarray(w.T) if first else w
    res = run_layer(ctx, layer, [x], params=[stored] + ([b] if bias else []), dy=[dy],
                    accumulate=accumulate)
    x64, w64 = x.astype(np.float64), w.astype(np.float64)
    b64 = None if b is None else b.astype(np.float64)
    y = ip_ref(x64, w64, b64, act)
    dx, dw, db = ip_backward_ref(x64, w64, b64, y, dy.astype(np.float64), act)
    assert_close(res.y[0], y, what="y")
    assert_close(res.dx[0], dx, rtol=2e-4, atol=2e-4, what="dx")
    assert res.dparams[0].shape == stored.shape
    assert_close(res.dparams[0], dw.T if first else dw, rtol=2e-4, atol=3e-4, what="dW")
    if bias:
        assert_close(res.dparams[1], db, rtol=2e-4, atol=3e-4, what="db")
    assert layer.flags.backward_reads_outputs == (act != "identity")
    assert layer.config().get("weight_layout") == (layout if first else None)


def test_init_and_config(ctx):
    layer = create(ctx, "InnerProduct", "fc", dict(outputs=7))
    x = np.random.default_rng(3).standard_normal((2, 50)).astype(np.float32)
    res = run_layer(ctx, layer, [x], mode="predict")
    w, b = res.params
    bound = 1 / np.sqrt(50)
    assert np.abs(w).max() <= bound and np.abs(b).max() <= bound and w.std() > bound / 3
    assert_close(res.y[0], x @ w.T + b)
    assert layer.config() == dict(outputs=7, inputs=-1, bias=True, activation="identity",
                                  weights="float32")


@pytest.mark.parametrize("options, shape, message", [
    (dict(outputs=4, inputs=10), (2, 3, 3), "inputs"),
    (dict(), (2, 3), "outputs"),
    (dict(outputs=0), (2, 3), "outputs"),
    (dict(outputs=4, activation="swish"), (2, 3), "activation"),
    (dict(outputs=4), (5,), "input"),
    (dict(outputs=4, weight_layout="transposed"), (2, 3), "weight_layout"),
    (dict(outputs=4, weight_layout="inputs_outputs", weights="int8"), (2, 3), "float32 weights"),
])
def test_option_errors(ctx, options, shape, message):
    with pytest.raises(LayerError, match=r"InnerProduct 'fc': .*%s" % message):
        create(ctx, "InnerProduct", "fc", options).setup([TensorSpec(shape)])


def test_split_gemms_use_the_layer_workspace(ctx, monkeypatch):
    # where the GEMMs split K (the wave plan on GPUs; forced here), their partial sums
    # live in the layer's planned workspace, after g = dy * act'(y)
    from dlprim.core import gemm_autotune, tuning
    tile = dict(TILE_M=16, TILE_N=48, TILE_K=8, BLOCK_M=4, BLOCK_N=12, VEC=4, GROUP=8)
    monkeypatch.setattr(tuning, "wave_plan", lambda facts, M, N, K, batch, trans_b: (dict(tile), 3))
    monkeypatch.setattr(gemm_autotune, "_on", [False])  # (DLPRIM_AUTOTUNE=1 would choose its own)
    rng = np.random.default_rng(5)
    shape, outputs = (33, 4, 8), 31
    layer = create(ctx, "InnerProduct", "fc", dict(outputs=outputs, activation="tanh"))
    x = rng.standard_normal(shape).astype(np.float32)
    w = (rng.standard_normal((outputs, 32)) / np.sqrt(32)).astype(np.float32)
    b = rng.standard_normal(outputs).astype(np.float32)
    dy = rng.standard_normal((33, outputs)).astype(np.float32)
    res = run_layer(ctx, layer, [x], params=[w, b], dy=[dy], accumulate=True)
    fwd, (data_op, filter_op) = layer._fwd, layer._backward_ops()
    assert min(fwd.splits, data_op.splits, filter_op.splits) > 1
    ops = (fwd, data_op, filter_op)
    assert all(op._workspace is None for op in ops)
    ws = layer.setup([TensorSpec(shape)]).workspace
    assert ws == layer.act_bytes + 4 * max(op.workspace_elements for op in ops)
    x64, w64, b64 = x.astype(np.float64), w.astype(np.float64), b.astype(np.float64)
    y = ip_ref(x64, w64, b64, "tanh")
    dx, dw, db = ip_backward_ref(x64, w64, b64, y, dy.astype(np.float64), "tanh")
    assert_close(res.y[0], y, what="y")
    assert_close(res.dx[0], dx, rtol=2e-4, atol=2e-4, what="dx")
    assert_close(res.dparams[0], dw, rtol=2e-4, atol=3e-4, what="dW")


def _residual_net(ctx, rows, inputs, outputs, weights, in_place):
    import dlprim as dp
    cfg = dp.NetConfig()
    cfg.add_input("x", [rows, inputs])
    cfg.add_input("a", [rows, outputs])
    cfg.add_input("b", [rows, outputs])
    # r is an activation (a net input is never written in place), read again after fc
    cfg.add("Elementwise", name="r", inputs=["a", "b"], outputs=["r"],
            options={"operation": "sum"})
    params = ["fc.weight", "fc.bias"] + (["fc.weight_scale"] if weights in ("int8", "q4")
                                         else [])
    cfg.add("InnerProduct", name="fc", inputs=["x", "r"], outputs=["r" if in_place else "y"],
            params=params, options={"outputs": outputs, "inputs": inputs, "weights": weights})
    cfg.set_outputs(["r" if in_place else "y"])
    return dp.Net(ctx, cfg, mode="predict")


@pytest.mark.parametrize("rows", [1, 8, 9, 70])
@pytest.mark.parametrize("weights", ["float32", "float16", "int8", "q4"])
@pytest.mark.parametrize("in_place", [True, False])
def test_a_residual_input_is_added_to_the_product(ctx, rng, rows, weights, in_place):
    import dlprim as dp
    from dlprim.core.quantize import dequantize_q4, quantize_q4, quantize_rows
    inputs, outputs = 67, 45
    net = _residual_net(ctx, rows, inputs, outputs, weights, in_place)
    w = rng.standard_normal((outputs, inputs)).astype(np.float32)
    bias = rng.standard_normal(outputs).astype(np.float32)
    given = {"fc.bias": bias}
    if weights == "int8":
        q, scale = quantize_rows(w)
        given.update({"fc.weight": q, "fc.weight_scale": scale})
        w = q.astype(np.float64) * scale[:, None]
    elif weights == "q4":
        q, scale = quantize_q4(w)
        given.update({"fc.weight": q, "fc.weight_scale": scale})
        w = dequantize_q4(q, scale, inputs).astype(np.float64)
    else:
        given["fc.weight"] = w
        w = w.astype(np.float16 if weights == "float16" else np.float64)
    net.set_parameters(given, strict=False)
    x = rng.standard_normal((rows, inputs)).astype(np.float32)
    a, b = (rng.standard_normal((rows, outputs)).astype(np.float32) for _ in range(2))
    y = net(x=x, a=a, b=b)["r" if in_place else "y"]
    want = x.astype(np.float64) @ w.astype(np.float64).T + bias + a + b
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4)
    # written where the residual was: no add of its own, and no copy of the residual
    # beyond what the product alone launches (a CPU widens 16-bit weights by a copy)
    plain = dp.NetConfig()
    plain.add_input("x", [rows, inputs])
    plain.add("InnerProduct", name="fc", inputs=["x"], outputs=["y"],
              options={"outputs": outputs, "inputs": inputs, "weights": weights})
    plain.set_outputs(["y"])
    names = [[launch.name for launch in n.plan.forward]
             for n in (net, dp.Net(ctx, plain, mode="predict"))]
    assert ("fc" in net.plan.autograd.inplace_ops) == in_place
    assert len(names[0]) == len(names[1]) + 1 + (0 if in_place else 1)  # (+1: r = a + b)


def test_residual_input_refusals(ctx):
    import dlprim as dp
    from dlprim.layers.base import LayerError as NetLayerError
    for options, shape, mode, match in (
            ({"activation": "relu"}, [4, 5], "predict", "option 'activation' must be identity"),
            ({}, [4, 6], "predict", r"input residual must be the output's \(N, outputs\)"),
            ({}, [4, 5], "train", "inference")):
        cfg = dp.NetConfig()
        cfg.add_input("x", [4, 3])
        cfg.add_input("r", shape)
        cfg.add("InnerProduct", name="fc", inputs=["x", "r"], outputs=["y"],
                options=dict({"outputs": 5}, **options))
        cfg.set_outputs(["y"])
        with pytest.raises(NetLayerError, match=match):
            dp.Net(ctx, cfg, mode=mode)


def _stored_linear(rng, outputs, inputs, weights, name):
    """(the parameters of a Linear ``name`` stored as ``weights``, its W in float64)."""
    from dlprim.core.quantize import dequantize_q4, quantize_q4, quantize_rows
    w = rng.standard_normal((outputs, inputs)).astype(np.float32)
    given = {name + ".bias": rng.standard_normal(outputs).astype(np.float32)}
    if weights == "int8":
        q, scale = quantize_rows(w)
        given.update({name + ".weight": q, name + ".weight_scale": scale})
        return given, q.astype(np.float64) * scale[:, None]
    if weights == "q4":
        q, scale = quantize_q4(w)
        given.update({name + ".weight": q, name + ".weight_scale": scale})
        return given, dequantize_q4(q, scale, inputs).astype(np.float64)
    given[name + ".weight"] = w
    return given, w.astype(np.float16 if weights == "float16" else np.float64).astype(np.float64)


@pytest.mark.parametrize("rows", [1, 3, 9])
@pytest.mark.parametrize("weights", ["float32", "float16", "int8", "q4"])
@pytest.mark.parametrize("residual", [False, True])
@pytest.mark.parametrize("norm", ["input_rms", "input_ln"])
def test_input_rms_normalizes_the_rows_first(ctx, rng, rows, weights, residual, norm):
    """Options input_rms and input_ln: the product of RMSNorm(x) (its weight the last
    parameter) or LayerNorm(x) (weight and bias the last two), in one launch where the
    few-rows kernel runs (one row of a float32 W on CPUs, up to 8 rows of typed W, any
    GPU's few rows), else a norm launch first; against float64."""
    import dlprim as dp
    from dlprim.core.gemm import Gemm
    inputs, outputs, eps = 67, 45, 1e-5
    layer_norm = norm == "input_ln"
    cfg = dp.NetConfig()
    cfg.add_input("x", [rows, inputs])
    cfg.add_input("r", [rows, outputs])
    scales = ["fc.weight_scale"] if weights in ("int8", "q4") else []
    cfg.add("InnerProduct", name="fc", inputs=["x", "r"] if residual else ["x"],
            outputs=["y"], params=["fc.weight", "fc.bias"] + scales + ["norm.weight"]
            + (["norm.bias"] if layer_norm else []),
            options={"outputs": outputs, "weights": weights, norm: eps})
    cfg.set_outputs(["y"])
    net = dp.Net(ctx, cfg, mode="predict")
    given, w = _stored_linear(rng, outputs, inputs, weights, "fc")
    gamma = rng.standard_normal(inputs).astype(np.float32)
    shift = rng.standard_normal(inputs).astype(np.float32)
    given["norm.weight"] = gamma
    if layer_norm:
        given["norm.bias"] = shift
    net.set_parameters(given, strict=False)
    x = (rng.standard_normal((rows, inputs)) * 4 + 3).astype(np.float32)
    r = rng.standard_normal((rows, outputs)).astype(np.float32)
    y = net(x=x, r=r)["y"]
    x64 = x.astype(np.float64)
    if layer_norm:
        d = x64 - x64.mean(axis=1, keepdims=True)
        normed = d / np.sqrt((d * d).mean(axis=1, keepdims=True) + eps) * gamma + shift
    else:
        normed = x64 / np.sqrt((x64 * x64).mean(axis=1, keepdims=True) + eps) * gamma
    want = normed @ w.astype(np.float64).T + given["fc.bias"] + (r if residual else 0)
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4)
    layer = net.layers[0]
    fused = Gemm.normalizes_a(ctx, rows, layer._fwd.dtypes[1])
    assert (layer._norm is None) == fused
    kernels = [launch.name for launch in net.plan.forward]
    assert any("norm" in k for k in kernels) != fused, kernels


@pytest.mark.parametrize("rows", [1, 3, 9])
@pytest.mark.parametrize("weights", ["float32", "float16", "int8", "q4"])
@pytest.mark.parametrize("norm", [False, True])
def test_gated_pair_is_one_product(ctx, rng, rows, weights, norm):
    """Option gated: y = silu(x W^T + b) * (x W2^T + b2) (and of RMSNorm(x) with
    input_rms), in one launch where the few-rows kernel runs, else two products and a
    multiply; against float64."""
    import dlprim as dp
    from dlprim.core.gemm import Gemm
    inputs, outputs, eps = 67, 45, 1e-5
    cfg = dp.NetConfig()
    cfg.add_input("x", [rows, inputs])
    scales = lambda n: [n + ".weight_scale"] if weights in ("int8", "q4") else []  # noqa: E731
    params = ["gate.weight", "gate.bias"] + scales("gate") + ["up.weight", "up.bias"] + \
        scales("up") + (["norm.weight"] if norm else [])
    cfg.add("InnerProduct", name="fc", inputs=["x"], outputs=["y"], params=params,
            options={"outputs": outputs, "weights": weights, "gated": True,
                     "activation": "silu", "input_rms": eps if norm else None})
    cfg.set_outputs(["y"])
    net = dp.Net(ctx, cfg, mode="predict")
    given, w = _stored_linear(rng, outputs, inputs, weights, "gate")
    more, w2 = _stored_linear(rng, outputs, inputs, weights, "up")
    given.update(more)
    gamma = rng.standard_normal(inputs).astype(np.float32)
    if norm:
        given["norm.weight"] = gamma
    net.set_parameters(given, strict=False)
    x = rng.standard_normal((rows, inputs)).astype(np.float32)
    y = net(x=x)["y"]
    x64 = x.astype(np.float64)
    if norm:
        x64 = x64 / np.sqrt((x64 * x64).mean(axis=1, keepdims=True) + eps) * gamma
    gate = x64 @ w.T + given["gate.bias"]
    want = gate / (1 + np.exp(-gate)) * (x64 @ w2.T + given["up.bias"])
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4)
    layer = net.layers[0]
    one = Gemm.streams_b(ctx, rows, layer._fwd.dtypes[1])
    assert layer.one_gated == one
    names = [launch.name for launch in net.plan.forward]
    if one:  # one product (on CPUs the norm's launches first)
        assert sum(n.startswith("gemv") for n in names) == 1, names
        assert len(names) == 1 or (norm and not ctx.facts.is_gpu), names


def test_input_rms_refusals(ctx):
    import dlprim as dp
    from dlprim.layers.base import LayerError as NetLayerError
    for options, mode, match in (({"input_rms": 0.0}, "predict", "option 'input_rms'"),
                                 ({"input_rms": "1"}, "predict", "input_rms"),
                                 ({"input_rms": 1e-5}, "train", "inference"),
                                 ({"input_rms": 1e-5, "input_ln": 1e-5}, "predict", "give one"),
                                 ({"gated": "yes"}, "predict", "option 'gated'"),
                                 ({"gated": True}, "train", "option 'gated' is for inference")):
        cfg = dp.NetConfig()
        cfg.add_input("x", [4, 3])
        cfg.add("InnerProduct", name="fc", inputs=["x"], outputs=["y"],
                options=dict({"outputs": 5}, **options))
        cfg.set_outputs(["y"])
        with pytest.raises(NetLayerError, match=match):
            dp.Net(ctx, cfg, mode=mode)


@pytest.mark.parametrize("rows", [1, 9, 70])
@pytest.mark.parametrize("act", ["gelu", "gelu_tanh", "silu"])
def test_input_gradient_activations_in_the_epilogue_for_inference(ctx, rng, rows, act):
    # GELU and SiLU are applied by the product in predict mode; training refuses them
    # (their gradient needs the input, which the layer does not keep)
    import math

    import dlprim as dp
    cfg = dp.NetConfig()
    cfg.add_input("x", [rows, 37])
    cfg.add("InnerProduct", name="fc", inputs=["x"], outputs=["y"],
            options={"outputs": 29, "activation": act})
    cfg.set_outputs(["y"])
    net = dp.Net(ctx, cfg, mode="predict")
    x = rng.standard_normal((rows, 37)).astype(np.float32)
    p = net.get_parameters()
    z = x.astype(np.float64) @ p["fc.0"].astype(np.float64).T + p["fc.1"]
    erf = np.vectorize(math.erf)
    want = {"gelu": 0.5 * z * (1 + erf(z / math.sqrt(2))),
            "gelu_tanh": 0.5 * z * (1 + np.tanh(math.sqrt(2 / math.pi) * (z + 0.044715 * z ** 3))),
            "silu": z / (1 + np.exp(-z))}[act]
    np.testing.assert_allclose(net(x=x)["y"], want, rtol=1e-4, atol=1e-5)
    assert [launch.name for launch in net.plan.forward if "pw_" in launch.name] == []
    from dlprim.layers.base import LayerError as NetLayerError
    with pytest.raises(NetLayerError, match="inference"):
        dp.Net(ctx, cfg, mode="train")
