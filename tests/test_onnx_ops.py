"""ONNX import, operator by operator: small hand-written graphs with the variants exporters
produce (attributes vs inputs across opsets, padding modes, axes), run by dlprim and by
onnxruntime on the same file."""
import numpy as np
import pytest

ort = pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import dlprim.onnx as dox  # noqa: E402

RNG = np.random.default_rng(11)
node = helper.make_node


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def make(nodes, inputs, outputs, inits=None, opset=17, proto=False):
    """Serialized model (or the ModelProto): ``inputs`` {name: shape} (float), ``outputs``
    names, ``inits`` {name: array} as initializers."""
    g = helper.make_graph(
        nodes, "test", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs.items()],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs],
        [numpy_helper.from_array(np.asarray(a), n) for n, a in (inits or {}).items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    if opset <= 20:  # what onnxruntime reads; newer opsets keep onnx's own IR version
        m.ir_version = 8 if opset <= 18 else 9
    return m if proto else m.SerializeToString()


def check(ctx, data, feeds, rtol=1e-4):
    """dlprim and onnxruntime agree on every output of the model; returns the dlprim net."""
    sess = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    ref = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))
    net = dox.load(data, ctx)
    ours = net(**feeds)
    assert set(ours) == set(ref)
    for k, r in ref.items():
        y = ours[k].reshape(r.shape) if ours[k].size == r.size and r.ndim == 0 else ours[k]
        assert y.shape == r.shape, (k, y.shape, r.shape)
        err, scale = float(np.abs(y - r).max()), float(np.abs(r).max())
        assert err <= rtol * max(scale, 1e-3), "%s: max error %g, largest %g" % (k, err, scale)
    return net


def op_types(data):
    cfg, _ = dox.to_netconfig(data)
    return [op["type"] for op in cfg.operators]


def test_conv_padding_variants(ctx):
    w, b = rand(4, 3, 3, 3), rand(4)
    nodes = [
        node("Conv", ["x", "w", "b"], ["same"], strides=[2, 2], auto_pad="SAME_UPPER"),
        node("Conv", ["x", "w"], ["lower"], auto_pad="SAME_LOWER", strides=[2, 3]),
        node("Conv", ["x", "w"], ["asym"], pads=[0, 1, 2, 1]),
        node("Pad", ["x", "pads"], ["padded"], mode="constant"),
        node("Conv", ["padded", "w", "b"], ["folded"]),
        node("Pad", ["x", "pads"], ["padded2"]),
        node("AveragePool", ["padded2"], ["avg_folded"], kernel_shape=[3, 3], pads=[0, 0, 0, 0]),
        node("Pad", ["x", "crop"], ["alone"]),
    ]
    inits = {"w": w, "b": b, "pads": np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64),
             "crop": np.array([0, 0, 2, -1, 0, 0, 0, 1], np.int64)}
    data = make(nodes, {"x": (2, 3, 9, 8)}, ["same", "lower", "asym", "folded", "avg_folded", "alone"], inits)
    types = op_types(data)
    assert types.count("Convolution2D") == 5  # 4 convolutions + the standalone pad
    assert "Slice" in types  # the negative pad crops
    check(ctx, data, {"x": rand(2, 3, 9, 8)})


def test_conv_transpose_gemm_matmul_batchnorm(ctx):
    wt = rand(4, 3, 3, 3)  # 2 groups: in 4, out 6
    nodes = [
        node("ConvTranspose", ["x", "wt", "bt"], ["deconv"], strides=[2, 2], pads=[1, 1, 1, 1],
             output_padding=[1, 0], group=2),
        node("ConvTranspose", ["x", "wt"], ["deconv_shape"], strides=[2, 2], output_shape=[10, 9], group=2),
        node("BatchNormalization", ["x", "s", "bb", "m", "v"], ["bn"], epsilon=1e-3),
        node("LRN", ["x"], ["lrn"], size=3, alpha=0.5, beta=0.6, bias=2.0),
        node("Flatten", ["x"], ["flat"]),
        node("Gemm", ["flat", "gw", "gc"], ["gemm"], alpha=0.5, beta=2.0),
        node("Gemm", ["flat", "gw2"], ["gemm_t"], transB=1),
        node("Reshape", ["x", "shape3"], ["x3"]),
        node("MatMul", ["x3", "mw"], ["mm"]),
        node("Add", ["mm", "mb"], ["mm_bias"]),
    ]
    inits = {"wt": wt, "bt": rand(6), "s": rand(4), "bb": rand(4), "m": rand(4),
             "v": RNG.uniform(0.5, 2, 4).astype(np.float32), "gw": rand(80, 5), "gc": np.float32(0.3),
             "gw2": rand(7, 80), "shape3": np.array([0, 4, -1], np.int64), "mw": rand(20, 3),
             "mb": rand(3)}
    data = make(nodes, {"x": (2, 4, 5, 4)},
                ["deconv", "deconv_shape", "bn", "lrn", "gemm", "gemm_t", "mm_bias"], inits)
    types = op_types(data)
    assert "BatchNorm" in types and "Elementwise" not in types  # MatMul + Add: one layer
    check(ctx, data, {"x": rand(2, 4, 5, 4)})


