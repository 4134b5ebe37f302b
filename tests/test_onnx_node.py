"""ONNX's own backend node tests (tests/onnx_node_cases.py): no case may give a wrong
result or fail with anything but a documented dlprim error, and the cases that pass stay
passing.

By default the cases of the operators CNN, transformer and recurrent exports write,
made in memory from onnx's case modules (a few seconds); ``DLPRIM_ONNX_NODE_FULL=1``
runs every case onnx defines (generated once into the cache, see onnx_node_cases).
"""
import os

import pytest

pytest.importorskip("onnx")
import onnx_node_cases as node_cases  # noqa: E402

# onnx's case modules (onnx/backend/test/case/node/<module>.py) run by default; the
# pooling ones are left out: onnx's reference takes some 20 s to make their cases
MODULES = (
    "flatten", "resize", "upsample", "reshape", "transpose", "concat", "split", "slice",
    "squeeze", "unsqueeze", "gather", "expand", "pad", "shape", "size", "where",
    "conv", "convtranspose", "gemm", "matmul", "einsum", "batch_normalization",
    "layernormalization", "groupnormalization", "lrn", "globalaveragepool",
    "softmax", "logsoftmax", "relu", "leakyrelu", "sigmoid", "tanh", "gelu", "erf",
    "hardswish", "hardsigmoid", "clip", "add", "sub", "mul", "div", "pow", "sqrt",
    "reducesum", "reducemean", "dropout", "equal", "cumsum", "lstm", "gru",
    "softmax_cross_entropy_loss", "negativeloglikelihoodloss",
    "attention", "rmsnormalization", "rotaryembedding", "rnn", "hardmax", "reversesequence",
)
# passing cases, at least: raise these as operators are added, never lower them
FLOOR_DEFAULT = 791
FLOOR_FULL = 1591

@pytest.fixture(scope="module")
def results(ctx):
    if os.environ.get("DLPRIM_ONNX_NODE_FULL"):
        return node_cases.run(ctx)
    return node_cases.run_collected(ctx, node_cases.collect(MODULES))


def test_no_wrong_result_and_no_crash(results):
    bad = ["%s %s (%s): %s" % (r.status, r.name, r.op, r.detail) for r in results
           if r.status in ("wrong", "crash")]
    assert not bad, "%d cases:\n%s" % (len(bad), "\n".join(bad))


def test_passing_cases_do_not_fall(results):
    floor = FLOOR_FULL if os.environ.get("DLPRIM_ONNX_NODE_FULL") else FLOOR_DEFAULT
    passed = node_cases.counts(results)["pass"]
    assert passed >= floor, node_cases.summary(results)


@pytest.mark.parametrize("name, shape", [
    ("test_flatten_negative_axis1", (24, 5)), ("test_flatten_negative_axis3", (2, 60))])
def test_flatten_negative_axis(results, name, shape):
    """axis=-1 on (2, 3, 4, 5) is axis 3: (24, 5)."""
    r = {r.name: r for r in results}[name]
    assert r.status == "pass", r.detail


def test_resize_computes_what_interpolate_does_not(results):
    """ONNX's align_corners with a fractional scale, and pytorch_half_pixel to one pixel,
    are not PyTorch's interpolate: computed with ONNX's own per-axis matrices."""
    by_name = {r.name: r for r in results}
    for name in ("test_resize_downsample_scales_linear_align_corners",
                 "test_resize_downsample_sizes_linear_pytorch_half_pixel"):
        assert by_name[name].status == "pass", by_name[name]


def test_shape_and_size_of_an_input_as_outputs(results):
    """An integer constant the importer works out (a Shape, a Size: ONNX's scalar) is a
    net output of its ONNX shape and dtype."""
    by_name = {r.name: r for r in results}
    for name in ("test_shape", "test_size"):
        assert by_name[name].status == "pass", by_name[name]


CTMS = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners",
        "asymmetric")
MODES = (("linear", None), ("nearest", "round_prefer_floor"), ("nearest", "round_prefer_ceil"),
         ("nearest", "floor"), ("nearest", "ceil"))


@pytest.mark.parametrize("ctm", CTMS)
def test_resize_is_onnx_reference_or_refused(ctx, ctm):
    """Every mode and nearest_mode of this transformation, up and down, by sizes and by
    scales: dlprim gives onnx's reference result, or refuses the node by name."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper
    from onnx.reference import ReferenceEvaluator
    import dlprim.onnx as dox
    x = np.random.default_rng(5).standard_normal((1, 2, 5, 4)).astype(np.float32)
    targets = [("sizes", np.array([1, 2, 10, 3], np.int64)), ("sizes", np.array([1, 2, 1, 8], np.int64)),
               ("scales", np.array([1, 1, 2, 1.5], np.float32)),
               ("scales", np.array([1, 1, 0.6, 0.5], np.float32))]
    ran = refused = 0
    for mode, nearest in MODES:
        for kind, value in targets:
            attrs = {"mode": mode, "coordinate_transformation_mode": ctm}
            if nearest:
                attrs["nearest_mode"] = nearest
            ins = ["x", "", "v"] if kind == "scales" else ["x", "", "", "v"]
            g = helper.make_graph([helper.make_node("Resize", ins, ["y"], name="rs", **attrs)], "g",
                                  [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                                  [numpy_helper.from_array(value, "v")])
            m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)])
            ref = ReferenceEvaluator(m).run(None, {"x": x})[0]
            try:
                net = dox.load(m, ctx)
            except dox.UnsupportedModelError as err:
                assert err.problems[0][:2] == ("Resize", "rs"), err
                refused += 1
                continue
            y = net(x=x)["y"]
            assert y.shape == ref.shape, (mode, nearest, kind, value)
            np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-6,
                                       err_msg="%s %s %s %s" % (mode, nearest, kind, value))
            ran += 1
    assert ran > 0 or ctm == "half_pixel_symmetric", (ran, refused)
