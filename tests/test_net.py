"""Net: loading, autograd rules, in-place, planning, reshape, modes, errors (test layers)."""
import json

import numpy as np
import pytest

import dlprim as dp
from dlprim.net.graph import GraphError
from dlprim.kernels import program
from dlprim.layers.base import LayerError

import net_test_layers as tl


def op(name, type_, inputs, outputs, **extra):
    d = {"name": name, "type": type_, "inputs": inputs, "outputs": outputs}
    d.update(extra)
    return d


def graph(ops, outputs=("loss",), n=33, inputs=None):
    if inputs is None:
        inputs = [{"name": "x", "shape": [n]}, {"name": "t", "shape": [n]}]
    return {"inputs": inputs, "outputs": list(outputs), "operators": ops}


FANOUT = [op("s1", "_TestScale", ["x"], ["h"]), op("r", "_TestRelu", ["h"], ["h"]),
          op("s2", "_TestScale", ["h"], ["a"]), op("s3", "_TestScale", ["h"], ["b"]),
          op("add", "_TestAdd", ["a", "b"], ["c"]), op("loss", "_TestSqLoss", ["c", "t"], ["loss"])]


def weights(net):
    return {n: float(net.param(n).to_host()[0]) for n in net.params}


def fanout_reference(w, x, t):
    """float64 forward and gradients of FANOUT."""
    x, t = x.astype(np.float64), t.astype(np.float64)
    h = np.maximum(w["s1.0"] * x, 0)
    c = (w["s2.0"] + w["s3.0"]) * h
    loss = 0.5 * np.sum((c - t) ** 2)
    dc = c - t
    dh = dc * (w["s2.0"] + w["s3.0"]) * (h > 0)
    grads = {"s1.0": np.sum(dh * x), "s2.0": np.sum(dc * h), "s3.0": np.sum(dc * h)}
    return loss, grads, dh * w["s1.0"]


@pytest.fixture
def data(rng):
    return rng.standard_normal(33).astype(np.float32), rng.standard_normal(33).astype(np.float32)


def test_fanout_gradients_sum_and_match_reference(ctx, data):
    x, t = data
    net = dp.Net(ctx, graph(FANOUT), mode=dp.TRAIN, seed=3)
    out = net(x=x, t=t)
    net.backward()
    loss, grads, _ = fanout_reference(weights(net), x, t)
    np.testing.assert_allclose(out["loss"][0], loss, rtol=1e-5)
    for name, g in grads.items():
        np.testing.assert_allclose(net.param_diff(name).to_host()[0], g, rtol=1e-4)
    assert net.plan.autograd.inplace_ops == ["r"]  # relu ran in place


def test_inplace_after_another_reader_shares_gradients_correctly(ctx, data):
    # h is read by "add" first, then overwritten in place by the relu: the relu's backward
    # writes dh first (in place over its dy), and add's contribution is added after it
    x, t = data
    ops = [op("s1", "_TestScale", ["x"], ["h"]), op("add", "_TestAdd", ["h", "x"], ["a"]),
           op("r", "_TestRelu", ["h"], ["h"]), op("s3", "_TestScale", ["h"], ["b"]),
           op("add2", "_TestAdd", ["a", "b"], ["c"]), op("loss", "_TestSqLoss", ["c", "t"], ["loss"])]
    net = dp.Net(ctx, graph(ops), seed=8)
    assert net.plan.autograd.inplace_ops == ["r"]
    out = net(x=x, t=t)
    net.backward()
    w = weights(net)
    x64 = x.astype(np.float64)
    h = w["s1.0"] * x64
    c = (h + x64) + w["s3.0"] * np.maximum(h, 0)
    dc = c - t
    dh = dc + dc * w["s3.0"] * (h > 0)
    np.testing.assert_allclose(out["loss"][0], 0.5 * np.sum(dc ** 2), rtol=1e-5)
    np.testing.assert_allclose(net.param_diff("s3.0").to_host()[0], np.sum(dc * np.maximum(h, 0)),
                               rtol=1e-4)
    np.testing.assert_allclose(net.param_diff("s1.0").to_host()[0], np.sum(dh * x64), rtol=1e-4)


