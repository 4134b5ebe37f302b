"""dlprim.llm.Checkpoint: HuggingFace model folders read without PyTorch (config.json,
safetensors weights whole or sharded by an index, bfloat16 too), and the errors that name
what is missing or unknown."""
import json

import numpy as np
import pytest

from dlprim.dtypes import bfloat16
from dlprim.errors import FileFormatError, MissingFileError
from dlprim.llm import ArchitectureError, Checkpoint
from dlprim.net.safetensors import save_safetensors


def _folder(tmp_path, arrays, config=None, shards=1):
    """A model folder holding ``arrays`` in ``shards`` safetensors files (an index when
    more than one)."""
    cfg = config or {"architectures": ["LlamaForCausalLM"], "model_type": "llama"}
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    names = list(arrays)
    if shards == 1:
        save_safetensors(str(tmp_path / "model.safetensors"), arrays)
        return tmp_path
    where = {}
    for k in range(shards):
        part = names[k::shards]
        file = "model-%05d-of-%05d.safetensors" % (k + 1, shards)
        save_safetensors(str(tmp_path / file), {n: arrays[n] for n in part})
        where.update({n: file for n in part})
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": where}))
    return tmp_path


@pytest.mark.parametrize("shards", [1, 3])
def test_whole_and_sharded_weights_read_back(tmp_path, shards):
    rng = np.random.default_rng(0)
    arrays = {"model.embed_tokens.weight": rng.standard_normal((11, 4)).astype(np.float32),
              "model.layers.0.self_attn.q_proj.weight": rng.standard_normal((4, 4)).astype(np.float16),
              "model.norm.weight": np.arange(4, dtype=np.uint16).view(bfloat16),
              "lm_head.weight": rng.standard_normal((11, 4)).astype(np.float32)}
    ckpt = Checkpoint(_folder(tmp_path, arrays, shards=shards))
    assert ckpt.architecture == "llama" and sorted(ckpt.names()) == sorted(arrays)
    for name, a in arrays.items():
        got = ckpt.tensor(name)
        assert got.dtype == a.dtype and got.shape == a.shape
        np.testing.assert_array_equal(got.view(np.uint8), a.view(np.uint8))
    assert "lm_head.weight" in ckpt and "nope" not in ckpt
    with pytest.raises(FileFormatError, match="no tensor 'nope'"):
        ckpt.tensor("nope")


def test_unknown_architectures_and_missing_files_are_named(tmp_path):
    arrays = {"w": np.zeros(2, np.float32)}
    with pytest.raises(ArchitectureError, match="MambaForCausalLM.*known: .*LlamaForCausalLM"):
        Checkpoint(_folder(tmp_path / "a", arrays, {"architectures": ["MambaForCausalLM"]}))
    assert Checkpoint(_folder(tmp_path / "b", arrays, {"model_type": "qwen2"})).architecture \
        == "qwen2"
    with pytest.raises(MissingFileError, match="no such model folder"):
        Checkpoint(tmp_path / "none")
    (tmp_path / "c").mkdir()
    with pytest.raises(MissingFileError, match="config"):
        Checkpoint(tmp_path / "c")
    (tmp_path / "c" / "config.json").write_text(json.dumps({"model_type": "llama"}))
    with pytest.raises(MissingFileError, match="model.safetensors"):
        Checkpoint(tmp_path / "c")
    sharded = _folder(tmp_path / "d", {"w": arrays["w"], "v": arrays["w"]}, shards=2)
    (sharded / "model-00002-of-00002.safetensors").unlink()
    with pytest.raises(MissingFileError, match="model-00002-of-00002.safetensors"):
        Checkpoint(sharded)
    (tmp_path / "e").mkdir()
    (tmp_path / "e" / "config.json").write_text("{not json")
    with pytest.raises(FileFormatError, match="not JSON"):
        Checkpoint(tmp_path / "e")


def test_a_transformers_folder_reads_as_its_state_dict(tmp_path):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    cfg = transformers.Qwen2Config(vocab_size=64, hidden_size=16, intermediate_size=32,
                                   num_hidden_layers=2, num_attention_heads=2,
                                   num_key_value_heads=1, max_position_embeddings=32)
    model = transformers.Qwen2ForCausalLM(cfg).to(torch.bfloat16)
    model.save_pretrained(str(tmp_path), safe_serialization=True, max_shard_size="4KB")
    ckpt = Checkpoint(tmp_path)
    assert ckpt.architecture == "qwen2" and ckpt.config["num_key_value_heads"] == 1
    assert (tmp_path / "model.safetensors.index.json").exists()  # sharded
    state = model.state_dict()
    for name in ckpt.names():
        want = state[name].view(torch.int16).numpy().view(np.uint16)
        np.testing.assert_array_equal(ckpt.tensor(name).view(np.uint16), want)
