"""Constant folding at import (dlprim/onnx/fold.py) where onnx's reference evaluator is
not the definition: GatherElements with indices smaller than the data along the other
axes, as BERT's export picks token types by position ids."""
import numpy as np
import pytest

pytest.importorskip("onnxruntime")
from onnx import helper  # noqa: E402

import dlprim.onnx as dox  # noqa: E402
from test_onnx_ops import check, make  # noqa: E402

node = helper.make_node


def test_gather_elements_of_constants_with_smaller_indices(ctx):
    table = np.arange(2 * 64, dtype=np.float32).reshape(2, 64)
    idx = np.array([[3, -1, 0, 7, 5]], np.int64)  # (1, 5) from (2, 64): rows 0 only, -1 wraps
    data = make([node("GatherElements", ["table", "idx"], ["picked"], axis=1),
                 node("Add", ["x", "picked"], ["y"])], {"x": (1, 5)}, ["y"],
                {"table": table, "idx": idx})
    check(ctx, data, {"x": np.ones((1, 5), np.float32)})


def test_gather_elements_folding_refuses_out_of_range_indices():
    table = np.zeros((1, 4), np.float32)
    data = make([node("GatherElements", ["table", "idx"], ["picked"], axis=1),
                 node("Add", ["x", "picked"], ["y"])], {"x": (1, 2)}, ["y"],
                {"table": table, "idx": np.array([[0, 4]], np.int64)})
    with pytest.raises(dox.OnnxImportError, match="GatherElements .*outside"):
        dox.to_netconfig(data)


def test_a_bias_written_as_an_identity_of_an_equal_one_folds_into_the_product(ctx):
    """PyTorch's exporter writes a parameter equal to one before it (the zero biases of a
    fresh model) as an Identity of that one: Add(MatMul(x, W), Identity(b)) is still one
    InnerProduct with its bias, not a product and an Elementwise add."""
    import io
    import torch
    import dlprim.onnx as dox

    class TwoLinears(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = torch.nn.Linear(6, 6), torch.nn.Linear(6, 6)
            for m in (self.a, self.b):
                torch.nn.init.zeros_(m.bias)

        def forward(self, x):
            return self.b(torch.relu(self.a(x)))
    x = torch.randn(2, 3, 6)
    f = io.BytesIO()
    torch.onnx.export(TwoLinears(), (x,), f, opset_version=17, dynamo=False,
                      input_names=["x"], do_constant_folding=False)
    cfg, _ = dox.to_netconfig(f.getvalue())
    types = [op["type"] for op in cfg.operators]
    assert types.count("InnerProduct") == 2 and "Elementwise" not in types, types