def test_views_share_memory_and_refuse_inplace_writes_over_it(ctx, data):
    """A Reshape's output is its input's memory (no launch); the in-place relu on the
    view gets its own buffer, since the input is still read under its own name; a view
    shares its input's gradient too, also where the input has a later reader (the view's
    reader then adds into the input's gradient), so no view copies in either pass."""
    x, t = data
    ops = [op("s1", "_TestScale", ["x"], ["h"]),
           op("v", "Reshape", ["h"], ["hv"], options={"dims": [3, 11]}),
           op("r", "_TestRelu", ["hv"], ["hv"]), op("s2", "_TestScale", ["hv"], ["a"]),
           op("s3", "_TestScale", ["h"], ["b"]),
           op("vf", "Reshape", ["a"], ["af"], options={"dims": [33]}),
           op("add", "_TestAdd", ["af", "b"], ["c"]), op("loss", "_TestSqLoss", ["c", "t"], ["loss"])]
    net = dp.Net(ctx, graph(ops), seed=4)
    ag, plan = net.plan.autograd, net.plan
    assert ag.view_ops == ["v", "vf"] and ag.inplace_ops == []
    values = {v.name: v.id for v in net.graph.values if v.producer >= 0}  # the last of a name
    first = {}
    for v in net.graph.values:
        first.setdefault(v.name, v.id)
    same = lambda a, b: a.buffer is b.buffer and a.offset == b.offset
    assert same(plan.acts[first["h"]], plan.acts[first["hv"]])  # the view
    assert not same(plan.acts[first["hv"]], plan.acts[values["hv"]])  # the relu's own
    assert same(plan.grads[values["a"]], plan.grads[values["af"]])  # last reader
    assert same(plan.grads[first["h"]], plan.grads[first["hv"]])  # s3 reads h later
    assert plan.op_forward[1] == 0 and plan.op_forward[5] == 0
    assert "strided_copy" not in [getattr(launch, "name", "") for launch in plan.backward]
    out = net(x=x, t=t)
    net.backward()
    w = weights(net)
    h = w["s1.0"] * x.astype(np.float64)
    c = w["s2.0"] * np.maximum(h, 0) + w["s3.0"] * h
    dc = c - t
    dh = dc * w["s2.0"] * (h > 0) + dc * w["s3.0"]
    np.testing.assert_allclose(out["loss"][0], 0.5 * np.sum(dc ** 2), rtol=1e-5)
    for name, want in (("s1.0", np.sum(dh * x)), ("s2.0", np.sum(dc * np.maximum(h, 0))),
                       ("s3.0", np.sum(dc * h))):
        np.testing.assert_allclose(net.param_diff(name).to_host()[0], want, rtol=1e-4,
                                   err_msg=name)


def test_param_gradients_accumulate_until_zeroed(ctx, data):
    x, t = data
    net = dp.Net(ctx, graph(FANOUT), seed=3)
    net(x=x, t=t)
    net.backward()
    once = net.grad_arena.to_host().copy()
    net.forward()
    net.backward()
    np.testing.assert_allclose(net.grad_arena.to_host(), 2 * once, rtol=1e-5)
    net.zero_grad()
    assert not net.grad_arena.to_host().any()


def test_input_gradient_when_requested(ctx, data):
    x, t = data
    g = graph(FANOUT, inputs=[{"name": "x", "shape": [33], "requires_grad": True},
                              {"name": "t", "shape": [33]}])
    net = dp.Net(ctx, g, seed=3)
    net(x=x, t=t)
    net.backward()
    _, _, dx = fanout_reference(weights(net), x, t)
    np.testing.assert_allclose(net.tensor_diff("x").to_host(), dx, rtol=1e-4, atol=1e-6)
    with pytest.raises(KeyError, match="'t' has no gradient"):
        net.tensor_diff("t")


def test_frozen_ops_train_nothing_and_skip_backward(ctx, data):
    x, t = data
    ops = [dict(o) for o in FANOUT]
    ops[0]["frozen"] = True
    net = dp.Net(ctx, graph(ops), seed=3)
    net(x=x, t=t)
    net.backward()
    _, grads, _ = fanout_reference(weights(net), x, t)
    assert net.param_diff("s1.0").to_host()[0] == 0
    np.testing.assert_allclose(net.param_diff("s2.0").to_host()[0], grads["s2.0"], rtol=1e-4)
    # s1 depends on nothing trainable now: it runs no backward at all
    assert net.plan.autograd.backward[0] is False
    # frozen parameters sit after the trainable ones
    assert net.param_layout["s1.0"][0] >= net.trainable_size
    assert not net.param_layout["s1.0"][2]


