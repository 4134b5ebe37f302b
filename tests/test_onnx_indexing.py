"""ONNX index operators on tensors computed at run time (ints and floats), imported into
Nets and compared with onnxruntime on the same file; what cannot be planned is refused
naming the node."""
import numpy as np
import pytest

ort = pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import dlprim.onnx as dox  # noqa: E402
from dlprim.onnx import UnsupportedModelError  # noqa: E402

node = helper.make_node
RNG = np.random.default_rng(21)
ONNX_TYPES = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.int64): TensorProto.INT64,
              np.dtype(np.int32): TensorProto.INT32}


def make(nodes, feeds, outputs, inits=None, opset=17):
    """A serialized model whose inputs are typed as ``feeds`` (name -> array)."""
    g = helper.make_graph(
        nodes, "t", [helper.make_tensor_value_info(n, ONNX_TYPES[a.dtype], a.shape)
                     for n, a in feeds.items()],
        [helper.make_empty_tensor_value_info(n) for n in outputs],
        [numpy_helper.from_array(np.asarray(a), n) for n, a in (inits or {}).items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m.SerializeToString()


def check(ctx, data, feeds, rtol=1e-5):
    """dlprim's net and onnxruntime agree on every output, values and dtypes."""
    sess = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    ref = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))
    ours = dox.load(data, ctx)(**feeds)
    for k, r in ref.items():
        y = ours[k]
        assert y.shape == r.shape, (k, y.shape, r.shape)
        assert y.dtype == r.dtype, (k, y.dtype, r.dtype)
        if r.dtype.kind == "f":
            np.testing.assert_allclose(y, r, rtol=rtol, atol=rtol, err_msg=k)
        else:
            np.testing.assert_array_equal(y, r, err_msg=k)


def ints(low, high, *shape):
    return RNG.integers(low, high, shape).astype(np.int64)


def test_gather_runtime_indices(ctx):
    x = RNG.standard_normal((3, 33, 2)).astype(np.float32)
    feeds = {"x": x, "idx": np.array([[0, -1, 5], [32, -33, 7]], np.int64),
             "i32": np.array([2, -3], np.int32), "ids": ints(0, 50, 3, 33)}
    nodes = [node("Gather", ["x", "idx"], ["g"], axis=1),
             node("Gather", ["x", "i32"], ["g32"], axis=0),
             node("Gather", ["ids", "idx"], ["gi"], axis=1),        # int data, int indices
             node("Gather", ["x", "perm"], ["gp"], axis=2),         # constant indices, no range
             node("Gather", ["ids", "pick"], ["gk"], axis=1)]
    check(ctx, make(nodes, feeds, ["g", "g32", "gi", "gp", "gk"],
                    {"perm": np.array([1, 0, 1], np.int64),
                     "pick": np.array([[3, -1], [0, 3]], np.int64)}), feeds)


def test_gather_elements_nd_and_scatters(ctx):
    x = RNG.standard_normal((4, 5)).astype(np.float32)
    feeds = {"x": x, "ids": ints(0, 9, 4, 5),
             "ge": ints(-4, 4, 2, 5), "nd": np.array([[1, -1], [3, 0], [0, 2]], np.int64),
             "se": np.array([[1, 3, 0, 2, 3], [-1, 0, 1, 1, 0]], np.int64),
             "u": RNG.standard_normal((2, 5)).astype(np.float32),
             "nd_u": ints(0, 9, 3)}
    nodes = [node("GatherElements", ["x", "ge"], ["ge_out"], axis=0),
             node("GatherND", ["ids", "nd"], ["nd_out"]),
             node("ScatterElements", ["x", "se", "u"], ["se_out"], axis=0, reduction="add"),
             node("ScatterND", ["ids", "nd", "nd_u"], ["snd_out"]),
             node("GatherND", ["x3", "bnd"], ["bnd_out"], batch_dims=1)]
    inits = {"x3": RNG.standard_normal((2, 3, 4)).astype(np.float32),
             "bnd": np.array([[[1], [0]], [[2], [-1]]], np.int64)}
    # x3 and bnd are constants: that GatherND folds; the others run in the net
    check(ctx, make(nodes, feeds, ["ge_out", "nd_out", "se_out", "snd_out", "bnd_out"], inits,
                    opset=18), feeds)


@pytest.mark.parametrize("exclusive,reverse", [(0, 0), (1, 1)])
def test_cumsum_int_and_float(ctx, exclusive, reverse):
    feeds = {"ids": ints(-5, 50, 2, 65), "x": RNG.standard_normal((2, 65)).astype(np.float32)}
    nodes = [node("CumSum", ["ids", "one"], ["ci"], exclusive=exclusive, reverse=reverse),
             node("CumSum", ["x", "zero"], ["cf"], exclusive=exclusive, reverse=reverse)]
    check(ctx, make(nodes, feeds, ["ci", "cf"], {"one": np.array(1, np.int64),
                                                  "zero": np.array(0, np.int32)}), feeds, 1e-5)


