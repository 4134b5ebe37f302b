"""dlprim.nn: each module's operator, naming by attribute path, activation folding, loss
heads, the errors, and whole models against PyTorch with weights copied by name."""
from collections import OrderedDict

import numpy as np
import pytest

import dlprim as dp
import dlprim.nn as nn
import dlprim.nn.functional as F
from dlprim.net.graph import GraphError


def ops_of(model, shape, **kw):
    return model.netconfig(shape, **kw).to_dict()["operators"]


def only_op(model, shape, **kw):
    ops = ops_of(model, shape, **kw)
    assert len(ops) == 1, ops
    return ops[0]


CONV = {"bias": True, "groups": 1, "kernel": [3, 3], "stride": [1, 1], "dilate": [1, 1],
        "pad": [0, 0], "channels_out": 4, "channels_in": 2}

# module, input shape, expected (type, options, params), output shape
MODULES = [
    (nn.Conv2d(2, 4, 3), [1, 2, 5, 5], ("Convolution2D", CONV, ["weight", "bias"]), [1, 4, 3, 3]),
    (nn.Conv2d(2, 4, (3, 1), stride=2, padding=(1, 0), dilation=(1, 2), bias=False), [1, 2, 5, 5],
     ("Convolution2D", dict(CONV, kernel=[3, 1], stride=[2, 2], pad=[1, 0], dilate=[1, 2], bias=False),
      ["weight"]), [1, 4, 3, 3]),
    (nn.Conv2d(4, 4, 4, groups=4, padding="same"), [1, 4, 5, 5],
     ("Convolution2D", dict(CONV, kernel=[4, 4], groups=4, channels_in=4, pad=[1, 1, 2, 2]),
      ["weight", "bias"]), [1, 4, 5, 5]),
    (nn.BatchNorm2d(3, eps=1e-3, momentum=0.2), [2, 3, 2, 2],
     ("BatchNorm", {"eps": 1e-3, "momentum": 0.2},
      ["running_mean", "running_var", "weight", "bias"]), [2, 3, 2, 2]),
    (nn.BatchNorm1d(3, affine=False), [2, 3],
     ("BatchNorm", {"eps": 1e-5, "momentum": 0.1, "affine": False},
      ["running_mean", "running_var"]), [2, 3]),
    (nn.Linear(12, 5), [2, 3, 2, 2],
     ("InnerProduct", {"bias": True, "outputs": 5, "inputs": 12}, ["weight", "bias"]), [2, 5]),
    (nn.Linear(3, 5, bias=False), [2, 3],
     ("InnerProduct", {"bias": False, "outputs": 5, "inputs": 3}, ["weight"]), [2, 5]),
    (nn.ReLU(), [2, 3], ("Activation", {"activation": "relu"}, None), [2, 3]),
    (nn.ReLU6(), [2, 3], ("Activation", {"activation": "relu6"}, None), [2, 3]),
    (nn.Sigmoid(), [2, 3], ("Activation", {"activation": "sigmoid"}, None), [2, 3]),
    (nn.Tanh(), [2, 3], ("Activation", {"activation": "tanh"}, None), [2, 3]),
    (nn.GELU(), [2, 3], ("Activation", {"activation": "gelu"}, None), [2, 3]),
    (nn.GELU("tanh"), [2, 3], ("Activation", {"activation": "gelu_tanh"}, None), [2, 3]),
    (nn.SiLU(), [2, 3], ("Activation", {"activation": "silu"}, None), [2, 3]),
    (nn.LeakyReLU(0.2), [2, 3],
     ("Activation", {"activation": "leaky_relu", "negative_slope": 0.2}, None), [2, 3]),
    (nn.ELU(0.5), [2, 3], ("Activation", {"activation": "elu", "alpha": 0.5}, None), [2, 3]),
    (nn.Softplus(2.0, 10.0), [2, 3],
     ("Activation", {"activation": "softplus", "beta": 2.0, "threshold": 10.0}, None), [2, 3]),
    (nn.Hardtanh(-2.0, 3.0), [2, 3], ("Hardtanh", {"min_val": -2.0, "max_val": 3.0}, None), [2, 3]),
    (nn.MaxPool2d(3, 2, 1), [1, 2, 7, 7],
     ("Pooling2D", {"kernel": [3, 3], "stride": [2, 2], "pad": [1, 1], "count_include_pad": False,
                    "mode": "max"}, None), [1, 2, 4, 4]),
    (nn.AvgPool2d(2, ceil_mode=True), [1, 2, 5, 5],
     ("Pooling2D", {"kernel": [2, 2], "stride": [2, 2], "pad": [0, 0], "count_include_pad": True,
                    "mode": "avg", "ceil_mode": True}, None), [1, 2, 3, 3]),
    (nn.AdaptiveAvgPool2d(1), [1, 2, 5, 5], ("GlobalPooling", {"mode": "avg"}, None), [1, 2, 1, 1]),
    (nn.AdaptiveMaxPool2d((1, 1)), [1, 2, 5, 5], ("GlobalPooling", {"mode": "max"}, None),
     [1, 2, 1, 1]),
    (nn.AdaptiveAvgPool2d(2), [1, 2, 6, 4],
     ("Pooling2D", {"kernel": [3, 2], "stride": [3, 2], "pad": [0, 0], "count_include_pad": False,
                    "mode": "avg"}, None), [1, 2, 2, 2]),
    (nn.Flatten(), [2, 3, 2, 2], ("Flatten", {}, None), [2, 12]),
    (nn.Flatten(2), [2, 3, 2, 2], ("Reshape", {"dims": [0, 0, 4]}, None), [2, 3, 4]),
    (nn.Dropout(0.25, inplace=True), [2, 3], ("Dropout", {"ratio": 0.25}, None), [2, 3]),
    (nn.LayerNorm(4), [2, 3, 4], ("LayerNorm", {"eps": 1e-5}, ["weight", "bias"]), [2, 3, 4]),
    (nn.LayerNorm([3, 4], eps=1e-6, elementwise_affine=False), [2, 3, 4],
     ("LayerNorm", {"eps": 1e-6, "normalized_dims": 2, "affine": False}, None), [2, 3, 4]),
    (nn.GroupNorm(2, 4), [2, 4, 3], ("GroupNorm", {"groups": 2, "eps": 1e-5}, ["weight", "bias"]),
     [2, 4, 3]),
    (nn.Softmax(dim=1), [2, 3], ("Softmax", {}, None), [2, 3]),
    (nn.LogSoftmax(dim=-1), [2, 3], ("Softmax", {"log": True}, None), [2, 3]),
]


