"""Careless and hostile input: sizes, graphs, net inputs and labels.

Every case must raise a dlprim.Error subclass that is also the fitting built-in exception,
with a message naming the culprit (the option, the place in the JSON, the net input, the
layer, the bad value and its position). One net serves all the cases that call it: after
each refusal it must still be usable (the last tests check that it is).
"""
import json

import numpy as np
import pytest

import dlprim as dp
from dlprim import models
from dlprim.errors import InputError, LabelError
from dlprim.layers import LayerError, create
from dlprim.layers.base import ParamSpec, TensorSpec
from dlprim.net.graph import GraphError, load_graph

BATCH = 4


@pytest.fixture(scope="module")
def lenet(ctx):
    return dp.Net(ctx, models.lenet(batch=BATCH), seed=0)


def images(channels=1, size=28, batch=BATCH, dtype=np.float32):
    return np.zeros((batch, channels, size, size), dtype)


LABELS = np.array([0, 1, 2, 3], np.int32)


def graph(inputs=None, operators=None, outputs=None):
    return {"inputs": [{"name": "x", "shape": [2, 3]}] if inputs is None else inputs,
            "outputs": ["y"] if outputs is None else outputs,
            "operators": [{"name": "y", "type": "Activation", "inputs": ["x"], "outputs": ["y"],
                           "options": {"activation": "relu"}}] if operators is None else operators}


def op(**changes):
    d = {"name": "y", "type": "Activation", "inputs": ["x"], "outputs": ["y"],
         "options": {"activation": "relu"}}
    d.update(changes)
    return d


def loss_net(ctx, type_name="SoftmaxWithLoss", label_dtype="int", label_shape=(4,), **options):
    return dp.Net(ctx, {"inputs": [{"name": "x", "shape": [4, 3]},
                                   {"name": "t", "shape": list(label_shape), "dtype": label_dtype}],
                        "outputs": ["loss"],
                        "operators": [{"name": "lossy", "type": type_name, "inputs": ["x", "t"],
                                       "outputs": ["loss"], "options": options}]})


def bn_net(ctx):
    cfg = dp.NetConfig()
    cfg.add_input("x", (2, 3, 4, 4))
    cfg.add("BatchNorm", name="bn")
    cfg.set_outputs(["bn"])
    return dp.Net(ctx, cfg)


def layer(ctx, type_name, **options):
    return lambda: create(ctx, type_name, "op1", options)


def cfg_input(shape, dtype="float"):
    return lambda: dp.NetConfig().add_input("img", shape, dtype)


def with_file(tmp_path, content):
    path = tmp_path / "net.json"
    path.write_bytes(content)
    return str(path)


X = np.zeros((4, 3), np.float32)

