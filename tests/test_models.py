"""Model builders against DLPrimitives' reference nets; reference nets load and run; LeNet trains."""
import copy
import json
import math
import os

import numpy as np
import pytest

import dlprim as dp
from dlprim import models
from dlprim.net.graph import load_graph
from dlprim.layers import REGISTRY

NETS = os.path.join(os.path.dirname(__file__), "data", "nets")
REFERENCE = {"alexnet": "alexnet-b16.js", "vgg16": "vgg16-b16.js", "resnet18": "resnet18-b16.js",
             "resnet50": "resnet50-b16.js", "mobilenet_v2": "mobilenet_v2-b16.js"}


def reference(name):
    with open(os.path.join(NETS, name)) as f:
        return json.load(f)


def needs_layers(graph):
    missing = sorted({op["type"] for op in graph["operators"]} - set(REGISTRY))
    if missing:
        pytest.skip("layer types not available yet: %s" % ", ".join(missing))


def same_value(a, b):
    if isinstance(a, (list, tuple)) or isinstance(b, (list, tuple)):
        return isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)) and len(a) == len(b) \
            and all(same_value(x, y) for x, y in zip(a, b))
    if isinstance(a, float) or isinstance(b, float):
        return math.isclose(float(a), float(b), rel_tol=1e-6)
    return a == b


def same_op(ref, mine):
    ro, mo = ref.get("options", {}), mine.get("options", {})
    return (ref["type"] == mine["type"] and set(ro) == set(mo)
            and all(same_value(v, mo[k]) for k, v in ro.items()))


@pytest.mark.parametrize("name", sorted(REFERENCE))
def test_builders_match_reference_nets_op_for_op(name):
    ref = reference(REFERENCE[name])
    mine = models.BUILDERS[name](batch=16, image_size=224, classes=1000, train=False).to_dict()
    ref_ops, my_ops = ref["operators"], mine["operators"]
    assert len(my_ops) == len(ref_ops) + 1 and my_ops[-1]["type"] == "Softmax"
    for i, (r, m) in enumerate(zip(ref_ops, my_ops)):
        assert same_op(r, m), "operator #%d differs: %s vs %s" % (i, r, m)
        # torchvision's state-dict names, as the reference (exported from torchvision) has them
        assert r.get("params") == m.get("params"), "operator #%d params" % i
    assert mine["inputs"] == [{"name": "data", "shape": [16, 3, 224, 224], "dtype": "float"}]


def test_lenet_matches_mnist_train_json():
    ref = reference("mnist_train.json")
    mine = models.lenet(batch=128).to_dict()
    assert len(mine["operators"]) == len(ref["operators"])
    for r, m in zip(ref["operators"], mine["operators"]):
        assert same_op(r, m), (r, m)
    assert [i["name"] for i in mine["inputs"]] == ["data", "label"]
    assert mine["inputs"][1]["dtype"] == "int" and mine["outputs"] == ["loss"]


@pytest.mark.parametrize("name", sorted(models.BUILDERS))
def test_every_builder_gives_a_valid_graph(name):
    kwargs = {} if name in ("lenet", "mlp") else {"image_size": 64}
    for train in (True, False):
        g = load_graph(models.BUILDERS[name](batch=2, classes=7, train=train, **kwargs))
        assert g.outputs == (["loss"] if train else ["prob"])
        names = [n for op in g.ops for n in (op.params or [])]
        assert len(names) == len(set(names)), "a parameter name repeats"


def test_resnet_names_follow_torchvision():
    ops = models.resnet50(batch=1, image_size=64).to_dict()["operators"]
    names = [n for op in ops for n in op.get("params", [])]
    for expected in ("conv1.weight", "bn1.running_mean", "layer1.0.conv3.weight",
                     "layer1.0.downsample.1.running_var", "layer4.2.bn3.bias", "fc.weight", "fc.bias"):
        assert expected in names
    assert len([n for n in names if n.endswith(".weight")]) == 53 + 53 + 1  # convs, BNs, fc


def _batch1(graph, size=None):
    g = copy.deepcopy(graph)
    for spec in g["inputs"]:
        spec["shape"][0] = 1
        if size and len(spec["shape"]) == 4:
            spec["shape"][2:] = [size, size]
    return g


@pytest.mark.parametrize("name", ["alexnet", "vgg16", "resnet18", "resnet50", "mobilenet_v2"])
def test_reference_nets_set_up(ctx, name):
    g = _batch1(reference(REFERENCE[name]))
    needs_layers(g)
    net = dp.Net(ctx, mode=dp.PREDICT)
    net.load_from_json(json.dumps(g))
    net.setup()
    assert net.tensor("loss").shape == (1, 1000)
    assert net.memory_stats()["arena_bytes"] < net.memory_stats()["unplanned_bytes"]


