"""DLPrimitives' Python names one by one: ONNXModel, Shape, the dtype constants,
NetConfig.to_json/to_str, Context.is_opencl_context, execution-context properties,
in-place reshapes and net tensors that stay valid across re-plans."""
import json

import numpy as np
import pytest

import dlprim as dp
from dlprim.onnx import OnnxImportError

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402


def conv_model(dims=("n", 3, "h", "w"), seed=0):
    """x (dims) -> Conv 3x3 -> Relu -> GlobalAveragePool -> Flatten -> y; ONNX bytes."""
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    b = rng.standard_normal(4).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("GlobalAveragePool", ["r"], ["g"]),
             helper.make_node("Flatten", ["g"], ["y"])]
    graph = helper.make_graph(nodes, "tiny",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(dims))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    return model.SerializeToString()


def test_onnx_model_dynamic_axes_beyond_the_batch(ctx, tmp_path):
    path = tmp_path / "tiny.onnx"
    path.write_bytes(conv_model())
    model = dp.ONNXModel()
    model.load(str(path))
    assert model.input_shapes == {"x": [0, 3, 0, 0]}
    assert model.dynamic_axes == {"x": [0, 2, 3]}
    model.set_batch(2)
    with pytest.raises(OnnxImportError, match=r"'x' axes \[2, 3\].*set_dynamic_axis"):
        model.build()
    model.set_dynamic_axis("x", 2, 5)
    model.set_dynamic_axis("x", 3, np.int64(7))   # numpy sizes as well
    assert model.input_shapes == {"x": [2, 3, 5, 7]}
    model.build()
    graph = json.loads(model.network)
    assert graph["inputs"][0]["shape"] == [2, 3, 5, 7] and graph["outputs"] == ["y"]
    assert sorted(model.parameters) == ["b", "w"]

    net = dp.Net(ctx)
    net.mode = dp.PREDICT
    net.load_model(model)
    x = np.random.default_rng(1).standard_normal((2, 3, 5, 7)).astype(np.float32)
    net.tensor("x").to_device(x)
    net.forward(ctx.make_execution_context(), True)
    ref = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(net.tensor("y").to_host(), ref, rtol=1e-5, atol=1e-5)

    # a new size drops the built network until build() runs again
    model.set_dynamic_axis("x", 3, 9)
    with pytest.raises(OnnxImportError, match="not built; call build"):
        model.network
    model.build()
    assert json.loads(model.network)["inputs"][0]["shape"] == [2, 3, 5, 9]


def test_onnx_model_misuse_is_named():
    model = dp.ONNXModel()
    with pytest.raises(OnnxImportError, match="no model loaded"):
        model.input_shapes
    with pytest.raises(OnnxImportError, match="no model loaded"):
        model.build()
    model.load(conv_model(dims=(1, 3, 4, 4)))
    assert model.dynamic_axes == {} and model.input_shapes == {"x": [1, 3, 4, 4]}
    model.set_batch(8)  # no dynamic batch axis: nothing to size, as in DLPrimitives
    assert model.input_shapes == {"x": [1, 3, 4, 4]}
    with pytest.raises(OnnxImportError, match="axis 0 of input 'x' is not dynamic"):
        model.set_dynamic_axis("x", 0, 2)
    with pytest.raises(OnnxImportError, match="not built"):
        model.parameters
    with pytest.raises(OnnxImportError, match="loaded already"):
        model.load(conv_model())
    dynamic = dp.ONNXModel()
    dynamic.load(conv_model())
    for bad in (0, 2.5, True):
        with pytest.raises(OnnxImportError, match="integer >= 1"):
            dynamic.set_dynamic_axis("x", 2, bad)
    with pytest.raises(OnnxImportError, match="axis 0 of input 'y' is not dynamic"):
        dynamic.set_dynamic_axis("y", 0, 2)