def test_multiple_losses_with_weights(ctx, rng):
    x = rng.standard_normal(31).astype(np.float32)
    t = rng.standard_normal(31).astype(np.float32)
    ops = [op("s1", "_TestScale", ["x"], ["a"]), op("s2", "_TestScale", ["x"], ["b"]),
           op("loss1", "_TestSqLoss", ["a", "t"], ["loss1"]),
           op("l2", "_TestSqLoss", ["b", "t"], ["other"])]
    g = graph(ops, outputs=[{"name": "loss1", "loss_weight": 0.5},
                            {"name": "other", "loss_weight": 3.0}], n=31)
    net = dp.Net(ctx, g, seed=1)
    net(x=x, t=t)
    net.backward()
    w = weights(net)
    x64, t64 = x.astype(np.float64), t.astype(np.float64)
    g1 = 0.5 * np.sum((w["s1.0"] * x64 - t64) * x64)
    g2 = 3.0 * np.sum((w["s2.0"] * x64 - t64) * x64)
    np.testing.assert_allclose(net.param_diff("s1.0").to_host()[0], g1, rtol=1e-4)
    np.testing.assert_allclose(net.param_diff("s2.0").to_host()[0], g2, rtol=1e-4)


def test_inplace_op_whose_backward_reads_its_input_gets_its_own_buffer(ctx, data):
    # _TestScale allows in place but its backward reads x (for dw): training must not share
    x, t = data
    ops = [op("s0", "_TestScale", ["x"], ["h"]), op("s1", "_TestScale", ["h"], ["h"]),
           op("loss", "_TestSqLoss", ["h", "t"], ["loss"])]
    net = dp.Net(ctx, graph(ops), seed=5)
    net(x=x, t=t)
    net.backward()
    w = weights(net)
    x64 = x.astype(np.float64)
    h0 = w["s0.0"] * x64
    dh1 = w["s1.0"] * h0 - t
    np.testing.assert_allclose(net.param_diff("s1.0").to_host()[0], np.sum(dh1 * h0), rtol=1e-4)
    np.testing.assert_allclose(net.param_diff("s0.0").to_host()[0],
                               np.sum(dh1 * w["s1.0"] * x64), rtol=1e-4)
    assert net.plan.autograd.inplace_ops == []
    net.mode = dp.PREDICT
    assert net.plan.autograd.inplace_ops == ["s1"]
    out = net(x=x, t=t)
    np.testing.assert_allclose(out["loss"][0], 0.5 * np.sum(dh1 ** 2), rtol=1e-4)


def test_inplace_on_a_net_input_leaves_the_users_data_alone(ctx, rng):
    x = rng.standard_normal(32).astype(np.float32)
    ops = [op("r", "_TestRelu", ["x"], ["x"]), op("s", "_TestScale", ["x"], ["y"])]
    net = dp.Net(ctx, graph(ops, outputs=["y"], inputs=[{"name": "x", "shape": [32]}]),
                 mode=dp.PREDICT)
    y1 = net(x=x)["y"]
    np.testing.assert_allclose(y1, weights(net)["s.0"] * np.maximum(x, 0), rtol=1e-6)
    # tensor("x") is the input buffer users write, untouched by the in-place relu
    assert np.array_equal(net.tensor("x").to_host(), x)
    net.forward()  # run again without rewriting the input: same result
    np.testing.assert_allclose(net.tensor("y").to_host(), y1)
    assert net.plan.autograd.inplace_ops == []
    # shapes set on the input tensor are picked up by reshape()
    net.tensor("x").shape = (5,)
    net.reshape()
    assert net.tensor("y").shape == (5,)


def test_mode_switch_reuses_cached_plans_and_sets_layer_mode(ctx, data):
    x, t = data
    net = dp.Net(ctx, graph(FANOUT), seed=3)
    train_plan = net.plan
    net.mode = dp.PREDICT
    assert all(layer.mode == dp.PREDICT for layer in net.layers)
    assert net.plan is not train_plan and net.plan.backward == []
    with pytest.raises(RuntimeError, match="needs mode TRAIN"):
        net.backward()
    predict_out = net(x=x, t=t)["loss"]
    net.mode = dp.TRAIN
    assert net.plan is train_plan
    assert all(layer.mode == dp.TRAIN for layer in net.layers)
    np.testing.assert_allclose(net(x=x, t=t)["loss"], predict_out, rtol=1e-6)