# vgg16 at batch 1 takes over a minute on a 2-core CPU: set up only (above)
@pytest.mark.parametrize("name, size", [("resnet18", 64), ("mobilenet_v2", 64), ("resnet50", 64),
                                        ("alexnet", 224)])
def test_reference_nets_run_forward_and_backward(ctx, rng, name, size):
    g = _batch1(reference(REFERENCE[name]), size)
    needs_layers(g)
    net = dp.Net(ctx, g, mode=dp.TRAIN, seed=0)
    x = rng.standard_normal((1, 3, size, size)).astype(np.float32)
    out = net(data=x)["loss"]
    assert out.shape == (1, 1000) and np.isfinite(out).all()
    net.backward()
    ctx.finish()
    assert np.isfinite(net.grad_arena.to_host()).all()
    for op in (g["operators"][0], g["operators"][-1]):  # gradients reach the first layer
        assert np.abs(net.param_diff(op["params"][0]).to_host()).sum() > 0, op["name"]


def test_mnist_train_json_runs(ctx, rng):
    g = _batch1(reference("mnist_train.json"))
    needs_layers(g)
    net = dp.Net(ctx, g, seed=0)
    out = net(data=rng.standard_normal((1, 1, 28, 28)).astype(np.float32),
              label=np.array([3], np.int32))
    assert np.isfinite(out["loss"]).all()
    net.backward()
    assert np.abs(net.param_diff("fc2.0").to_host()).sum() > 0


def test_lenet_trains_with_sgd_and_round_trips_its_parameters(ctx, rng, tmp_path):
    cfg = models.lenet(batch=16)
    needs_layers(cfg.to_dict())
    net = dp.Net(ctx, cfg, seed=1)
    # MNIST-like: a fixed random digit pattern per class plus noise
    patterns = rng.standard_normal((10, 1, 28, 28)).astype(np.float32)
    labels = rng.integers(0, 10, size=16).astype(np.int32)
    images = patterns[labels] + 0.3 * rng.standard_normal((16, 1, 28, 28)).astype(np.float32)
    losses = []
    lr = np.float32(0.02)
    for step in range(20):
        net.zero_grad()
        losses.append(float(net(data=images, label=labels)["loss"].reshape(-1)[0]))
        net.backward()
        # plain SGD over the trainable part of the arena
        n = net.trainable_size
        w, g = net.param_arena.to_host(), net.grad_arena.to_host()
        w[:n] -= lr * g[:n]
        net.param_arena.to_device(w)
    assert losses[-1] < 0.75 * losses[0], losses
    assert all(b < a for a, b in zip(losses, losses[1:])), losses  # falls at every step
    path = str(tmp_path / "lenet.dlp")
    net.save_parameters(path)
    net.mode = dp.PREDICT
    expected = net(data=images, label=labels)["loss"]
    other = dp.Net(ctx, cfg, mode=dp.PREDICT, seed=2)
    other.load_parameters(path)
    assert np.array_equal(other(data=images, label=labels)["loss"], expected)


def test_mlp_and_dropout_variants_run(ctx, rng):
    cfg = models.mlp(batch=3, inputs=33, hidden=(65, 31), classes=5)
    needs_layers(cfg.to_dict())
    net = dp.Net(ctx, cfg, seed=0)
    out = net(data=rng.standard_normal((3, 33)).astype(np.float32), label=np.array([0, 4, 2], np.int32))
    assert np.isfinite(out["loss"]).all()
    net.backward()
    assert np.abs(net.param_diff("fc1.weight").to_host()).sum() > 0
    for builder in (models.alexnet, models.vgg16, models.mobilenet_v2):
        ops = builder(batch=1, image_size=64, dropout=True).to_dict()["operators"]
        drops = [op for op in ops if op["type"] == "Dropout"]
        assert drops and all(op["inputs"] == op["outputs"] for op in drops)


def test_reshape_with_real_layers_builds_nothing_and_matches_a_fresh_net(ctx, rng):
    from dlprim.kernels import program
    cfg = models.resnet18(batch=2, image_size=32, classes=10, train=False)
    needs_layers(cfg.to_dict())
    net = dp.Net(ctx, cfg, mode=dp.PREDICT, seed=3)
    net(data=rng.standard_normal((2, 3, 32, 32)).astype(np.float32))
    x = rng.standard_normal((5, 3, 32, 32)).astype(np.float32)
    net(data=x)  # a new batch size: reshape; a GEMM met with so few rows may build its variant
    builds = program.stats["builds"]
    net(data=rng.standard_normal((2, 3, 32, 32)).astype(np.float32))
    got = net(data=x)["prob"]  # shapes met before: their plans back, nothing built
    assert program.stats["builds"] == builds
    fresh = dp.Net(ctx, models.resnet18(batch=5, image_size=32, classes=10, train=False),
                   mode=dp.PREDICT, seed=3)
    np.testing.assert_allclose(got, fresh(data=x)["prob"], rtol=1e-5, atol=1e-7)