@pytest.mark.parametrize("module, shape, expected, out_shape", MODULES,
                         ids=[repr(m[0]) for m in MODULES])
def test_each_module_writes_its_operator(module, shape, expected, out_shape):
    op = only_op(module, shape)
    kind, options, params = expected
    assert (op["type"], op.get("options", {}), op.get("params")) == (kind, options, params)
    # a module alone is named after its class; it reads the net input
    assert op["name"] == type(module).__name__.lower() and op["inputs"] == ["data"]
    inplace = getattr(module, "inplace", False)
    assert op["outputs"] == (["data"] if inplace else [op["name"]])
    assert module.output_shape(shape) == tuple(out_shape)


def test_embedding_takes_integer_indices(ctx):
    emb = nn.Embedding(7, 3, padding_idx=0)
    op = only_op(emb, [2, 4], dtype="int64")
    assert (op["type"], op["options"], op["params"]) == (
        "Embedding", {"num_embeddings": 7, "embedding_dim": 3, "padding_idx": 0}, ["weight"])
    with pytest.raises(GraphError, match=r"^Embedding: takes integer indices, got a float input"):
        emb.netconfig([2, 4])
    net = dp.Net(ctx, emb.netconfig([2, 4], dtype="int64"), mode=dp.PREDICT)
    idx = np.array([[1, 2, 3, 6], [0, 0, 5, 4]], np.int64)
    table = net.get_parameters()["weight"]
    np.testing.assert_array_equal(net(data=idx)[net.output_names[0]], table[idx])