@pytest.mark.parametrize("opset", [9, 11, 13, 18])
def test_activations_and_clip(ctx, opset):
    clip_attr = {"min": -0.5, "max": 0.7} if opset < 11 else {}
    clip_in = ["x"] if opset < 11 else ["x", "lo", "hi"]
    nodes = [node("Relu", ["x"], ["relu"]), node("Sigmoid", ["x"], ["sig"]), node("Tanh", ["x"], ["tanh"]),
             node("LeakyRelu", ["x"], ["leaky"], alpha=0.3), node("Elu", ["x"], ["elu"], alpha=0.7),
             node("HardSigmoid", ["x"], ["hsig"]), node("HardSigmoid", ["x"], ["hsig6"], alpha=1 / 6, beta=0.5),
             node("Softplus", ["x"], ["softplus"]), node("Erf", ["x"], ["erf"]), node("Abs", ["x"], ["abs"]),
             node("Clip", clip_in, ["clip"], **clip_attr),
             node("Sigmoid", ["x"], ["s"]), node("Mul", ["x", "s"], ["silu"])]
    outs = ["relu", "sig", "tanh", "leaky", "elu", "hsig", "hsig6", "softplus", "erf", "abs", "clip", "silu"]
    inits = {"lo": np.float32(-0.5), "hi": np.float32(0.7)} if opset >= 11 else {}
    if opset >= 11:  # Clip with min only, max only (inputs)
        nodes += [node("Clip", ["x", "zero"], ["clip_min"]), node("Clip", ["x", "", "hi"], ["clip_max"]),
                  node("Clip", ["x", "zero", "six"], ["relu6"])]
        inits.update(zero=np.float32(0), six=np.float32(6))
        outs += ["clip_min", "clip_max", "relu6"]
    data = make(nodes, {"x": (2, 3, 4, 5)}, outs, inits, opset)
    check(ctx, data, {"x": 4 * rand(2, 3, 4, 5)})


def test_gelu_forms(ctx):
    sqrt2 = np.float32(np.sqrt(2))
    nodes = [node("Div", ["x", "r2"], ["d"]), node("Erf", ["d"], ["e"]), node("Add", ["e", "one"], ["a"]),
             node("Mul", ["x", "a"], ["m"]), node("Mul", ["m", "half"], ["gelu_erf"]),
             node("Gelu", ["x"], ["gelu"]), node("Gelu", ["x"], ["gelu_tanh"], approximate="tanh"),
             node("HardSwish", ["x"], ["hswish"])]
    inits = {"r2": sqrt2, "one": np.float32(1), "half": np.float32(0.5)}
    data = make(nodes, {"x": (3, 7)}, ["gelu_erf", "gelu", "gelu_tanh", "hswish"], inits, opset=20)
    cfg, _ = dox.to_netconfig(data)
    acts = [op["options"]["activation"] for op in cfg.operators]
    assert acts == ["gelu", "gelu", "gelu_tanh", "hardswish"]  # the erf pattern is one layer
    check(ctx, data, {"x": 3 * rand(3, 7)})


