"""Character-level language models: the text source and vocabulary, dlprim-train on a
GPT with its errors, sampling from the saved model, and the bundled example's config."""
import json
import os
import sys

import numpy as np
import pytest

import dlprim as dp
from dlprim.data import BatchLoader, CharVocab, DataError, TextSource
from dlprim.sampling import next_token_distribution, sample_text
from dlprim.train import Trainer
from dlprim.train.config import ConfigError, load_config
from dlprim.train.graphs import deploy_graph, loss_parts

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE = os.path.join(ROOT, "examples", "charlm")
TEXT = "the cat sat on the mat. the dog sat on the log.\n" * 8


@pytest.fixture
def text_file(tmp_path):
    path = tmp_path / "text.txt"
    path.write_text(TEXT)
    return str(path)


# ----- vocabulary and source
def test_vocab_round_trip_and_errors(tmp_path):
    vocab = CharVocab.from_text("banana!")
    assert vocab.chars == "!abn" and len(vocab) == 4
    ids = vocab.encode("nab!")
    assert ids.dtype == np.int64 and list(ids) == [3, 1, 2, 0]
    assert vocab.decode(ids) == "nab!"
    with pytest.raises(DataError, match=r"'z' at position 2 is not in the vocabulary"):
        vocab.encode("abz")
    with pytest.raises(ValueError, match="token id outside 0..3"):
        vocab.decode([4])
    with pytest.raises(DataError, match="must not repeat"):
        CharVocab("aa")
    vocab.save(str(tmp_path / "v.json"))
    assert CharVocab.load(str(tmp_path / "v.json")) == vocab
    (tmp_path / "bad.json").write_text("[1]")
    with pytest.raises(DataError, match="not a character vocabulary"):
        CharVocab.load(str(tmp_path / "bad.json"))


