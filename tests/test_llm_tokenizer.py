"""dlprim.llm.tokenizer against transformers on a model folder that transformers itself
saved: a byte-level BPE of ~300 tokens trained here on Shakespeare, with <s> and </s>, a
Llama-style chat template and a generation_config.json. encode, decode, the chat template
(the file and the tokenizer_config.json forms), the stop ids, the stream decoder (a
character split over byte tokens, stop strings over token boundaries, a window of a few
ids) and the errors that name the folder and file."""
import json
import os
import shutil
import sys

import pytest

pytest.importorskip("tokenizers")
pytest.importorskip("jinja2")

from dlprim.errors import FileFormatError, MissingFileError  # noqa: E402
from dlprim.errors import MissingDependencyError  # noqa: E402
from dlprim.llm.tokenizer import (StreamDecoder, Tokenizer,  # noqa: E402
                                  TokenizerError)

SHAKESPEARE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                           "examples", "charlm", "data", "shakespeare.txt")
# Llama 2's layout, plus what transformers' environment gives a template beyond jinja's:
# trim/lstrip_blocks (the indented lines), loop controls, {% generation %}, namespace,
# raise_exception, strftime_now and a tojson that keeps non-ASCII and '<' as they are
TEMPLATE = """{% set ns = namespace(turns=0) %}
{% if strftime_now('%Y') | length != 4 %}
    {{ raise_exception('strftime_now gave no year') }}
{% endif %}
{% if messages[0]['role'] == 'system' %}
    {% set system = messages[0]['content'] %}
    {% set rest = messages[1:] %}
{% else %}
    {% set system = none %}
    {% set rest = messages %}
{% endif %}
{% for message in rest %}
    {% if message['role'] == 'end' %}
        {% break %}
    {% endif %}
    {% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}
        {{ raise_exception('Conversation roles must alternate user/assistant/user/...') }}
    {% endif %}
    {% set ns.turns = ns.turns + 1 %}
    {% if loop.index0 == 0 and system is not none %}
        {% set content = '<<SYS>>\\n' + system + '\\n<</SYS>>\\n\\n' + message['content'] %}
    {% else %}
        {% set content = message['content'] %}
    {% endif %}
    {% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content | trim + ' [/INST]' }}
    {% else %}{% generation %}{{ ' ' + content | trim + ' ' + eos_token }}{% endgeneration %}
    {% endif %}
    {% if message['name'] is defined %}{{ '(' + message['name'] + ')' }}
    {% endif %}
{% endfor %}
{% if meta is defined %}{{ meta | tojson }}{% endif %}
{% if add_generation_prompt %}{{ ' ' }}{% endif %}
"""
CHATS = [
    [{"role": "user", "content": "Hello there!"}],
    [{"role": "system", "content": "Answer as a Roman citizen."},
     {"role": "user", "content": "  Who is Caius Marcius?  "},
     {"role": "assistant", "content": "Chief enemy to the people.", "name": None},
     {"role": "user", "content": "naïve café 😀, 日本語?"},
     {"role": "end", "content": "never shown"}],
]
TEXTS = ["Before we proceed any further, hear me speak.", "naïve café 😀",
         "日本語 ünïcödé\n", "", "  two  spaces\tand a tab\n\n", "<s>Speak,</s> speak.",
         "Ünïcode 🙂🎭 End"]