def test_arithmetic_with_constants_and_broadcast(ctx):
    nodes = [node("Sub", ["k", "x"], ["sub"]), node("Div", ["x", "c"], ["div"]),
             node("Max", ["x", "y"], ["max"]), node("Min", ["x", "c"], ["min"]),
             node("Sum", ["x", "y", "c"], ["sum3"]), node("Mul", ["x", "y"], ["mul"]),
             node("Add", ["x", "x"], ["twice"]),
             # a constant silu pattern: folded by the rewrite, then read as a Parameter
             node("Sigmoid", ["c"], ["sc"]), node("Mul", ["c", "sc"], ["silu_c"]),
             node("Add", ["x", "silu_c"], ["plus_const"]),
             # a constant subgraph evaluated at import
             node("Shape", ["x"], ["shp"]), node("ConstantOfShape", ["shp"], ["ones"],
                                                 value=numpy_helper.from_array(np.ones(1, np.float32))),
             node("Range", ["r0", "r5", "r1"], ["ramp"]), node("Mul", ["ones", "ramp"], ["grid"]),
             node("Mul", ["x", "grid"], ["ramped"])]
    inits = {"k": np.float32(2.5), "c": RNG.uniform(0.5, 2, (3, 1, 1)).astype(np.float32),
             "r0": np.float32(0), "r5": np.float32(5), "r1": np.float32(1)}
    data = make(nodes, {"x": (2, 3, 4, 5), "y": (1, 3, 1, 5)},
                ["sub", "div", "max", "min", "sum3", "mul", "twice", "plus_const", "ramped"], inits)
    check(ctx, data, {"x": rand(2, 3, 4, 5), "y": rand(1, 3, 1, 5)})


@pytest.mark.parametrize("opset", [11, 13])
def test_softmax_axes(ctx, opset):
    nodes = [node("Softmax", ["x"], ["sm1"], axis=1), node("LogSoftmax", ["x"], ["lsm3"], axis=3),
             node("Softmax", ["x"], ["sm2"], axis=2), node("Softmax", ["v"], ["smv"])]
    data = make(nodes, {"x": (2, 3, 4, 5), "v": (2, 6)}, ["sm1", "lsm3", "sm2", "smv"], opset=opset)
    check(ctx, data, {"x": 3 * rand(2, 3, 4, 5), "v": 3 * rand(2, 6)})


