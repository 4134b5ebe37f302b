"""ONNX 1-D convolutions (Whisper's and wav2vec's front ends): Conv and ConvTranspose over
(N, C, L) import as the 2-D layers over (N, C, 1, L) and match onnxruntime, with every
window attribute (strides, dilations, pads, groups, auto_pad, output_padding)."""
import numpy as np
import pytest

pytest.importorskip("onnxruntime")
from onnx import helper  # noqa: E402

from test_onnx_ops import check, make, op_types, rand  # noqa: E402

node = helper.make_node


@pytest.mark.parametrize("attrs", [
    {},
    {"strides": [2], "pads": [1, 1]},
    {"dilations": [2], "pads": [2, 0]},
    {"group": 2, "pads": [1, 1]},
    {"auto_pad": "SAME_UPPER", "strides": [3]},
])
def test_conv1d_matches_onnxruntime(ctx, attrs):
    groups = attrs.get("group", 1)
    w, b = rand(6, 4 // groups, 3), rand(6)
    data = make([node("Conv", ["x", "w", "b"], ["y"], **attrs)], {"x": (2, 4, 37)}, ["y"],
                {"w": w, "b": b})
    check(ctx, data, {"x": rand(2, 4, 37)})


@pytest.mark.parametrize("attrs", [
    {"strides": [2]},
    {"strides": [2], "pads": [1, 0], "output_padding": [1]},
    {"dilations": [2], "group": 2},
])
def test_conv_transpose1d_matches_onnxruntime(ctx, attrs):
    groups = attrs.get("group", 1)
    w = rand(4, 6 // groups, 3)
    data = make([node("ConvTranspose", ["x", "w"], ["y"], **attrs)], {"x": (2, 4, 19)}, ["y"],
                {"w": w})
    check(ctx, data, {"x": rand(2, 4, 19)})


def test_conv1d_keeps_the_weight_under_its_name():
    # the model's parameter maps onto the Net's weight element for element
    # (torch.compile copies a trained Conv1d's weight into it by name)
    import dlprim.onnx as dox
    w = rand(6, 4, 5)
    data = make([node("Conv", ["x", "conv.weight"], ["y"])], {"x": (1, 4, 20)}, ["y"],
                {"conv.weight": w})
    cfg, weights = dox.to_netconfig(data)
    assert op_types(data) == ["Reshape", "Convolution2D", "Reshape"]
    assert weights["conv.weight"].shape == (6, 4, 1, 5)
    np.testing.assert_array_equal(weights["conv.weight"].ravel(), w.ravel())