class Block(nn.Module):
    """A residual block as torchvision writes its BasicBlock."""

    def __init__(self, channels, width):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, width, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(width, width, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)

    def forward(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        out = out + x
        return self.relu(out)


def test_a_residual_module_names_its_operators_by_attribute_path():
    model = nn.Sequential(OrderedDict([("stem", nn.Conv2d(1, 4, 1)), ("layer1", nn.Sequential(Block(4, 4)))]))
    ops = ops_of(model, [2, 1, 6, 6])
    assert [(op["name"], op["type"], op["inputs"], op["outputs"]) for op in ops] == [
        ("stem", "Convolution2D", ["data"], ["stem"]),
        ("layer1.0.conv1", "Convolution2D", ["stem"], ["layer1.0.conv1"]),
        ("layer1.0.bn1", "BatchNorm", ["layer1.0.conv1"], ["layer1.0.bn1"]),
        ("layer1.0.relu", "Activation", ["layer1.0.bn1"], ["layer1.0.bn1"]),   # in place
        ("layer1.0.conv2", "Convolution2D", ["layer1.0.bn1"], ["layer1.0.conv2"]),
        ("layer1.0.bn2", "BatchNorm", ["layer1.0.conv2"], ["layer1.0.bn2"]),
        # the sum, named in the block's scope, with the second ReLU folded into it
        ("layer1.0.add", "Elementwise", ["layer1.0.bn2", "stem"], ["layer1.0.add"]),
    ]
    assert ops[-1]["options"] == {"operation": "sum", "activation": "relu"}
    assert "activation" not in ops[0]["options"]   # the stem's output has two readers
    assert ops[2]["params"] == ["layer1.0.bn1.running_mean", "layer1.0.bn1.running_var",
                                "layer1.0.bn1.weight", "layer1.0.bn1.bias"]
    assert model.parameter_names() == [n for op in ops for n in op.get("params", [])]


def test_activation_folds_only_into_a_sole_reader_with_that_epilogue():
    class Net(nn.Module):
        def __init__(self, act):
            super().__init__()
            self.fc, self.act = nn.Linear(3, 3), act

        def forward(self, x):
            return self.act(self.fc(x))

    folded = ops_of(Net(nn.ReLU()), [2, 3])
    assert [op["name"] for op in folded] == ["fc"] and folded[0]["options"]["activation"] == "relu"
    assert folded[0]["outputs"] == ["fc"]
    for act in (nn.LeakyReLU(0.1), nn.GELU(), nn.Softmax(1)):   # no epilogue for these
        assert [op["name"] for op in ops_of(Net(act), [2, 3])] == ["fc", "act"]

    class Both(Net):   # the pre-activation value is an output too: nothing folds
        def forward(self, x):
            y = self.fc(x)
            return y, self.act(y)

    ops = ops_of(Both(nn.ReLU()), [2, 3])
    assert [op["name"] for op in ops] == ["fc", "act"] and "activation" not in ops[0]["options"]
    assert Both(nn.ReLU()).netconfig([2, 3]).outputs == ["fc", "act"]


def test_sequential_naming_slicing_and_module_lists():
    seq = nn.Sequential(nn.Conv2d(1, 2, 3), nn.Sequential(nn.BatchNorm2d(2), nn.ReLU()),
                        nn.Flatten(), nn.Linear(8, 3))
    ops = ops_of(seq, [1, 1, 4, 4])
    assert [op["name"] for op in ops] == ["0", "1.0", "1.1", "2", "3"]
    assert seq.parameter_names() == ["0.weight", "0.bias", "1.0.running_mean", "1.0.running_var",
                                     "1.0.weight", "1.0.bias", "3.weight", "3.bias"]
    assert len(seq) == 4 and isinstance(seq[1][1], nn.ReLU)
    tail = seq[2:]
    assert [n for n, _ in tail.named_children()] == ["2", "3"]   # the names stay
    named = nn.Sequential(OrderedDict([("features", nn.Conv2d(1, 2, 3)), ("act", nn.ReLU())]))
    assert [op["name"] for op in ops_of(named, [1, 1, 4, 4])] == ["features"]   # act folded
    blocks = nn.ModuleList([nn.Linear(3, 3) for _ in range(2)]).append(nn.Linear(3, 1))
    assert [n for n, _ in blocks.named_children()] == ["0", "1", "2"]
    assert "(1): Linear(in_features=3, out_features=3, bias=True)" in repr(blocks)


def test_sequential_names_match_pytorch_state_dict_keys():
    torch = pytest.importorskip("torch")

    def build(lib):
        return lib.Sequential(lib.Conv2d(1, 2, 3), lib.BatchNorm2d(2), lib.ReLU(),
                              lib.Sequential(lib.Linear(8, 4), lib.Linear(4, 2)))

    keys = [k for k in build(torch.nn).state_dict() if not k.endswith("num_batches_tracked")]
    names = build(nn).parameter_names()   # in the operators' order: BatchNorm's statistics first
    assert len(names) == len(keys) and sorted(names) == sorted(keys)


def test_a_module_called_twice_shares_its_parameters(ctx, rng):
    class Twice(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 4)

        def forward(self, x):
            return self.fc(F.relu(self.fc(x)))

    ops = ops_of(Twice(), [3, 4])
    assert [(op["name"], op["params"]) for op in ops] == [
        ("fc", ["fc.weight", "fc.bias"]), ("fc/1", ["fc.weight", "fc.bias"])]
    net = dp.Net(ctx, Twice(), input_shape=[3, 4], mode=dp.PREDICT)
    p = net.get_parameters()
    x = rng.standard_normal((3, 4)).astype(np.float32)
    h = np.maximum(x @ p["fc.weight"].T + p["fc.bias"], 0)
    np.testing.assert_allclose(net(data=x)["fc/1"], h @ p["fc.weight"].T + p["fc.bias"],
                               rtol=1e-5, atol=1e-6)


def test_functional_and_value_methods():
    class Ops(nn.Module):
        def forward(self, x):
            a = x.permute(0, 2, 1)                 # (2, 4, 3)
            b = a.reshape(2, 12).view(2, 3, 4)     # back to x's shape
            c = F.cat([x, b * x, x - b, x / b], dim=1)
            d = F.sigmoid(c) @ x.transpose(1, 2)   # (2, 12, 3)
            return F.softmax(d.flatten(1).relu(), dim=1)

    ops = ops_of(Ops(), [2, 3, 4])
    assert [(op["name"], op["type"]) for op in ops] == [
        ("permute", "Transpose"), ("reshape", "Reshape"), ("reshape/1", "Reshape"),
        ("mul", "Elementwise"), ("sub", "Elementwise"), ("div", "Elementwise"),
        ("cat", "Concat"), ("sigmoid", "Activation"), ("transpose", "Transpose"),
        ("matmul", "MatMul"), ("flatten", "Flatten"), ("relu", "Activation"),
        ("softmax", "Softmax")]
    assert ops[6]["inputs"] == ["data", "mul", "sub", "div"] and ops[6]["options"] == {"dim": 1}
    assert ops[8]["options"] == {"dims": [0, 2, 1]}
    assert Ops().output_shape([2, 3, 4]) == (2, 36)


def test_loss_heads_as_dlprim_models_spells_them():
    cfg = nn.Linear(3, 4).netconfig([5, 3], loss="cross_entropy")
    assert cfg.inputs == [{"name": "data", "shape": [5, 3], "dtype": "float"},
                          {"name": "label", "shape": [5], "dtype": "int"}]
    assert cfg.operators[-1] == {"name": "loss", "type": "SoftmaxWithLoss",
                                 "inputs": ["linear", "label"], "outputs": ["loss"]}
    assert cfg.outputs == ["loss"]
    assert nn.Linear(3, 4).netconfig([5, 3]).outputs == ["linear"]
    assert nn.Linear(3, 4).netconfig([5, 3], loss="nll").operators[-1]["type"] == "NLLLoss"
    cfg = nn.Linear(3, 4).netconfig([5, 3], loss="mse")
    assert cfg.inputs[1] == {"name": "target", "shape": [5, 4], "dtype": "float"}
    assert cfg.operators[-1]["inputs"] == ["linear", "target"]


def test_mse_net_matches_numpy(ctx, rng):
    net = dp.Net(ctx, nn.Linear(3, 2), input_shape=[4, 3], loss="mse", seed=2)
    p = net.get_parameters()
    x = rng.standard_normal((4, 3)).astype(np.float32)
    t = rng.standard_normal((4, 2)).astype(np.float32)
    expected = np.mean((x @ p["weight"].T + p["bias"] - t) ** 2)
    np.testing.assert_allclose(net(data=x, target=t)["loss"], [expected], rtol=1e-5)


def make_small_cnn(lib, functional):
    """The same source for torch.nn and dlprim.nn."""
    class Small(lib.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = lib.Conv2d(3, 6, 3, padding=1, bias=False)
            self.bn1 = lib.BatchNorm2d(6)
            self.relu = lib.ReLU(inplace=True)
            self.conv2 = lib.Conv2d(6, 6, 3, padding=1)
            self.bn2 = lib.BatchNorm2d(6)
            self.pool = lib.MaxPool2d(2)
            self.head = lib.Sequential(lib.Flatten(), lib.Linear(6 * 3 * 3, 8), lib.Tanh(),
                                       lib.Linear(8, 5))

        def forward(self, x):
            x = self.relu(self.bn1(self.conv1(x)))
            out = self.bn2(self.conv2(x))
            x = functional.relu(out + x)
            return self.head(self.pool(x))
    return Small()


def test_small_cnn_matches_pytorch_forward_and_gradients(ctx, rng):
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    reference = make_small_cnn(torch.nn, torch.nn.functional)
    model = make_small_cnn(nn, F)
    x = rng.standard_normal((4, 3, 6, 6)).astype(np.float32)
    labels = np.array([0, 4, 2, 1], np.int32)

    net = dp.Net(ctx, model, input_shape=x.shape, loss="cross_entropy")
    net.set_parameters({k: v.numpy() for k, v in reference.state_dict().items()})
    loss = net(data=x, label=labels)["loss"]
    net.zero_grad()
    net.backward()

    reference.train()
    want = torch.nn.functional.cross_entropy(reference(torch.from_numpy(x)),
                                             torch.from_numpy(labels).long())
    want.backward()
    np.testing.assert_allclose(loss, [want.item()], rtol=1e-5)
    for name, p in reference.named_parameters():
        np.testing.assert_allclose(net.param_diff(name).to_host(), p.grad.numpy(), rtol=1e-4,
                                   atol=1e-5, err_msg=name)
    # the running statistics moved by the same step
    ours = net.get_parameters()
    for name, buf in reference.named_buffers():
        if "running" in name:
            np.testing.assert_allclose(ours[name], buf.numpy(), rtol=1e-5, atol=1e-6, err_msg=name)

    # inference with the model's own output (the logits), weights as they are now
    reference.eval()
    predict = dp.Net(ctx, model, input_shape=x.shape, mode=dp.PREDICT)
    predict.set_parameters({k: v.numpy() for k, v in reference.state_dict().items()})
    with torch.no_grad():
        logits = reference(torch.from_numpy(x)).numpy()
    assert predict.output_names == ["head.3"]
    np.testing.assert_allclose(predict(data=x)["head.3"], logits, rtol=1e-4, atol=1e-5)


def test_linear_along_the_last_axis_matches_pytorch(ctx, rng):
    torch = pytest.importorskip("torch")

    def build(lib):
        return lib.Sequential(lib.Linear(4, 6), lib.GELU(), lib.LayerNorm(6), lib.Linear(6, 3))

    reference, model = build(torch.nn), build(nn)
    x = rng.standard_normal((2, 5, 4)).astype(np.float32)
    net = dp.Net(ctx, model, input_shape=x.shape, mode=dp.PREDICT)
    net.set_parameters({k: v.detach().numpy() for k, v in reference.state_dict().items()})
    with torch.no_grad():
        want = reference(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(net(data=x)[net.output_names[0]], want, rtol=1e-4, atol=1e-5)


# ----- errors
def test_channel_mismatch_names_the_module_path():
    model = nn.Sequential(OrderedDict([("stem", nn.Conv2d(1, 4, 1)),
                                       ("layer1", nn.Sequential(Block(3, 3)))]))
    with pytest.raises(GraphError, match=r"^layer1\.0\.conv1: input has 4 channels, in_channels is 3$"):
        model.netconfig([1, 1, 4, 4])
    with pytest.raises(GraphError, match=r"^bn: input has 2 channels, num_features is 3"):
        nn.Sequential(OrderedDict([("bn", nn.BatchNorm2d(3))])).netconfig([1, 2, 4, 4])
    with pytest.raises(GraphError, match=r"^Conv2d: the 2x2 input is smaller than the kernel"):
        nn.Conv2d(1, 1, 3).netconfig([1, 1, 2, 2])


def test_linear_in_features_mismatch():
    model = nn.Sequential(OrderedDict([("features", nn.Conv2d(1, 2, 3)), ("fc", nn.Linear(10, 3))]))
    with pytest.raises(GraphError, match=r"^fc: input \(1, 2, 3, 3\) flattens to 18 features and "
                                         r"its last axis has 3, in_features is 10$"):
        model.netconfig([1, 1, 5, 5])
    with pytest.raises(GraphError, match=r"^Linear: input has 5 features, in_features is 4$"):
        nn.Linear(4, 2).netconfig([3, 5])


def test_unknown_loss_lists_the_accepted_ones():
    with pytest.raises(GraphError, match=r"unknown loss 'crossentropy'; accepted: cross_entropy, "
                                         r"mse, nll, or None"):
        nn.Linear(3, 2).netconfig([1, 3], loss="crossentropy")
    with pytest.raises(GraphError, match=r"needs \(batch, classes\) scores"):
        nn.Conv2d(1, 2, 1).netconfig([1, 1, 2, 2], loss="cross_entropy")


def test_net_needs_an_input_shape_for_a_model_and_only_then(ctx):
    with pytest.raises(GraphError, match=r"Net: a Linear model has no input shape of its own; "
                                         r"pass input_shape="):
        dp.Net(ctx, nn.Linear(3, 2))
    with pytest.raises(GraphError, match=r"unknown loss"):
        dp.Net(ctx, nn.Linear(3, 2), input_shape=[1, 3], loss="hinge")
    cfg = nn.Linear(3, 2).netconfig([1, 3])
    with pytest.raises(GraphError, match=r"input_shape and loss are for dlprim.nn models, not "
                                         r"for a NetConfig"):
        dp.Net(ctx, cfg, input_shape=[1, 3])
    with pytest.raises(GraphError, match=r"not for a NetConfig"):
        dp.Net(ctx, cfg, loss="cross_entropy")
    with pytest.raises(GraphError, match=r"input_shape\[1\] is 2.5"):
        nn.Linear(3, 2).netconfig([1, 2.5])


def test_what_a_plain_pooling_cannot_express_is_an_error():
    with pytest.raises(GraphError, match=r"avgpool: adaptive_avg_pool2d to 6x6 of a 4x4 input has "
                                         r"no plain pooling"):
        nn.Sequential(OrderedDict([("avgpool", nn.AdaptiveAvgPool2d(6))])).netconfig([1, 1, 4, 4])
    with pytest.raises(GraphError, match=r"softmax works over axis 1"):
        nn.Softmax(dim=2).netconfig([1, 2, 3])
    with pytest.raises(ValueError, match=r"padding \(2, 2\) must be at most half"):
        nn.MaxPool2d(2, padding=2)


def test_misuse_is_explained():
    class Fresh(nn.Module):
        def forward(self, x):
            return nn.Linear(3, 3)(x)   # new weights at every call: refused

    with pytest.raises(GraphError, match=r"linear: a Linear has parameters, so it must be assigned"):
        Fresh().netconfig([1, 3])

    class Forgot(nn.Module):
        def __init__(self):
            self.fc = nn.Linear(3, 3)

    with pytest.raises(TypeError, match=r"call super\(\).__init__\(\) before assigning"):
        Forgot()
    with pytest.raises(TypeError, match=r"runs on the symbolic Values"):
        nn.Linear(3, 2)(np.zeros((1, 3), np.float32))

    class Branchy(nn.Module):
        def forward(self, x):
            return x if x else x

    with pytest.raises(TypeError, match=r"cannot decide an if"):
        Branchy().netconfig([1, 3])

    class Scalar(nn.Module):
        def forward(self, x):
            return x * 2.0

    with pytest.raises(TypeError, match=r"mul combines two Values"):
        Scalar().netconfig([1, 3])
    with pytest.raises(GraphError, match=r"the model's output is its input"):
        nn.Identity().netconfig([1, 3])
    with pytest.raises(ValueError, match=r"groups \(2\) must divide in_channels \(3\)"):
        nn.Conv2d(3, 4, 1, groups=2)