def test_reshape_replans_without_building_kernels(ctx, rng):
    net = dp.Net(ctx, graph(FANOUT, n=65), seed=3)
    builds, tl_builds = program.stats["builds"], tl.BUILDS["count"]
    for n in (1, 129, 64):
        x = rng.standard_normal(n).astype(np.float32)
        t = rng.standard_normal(n).astype(np.float32)
        net.reshape(x=(n,), t=(n,))
        net.tensor("x").to_device(x)
        net.tensor("t").to_device(t)
        net.forward()
        net.zero_grad()
        net.backward()
        loss, grads, _ = fanout_reference(weights(net), x, t)
        np.testing.assert_allclose(net.tensor("loss").to_host()[0], loss, rtol=1e-4)
        np.testing.assert_allclose(net.param_diff("s1.0").to_host()[0], grads["s1.0"], rtol=1e-4)
    assert program.stats["builds"] == builds and tl.BUILDS["count"] == tl_builds
    # the Pythonic call reshapes by itself on a new batch size
    out = net(x=np.ones(5, np.float32), t=np.zeros(5, np.float32))
    assert out["loss"].shape == (1,) and net.tensor("x").shape == (5,)


def test_workspace_and_keep_intermediate_tensors(ctx, rng):
    x = rng.standard_normal(64).astype(np.float32)
    ops = [op("w%d" % i, "_TestTwiceWS", ["x" if i == 0 else "h%d" % (i - 1)], ["h%d" % i])
           for i in range(6)]
    g = graph(ops, outputs=["h5"], inputs=[{"name": "x", "shape": [64]}])
    net = dp.Net(ctx, g, mode=dp.PREDICT)
    np.testing.assert_allclose(net(x=x)["h5"], 64 * x, rtol=1e-6)
    stats = net.memory_stats()
    assert stats["arena_bytes"] < stats["unplanned_bytes"]
    net.keep_intermediate_tensors = True
    net(x=x)
    for i in range(6):
        np.testing.assert_allclose(net.tensor("h%d" % i).to_host(), 2 ** (i + 1) * x, rtol=1e-6)


def test_net_without_inputs_and_no_backward_through_nograd(ctx):
    ops = [op("p", "_TestParam", [], ["v"], options={"shape": [7]}),
           op("cut", "_TestNoGrad", ["v"], ["c"]),
           op("s", "_TestScale", ["c"], ["y"])]
    g = {"outputs": [{"name": "y", "loss_weight": 1.0}], "operators": ops}
    net = dp.Net(ctx, g, seed=2)
    assert net.input_names == []
    out = net()
    v = net.param("p.0").to_host()
    np.testing.assert_allclose(out["y"], weights(net)["s.0"] * v, rtol=1e-6)
    net.backward()
    # loss = sum(y); dw = sum(c); nothing flows through the op without backward
    np.testing.assert_allclose(net.param_diff("s.0").to_host()[0], v.sum(), rtol=1e-5)
    assert not net.param_diff("p.0").to_host().any()


def test_param_names_sharing_and_layout(ctx, data):
    x, t = data
    ops = [op("a", "_TestScale", ["x"], ["h"], params=["shared"]),
           op("b", "_TestScale", ["h"], ["y"], params=["shared"]),
           op("loss", "_TestSqLoss", ["y", "t"], ["loss"])]
    net = dp.Net(ctx, graph(ops), seed=4)
    assert list(net.params) == ["shared"]
    net(x=x, t=t)
    net.backward()
    w = weights(net)["shared"]
    x64 = x.astype(np.float64)
    dy = w * w * x64 - t
    np.testing.assert_allclose(net.param_diff("shared").to_host()[0], np.sum(dy * 2 * w * x64),
                               rtol=1e-4)
    for name, (offset, shape, trainable) in net.param_layout.items():
        assert offset % 64 == 0
    assert net.trainable_size == 64


def test_dlprimitives_style_api(ctx, data, tmp_path):
    x, t = data
    path = tmp_path / "net.json"
    path.write_text(json.dumps(graph(FANOUT)))
    net = dp.Net(ctx)
    net.mode = dp.TRAIN
    net.load_from_json_file(str(path))
    net.setup()
    net.initialize_parameters(ctx.make_execution_context())
    e = ctx.make_execution_context()
    net.tensor(net.input_names[0]).to_device(x)
    net.tensor("t").to_device(t)
    net.forward(e)
    net.backward(e)
    e.finish()
    loss, grads, _ = fanout_reference(weights(net), x, t)
    np.testing.assert_allclose(net.tensor(net.output_names[0]).to_host()[0], loss, rtol=1e-5)
    assert "s1" in net.summary() and "<table>" in net._repr_html_()
    # a NetConfig builds the same graph
    cfg = dp.NetConfig()
    cfg.add_input("x", [33])
    cfg.add_input("t", [33])
    cfg.add("_TestScale", name="s1", inputs="x", outputs="h")
    cfg.add("_TestRelu", name="r", inplace=True)
    cfg.add("_TestScale", name="s2", inputs="h", outputs="a")
    cfg.add("_TestScale", name="s3", inputs="h", outputs="b")
    cfg.add("_TestAdd", name="add", inputs=["a", "b"], outputs="c")
    cfg.add("_TestSqLoss", name="loss", inputs=["c", "t"])
    cfg.set_outputs(["loss"])
    net2 = dp.Net(ctx, cfg, seed=0)
    net2.load_from_json(cfg.to_json())
    assert cfg.to_dict()["operators"] == dp.NetConfig(graph(FANOUT)).to_dict()["operators"]


