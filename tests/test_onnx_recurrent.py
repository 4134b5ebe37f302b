"""ONNX's LSTM and GRU: models PyTorch exports (stacked, bidirectional, batch-first) import
and match onnxruntime; hand-written nodes (Y read as it is, one initial state, layout=1)
too; dlprim's layers export and come back; unsupported variants are named (the
unrolled variants: tests/test_onnx_misc_ops.py)."""
import io

import numpy as np
import pytest

ort = pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")
torch = pytest.importorskip("torch")

import dlprim as dp  # noqa: E402
import dlprim.onnx as dox  # noqa: E402
from dlprim.onnx.export import to_model  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

L, N, I, H = 6, 3, 5, 7


def ort_run(data, feeds):
    sess = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))


def close(got, want, what):
    assert got.shape == want.shape, (what, got.shape, want.shape)
    assert np.abs(got - want).max() <= 1e-4 * max(1.0, float(np.abs(want).max())), what


class Encoder(torch.nn.Module):
    def __init__(self, cell):
        super().__init__()
        self.rnn = getattr(torch.nn, cell)(I, H, num_layers=2, bidirectional=True,
                                           batch_first=True)

    def forward(self, x):
        y, state = self.rnn(x)
        return (y,) + (state if isinstance(state, tuple) else (state,))


# the legacy exporter's notes on tracing, batch sizes and its own deprecation
@pytest.mark.filterwarnings("ignore::UserWarning", "ignore::DeprecationWarning",
                            "ignore::torch.jit.TracerWarning")
@pytest.mark.parametrize("cell", ["LSTM", "GRU"])
def test_pytorch_exports_import_and_match_onnxruntime(ctx, cell):
    torch.manual_seed(0)
    model = Encoder(cell).eval()
    x = torch.randn(N, L, I)
    f = io.BytesIO()
    torch.onnx.export(model, (x,), f, opset_version=17, dynamo=False, input_names=["x"])
    data = f.getvalue()
    cfg, _ = dox.to_netconfig(data)
    layers = [op for op in cfg.operators if op["type"] == cell]
    assert len(layers) == 2  # one dlprim layer per ONNX node, their Y tails folded away
    assert not any(op["type"] == "Reshape" for op in cfg.operators)
    net = dox.load(data, ctx)
    got = net(x=x.numpy())
    want = ort_run(data, {"x": x.numpy()})
    assert len(want) == (3 if cell == "LSTM" else 2)
    for name, value in want.items():
        close(got[name], value, name)


def node_model(cell, layout, initial_h=True, linear_before_reset=1, **attrs):
    """A one-node model: a bidirectional ``cell`` whose outputs are the model's."""
    rng = np.random.default_rng(1)
    g = (4 if cell == "LSTM" else 3) * H
    w = [(0.3 * rng.standard_normal(s)).astype(np.float32)
         for s in ((2, g, I), (2, g, H), (2, 2 * g))]
    xs, hs = ((N, L, I), (N, 2, H)) if layout else ((L, N, I), (2, N, H))
    ys = (N, L, 2, H) if layout else (L, 2, N, H)
    outs = ["Y", "Y_h"] + (["Y_c"] if cell == "LSTM" else [])
    if cell == "GRU":
        attrs["linear_before_reset"] = linear_before_reset
    node = helper.make_node(cell, ["x", "W", "R", "B", "", "h0" if initial_h else ""], outs,
                            name="rnn", hidden_size=H, direction="bidirectional", layout=layout,
                            **attrs)
    info = helper.make_tensor_value_info
    inputs = [info("x", TensorProto.FLOAT, xs)] + ([info("h0", TensorProto.FLOAT, hs)]
                                                   if initial_h else [])
    graph = helper.make_graph([node], "rnn", inputs,
                              [info("Y", TensorProto.FLOAT, ys)] +
                              [info(o, TensorProto.FLOAT, hs) for o in outs[1:]],
                              [numpy_helper.from_array(a, n) for a, n in zip(w, "WRB")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


@pytest.mark.parametrize("cell", ["LSTM", "GRU"])
def test_nodes_as_written_and_batch_first_layout(ctx, cell):
    rng = np.random.default_rng(2)
    feeds = {"x": rng.standard_normal((L, N, I)).astype(np.float32),
             "h0": rng.standard_normal((2, N, H)).astype(np.float32)}
    want = ort_run(node_model(cell, 0), feeds)
    got = dox.load(node_model(cell, 0), ctx)(**feeds)
    for name, value in want.items():   # Y (L, D, N, H) itself, the LSTM's c_0 zero
        close(got[name], value, name)
    # layout=1 (onnxruntime runs only layout 0): the same numbers, batch first
    first = dox.load(node_model(cell, 1), ctx)(x=feeds["x"].transpose(1, 0, 2),
                                               h0=feeds["h0"].transpose(1, 0, 2))
    close(first["Y"], want["Y"].transpose(2, 0, 1, 3), "Y, layout 1")
    for name in want:
        if name != "Y":
            close(first[name], want[name].transpose(1, 0, 2), name + ", layout 1")


@pytest.mark.parametrize("cell", ["LSTM", "GRU"])
def test_layers_export_and_come_back(ctx, cell):
    rng = np.random.default_rng(3)
    states = 2 if cell == "LSTM" else 1
    outs = ["y", "h_n", "c_n"][:1 + states]
    cfg = dp.NetConfig()
    cfg.add_input("x", [N, L, I])
    names = ["h0", "c0"][:states]
    for name in names:
        cfg.add_input(name, [4, N, H])
    cfg.add(cell, name="rnn", inputs=["x"] + names, outputs=outs,
            options={"hidden_size": H, "num_layers": 2, "bidirectional": True,
                     "batch_first": True, "dropout": 0.5})
    cfg.set_outputs(outs)
    net = dp.Net(ctx, cfg, mode=dp.PREDICT)
    feeds = {n: rng.standard_normal(net.tensor(n).shape).astype(np.float32) for n in ["x"] + names}
    got = net(**feeds)
    data = to_model(net).SerializeToString()
    want = ort_run(data, feeds)
    for name in outs:
        close(got[name], want[name], name)
    again = dox.load(data, ctx)(**feeds)
    for name in outs:
        close(again[name], got[name], name + " after import")


@pytest.mark.parametrize("variant,match", [
    (dict(cell="LSTM", input_forget=1), "input_forget"),
    (dict(cell="LSTM", activation_alpha=[0.5, 0.5]), "activation_alpha"),
    (dict(cell="GRU", activations=["HardSigmoid", "Tanh"] * 2), "activation")])
def test_unsupported_variants_are_named(variant, match):
    variant = dict(variant)
    cell = variant.pop("cell")
    with pytest.raises(dox.UnsupportedModelError, match=match):
        dox.to_netconfig(node_model(cell, 0, **variant))
