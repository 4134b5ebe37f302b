"""The graph passes (dlprim/net/passes.py): each rule on small NetConfigs, and one result
for the same model from every front end. No device is needed."""
import numpy as np
import pytest

from dlprim.net import passes
from dlprim.net.netconfig import NetConfig


def conv_relu(inplace=False, activation="relu", conv_activation=None, **act_options):
    """data -> conv -> relu (-> the net output, unless the caller sets others)."""
    cfg = NetConfig()
    cfg.add_input("data", [2, 3, 8, 8])
    options = {"channels_out": 4, "kernel": 3}
    if conv_activation:
        options["activation"] = conv_activation
    cfg.add("Convolution2D", name="conv", options=options)
    cfg.add("Activation", name="relu", options=dict(activation=activation, **act_options),
            inplace=inplace)
    cfg.set_outputs([cfg.last])
    return cfg


def types(cfg):
    return [op["type"] for op in cfg.operators]


@pytest.mark.parametrize("inplace", [False, True])
def test_an_activation_folds_into_its_producer_and_keeps_its_output_name(inplace):
    cfg = conv_relu(inplace)
    before = cfg.to_dict()
    out = passes.run(cfg)
    assert cfg.to_dict() == before, "run must leave its argument as it was"
    assert types(out) == ["Convolution2D"]
    conv = out.operators[0]
    assert conv["options"]["activation"] == "relu"
    assert conv["outputs"] == (["conv"] if inplace else ["relu"]) == out.outputs
    assert out.last == conv["outputs"][0]


@pytest.mark.parametrize("producer, activation", [("Elementwise", "sigmoid"),
                                                  ("InnerProduct", "relu6"),
                                                  ("TransposedConvolution2D", "tanh")])
def test_every_producer_in_the_table_takes_its_activations(producer, activation):
    cfg = NetConfig()
    cfg.add_input("a", [2, 4])
    cfg.add(producer, name="p", inputs=["a", "a"] if producer == "Elementwise" else ["a"])
    cfg.add("Activation", name="act", options={"activation": activation})
    cfg.set_outputs(["act"])
    out = passes.run(cfg)
    assert types(out) == [producer] and out.operators[0]["options"]["activation"] == activation


def test_nothing_folds_where_the_kernel_cannot_apply_it():
    # Elementwise takes only activations whose gradient follows from y; no BatchNorm option
    cfg = NetConfig()
    cfg.add_input("a", [2, 4, 3, 3])
    cfg.add("Elementwise", name="sum", inputs=["a", "a"])
    cfg.add("Activation", name="gelu", options={"activation": "gelu"})
    cfg.add("BatchNorm", name="bn")
    cfg.add("Activation", name="relu", options={"activation": "relu"})
    cfg.set_outputs(["relu"])
    assert passes.run(cfg).to_dict() == cfg.to_dict()


@pytest.mark.parametrize("activation", ["gelu", "gelu_tanh", "silu"])
def test_inference_only_epilogues_fold_only_by_the_inference_rules(activation):
    # their gradients need the product's output, which the epilogue does not keep: a net
    # that trains keeps them apart; one that never runs backward folds them
    cfg = NetConfig()
    cfg.add_input("a", [2, 4])
    cfg.add("InnerProduct", name="fc", options={"outputs": 3})
    cfg.add("Activation", name="act", options={"activation": activation})
    cfg.add("Convolution2D", name="conv", inputs=["a"], options={"channels_out": 2, "kernel": 1})
    cfg.add("Activation", name="act2", options={"activation": activation})
    cfg.set_outputs(["act", "act2"])
    assert passes.run(cfg).to_dict() == cfg.to_dict()
    out = passes.run(cfg, passes.INFERENCE_RULES)
    assert types(out) == ["InnerProduct", "Convolution2D", "Activation"]  # (conv: training's only)
    assert out.operators[0]["options"]["activation"] == activation
    assert out.operators[0]["outputs"] == ["act"]


def test_no_fold_when_a_second_operator_reads_the_value():
    cfg = conv_relu()
    cfg.add("Elementwise", name="sum", inputs=["relu", "conv"])
    cfg.set_outputs(["sum"])
    assert passes.run(cfg).to_dict() == cfg.to_dict()


@pytest.mark.parametrize("inplace", [False, True])
def test_no_fold_when_the_value_is_a_net_output(inplace):
    cfg = conv_relu()
    cfg.set_outputs(["conv", "relu"])
    assert passes.run(cfg).to_dict() == cfg.to_dict()
    # in place, "conv" names the activation's output: the convolution's value is no output
    folded = passes.run(conv_relu(inplace=True))
    assert types(folded) == ["Convolution2D"] and folded.outputs == ["conv"]


def test_no_fold_when_the_producer_already_has_an_activation():
    cfg = conv_relu(activation="sigmoid", conv_activation="relu")
    assert passes.run(cfg).to_dict() == cfg.to_dict()


