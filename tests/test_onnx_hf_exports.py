"""HuggingFace transformers exported to ONNX by PyTorch (small configs, random weights),
imported by dlprim and run against onnxruntime on the same file: token ids with padded
attention masks (GPT-2, BERT, Llama, T5), log-mel features through 1-D convolutions
(Whisper), pixel values (ViT). The builders and the comparison are
benchmarks/onnx_hf_exports.py's."""
import importlib.util
import os

import pytest

pytest.importorskip("onnxruntime")
pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

_PATH = os.path.join(os.path.dirname(__file__), "..", "benchmarks", "onnx_hf_exports.py")
_spec = importlib.util.spec_from_file_location("onnx_hf_exports", _PATH)
hf = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(hf)


@pytest.mark.parametrize("name", sorted(hf.MODELS))
def test_torchscript_export_matches_onnxruntime(ctx, tmp_path, name):
    path, feeds, _ = hf.export(name, str(tmp_path))
    assert hf.compare(path, feeds, ctx) < 1e-4


@pytest.mark.parametrize("name", ["gpt2", "bert", "vit"])
def test_dynamo_export_matches_onnxruntime(ctx, tmp_path, name):
    pytest.importorskip("onnxscript")
    path, feeds, _ = hf.export(name, str(tmp_path), dynamo=True)
    assert hf.compare(path, feeds, ctx) < 1e-4