def test_shape_and_dtype_constants(ctx):
    s = dp.Shape(2, 3, 4)
    assert len(s) == 3 and s[1] == 3 and s.total_size == 24 and str(s) == "(2,3,4)"
    assert s == (2, 3, 4) and repr(s) == "Shape(2, 3, 4)"
    for name, np_type in [("float32", np.float32), ("half", np.float16), ("int32", np.int32),
                          ("int64", np.int64), ("uint8", np.uint8)]:
        t = dp.Tensor(ctx, dp.Shape(3), getattr(dp, name))
        assert t.dtype == np.dtype(np_type) and t.dtype == getattr(dp, name)
    with pytest.raises(ValueError, match="negative"):
        dp.Shape(2, -1)


def test_netconfig_to_json_and_to_str():
    cfg = dp.NetConfig()
    cfg.add_input("data", (2, 4))
    cfg.add("InnerProduct", name="fc", options={"outputs": 3})
    cfg.add("Softmax", name="prob")
    d = cfg.to_json()
    assert isinstance(d, dict) and d["operators"][0]["name"] == "fc"
    assert d["outputs"] == ["prob"]        # none set: the last operator's, as DLPrimitives
    assert cfg.to_dict()["outputs"] == []  # the literal content
    assert json.loads(cfg.to_str()) == d and str(cfg) == cfg.to_str()
    cfg.set_outputs(["fc"])
    assert json.loads(cfg.to_str())["outputs"] == ["fc"]


def test_context_spellings(ctx):
    assert ctx.is_opencl_context is True
    assert ctx.make_execution_context(0).queue is ctx.queue
    import pyopencl as cl
    profiling = cl.command_queue_properties.PROFILING_ENABLE
    with pytest.raises(ValueError, match="profiling=True"):
        ctx.make_execution_context(profiling)
    pctx = dp.Context(ctx.device_string, profiling=True)
    assert pctx.make_execution_context(profiling).queue is pctx.queue


def test_in_place_reshape_shrinks_and_grows_back_only(ctx):
    t = dp.Tensor.from_numpy(ctx, np.arange(12, dtype=np.float32).reshape(4, 3))
    view = t.reshape(2, 6)
    assert view.shape == (2, 6) and t.shape == (4, 3)   # plain sizes: a view
    assert t.reshape(dp.Shape(2, 3)) is None and t.shape == (2, 3)
    np.testing.assert_array_equal(t.to_host(), [[0, 1, 2], [3, 4, 5]])
    t.reshape(dp.Shape(4, 3))
    np.testing.assert_array_equal(t.to_host().ravel(), np.arange(12))
    with pytest.raises(ValueError, match="needs 52 bytes, the tensor holds 48"):
        t.reshape(dp.Shape(13))


def test_net_tensors_follow_reshape_and_mode(ctx):
    cfg = dp.NetConfig()
    cfg.add_input("data", (4, 5))
    cfg.add("InnerProduct", name="fc", options={"outputs": 3})
    cfg.add_input("label", (4,))
    cfg.add("SoftmaxWithLoss", name="loss", inputs=["fc", "label"])
    cfg.set_outputs(["loss", "fc"])
    net = dp.Net(ctx)
    net.mode = dp.TRAIN
    net.load_from_json(cfg.to_str())
    net.setup()
    net.initialize_parameters()
    data, label, fc = net.tensor("data"), net.tensor("label"), net.tensor("fc")
    data.reshape(dp.Shape(2, 5))
    label.reshape(dp.Shape(2))
    net.reshape()
    assert fc.shape == (2, 3) and net.tensor("data") is data
    x = np.random.default_rng(0).standard_normal((2, 5)).astype(np.float32)
    data.to_device(x)
    label.to_device(np.array([0, 2], np.float32))
    net.forward()
    p = net.get_parameters()
    np.testing.assert_allclose(fc.to_host(), x @ p["fc.0"].T + p["fc.1"], rtol=1e-5, atol=1e-6)
    net.mode = dp.PREDICT
    net.forward()
    np.testing.assert_allclose(fc.to_host(), x @ p["fc.0"].T + p["fc.1"], rtol=1e-5, atol=1e-6)
    assert fc.buffer is net.plan.acts[net._vid("fc")].buffer


def test_load_model_needs_a_built_model(ctx):
    model = dp.ONNXModel()
    model.load(conv_model())
    with pytest.raises(OnnxImportError, match="call build"):
        dp.Net(ctx).load_model(model)