def test_no_fold_for_an_activation_with_parameters_or_identity():
    for cfg in (conv_relu(negative_slope=0.1, activation="leaky_relu"),
                conv_relu(activation="relu", negative_slope=0.01),
                conv_relu(activation="identity")):
        assert passes.run(cfg).to_dict() == cfg.to_dict()


def test_a_chain_folds_once():
    cfg = conv_relu()
    cfg.add("Activation", name="sig", options={"activation": "sigmoid"})
    cfg.set_outputs(["sig"])
    out = passes.run(cfg)
    assert types(out) == ["Convolution2D", "Activation"]
    assert out.operators[0]["options"]["activation"] == "relu"
    assert out.operators[1]["inputs"] == ["relu"]


def test_no_fold_that_would_move_a_write_over_a_pending_read():
    # "relu" names an older value read between the convolution and the activation
    cfg = NetConfig()
    cfg.add_input("relu", [2, 4])
    cfg.add("InnerProduct", name="fc", inputs=["relu"], options={"outputs": 4})
    cfg.add("Elementwise", name="sum", inputs=["relu", "relu"])
    cfg.add("Activation", name="act", inputs=["fc"], outputs=["relu"],
            options={"activation": "relu"})
    cfg.set_outputs(["relu", "sum"])
    assert passes.run(cfg).to_dict() == cfg.to_dict()


def reshaped(extra_reader=False):
    """An InnerProduct over rows, reshaped to (N, L, C), then a relu."""
    cfg = NetConfig()
    cfg.add_input("x", [6, 4])
    cfg.add("InnerProduct", name="fc", options={"outputs": 5})
    cfg.add("Reshape", name="view", options={"dims": [2, 3, 5]})
    cfg.add("Activation", name="relu", options={"activation": "relu"})
    outputs = ["relu"]
    if extra_reader:
        cfg.add("Elementwise", name="sum", inputs=["fc", "fc"])
        outputs.append("sum")
    cfg.set_outputs(outputs)
    return cfg


def test_an_activation_after_a_reshape_folds_into_the_layer_before_it():
    out = passes.run(reshaped())
    assert types(out) == ["InnerProduct", "Reshape"]
    assert out.operators[0]["options"]["activation"] == "relu"
    assert out.operators[1]["outputs"] == ["relu"] == out.outputs
    # the layer's output is read again: the activation cannot go into it
    cfg = reshaped(extra_reader=True)
    assert passes.run(cfg).to_dict() == cfg.to_dict()


def _anonymous(cfg):
    """``cfg`` with operator, tensor and parameter names replaced by their order."""
    names = {}

    def n(name):
        return names.setdefault(name, "t%d" % len(names))
    return ([n(i["name"]) for i in cfg.inputs],
            [(op["type"], [n(x) for x in op["inputs"]], [n(y) for y in op["outputs"]],
              op.get("options", {})) for op in cfg.operators],
            [n(o) for o in cfg.outputs])


def test_dlprim_nn_and_onnx_give_the_same_net():
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper
    import dlprim.nn as nn
    import dlprim.onnx as dox

    model = nn.Sequential(nn.Linear(4, 5), nn.ReLU(), nn.Linear(5, 3), nn.Sigmoid())
    ours = model.netconfig((2, 4))
    arrays = {n: np.ones(s, np.float32) for n, s in
              [("w1", (5, 4)), ("b1", (5,)), ("w2", (3, 5)), ("b2", (3,))]}
    node = helper.make_node
    graph = helper.make_graph(
        [node("Gemm", ["x", "w1", "b1"], ["h"], transB=1), node("Relu", ["h"], ["a"]),
         node("Gemm", ["a", "w2", "b2"], ["y"], transB=1), node("Sigmoid", ["y"], ["out"])],
        "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(a, n) for n, a in arrays.items()])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    proto.ir_version = 8
    imported, _ = dox.to_netconfig(proto.SerializeToString())
    assert types(imported) == ["InnerProduct", "InnerProduct"]
    assert _anonymous(imported) == _anonymous(ours)
    # and the passes find nothing more to do in either
    assert passes.run(imported).to_dict() == imported.to_dict()
    assert passes.run(ours).to_dict() == ours.to_dict()


def test_dlprim_nn_folds_through_the_reshapes_of_a_linear_over_sequences(ctx):
    import dlprim as dp
    import dlprim.nn as nn

    model = nn.Sequential(nn.Linear(4, 5), nn.ReLU())
    cfg = model.netconfig((2, 3, 4))
    assert types(cfg) == ["Reshape", "InnerProduct", "Reshape"]
    assert cfg.operators[1]["options"]["activation"] == "relu"
    assert cfg.outputs == cfg.operators[2]["outputs"]
    net = dp.Net(ctx, cfg)
    w = np.random.RandomState(0).randn(5, 4).astype(np.float32)
    b = np.random.RandomState(1).randn(5).astype(np.float32)
    net.param("0.weight").to_device(w)
    net.param("0.bias").to_device(b)
    x = np.random.RandomState(2).randn(2, 3, 4).astype(np.float32)
    y = net(data=x)[cfg.outputs[0]]
    assert np.allclose(y, np.maximum(x @ w.T + b, 0), atol=1e-5)