# (id, make(ctx, lenet, tmp_path) -> the call that must fail, class, built-in, pattern)
CASES = [
    # sizes: shapes and size options are integers, never truncated
    ("spec-float", lambda c, n, p: lambda: TensorSpec((2, 8.9)), LayerError, ValueError,
     r"TensorSpec shape\[1\] is 8\.9 \(float\), not an integer"),
    ("spec-bool", lambda c, n, p: lambda: TensorSpec((True, 3)), LayerError, ValueError,
     r"shape\[0\] is True \(bool\)"),
    ("spec-str", lambda c, n, p: lambda: TensorSpec(("2", 3)), LayerError, ValueError,
     r"shape\[0\] is '2' \(str\)"),
    ("spec-negative", lambda c, n, p: lambda: TensorSpec((2, -1)), LayerError, ValueError,
     r"shape\[1\] is -1, a size must not be negative"),
    ("param-spec-float", lambda c, n, p: lambda: ParamSpec((3.5,)), LayerError, ValueError,
     r"ParamSpec shape\[0\] is 3\.5"),
    ("setup-spec", lambda c, n, p: lambda: create(c, "Activation", "act", {}).setup(
        [((2, 8.9), "float32")]), LayerError, ValueError,
     r"Activation 'act': input 0: TensorSpec shape\[1\] is 8\.9"),
    ("json-shape-float", lambda c, n, p: lambda: load_graph(graph([{"name": "x",
                                                                    "shape": [2, 8.9]}])),
     GraphError, ValueError, r"net input 'x': inputs\[0\]\.shape\[1\] is 8\.9"),
    ("json-shape-str-elem", lambda c, n, p: lambda: load_graph(graph([{"name": "x",
                                                                       "shape": [2, "3"]}])),
     GraphError, ValueError, r"inputs\[0\]\.shape\[1\] is '3'"),
    ("json-shape-str", lambda c, n, p: lambda: load_graph(graph([{"name": "x",
                                                                  "shape": "2x3"}])),
     GraphError, ValueError, r"inputs\[0\]\.shape must be a list of integers, got str '2x3'"),
    ("json-shape-bool", lambda c, n, p: lambda: load_graph(graph([{"name": "x",
                                                                   "shape": [2, True]}])),
     GraphError, ValueError, r"inputs\[0\]\.shape\[1\] is True"),
    ("netconfig-float", lambda c, n, p: cfg_input((2, 8.9)), GraphError, ValueError,
     r"add_input\('img'\): shape\[1\] is 8\.9"),
    ("netconfig-str", lambda c, n, p: cfg_input((2, "3")), GraphError, ValueError,
     r"add_input\('img'\): shape\[1\] is '3'"),
    ("netconfig-dtype", lambda c, n, p: cfg_input((2, 3), "floaty"), GraphError, ValueError,
     r"add_input\('img'\): dtype 'floaty' is unknown"),
    ("conv-channels-float", lambda c, n, p: layer(c, "Convolution2D", channels_out=8.9, kernel=3),
     LayerError, ValueError, r"Convolution2D 'op1': option 'channels_out'.*8\.9"),
    ("conv-channels-bool", lambda c, n, p: layer(c, "Convolution2D", channels_out=True, kernel=3),
     LayerError, ValueError, r"Convolution2D 'op1': option 'channels_out'.*True"),
    ("conv-kernel-str", lambda c, n, p: layer(c, "Convolution2D", channels_out=8, kernel="3"),
     LayerError, ValueError, r"option 'kernel' must be an int or \[h, w\], got '3'"),
    ("conv-kernel-float", lambda c, n, p: layer(c, "Convolution2D", channels_out=8,
                                                kernel=[3, 2.5]),
     LayerError, ValueError, r"option 'kernel'.*2\.5"),
    ("conv-stride-bool", lambda c, n, p: layer(c, "Convolution2D", channels_out=8, kernel=3,
                                               stride=True),
     LayerError, ValueError, r"option 'stride'.*True"),
    ("conv-pad4-float", lambda c, n, p: layer(c, "Convolution2D", channels_out=8, kernel=3,
                                              pad=[1, 1, 1, 0.5]),
     LayerError, ValueError, r"option 'pad'.*0\.5"),
    ("conv-groups-float", lambda c, n, p: layer(c, "Convolution2D", channels_out=8, kernel=3,
                                                groups=1.0),
     LayerError, ValueError, r"option 'groups'.*1\.0"),
    ("ip-outputs-float", lambda c, n, p: layer(c, "InnerProduct", outputs=10.5),
     LayerError, ValueError, r"InnerProduct 'op1': option 'outputs'.*10\.5"),
    ("ip-outputs-bool", lambda c, n, p: layer(c, "InnerProduct", outputs=False),
     LayerError, ValueError, r"option 'outputs'.*False"),
    ("bn-features-float", lambda c, n, p: layer(c, "BatchNorm", features=3.0),
     LayerError, ValueError, r"BatchNorm 'op1': option 'features'.*3\.0"),
    ("pool-kernel-float", lambda c, n, p: layer(c, "Pooling2D", kernel=2.5),
     LayerError, ValueError, r"Pooling2D 'op1': option 'kernel'.*2\.5"),
    ("parameter-shape", lambda c, n, p: layer(c, "Parameter", shape=[2, 2.5]),
     LayerError, ValueError, r"Parameter 'op1': option 'shape'.*2\.5"),
    ("reshape-dims", lambda c, n, p: layer(c, "Reshape", dims=[2, 1.5]),
     LayerError, ValueError, r"Reshape 'op1'.*1\.5"),
    ("lrn-size-bool", lambda c, n, p: layer(c, "LRN", size=True),
     LayerError, ValueError, r"LRN 'op1': option 'size'.*True"),
    ("loss-ignore-str", lambda c, n, p: layer(c, "SoftmaxWithLoss", ignore_index="none"),
     LayerError, ValueError, r"SoftmaxWithLoss 'op1': option 'ignore_index'.*'none'"),
    ("loss-ignore-float", lambda c, n, p: layer(c, "NLLLoss", ignore_index=-100.5),
     LayerError, ValueError, r"NLLLoss 'op1': option 'ignore_index'.*-100\.5"),
    # graphs: malformed structure at any depth names its place in the JSON
    ("json-top-list", lambda c, n, p: lambda: load_graph("[1, 2]"), GraphError, ValueError,
     r"a net must be a JSON object, got list"),
    ("json-inputs-str", lambda c, n, p: lambda: load_graph({"inputs": "data"}),
     GraphError, ValueError, r"inputs must be a list, got str 'data'"),
    ("json-input-str", lambda c, n, p: lambda: load_graph(graph(["x"])), GraphError, ValueError,
     r"inputs\[0\] must be an object \{name, shape, dtype\}, got str 'x'"),
    ("json-input-key", lambda c, n, p: lambda: load_graph(graph([{"name": "x", "shape": [2],
                                                                  "dtpye": "int"}])),
     GraphError, ValueError, r"net input 'x': inputs\[0\]: unknown key 'dtpye'"),
    ("json-input-dtype", lambda c, n, p: lambda: load_graph(graph([{"name": "x", "shape": [2],
                                                                    "dtype": "floaty"}])),
     GraphError, ValueError, r"inputs\[0\]\.dtype is str 'floaty'"),
    ("json-requires-grad", lambda c, n, p: lambda: load_graph(graph([{
        "name": "x", "shape": [2], "requires_grad": "yes"}])), GraphError, ValueError,
     r"inputs\[0\]\.requires_grad must be true or false"),
    ("json-operator-str", lambda c, n, p: lambda: load_graph(graph(operators=[op(), "conv"])),
     GraphError, ValueError, r"operators\[1\] must be an object .*got str 'conv'"),
    ("json-options-list", lambda c, n, p: lambda: load_graph(graph(operators=[op(options=[1])])),
     GraphError, ValueError, r"operator 'y': operators\[0\]\.options must be an object"),
    ("json-op-inputs-str", lambda c, n, p: lambda: load_graph(graph(operators=[op(inputs="x")])),
     GraphError, ValueError, r"operators\[0\]\.inputs must be a list of names, got str 'x'"),
    ("json-op-input-int", lambda c, n, p: lambda: load_graph(graph(operators=[op(inputs=[1])])),
     GraphError, ValueError, r"operators\[0\]\.inputs\[0\]: 1 is not a tensor name"),
    ("json-op-type", lambda c, n, p: lambda: load_graph(graph(operators=[op(type=3)])),
     GraphError, ValueError, r"operator 'y': operators\[0\]\.type: no type, got int 3"),
    ("json-frozen-str", lambda c, n, p: lambda: load_graph(graph(operators=[op(frozen="yes")])),
     GraphError, ValueError, r"operators\[0\]\.frozen must be true or false"),
    ("json-output-int", lambda c, n, p: lambda: load_graph(graph(outputs=[5])),
     GraphError, ValueError, r"net output outputs\[0\] has no name"),
    ("json-loss-weight", lambda c, n, p: lambda: load_graph(graph(outputs=[
        {"name": "y", "loss_weight": "high"}])), GraphError, ValueError,
     r"net output 'y': outputs\[0\]\.loss_weight must be a number"),
    ("json-file-text", lambda c, n, p: lambda: dp.Net(c).load_from_json_file(
        with_file(p, b"conv1 -> relu -> fc\n")), GraphError, ValueError,
     r"file '.*net\.json' is not a JSON net .*starts with b'conv1"),
    ("json-file-binary", lambda c, n, p: lambda: dp.Net(c).load_from_json_file(
        with_file(p, b"DLPW\x00\x00\x00\x10\xff\xfe")), GraphError, ValueError,
     r"file '.*net\.json' is not a JSON net.*DLPW"),
    ("json-text", lambda c, n, p: lambda: dp.Net(c).load_from_json("resnet18.json"),
     GraphError, ValueError, r"the text given to load_from_json is not a JSON net"),
    ("json-broken", lambda c, n, p: lambda: load_graph('{"inputs": ['), GraphError, ValueError,
     r"the net text is not a JSON net"),
    # net inputs: every needed input, numbers of the input's kind
    ("net-missing-label", lambda c, n, p: lambda: n(data=images()), InputError, ValueError,
     r"input 'label' is missing \(read by SoftmaxWithLoss 'loss'\)"),
    ("net-unknown-input", lambda c, n, p: lambda: n(data=images(), label=LABELS, lable=LABELS),
     InputError, ValueError, r"'lable' is not a net input; inputs: data, label"),
    ("net-int-data", lambda c, n, p: lambda: n(data=images(dtype=np.int32), label=LABELS),
     InputError, ValueError, r"net input 'data' is float32 \(read by Convolution2D 'conv1'\); "
                             r"got int32 data"),
    ("net-bool-data", lambda c, n, p: lambda: n(data=images(dtype=bool), label=LABELS),
     InputError, ValueError, r"net input 'data' is float32 .*; got bool data"),
    ("net-str-data", lambda c, n, p: lambda: n(data="images", label=LABELS),
     InputError, ValueError, r"net input 'data' .*takes numbers; got str"),
    ("net-ragged-data", lambda c, n, p: lambda: n(data=[[1.0], [1.0, 2.0]], label=LABELS),
     InputError, ValueError, r"net input 'data'"),
    ("net-complex-data", lambda c, n, p: lambda: n(data=images(dtype=np.complex64), label=LABELS),
     InputError, ValueError, r"net input 'data' .*got complex64 data"),
    ("net-channels", lambda c, n, p: lambda: n(data=images(channels=3), label=LABELS),
     LayerError, ValueError, r"Convolution2D 'conv1': input has 3 channels, the layer was set "
                             r"up for 1.*net input 'data' is now \(4, 3, 28, 28\), was "
                             r"\(4, 1, 28, 28\)"),
    ("net-image-size", lambda c, n, p: lambda: n(data=images(size=32), label=LABELS),
     LayerError, ValueError, r"InnerProduct 'fc1': input has 4096 features .*set up for 3136"
                             r".*net input 'data' is now"),
    ("net-rank", lambda c, n, p: lambda: n(data=np.zeros((4, 784), np.float32), label=LABELS),
     LayerError, ValueError, r"Convolution2D 'conv1': input must be \(N, C, H, W\).*"
                             r"net input 'data' is now \(4, 784\)"),
    ("net-label-count", lambda c, n, p: lambda: n(data=images(), label=np.arange(5)),
     LayerError, ValueError, r"SoftmaxWithLoss 'loss': labels must have shape \(4,\).*"
                             r"net input 'label' is now \(5,\)"),
    ("net-bn-channels", lambda c, n, p: lambda: bn_net(c)(x=np.zeros((2, 5, 4, 4), np.float32)),
     LayerError, ValueError, r"BatchNorm 'bn': input has 5 channels, the layer was set up for 3 "
                             r"\(net input 'x' is now \(2, 5, 4, 4\)"),
    ("reshape-unknown", lambda c, n, p: lambda: n.reshape(dta=(4, 1, 28, 28)),
     InputError, ValueError, r"reshape: 'dta' is not a net input"),
    ("reshape-float", lambda c, n, p: lambda: n.reshape(data=(4, 1, 28.5, 28)),
     InputError, ValueError, r"net input 'data' shape\[2\] is 28\.5"),
    ("int-input-overflow", lambda c, n, p: lambda: dp.Net(c, {
        "inputs": [{"name": "x", "shape": [2], "dtype": "int"}], "outputs": ["x"],
        "operators": []})(x=np.array([1, 2 ** 40])), InputError, ValueError,
     r"net input 'x' is int32; value 1099511627776 at position \(1,\) does not fit"),
    # labels: integers in [0, classes) or ignore_index
    ("label-too-big", lambda c, n, p: lambda: n(data=images(), label=np.array([0, 1, 10, 2])),
     LabelError, ValueError, r"SoftmaxWithLoss 'loss': label 10 at position 2 of net input "
                             r"'label' .*\[0, 10\) or ignore_index \(-100\)"),
    ("label-negative", lambda c, n, p: lambda: n(data=images(), label=np.array([-1, 1, 2, 3])),
     LabelError, ValueError, r"label -1 at position 0 of net input 'label'"),
    ("label-float", lambda c, n, p: lambda: n(data=images(), label=LABELS.astype(np.float64)),
     LabelError, ValueError, r"SoftmaxWithLoss 'loss': labels \(net input 'label'\) must be "
                             r"integers, got float64 data; the input is int32"),
    ("label-fraction", lambda c, n, p: lambda: loss_net(c, label_dtype="float")(
        x=X, t=np.array([0, 1.5, 2, 0], np.float32)), LabelError, ValueError,
     r"SoftmaxWithLoss 'lossy': label 1\.5 at position 1 of net input 't'"),
    ("label-nan", lambda c, n, p: lambda: loss_net(c, label_dtype="float")(
        x=X, t=np.array([0, 1, np.nan, 0], np.float32)), LabelError, ValueError,
     r"label nan at position 2 of net input 't'"),
    ("label-nll", lambda c, n, p: lambda: loss_net(c, "NLLLoss", reduce="sum")(
        x=X, t=np.array([0, 3, 1, 0])), LabelError, ValueError,
     r"NLLLoss 'lossy': label 3 at position 1 .*\[0, 3\)"),
    ("label-2d-position", lambda c, n, p: lambda: loss_net(c, label_shape=(4, 1))(
        x=X, t=np.array([[0], [1], [2], [7]])), LabelError, ValueError,
     r"label 7 at position \(3, 0\)"),
    ("label-other-ignore", lambda c, n, p: lambda: loss_net(c, ignore_index=255)(
        x=X, t=np.array([0, 255, -100, 1])), LabelError, ValueError,
     r"label -100 at position 2 .*ignore_index \(255\)"),
]