def test_topk_argmax_argmin(ctx):
    feeds = {"x": RNG.standard_normal((3, 33)).astype(np.float32), "ids": ints(0, 4, 3, 33)}
    nodes = [node("TopK", ["x", "k"], ["v", "i"], axis=1),
             node("TopK", ["ids", "k"], ["vi", "ii"], axis=-1, largest=0),
             node("ArgMax", ["ids"], ["am"], axis=1, select_last_index=1),
             node("ArgMin", ["x"], ["an"], axis=0, keepdims=0)]
    check(ctx, make(nodes, feeds, ["v", "i", "vi", "ii", "am", "an"],
                    {"k": np.array([5], np.int64)}), feeds)


def test_expand_tile_trilu_one_hot(ctx):
    feeds = {"ids": ints(-10, 10, 3, 1), "x": RNG.standard_normal((3, 1)).astype(np.float32),
             "m": ints(0, 9, 2, 4, 33)}
    nodes = [node("Expand", ["ids", "shape"], ["ex"]),
             node("Tile", ["x", "reps"], ["ti"]),
             node("Trilu", ["m", "k"], ["tr"], upper=0),
             node("OneHot", ["ids", "depth", "values"], ["oh"], axis=1)]
    inits = {"shape": np.array([2, 1, 33], np.int64), "reps": np.array([2, 33], np.int64),
             "k": np.array(1, np.int64), "depth": np.array(10, np.int64),
             "values": np.array([-1.0, 3.0], np.float32)}
    check(ctx, make(nodes, feeds, ["ex", "ti", "tr", "oh"], inits), feeds)


def test_position_ids_from_a_runtime_offset(ctx):
    """A decoder's positions: Range(past, past + seq) over a run-time past length, the
    sequence length from Shape of the int64 input ids; token and position embeddings
    added, as GPT-2 with a cache computes them."""
    seq, vocab, dim = 7, 50, 8
    nodes = [node("Squeeze", ["past_length"], ["past"]),
             node("Shape", ["input_ids"], ["shape"]),
             node("Gather", ["shape", "one"], ["seq"], axis=0),
             node("Add", ["past", "seq"], ["end"]),
             node("Range", ["past", "end", "step"], ["positions"]),
             node("Unsqueeze", ["positions", "zero_axis"], ["position_ids"]),
             node("Gather", ["wpe", "position_ids"], ["pos_emb"]),
             node("Gather", ["wte", "input_ids"], ["tok_emb"]),
             node("Add", ["tok_emb", "pos_emb"], ["hidden"]),
             node("CumSum", ["input_ids", "one"], ["running"])]
    inits = {"one": np.array(1, np.int64), "step": np.array(1, np.int64),
             "zero_axis": np.array([0], np.int64),
             "wpe": RNG.standard_normal((32, dim)).astype(np.float32),
             "wte": RNG.standard_normal((vocab, dim)).astype(np.float32)}
    data = make(nodes, {"input_ids": ints(0, vocab, 2, seq), "past_length": np.array([3])},
                ["hidden", "position_ids", "running"], inits)
    cfg, _ = dox.to_netconfig(data)
    assert "Range" in [op["type"] for op in cfg.operators]  # computed in the net
    for past in (0, 5):
        check(ctx, data, {"input_ids": ints(0, vocab, 2, seq), "past_length": np.array([past])})


@pytest.mark.parametrize("nodes,name,why", [
    ([node("NonZero", ["x"], ["y"], name="nz")], "nz", "depends on the data"),
    ([node("Range", ["zero", "n", "one"], ["y"], name="ramp")], "ramp", "computed at run time"),
    ([node("Expand", ["f", "n"], ["y"], name="grow")], "grow", "computed at run time"),
])
def test_data_dependent_shapes_are_refused_by_name(nodes, name, why):
    feeds = {"x": np.ones((2, 3), np.float32), "n": np.array([3], np.int64)}
    inits = {"zero": np.array(0, np.int64), "one": np.array(1, np.int64),
             "f": np.ones((1,), np.float32)}
    data = make(nodes, feeds, ["y"], inits)
    with pytest.raises(UnsupportedModelError, match=why) as err:
        dox.to_netconfig(data)
    assert name in str(err.value)


def test_constant_indices_of_a_range_or_one_row_are_slices(ctx):
    """Position ids (1, S), a range, and token type ids (B, S), one row everywhere, pick
    rows of a table as a Slice (reshaped) and a Slice broadcast by Expand (a sum over the
    repeats in backward), not a Gather (whose backward adds every repeat into one row at
    once)."""
    table = RNG.standard_normal((70, 6)).astype(np.float32)
    feeds = {"x": RNG.standard_normal((3, 70, 6)).astype(np.float32)}
    inits = {"table": table, "pos": np.arange(2, 69, dtype=np.int64).reshape(1, 67),
             "types": np.full((4, 67), 3, np.int64), "ax1": np.full((2, 3), -1, np.int64)}
    nodes = [node("Gather", ["table", "pos"], ["p"]),
             node("Gather", ["table", "types"], ["t"]),
             node("Gather", ["x", "ax1"], ["r"], axis=1)]
    data = make(nodes, feeds, ["p", "t", "r"], inits)
    check(ctx, data, feeds)
    # the table as a parameter being trained (not folded with its constant indices)
    types = [op["type"] for op in dox.to_netconfig(data, live=["table"])[0].operators]
    assert "Gather" not in types and types.count("Expand") == 2, types