@pytest.mark.parametrize("ops, outputs, error, match", [
    ([op("a", "_NoSuchType", ["x"], ["y"])], ["y"], LayerError, "'a'.*unknown type '_NoSuchType'"),
    ([op("a", "_TestScale", ["x"], ["y"], options={"bogus": 1})], ["y"], LayerError,
     "_TestScale 'a': unknown option 'bogus'"),
    ([op("a", "_TestScale", ["q"], ["y"])], ["y"], GraphError, "operator 'a': input 'q'"),
    ([op("a", "_TestScale", ["x"], ["y"]), op("a", "_TestScale", ["y"], ["z"])], ["z"],
     GraphError, "duplicate operator name 'a'"),
    ([op("a", "_TestScale", ["z"], ["y"]), op("b", "_TestScale", ["y"], ["z"])], ["z"],
     GraphError, "operator 'a': input 'z' is produced only later"),
    ([op("a", "_TestAdd", ["x", "short"], ["y"])], ["y"], LayerError,
     "_TestAdd 'a': input shapes differ"),
    ([op("a", "_TestSqLoss", ["x", "ilabel"], ["loss"])], ["loss"], LayerError,
     "_TestSqLoss 'a': label must be float32"),
    ([op("a", "_TestScale", ["x"], ["y"])], ["missing"], GraphError, "net output 'missing'"),
    ([op("a", "_TestScale", ["x"], ["y"], params=["p", "q"])], ["y"], GraphError,
     "operator 'a' lists 2 params"),
    ([op("a", "_TestParam", [], ["y"], params=["p"], options={"shape": [2]}),
      op("b", "_TestParam", [], ["z"], params=["p"], options={"shape": [3]})], ["y"],
     GraphError, "parameter 'p' is shared by operators 'a' and 'b' with different shapes"),
])
def test_bad_graphs_raise_one_clear_error(ctx, ops, outputs, error, match):
    inputs = [{"name": "x", "shape": [4]}, {"name": "short", "shape": [3]},
              {"name": "ilabel", "shape": [4], "dtype": "int"}]
    with pytest.raises(error, match=match):
        dp.Net(ctx, {"inputs": inputs, "outputs": outputs, "operators": ops})


def test_precision_setting(ctx):
    # the Net hands its precision to the layers' GEMMs; "tf32" without tensor cores runs
    # the float32 kernels, so the outputs match the "fp32" net's
    from dlprim import models
    from dlprim.core.gemm import tensor_cores
    graph = models.mlp(batch=4, hidden=(16,), train=False).to_dict()
    with pytest.raises(ValueError, match="Net: precision must be one of fp32, tf32, fp16, bf16, got 'fp8'"):
        dp.Net(ctx, graph, mode="predict", precision="fp8")
    nets = [dp.Net(ctx, graph, mode="predict", precision=p, seed=3) for p in ("fp32", "tf32")]
    ips = [layer for layer in nets[1].layers if layer.type_name == "InnerProduct"]
    assert ips and all(layer.precision == "tf32" and layer._fwd.precision == "tf32" for layer in ips)
    assert all(layer._fwd.mma == tensor_cores(ctx) for layer in ips)
    x = np.random.default_rng(0).standard_normal(nets[0].tensor("data").shape).astype(np.float32)
    outs = []
    for net in nets:
        net.tensor("data").to_device(x)
        net.forward()
        outs.append(net.tensor(net.output_names[0]).to_host())
    if not tensor_cores(ctx):
        np.testing.assert_array_equal(outs[0], outs[1])
    else:
        np.testing.assert_allclose(outs[0], outs[1], rtol=1e-2, atol=1e-2)
    assert nets[1].precision == "tf32" and nets[0].precision == "fp32"