@pytest.mark.parametrize("opset", [11, 18])
def test_reductions_and_pooling(ctx, opset):
    def red(op, out, axes, keep):
        if opset >= 18 or op == "ReduceSum" and opset >= 13:
            return node(op, ["x", "ax_" + out], [out], keepdims=keep), {"ax_" + out: np.array(axes, np.int64)}
        return node(op, ["x"], [out], axes=axes, keepdims=keep), {}
    inits, nodes = {}, []
    for op, out, axes, keep in [("ReduceMean", "mean_hw", [2, 3], 1), ("ReduceMean", "mean_c", [1], 0),
                                ("ReduceSum", "sum_w", [-1], 1), ("ReduceMax", "max_hw", [2, 3], 1),
                                ("ReduceSumSquare", "sumsq", [1, 2], 0)]:
        n, i = red(op, out, axes, keep)
        nodes.append(n)
        inits.update(i)
    nodes += [node("MaxPool", ["x"], ["mp"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1),
              node("AveragePool", ["x"], ["ap"], kernel_shape=[2, 3], strides=[2, 1], pads=[1, 1, 1, 1],
                   count_include_pad=1),
              node("AveragePool", ["x"], ["ap_ex"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
              node("GlobalMaxPool", ["x"], ["gmp"]), node("GlobalAveragePool", ["x"], ["gap"])]
    data = make(nodes, {"x": (2, 3, 7, 6)}, ["mean_hw", "mean_c", "sum_w", "max_hw", "sumsq", "mp", "ap",
                                              "ap_ex", "gmp", "gap"], inits, opset)
    check(ctx, data, {"x": rand(2, 3, 7, 6)})


@pytest.mark.parametrize("opset", [9, 11, 13, 18])
def test_shape_operators(ctx, opset):
    inits = {}

    def ints(name, values):
        inits[name] = np.array(values, np.int64)
        return name
    if opset >= 13:
        split = node("Split", ["x", ints("sp", [1, 3])], ["s1", "s2"], axis=1)
        if opset >= 18:
            split = node("Split", ["x"], ["s1", "s2"], axis=1, num_outputs=2)
        squeeze = node("Squeeze", ["g", ints("sq_axes", [1])], ["sq"])
        unsq = node("Unsqueeze", ["sq", ints("un_axes", [0, -1])], ["un"])
    else:
        split = node("Split", ["x"], ["s1", "s2"], axis=1, split=[1, 3])
        squeeze = node("Squeeze", ["g"], ["sq"], axes=[1])
        unsq = node("Unsqueeze", ["sq"], ["un"], axes=[0, 4])
    if opset >= 10:
        sl = node("Slice", ["x", ints("st", [1, -3]), ints("en", [2 ** 62, -1]), ints("axs", [1, 3])], ["sl"])
    else:
        sl = node("Slice", ["x"], ["sl"], starts=[1, -3], ends=[1000, -1], axes=[1, 3])
    nodes = [split, sl, node("Gather", ["x", "idx"], ["g"], axis=1), squeeze, unsq,
             node("Gather", ["x", "idx0"], ["gs"], axis=3), node("Gather", ["x", "rng"], ["gr"], axis=2),
             node("Transpose", ["x"], ["tr"], perm=[0, 2, 3, 1]),
             node("Concat", ["x", "cst"], ["cat"], axis=1),
             node("Flatten", ["x"], ["fl2"], axis=2),
             node("Reshape", ["x", ints("shp", [0, 2, -1, 5])], ["rs"]),
             node("Dropout", ["x"], ["drop"], **({"ratio": 0.4} if opset < 12 else {})),
             node("Identity", ["x"], ["ident"])]
    inits.update(idx=np.array([2], np.int64), idx0=np.array(-2, np.int64),
                 rng=np.array([1, 2], np.int64), cst=rand(2, 2, 4, 5))
    outs = ["s1", "s2", "sl", "g", "gs", "gr", "sq", "un", "tr", "cat", "fl2", "rs", "drop", "ident"]
    data = make(nodes, {"x": (2, 4, 4, 5)}, outs, inits, opset)
    check(ctx, data, {"x": rand(2, 4, 4, 5)})


def test_shape_subgraph_folds_to_constants(ctx):
    """Shape -> Gather -> Unsqueeze -> Concat -> Reshape, as PyTorch writes x.view(n, -1)."""
    nodes = [node("Shape", ["x"], ["shape"]), node("Gather", ["shape", "zero"], ["n"], axis=0),
             node("Unsqueeze", ["n", "ax0"], ["n1"]), node("Constant", [], ["minus1"],
                                                           value=numpy_helper.from_array(np.array([-1], np.int64))),
             node("Concat", ["n1", "minus1"], ["target"], axis=0), node("Reshape", ["x", "target"], ["y"]),
             node("Relu", ["y"], ["out"])]
    inits = {"zero": np.array(0, np.int64), "ax0": np.array([0], np.int64)}
    data = make(nodes, {"x": (2, 3, 4, 5)}, ["out"], inits)
    assert op_types(data) == ["Reshape", "Activation"]
    check(ctx, data, {"x": rand(2, 3, 4, 5)})


@pytest.mark.parametrize("opset", [9, 11, 13])
def test_resize_and_upsample(ctx, opset):
    inits = {"scales": np.array([1, 1, 2, 3], np.float32)}
    if opset == 9:
        nodes = [node("Upsample", ["x", "scales"], ["near"], mode="nearest")]
        outs = ["near"]
    else:
        inits.update(sizes=np.array([2, 3, 7, 5], np.int64), roi=np.zeros(0, np.float32),
                     s2=np.array([1, 1, 2, 2], np.float32), none=np.zeros(0, np.float32))
        nodes = [node("Resize", ["x", "roi", "scales"], ["near"], mode="nearest",
                      coordinate_transformation_mode="asymmetric", nearest_mode="floor"),
                 node("Resize", ["x", "roi", "none", "sizes"], ["lin"], mode="linear"),
                 node("Resize", ["x", "roi", "none", "sizes"], ["lin_pt"], mode="linear",
                      coordinate_transformation_mode="pytorch_half_pixel"),
                 node("Resize", ["x", "roi", "none", "sizes"], ["corners"], mode="linear",
                      coordinate_transformation_mode="align_corners"),
                 node("Resize", ["x", "roi", "none", "sizes"], ["exact"], mode="nearest",
                      nearest_mode="round_prefer_ceil"),
                 node("Resize", ["x", "roi", "s2"], ["half"], mode="nearest")]
        outs = ["near", "lin", "lin_pt", "corners", "exact", "half"]
    data = make(nodes, {"x": (2, 3, 4, 3)}, outs, inits, opset)
    check(ctx, data, {"x": rand(2, 3, 4, 3)})


def test_outputs_keep_their_names(ctx):
    """A model output that is an input or another output's tensor gets its own copy."""
    nodes = [node("Identity", ["x"], ["same"]), node("Relu", ["x"], ["r"]), node("Identity", ["r"], ["r2"])]
    data = make(nodes, {"x": (2, 3)}, ["same", "r", "r2"])
    net = check(ctx, data, {"x": rand(2, 3)})
    assert net.output_names == ["same", "r", "r2"]


def test_batch_argument_and_reshape(ctx):
    w = rand(4, 3, 3, 3)
    nodes = [node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), node("Relu", ["c"], ["r"]),
             node("Flatten", ["r"], ["f"]), node("Gemm", ["f", "fc"], ["y"], transB=1)]
    g = helper.make_graph(nodes, "t", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 5, 5])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 2])],
                          [numpy_helper.from_array(w, "w"), numpy_helper.from_array(rand(2, 100), "fc")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    cfg, weights = dox.to_netconfig(m)
    assert cfg.inputs[0]["shape"] == [1, 3, 5, 5]  # a symbolic batch defaults to 1
    assert [op["type"] for op in cfg.operators] == ["Convolution2D", "Flatten", "InnerProduct"]
    assert cfg.operators[0]["options"]["activation"] == "relu"  # Relu folded into the conv
    assert cfg.operators[1]["inputs"] == cfg.operators[1]["outputs"] == ["r"]  # in place
    assert sorted(weights) == ["fc", "w"]
    net = dox.load(m, ctx, batch=4)
    assert net.tensor("x").shape == (4, 3, 5, 5)
    check(ctx, m.SerializeToString(), {"x": rand(3, 3, 5, 5)})  # another batch: re-planned


def test_newest_opset_against_the_reference_evaluator(ctx):
    """The newest opset the installed onnx knows (onnxruntime may lag behind it)."""
    from onnx.reference import ReferenceEvaluator
    newest = onnx.defs.onnx_opset_version()
    nodes = [node("Conv", ["x", "w"], ["c"], pads=[1, 0, 1, 0]), node("Relu", ["c"], ["r"]),
             node("MaxPool", ["r"], ["mp"], kernel_shape=[2, 2], strides=[2, 2]),
             node("Split", ["mp"], ["a", "b"], axis=1, num_outputs=2),
             node("Concat", ["b", "a"], ["cat"], axis=1),
             node("ReduceMean", ["cat", "axes"], ["mean"], keepdims=1),
             node("Resize", ["mean", "", "scales"], ["up"], mode="linear"),
             node("Gelu", ["up"], ["gelu"]), node("HardSwish", ["gelu"], ["hs"]),
             node("Unsqueeze", ["hs", "ax0"], ["u"]), node("Squeeze", ["u", "ax0"], ["sq"]),
             node("Slice", ["sq", "st", "en", "ax3"], ["sl"]),
             node("Transpose", ["sl"], ["tr"], perm=[0, 3, 2, 1]), node("Flatten", ["tr"], ["fl"]),
             node("Gemm", ["fl", "fc"], ["y"], transB=1), node("Softmax", ["y"], ["prob"])]
    inits = {"w": rand(4, 3, 3, 2), "axes": np.array([1], np.int64),
             "scales": np.array([1, 1, 2, 2], np.float32), "ax0": np.array([0], np.int64),
             "st": np.array([1], np.int64), "en": np.array([-1], np.int64), "ax3": np.array([3], np.int64),
             "fc": rand(5, 32)}
    model = make(nodes, {"x": (2, 3, 8, 8)}, ["y", "prob"], inits, newest, proto=True)
    x = rand(2, 3, 8, 8)
    ref = ReferenceEvaluator(model).run(None, {"x": x})
    ours = dox.load(model, ctx)(x=x)
    for y, r in zip((ours["y"], ours["prob"]), ref):
        np.testing.assert_allclose(y, r, rtol=1e-4, atol=1e-4 * float(np.abs(r).max()))


@pytest.mark.parametrize("opset", [17, 18])
def test_layer_and_group_norm_and_data_matmul(ctx, opset):
    nodes = [
        node("LayerNormalization", ["x", "ls", "lb"], ["ln"], axis=-1, epsilon=1e-3),
        node("LayerNormalization", ["x", "ls2"], ["ln2"], axis=1),
        node("MatMul", ["q", "kt"], ["scores"]),            # batched data x data
        node("MatMul", ["q", "w3"], ["shared"]),            # data x a broadcast data operand
    ]
    inits = {"ls": rand(6), "lb": rand(6), "ls2": rand(5, 6)}
    outputs = ["ln", "ln2", "scores", "shared"]
    if opset >= 18:
        nodes.append(node("GroupNormalization", ["img", "gs", "gb"], ["gn"], num_groups=2,
                          epsilon=1e-4))
        inits.update({"gs": rand(2), "gb": rand(2)})  # opset 18: one value per group
        outputs.append("gn")
    inputs = {"x": (2, 5, 6), "q": (3, 4, 7), "kt": (3, 7, 5), "w3": (7, 2)}
    if opset >= 18:
        inputs["img"] = (2, 4, 3, 3)
    data = make(nodes, inputs, outputs, inits, opset=opset)
    types = op_types(data)
    assert types.count("LayerNorm") == 2 and types.count("MatMul") == 2
    check(ctx, data, {k: rand(*s) for k, s in inputs.items()})


def test_einsum_batched_products(ctx):
    nodes = [node("Einsum", ["q", "k"], ["scores"], equation="bhqd,bhkd->bhqk"),
             node("Einsum", ["p", "v"], ["mixed"], equation="bhqk,bhkd->bhqd"),
             node("Einsum", ["kt", "q"], ["both"], equation="bhdq, bhkd -> bhqk")]
    inputs = {"q": (2, 3, 5, 4), "k": (2, 3, 6, 4), "p": (2, 3, 5, 6), "v": (2, 3, 6, 4),
              "kt": (2, 3, 4, 5)}
    data = make(nodes, inputs, ["scores", "mixed", "both"], opset=13)
    assert op_types(data) == ["MatMul"] * 3
    check(ctx, data, {k: rand(*s) for k, s in inputs.items()})
    # an index of two sizes is no equation
    bad = make([node("Einsum", ["q", "k"], ["t"], equation="bhqd,bhqd->bhq")],
               {"q": (2, 3, 5, 4), "k": (2, 3, 6, 4)}, ["t"], opset=13)
    with pytest.raises(dox.OnnxImportError, match="Einsum"):
        dox.load(bad, ctx)


def test_activation_after_a_reshape_folds_into_the_layer_only_when_nothing_else_reads_it(ctx):
    w, b = rand(4, 5), rand(5)
    # a Linear over (N, L, C) as PyTorch writes it: an InnerProduct over rows, reshaped
    folds = make([node("Transpose", ["wt"], ["w_t"], perm=[1, 0]),
                  node("MatMul", ["x", "w_t"], ["m"]), node("Add", ["m", "b"], ["y"]),
                  node("Relu", ["y"], ["a"])],
                 {"x": [2, 3, 4]}, ["a"], {"wt": w.T.copy(), "b": b})
    net = check(ctx, folds, {"x": rand(2, 3, 4)})
    types = [op.type for op in net.graph.ops]
    assert "Activation" not in types and "Elementwise" not in types, types
    # the layer's output is read again after the Relu: the activation cannot go into it
    kept = make([node("Gemm", ["x", "w", "b"], ["y"]),
                 node("Reshape", ["y", "shape"], ["z"]), node("Relu", ["z"], ["a"]),
                 node("Add", ["y", "y"], ["c"])],
                {"x": [6, 4]}, ["a", "c"], {"w": w, "b": b, "shape": np.array([2, 3, 5], np.int64)})
    check(ctx, kept, {"x": rand(6, 4)})