def save_tokenizer(out, template=TEMPLATE, vocab=300):
    """A byte-level BPE tokenizer trained on Shakespeare, saved into folder ``out`` as
    transformers saves it (<s> BOS added by the post-processor, </s> EOS, the template)."""
    import transformers
    from tokenizers import Tokenizer as Backend, decoders, models, pre_tokenizers, \
        processors, trainers
    with open(SHAKESPEARE, encoding="utf-8") as f:
        text = f.read()[:20000]
    tok = Backend(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator([text], trainers.BpeTrainer(
        vocab_size=vocab, special_tokens=["<s>", "</s>"], show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", 0)])
    transformers.PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>",
                                         chat_template=template).save_pretrained(out)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """A model folder as transformers saves it, plus a generation_config.json whose EOS
    ids differ from the tokenizer's."""
    pytest.importorskip("transformers")
    out = tmp_path_factory.mktemp("model")
    save_tokenizer(out)
    (out / "generation_config.json").write_text(json.dumps({"eos_token_id": [1, 7],
                                                            "bos_token_id": 0}))
    (out / "config.json").write_text(json.dumps({"eos_token_id": 9}))
    assert (out / "chat_template.jinja").exists()
    return out


@pytest.fixture(scope="module")
def metaspace(tmp_path_factory):
    """Llama 2's kind of tokenizer.json alone: words begin with '▁', unknown characters
    fall back to <0xNN> byte tokens, and the decoder strips the first token's space."""
    from tokenizers import Tokenizer as Backend, decoders, models, pre_tokenizers, trainers
    with open(SHAKESPEARE, encoding="utf-8") as f:
        text = f.read()[:20000]
    tok = Backend(models.BPE(unk_token="<unk>", byte_fallback=True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first")
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(),
                                     decoders.Fuse(), decoders.Strip(" ", 1, 0)])
    tok.train_from_iterator([text], trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<unk>", "<s>", "</s>"], show_progress=False))
    spec = json.loads(tok.to_str())
    for b in range(256):
        spec["model"]["vocab"].setdefault("<0x%02X>" % b, len(spec["model"]["vocab"]))
    out = tmp_path_factory.mktemp("metaspace")
    Backend.from_str(json.dumps(spec)).save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(json.dumps({"eos_token": {"content": "</s>"}}))
    return out


def _hf(path):
    return pytest.importorskip("transformers").AutoTokenizer.from_pretrained(str(path))


def _variant(folder, tmp_path, drop=(), config=None, files=None):
    """A copy of ``folder`` without the files ``drop``, its tokenizer_config.json updated by
    ``config``, and ``files`` ({name: text}) written."""
    out = tmp_path / "variant"
    shutil.copytree(folder, out)
    for name in drop:
        os.remove(out / name)
    if config:
        cfg = json.loads((out / "tokenizer_config.json").read_text())
        cfg.update(config)
        (out / "tokenizer_config.json").write_text(json.dumps(cfg))
    for name, text in (files or {}).items():
        (out / name).write_text(text, encoding="utf-8")
    return out


def test_encode_and_decode_match_transformers(folder):
    tok, hf = Tokenizer(folder), _hf(folder)
    for text in TEXTS:
        ids = tok.encode(text)
        assert ids == hf.encode(text) and ids[0] == tok.bos_id == hf.bos_token_id == 0
        bare = tok.encode(text, add_special_tokens=False)
        assert bare == hf.encode(text, add_special_tokens=False) == ids[1:]
        assert tok.decode(ids) == hf.decode(ids, skip_special_tokens=True)
        assert tok.decode(ids, skip_special_tokens=False) == hf.decode(ids) == "<s>" + text
    assert tok.decode(tok.encode(TEXTS[5])) == "Speak, speak."
    assert tok.vocab_size == len(hf) == 300


def test_stop_ids_come_from_generation_config_then_config_then_the_eos_token(folder, tmp_path):
    tok = Tokenizer(folder)
    assert tok.eos_ids == {1, 7} and tok.bos_id == 0 and tok.pad_id is None
    assert tok.special_tokens == {"bos_token": "<s>", "eos_token": "</s>"}
    assert Tokenizer(_variant(folder, tmp_path / "a", ["generation_config.json"])).eos_ids == {9}
    assert Tokenizer(_variant(folder, tmp_path / "b", ["generation_config.json", "config.json"])
                     ).eos_ids == {1}


def test_damaged_configs_are_named(folder, tmp_path):
    cases = [({"bos_token": 5}, FileFormatError, "tokenizer_config.json: bos_token is 5"),
             ({"chat_template": [{"name": "default"}]}, FileFormatError,
              "tokenizer_config.json: chat_template {'name': 'default'} is not"),
             ({"chat_template": [{"name": "a", "template": "x"}]}, TokenizerError,
              "chat templates a, none named 'default'")]
    for k, (config, error, message) in enumerate(cases):
        path = _variant(folder, tmp_path / str(k), ["chat_template.jinja"], config=config)
        with pytest.raises(error, match=message):
            Tokenizer(path)
    path = _variant(folder, tmp_path / "gen",
                    files={"generation_config.json": '{"eos_token_id": "x"}'})
    with pytest.raises(FileFormatError, match="generation_config.json: eos_token_id is 'x'"):
        Tokenizer(path)
    path = _variant(folder, tmp_path / "tok", files={"tokenizer.json": '{"model": 3}'})
    with pytest.raises(FileFormatError, match="tokenizer.json: not a tokenizer"):
        Tokenizer(path)
    path = _variant(folder, tmp_path / "json", files={"config.json": '{"eos_'})
    with pytest.raises(FileFormatError, match="config.json: the model's config is not JSON"):
        Tokenizer(path)


def test_named_special_tokens_are_added_and_tokenizer_json_decides_bos(folder, tmp_path):
    # as transformers 5: named special tokens that tokenizer.json lacks are added (the
    # legacy special_tokens_map.json winning), model-specific ones reach the template, and
    # with a tokenizer.json, add_bos_token / add_eos_token change nothing
    path = _variant(folder, tmp_path, config={
        "add_bos_token": False, "add_eos_token": True, "pad_token": "<pad>",
        "extra_special_tokens": {"image_token": "<image>"}}, files={
        "special_tokens_map.json": json.dumps({"pad_token": {"content": "<pad2>"},
                                               "unk_token": "<unk>"}),
        "chat_template.jinja": "{{ image_token }}|{{ pad_token }}|{{ unk_token }}|"
                               "{{ messages[0]['content'] }}"})
    tok, hf = Tokenizer(path), _hf(path)
    for text in ("Speak, speak.", "a<pad2>b<image>c<unk>", "<pad>"):
        assert tok.encode(text) == hf.encode(text)
    assert tok.encode("hi")[0] == 0 and tok.encode("hi")[-1] != 1
    assert tok.pad_id == hf.pad_token_id == 301 and tok.encode("<image>", False) == [302]
    assert tok.decode(tok.encode("a<pad2>b<image>c")) == "abc" and tok.vocab_size == len(hf) == 303
    assert tok.chat(CHATS[0]) == hf.apply_chat_template(CHATS[0], tokenize=False) \
        == "<image>|<pad2>|<unk>|Hello there!"


def test_templates_run_in_the_sandbox(folder, tmp_path):
    def chat(template, name):
        path = _variant(folder, tmp_path / name, files={"chat_template.jinja": template})
        return Tokenizer(path).chat(CHATS[0])

    assert chat("{{ dict(a=1) | tojson }}{{ dict.fromkeys('b', 'é') | tojson }}", "dict") \
        == '{"a": 1}{"b": "é"}'
    for name, template in [("append", "{{ messages.append(1) }}"),
                           ("dunder", "{{ messages.__class__.__mro__ }}"),
                           ("namespace", "{% set ns = namespace(_x=1) %}"),
                           ("type", "{{ dict.pop(messages[0], 'role') }}")]:
        with pytest.raises(TokenizerError, match="the chat template .* failed"):
            chat(template, name)
    with pytest.raises(FileFormatError, match="chat_template.jinja: the chat template, line 2"):
        chat("fine\n{% if %}", "syntax")


@pytest.mark.parametrize("generation_prompt", [True, False])
def test_chat_matches_apply_chat_template(folder, generation_prompt):
    tok, hf = Tokenizer(folder), _hf(folder)
    for messages in CHATS:
        text = tok.chat(messages, add_generation_prompt=generation_prompt)
        assert text == hf.apply_chat_template(messages, tokenize=False,
                                              add_generation_prompt=generation_prompt)
        assert tok.encode_chat(messages, generation_prompt) == hf.apply_chat_template(
            messages, tokenize=True, return_dict=False, add_generation_prompt=generation_prompt)
    assert text.startswith("<s>[INST] <<SYS>>\nAnswer") and "never shown" not in text
    meta = {"note": "café <b>"}  # template variables, and tojson as transformers has it
    assert tok.chat(CHATS[0], meta=meta) == hf.apply_chat_template(
        CHATS[0], tokenize=False, add_generation_prompt=True, meta=meta)
    assert '{"note": "café <b>"}' in tok.chat(CHATS[0], meta=meta)


def test_the_jinja_file_wins_and_the_config_list_gives_its_default(folder, tmp_path):
    both = _variant(folder, tmp_path / "both", config={"chat_template": "{{ 'config' }}"})
    assert Tokenizer(both).chat(CHATS[1]) == _hf(both).apply_chat_template(
        CHATS[1], tokenize=False, add_generation_prompt=True) != "config"
    listed = _variant(folder, tmp_path / "listed", ["chat_template.jinja"], config={
        "chat_template": [{"name": "tool_use", "template": "{{ 'tools' }}"},
                          {"name": "default", "template": TEMPLATE}]})
    assert Tokenizer(listed).chat(CHATS[1]) == _hf(listed).apply_chat_template(
        CHATS[1], tokenize=False, add_generation_prompt=True) != "tools"


def test_chat_errors_name_what_is_wrong(folder, tmp_path):
    tok = Tokenizer(folder)
    with pytest.raises(TokenizerError, match="refuses these messages: Conversation roles must"):
        tok.chat([{"role": "assistant", "content": "I speak first"}])
    bad = [("hello", "got str"), ([], "the chat is empty"),
           (["hi"], r"messages\[0\] is 'hi', not a dict"),
           ([CHATS[0][0], {"role": "user"}], r"messages\[1\]\['content'\] is None"),
           ([{"role": 3, "content": "x"}], r"messages\[0\]\['role'\] is 3, not a str")]
    for messages, message in bad:
        with pytest.raises(TokenizerError, match=message) as e:
            tok.chat(messages)
        assert isinstance(e.value, ValueError)
    bare = _variant(folder, tmp_path, ["chat_template.jinja"])
    plain = Tokenizer(bare)
    assert plain.encode("Speak") == tok.encode("Speak")
    with pytest.raises(TokenizerError, match="%s: the model has no chat template"
                       % str(bare).replace("\\", "\\\\")):
        plain.chat(CHATS[0])


def test_missing_files_and_packages_are_named(folder, tmp_path, monkeypatch):
    gone = _variant(folder, tmp_path, ["tokenizer.json"])
    with pytest.raises(MissingFileError, match="%s: tokenizer.json is missing" % gone.name):
        Tokenizer(gone)
    with pytest.raises(MissingFileError, match="no such model folder"):
        Tokenizer(tmp_path / "nowhere")
    tok = Tokenizer(folder)
    monkeypatch.setitem(sys.modules, "jinja2", None)
    with pytest.raises(MissingDependencyError, match=r"jinja2 .*pip install 'dlprim\[llm\]'"):
        tok.chat(CHATS[0])
    monkeypatch.setitem(sys.modules, "tokenizers", None)
    with pytest.raises(MissingDependencyError, match=r"tokenizers .*'dlprim\[llm\]'") as e:
        Tokenizer(folder)
    assert isinstance(e.value, ImportError)


def _stream(tok, ids, **kw):
    stream = tok.stream(**kw)
    assert isinstance(stream, StreamDecoder)
    pieces = [stream.push(i) for i in ids]
    return stream, pieces, stream.finish()


def test_stream_holds_back_a_character_split_over_byte_tokens(folder):
    tok = Tokenizer(folder)
    ids = tok.encode("Speak 😀 naïve 日本 done", add_special_tokens=False)
    ids = ids[:4] + [1] + ids[4:]  # a special token inside: skipped, as decode skips it
    assert sum(tok.decode([i]).endswith("\ufffd") for i in ids) >= 4  # bytes split, really
    stream, pieces, rest = _stream(tok, ids)
    assert "".join(pieces) + rest == tok.decode(ids) and rest == ""
    assert not any("\ufffd" in p for p in pieces) and "😀" in pieces and "" in pieces
    assert stream.text == tok.decode(ids) and not stream.stopped
    cut = ids[:-1] + tok.encode("😀", add_special_tokens=False)[:2]  # ends inside a character
    _, pieces, rest = _stream(tok, cut)
    assert "".join(pieces) + rest == tok.decode(cut) and rest.endswith("\ufffd")


def test_stream_keeps_the_space_a_first_token_loses(metaspace):
    tok = Tokenizer(metaspace)
    assert tok.eos_ids == {2} and tok.bos_id is None and tok.chat_template is None
    text = "Hello there, naïve 😀 friend. Speak!"
    ids = tok.encode(text)
    ids = ids[:5] + [2] + ids[5:]  # </s>: skipped, and the next token is first no more
    assert "".join(tok.decode([i]) for i in ids) != tok.decode(ids) == text  # spaces, bytes
    stream, pieces, rest = _stream(tok, ids)
    assert "".join(pieces) + rest == text and not any("\ufffd" in p for p in pieces)


def test_stream_decodes_a_window_not_the_whole_list(folder):
    tok = Tokenizer(folder)
    with open(SHAKESPEARE, encoding="utf-8") as f:
        ids = tok.encode(f.read()[:1500] + " 😀日本", add_special_tokens=False)
    lengths = []
    decode = tok.decode
    tok.decode = lambda i, **kw: lengths.append(len(i)) or decode(i, **kw)
    _, pieces, rest = _stream(tok, ids)
    assert len(ids) > 400 and max(lengths) <= 8
    assert "".join(pieces) + rest == decode(ids)


def test_stop_strings_cut_the_text_exactly(folder):
    tok = Tokenizer(folder)
    text = "Help me, citizen. Hello there, END of it"
    ids = tok.encode(text, add_special_tokens=False)
    for stop in ("Hello", "END"):
        assert not any(stop in tok.decode([i]) for i in ids)  # it spans two tokens or more
        stream, pieces, rest = _stream(tok, ids, stop=("\n\n", stop))
        assert "".join(pieces) == stream.text == text[:text.index(stop)] and rest == ""
        assert stream.stopped and stream.push(ids[0]) == "" and stream.finish() == ""
    # "Hel" of "Help" waited until "p" showed it is no "Hello"
    help_ids = tok.encode("Help", add_special_tokens=False)
    pieces = _stream(tok, ids, stop="Hello")[1][:len(help_ids)]
    assert len(help_ids) > 1 and pieces == [""] * (len(help_ids) - 1) + ["Help"]
    stream, pieces, rest = _stream(tok, ids, stop=("re", "there"))  # both end at one token
    assert "".join(pieces) == text[:text.index("there")] and stream.stopped
    stream, pieces, rest = _stream(tok, ids, stop="of its")  # held at the end, then given
    assert "".join(pieces) + rest == text and rest == "of it" and not stream.stopped
    with pytest.raises(TokenizerError, match="non-empty str"):
        StreamDecoder(tok, stop=("",))
