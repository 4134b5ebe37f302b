"""ONNX operators composed of dlprim's layers at import: the RNN and the LSTM/GRU
variants unrolled over the time steps (against onnxruntime, whose RNNs take every
attribute), ..."""
import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import dlprim.onnx as dox  # noqa: E402

L, N, I, H = 3, 2, 3, 4


def _ort(model, feeds):
    ort = pytest.importorskip("onnxruntime")
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))


def _close(got, want, what, tol=1e-5):
    assert got.shape == want.shape, (what, got.shape, want.shape)
    assert np.abs(got - want).max() <= tol * max(1.0, float(np.abs(want).max())), what


# ----- recurrent cells unrolled
def _rnn_model(cell, direction="forward", initial=True, peepholes=False, **attrs):
    rng = np.random.default_rng(3)
    d = 2 if direction == "bidirectional" else 1
    g = {"RNN": 1, "GRU": 3, "LSTM": 4}[cell] * H
    consts = {"W": (d, g, I), "R": (d, g, H), "B": (d, 2 * g)}
    if peepholes:
        consts["P"] = (d, 3 * H)
    consts = {n: (0.5 * rng.standard_normal(s)).astype(np.float32) for n, s in consts.items()}
    states = ["h0", "c0"][:2 if cell == "LSTM" else 1] if initial else []
    names = ["x", "W", "R", "B", ""] + (states or ([""] * (2 if peepholes else 0)))
    if peepholes:
        names = names[:7] + [""] * (7 - len(names)) + ["P"]
    outs = ["Y", "Y_h"] + (["Y_c"] if cell == "LSTM" else [])
    node = helper.make_node(cell, names, outs, hidden_size=H, direction=direction, **attrs)
    info = helper.make_tensor_value_info
    graph = helper.make_graph(
        [node], "rnn", [info("x", TensorProto.FLOAT, (L, N, I))] +
        [info(s, TensorProto.FLOAT, (d, N, H)) for s in states],
        [info(o, TensorProto.FLOAT, None) for o in outs],
        [numpy_helper.from_array(a, n) for n, a in consts.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    model.ir_version = 8
    feeds = {"x": rng.standard_normal((L, N, I)).astype(np.float32)}
    feeds.update((s, rng.standard_normal((d, N, H)).astype(np.float32)) for s in states)
    return model, feeds


@pytest.mark.parametrize("cell, attrs", [
    ("RNN", dict(direction="bidirectional")),
    ("RNN", dict(activations=["Relu"], initial=False)),
    ("RNN", dict(direction="reverse", clip=0.7)),
    ("GRU", dict(direction="bidirectional", linear_before_reset=0)),
    ("GRU", dict(direction="reverse", linear_before_reset=1)),
    ("LSTM", dict(direction="reverse")),
    ("LSTM", dict(clip=0.5, activations=["Sigmoid", "Relu", "Tanh"])),
    ("LSTM", dict(direction="bidirectional", peepholes=True)),
])
def test_unrolled_cells_match_onnxruntime(ctx, cell, attrs):
    model, feeds = _rnn_model(cell, **attrs)
    want = _ort(model, feeds)
    net = dox.load(model, ctx)
    assert cell not in [op["type"] for op in dox.to_netconfig(model)[0].operators]
    got = net(**feeds)
    for name, value in want.items():
        _close(np.asarray(got[name]), value, name)


# ----- Einsum
def _one_node(op, inputs, outputs, opset, consts=(), **attrs):
    types = {np.float32: TensorProto.FLOAT, np.float64: TensorProto.DOUBLE,
             np.int64: TensorProto.INT64, np.bool_: TensorProto.BOOL}
    vis = [helper.make_tensor_value_info(n, types[a.dtype.type], a.shape)
           for n, a in inputs.items()]
    node = helper.make_node(op, list(inputs) + [n for n, _ in consts], outputs, **attrs)
    graph = helper.make_graph([node], "g", vis,
                              [helper.make_tensor_value_info(o, 0, None) for o in outputs],
                              [numpy_helper.from_array(v, n) for n, v in consts])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


@pytest.mark.parametrize("eq, shapes, dtype", [
    ("ii->i", [(4, 4)], np.float32),
    ("...ii->...i", [(2, 3, 3)], np.float64),
    ("ii", [(5, 5)], np.float32),                       # the trace (implicit output)
    ("iij->j", [(3, 3, 2)], np.float32),
    ("ij,jk", [(3, 4), (4, 5)], np.float32),
    ("ij,jk->ik", [(3, 4), (4, 5)], np.float64),        # a broadcast product and sum
    ("i,j->ij", [(3,), (4,)], np.float32),
    ("ijk,ikl,il->jl", [(2, 3, 4), (2, 4, 5), (2, 5)], np.float32),
    ("b...d,bd->b...", [(2, 3, 4, 5), (2, 5)], np.float32),
    ("ij->", [(3, 4)], np.int64),
    ("->", [()], np.float32),
])
def test_einsum_matches_numpy(ctx, eq, shapes, dtype):
    rng = np.random.default_rng(4)
    ins = {"x%d" % k: (rng.integers(-4, 5, s) if dtype == np.int64 else
                       rng.standard_normal(s)).astype(dtype) for k, s in enumerate(shapes)}
    model = _one_node("Einsum", ins, ["y"], 12, equation=eq)
    got = np.asarray(dox.load(model, ctx)(**ins)["y"])
    want = np.einsum(eq, *[a.astype(np.float64) for a in ins.values()])
    assert got.shape == want.shape and got.dtype == dtype
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


# ----- BatchNormalization, training_mode=1
@pytest.mark.parametrize("outputs", [["y"], ["y", "running_mean", "running_var"]])
def test_batchnorm_training_mode_uses_the_batch_statistics(ctx, outputs):
    rng = np.random.default_rng(5)
    x = rng.standard_normal((3, 4, 2, 5)).astype(np.float32)
    s, bias, mean = (rng.standard_normal(4).astype(np.float32) for _ in range(3))
    var = rng.uniform(0.5, 2.0, 4).astype(np.float32)
    model = _one_node("BatchNormalization", {"x": x}, outputs, 15,
                      consts=[("s", s), ("bias", bias), ("mean", mean), ("var", var)],
                      training_mode=1, momentum=0.8, epsilon=1e-3)
    got = dox.load(model, ctx)(x=x)
    m = x.mean(axis=(0, 2, 3), dtype=np.float64)
    v = x.var(axis=(0, 2, 3), dtype=np.float64)   # biased, as ONNX defines it
    c = (1, 4, 1, 1)
    y = (x - m.reshape(c)) / np.sqrt(v.reshape(c) + 1e-3) * s.reshape(c) + bias.reshape(c)
    np.testing.assert_allclose(np.asarray(got["y"]), y, rtol=1e-4, atol=1e-5)
    if len(outputs) > 1:
        np.testing.assert_allclose(np.asarray(got["running_mean"]), mean * 0.8 + m * 0.2,
                                   rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(np.asarray(got["running_var"]), var * 0.8 + v * 0.2,
                                   rtol=1e-5, atol=1e-6)


# ----- Hardmax, ReverseSequence (against onnx's reference)
def _reference_check(ctx, model, ins):
    from onnx.reference import ReferenceEvaluator
    want = ReferenceEvaluator(model).run(None, ins)
    got = dox.load(model, ctx)(**ins)
    for out, w in zip(model.graph.output, want):
        g = np.asarray(got[out.name])
        assert g.shape == w.shape and g.dtype == w.dtype, (out.name, g.shape, w.shape)
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("opset, axis", [(13, -1), (13, 1), (13, 0), (11, 1), (11, 2), (11, 0)])
def test_hardmax(ctx, opset, axis):
    rng = np.random.default_rng(6)
    x = rng.integers(0, 3, (2, 3, 4)).astype(np.float32)  # ties: the first index wins
    model = _one_node("Hardmax", {"x": x}, ["y"], opset, axis=axis)
    if opset >= 13:
        _reference_check(ctx, model, {"x": x})
        return
    # before opset 13 over x flattened to 2-D at axis, as the definition says (onnx's
    # reference evaluator skips that)
    got = np.asarray(dox.load(model, ctx)(x=x)["y"])
    rows = x.reshape(int(np.prod(x.shape[:axis])), -1)
    want = np.zeros_like(rows)
    want[np.arange(len(rows)), rows.argmax(axis=1)] = 1
    np.testing.assert_array_equal(got, want.reshape(x.shape))


@pytest.mark.parametrize("batch_axis, time_axis", [(0, 1), (1, 0)])
def test_reverse_sequence(ctx, batch_axis, time_axis):
    rng = np.random.default_rng(7)
    x = rng.standard_normal((4, 5, 2) if batch_axis == 0 else (5, 4, 2)).astype(np.float32)
    lens = np.array([1, 5, 3, 0], np.int64)
    model = _one_node("ReverseSequence", {"x": x}, ["y"], 10, consts=[("lens", lens)],
                      batch_axis=batch_axis, time_axis=time_axis)
    _reference_check(ctx, model, {"x": x})