def test_text_source_windows_are_shifted_targets(text_file):
    src = TextSource(text_file, context=5, begin=0.0, end=0.5)
    part = TEXT[:len(TEXT) // 2]
    assert len(src) == (len(part) - 1) // 5 and src.shape == (5,)
    assert src.num_classes == len(set(TEXT))  # the whole file's characters
    x, y = src.fetch([0, 3])
    assert x.dtype == np.int64 and x.shape == (2, 5)
    assert src.vocab.decode(x[1]) == part[15:20] and src.vocab.decode(y[1]) == part[16:21]
    loader = BatchLoader(src, 4, shuffle=True, seed=1, prefetch=0)
    bx, by = next(iter(loader))
    assert bx.dtype == np.int64 and bx.shape == (4, 5) and by.shape == (4, 5)
    np.testing.assert_array_equal(bx[:, 1:], by[:, :-1])


def test_text_source_errors(tmp_path, text_file):
    with pytest.raises(DataError, match="too few for one window of context 500"):
        TextSource(text_file, 500)
    with pytest.raises(DataError, match="begin 0.5 must be before end 0.2"):
        TextSource(text_file, 4, begin=0.5, end=0.2)
    with pytest.raises(DataError, match="context must be a positive integer"):
        TextSource(text_file, 0)
    (tmp_path / "latin1.txt").write_bytes(b"caf\xe9 au lait")
    with pytest.raises(DataError, match=r"not UTF-8 text \(byte 3\)"):
        TextSource(str(tmp_path / "latin1.txt"), 2)
    other = tmp_path / "other.txt"
    other.write_text("xyz" * 20)
    with pytest.raises(DataError, match="'x' at position 0 is not in the vocabulary"):
        TextSource(str(other), 4, vocab=CharVocab.from_text(TEXT))


# ----- training
def _config(tmp_path, text_file, **over):
    model = {"name": "gpt", "args": {"vocab": len(set(TEXT)), "context": 8, "layers": 1,
                                     "heads": 2, "dim": 16}}
    cfg = {"net": {"model": model},
           "data": {"train": {"type": "text", "path": text_file, "context": 8, "end": 0.8},
                    "val": {"type": "text", "path": text_file, "context": 8, "begin": 0.8}},
           "solver": {"type": "adam", "lr": 0.01}, "epochs": 4, "batch": 8, "seed": 1,
           "out": str(tmp_path / "run"), "progress": False, "plot": False}
    cfg.update(over)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    return str(path)


def test_gpt_trains_on_text_and_samples(ctx, tmp_path, text_file):
    cfg = load_config(_config(tmp_path, text_file))
    result = Trainer(cfg, ctx).run()
    rows = result.out_dir
    metrics = open(os.path.join(rows, "metrics.csv")).read().splitlines()
    losses = [float(r.split(",")[1]) for r in metrics[1:]]
    assert losses[-1] < 0.7 * losses[0], losses  # a repetitive text is learnt fast
    assert result.val_acc > 0.5  # per character, against 1/15 by chance
    vocab = CharVocab.load(os.path.join(rows, "vocab.json"))
    assert vocab == CharVocab.from_text(TEXT)
    net = dp.Net(ctx, mode=dp.PREDICT)
    net.load_from_json_file(os.path.join(rows, "model-deploy.json"))
    net.setup()
    net.load_parameters(os.path.join(rows, "model.dlp"))
    assert net.input_names == ["tokens"] and net.tensor("tokens").shape == (1, 8)
    a = sample_text(net, vocab, "the ", 40, seed=5)
    assert len(a) == 40 and set(a) <= set(TEXT)
    assert sample_text(net, vocab, "the ", 40, seed=5) == a
    # the greedy continuation of a memorised text is the text
    assert sample_text(net, vocab, "the cat sat on", 4, temperature=0.01, seed=0) == " the"


def test_padding_after_the_prompt_is_not_seen(ctx):
    """sample_text fills the window's tail with id 0; causal attention must make the
    distribution at the last prompt position independent of it."""
    graph = dp.models.gpt(vocab=11, context=6, layers=1, heads=2, dim=8, batch=1, train=False)
    net = dp.Net(ctx, graph, mode=dp.PREDICT, seed=2)
    out = []
    for tail in ([0, 0, 0], [7, 3, 9]):
        net.tensor("tokens").to_device(np.array([[1, 5, 2] + tail], dtype=np.int64))
        net.forward()
        out.append(net.tensor("logits").to_host()[:3])
    np.testing.assert_allclose(out[0], out[1], rtol=1e-5, atol=1e-6)


def test_next_token_distribution():
    p = np.array([0.1, 0.2, 0.7])
    np.testing.assert_allclose(next_token_distribution(p), p)
    cold = next_token_distribution(p, temperature=0.5)
    np.testing.assert_allclose(cold, p ** 2 / np.sum(p ** 2))
    np.testing.assert_allclose(next_token_distribution(p, top_k=2), [0, 2 / 9, 7 / 9])
    with pytest.raises(ValueError, match="temperature must be > 0"):
        next_token_distribution(p, temperature=0)
    with pytest.raises(ValueError, match="top_k must be a positive integer"):
        next_token_distribution(p, top_k=0)
    with pytest.raises(dp.errors.NonFiniteError, match="not finite"):
        next_token_distribution([np.nan, 1.0])


def test_text_config_errors(tmp_path, text_file):
    path = _config(tmp_path, text_file)
    cfg = json.loads(open(path).read())
    cfg["data"]["train"].update(context=0, begin=2, transforms=[{"type": "normalize",
                                                                "mean": 0, "std": 1}])
    del cfg["data"]["val"]["context"]
    open(path, "w").write(json.dumps(cfg))
    with pytest.raises(ConfigError) as err:
        load_config(path)
    text = str(err.value)
    for want in ("data.train.context: must be a positive integer",
                 "data.train.begin: must be <= 1", "data.train.transforms: does not apply to text",
                 "data.val.context: required"):
        assert want in text, text
    cfg["data"]["train"].update(context=4000, begin=0, transforms=[])
    cfg["data"]["val"]["context"] = 8
    open(path, "w").write(json.dumps(cfg))
    with pytest.raises(ConfigError, match="too short for one window of 4000 characters"):
        load_config(path)


def test_text_shorter_vocab_than_model_is_refused(ctx, tmp_path, text_file):
    cfg = load_config(_config(tmp_path, text_file))
    cfg["net"]["model"]["args"]["vocab"] = 5
    want = "data.train: %d classes, the net's 'logits' has 5" % len(set(TEXT))
    with pytest.raises(ValueError, match=want):
        Trainer(cfg, ctx)


def test_language_model_deploy_graph():
    graph = dp.models.gpt(vocab=7, context=4, layers=1, heads=1, dim=4, batch=2).to_dict()
    assert loss_parts(graph) == ("tokens", "targets", "logits", "loss")
    deploy = deploy_graph(graph)
    assert [i["name"] for i in deploy["inputs"]] == ["tokens"]
    assert not any("targets" in op["inputs"] or "targets/rows" in op["inputs"]
                   for op in deploy["operators"])


def test_example_config_is_valid_and_sample_script_runs(ctx, tmp_path):
    cfg = load_config(os.path.join(EXAMPLE, "config.json"))
    train = cfg["data"]["train"]
    src = TextSource(train["path"], train["context"])
    assert len(src.vocab) <= cfg["net"]["model"]["args"]["vocab"]
    assert os.path.getsize(train["path"]) > 200_000  # a few hundred KB of text
    sys.path.insert(0, EXAMPLE)
    try:
        import sample
    finally:
        sys.path.remove(EXAMPLE)
    assert sample.main([str(tmp_path)]) == 2  # no run there: an error, not a traceback
