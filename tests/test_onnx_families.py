"""ONNX import of tiny CNN families exported by PyTorch at two opsets, checked against
onnxruntime on the same file (logits, within 1e-4 of their largest magnitude)."""
import io

import numpy as np
import pytest

torch = pytest.importorskip("torch")
ort = pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")

import dlprim.onnx as dox  # noqa: E402

from onnx_models import FAMILIES, IMAGE, build  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

OPSETS = (11, 17)
BATCH = 2


def export(model, opset, x):
    f = io.BytesIO()
    torch.onnx.export(model, x, f, opset_version=opset, dynamo=False, input_names=["data"],
                      output_names=["logits"])
    return f.getvalue()


def check_close(y, ref, rtol=1e-4):
    scale = float(np.abs(ref).max())
    err = float(np.abs(y - ref).max())
    assert err <= rtol * max(scale, 1e-3), "max error %g, largest output %g" % (err, scale)


@pytest.mark.parametrize("opset", OPSETS)
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_family_matches_onnxruntime(ctx, family, opset):
    model = build(family)
    x = torch.from_numpy(np.random.default_rng(7).standard_normal((BATCH,) + IMAGE,
                                                                  dtype=np.float32))
    data = export(model, opset, x)
    ref = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(
        None, {"data": x.numpy()})[0]
    net = dox.load(data, ctx)
    y = net(data=x.numpy())["logits"]
    assert y.shape == ref.shape
    check_close(y, ref)
