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

# in make test: the masks (GPT-2, BERT) and the 1-D convolutions (Whisper); every model
# with DLPRIM_MODELS_FULL=1
FULL = bool(os.environ.get("DLPRIM_MODELS_FULL"))


def _models(names, quick):
    return [n if FULL or n in quick else pytest.param(n, marks=pytest.mark.skip(
        reason="DLPRIM_MODELS_FULL=1 runs it")) for n in names]


@pytest.mark.parametrize("name", _models(sorted(hf.MODELS), ("gpt2", "bert", "whisper")))
def test_torchscript_export_matches_onnxruntime(ctx, tmp_path, name):
    path, feeds, _ = hf.export(name, str(tmp_path))
    assert hf.compare(path, feeds, ctx) < 1e-4


@pytest.mark.parametrize("name", _models(["gpt2", "bert", "llama", "t5", "vit"], ("gpt2",)))
def test_dynamo_export_matches_onnxruntime(ctx, tmp_path, name):
    pytest.importorskip("onnxscript")
    path, feeds, _ = hf.export(name, str(tmp_path), dynamo=True)
    assert hf.compare(path, feeds, ctx) < 1e-4