@pytest.mark.parametrize("make, error, builtin, pattern", [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_refused_with_a_message_naming_the_culprit(ctx, lenet, tmp_path, make, error, builtin,
                                                   pattern):
    call = make(ctx, lenet, tmp_path)
    with pytest.raises(error, match=pattern) as info:
        call()
    assert isinstance(info.value, dp.Error) and isinstance(info.value, builtin)


def test_the_net_still_runs_after_every_refusal(ctx, lenet):
    # the refused calls above (wrong channels, sizes, labels) left no half-reshaped state
    rng = np.random.default_rng(0)
    x = rng.standard_normal((BATCH, 1, 28, 28)).astype(np.float32)
    got = lenet(data=x, label=LABELS)["loss"]
    fresh = dp.Net(ctx, models.lenet(batch=BATCH), seed=0)
    assert np.array_equal(got, fresh(data=x, label=LABELS)["loss"])
    assert lenet.tensor("data").shape == (BATCH, 1, 28, 28)


def test_what_is_accepted(ctx, lenet):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((BATCH, 1, 28, 28))
    want = lenet(data=x.astype(np.float32), label=LABELS)["loss"]
    # float64 data is converted; int64 and uint8 labels too; ignore_index is a label
    assert np.array_equal(lenet(data=x, label=LABELS.astype(np.int64))["loss"], want)
    assert np.array_equal(lenet(data=x, label=LABELS.astype(np.uint8))["loss"], want)
    assert np.isfinite(lenet(data=x, label=np.array([0, -100, 2, 3]))["loss"]).all()
    # integral floats for a float32 label input
    assert np.isfinite(loss_net(ctx, label_dtype="float")(
        x=X, t=np.array([0, 1, 2, -100], np.float32))["loss"]).all()


def test_the_dlprimitives_style_writes_buffers_unchecked(ctx):
    # tensor(name).to_device + forward: no host check, and an out-of-range label that gets
    # there counts as ignored rather than reading outside the row
    net = loss_net(ctx)
    net.tensor("x").to_device(np.ones((4, 3), np.float32))
    net.tensor("t").to_device(np.array([0, 1, 2, 9], np.int32))
    net.forward()
    np.testing.assert_allclose(net.tensor("loss").to_host(), [np.log(3)], rtol=1e-6)


def test_an_input_no_operator_reads_may_be_left_out(ctx):
    net = dp.Net(ctx, {"inputs": [{"name": "x", "shape": [2]}, {"name": "unused", "shape": [2]}],
                       "outputs": ["y"],
                       "operators": [{"name": "y", "type": "Activation", "inputs": ["x"],
                                      "outputs": ["y"], "options": {"activation": "relu"}}]})
    np.testing.assert_array_equal(net(x=np.array([-1, 2], np.float32))["y"], [0, 2])


def test_a_net_file_still_loads_by_path(ctx, tmp_path):
    path = tmp_path / "net.json"
    path.write_text(json.dumps(graph()))
    net = dp.Net(ctx)
    net.load_from_json_file(str(path))
    net.setup()
    assert net.input_names == ["x"]
    assert load_graph(str(path)).inputs["x"][0] == (2, 3)
