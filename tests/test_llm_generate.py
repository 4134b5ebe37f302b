"""dlprim.llm.load and generate against transformers on the CPU, without downloads: small
Llama, Qwen2, Mistral, Phi-3 and GPT-2 models from their configs (random weights),
``save_pretrained`` into a folder, loaded by dlprim. Every step's logits within 1e-4 over
64 decoded tokens and the same greedy tokens; prompts of different lengths in one batch
as alone; draws that follow HF's processors (a chi-square test); ends and errors."""
import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from dlprim.llm import load  # noqa: E402
from dlprim.llm.checkpoint import ArchitectureError  # noqa: E402
from dlprim.llm.engine import GenerationError  # noqa: E402
from dlprim.llm.scheduler import ContextError  # noqa: E402
from dlprim.llm.settings import SettingsError  # noqa: E402
from test_sampling import _chi_square_fits, reference  # noqa: E402

VOCAB, CONTEXT, STEPS = 96, 96, 64


def _hf_model(kind):
    torch.manual_seed(0)
    common = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                  initializer_range=0.3, attn_implementation="eager", eos_token_id=VOCAB - 1,
                  bos_token_id=0)
    if kind == "gpt2":
        cfg = transformers.GPT2Config(vocab_size=VOCAB, n_positions=128, n_embd=32, n_layer=2,
                                      n_head=4, initializer_range=0.3, eos_token_id=VOCAB - 1,
                                      bos_token_id=0, attn_implementation="eager")
        return transformers.GPT2LMHeadModel(cfg).eval()
    if kind == "gpt2_flags":  # the attention scale's flags (scale 1 / (layer + 1)), a ReLU
        cfg = transformers.GPT2Config(vocab_size=VOCAB, n_positions=128, n_embd=32, n_layer=2,
                                      n_head=4, initializer_range=0.3, eos_token_id=VOCAB - 1,
                                      bos_token_id=0, attn_implementation="eager",
                                      scale_attn_weights=False, reorder_and_upcast_attn=True,
                                      scale_attn_by_inverse_layer_idx=True,
                                      activation_function="relu")
        return transformers.GPT2LMHeadModel(cfg).eval()
    if kind == "llama":
        cfg = transformers.LlamaConfig(tie_word_embeddings=True, rope_theta=500.0, **common)
        return transformers.LlamaForCausalLM(cfg).eval()
    if kind == "llama_biases":  # attention_bias (q, k, v, o), mlp_bias (not zeros), a GELU
        cfg = transformers.LlamaConfig(attention_bias=True, mlp_bias=True,
                                       hidden_act="gelu_pytorch_tanh", **common)
        model = transformers.LlamaForCausalLM(cfg).eval()
        with torch.no_grad():
            for name, p in model.named_parameters():
                if name.endswith(".bias"):
                    p.normal_(0.0, 0.3)
        return model
    if kind == "llama3":
        cfg = transformers.LlamaConfig(rope_scaling={
            "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
            "high_freq_factor": 4.0, "original_max_position_embeddings": 32}, **common)
        return transformers.LlamaForCausalLM(cfg).eval()
    if kind == "qwen2":
        cfg = transformers.Qwen2Config(tie_word_embeddings=False, **common)
        return transformers.Qwen2ForCausalLM(cfg).eval()
    if kind == "mistral":
        cfg = transformers.MistralConfig(sliding_window=None, **common)
        return transformers.MistralForCausalLM(cfg).eval()
    if kind == "mistral_window":  # every layer's queries see the 24 keys ending at them
        cfg = transformers.MistralConfig(sliding_window=24, **common)
        return transformers.MistralForCausalLM(cfg).eval()
    if kind == "qwen2_window":  # the window on the second layer only (max_window_layers)
        cfg = transformers.Qwen2Config(use_sliding_window=True, sliding_window=24,
                                       max_window_layers=1, **common)
        return transformers.Qwen2ForCausalLM(cfg).eval()
    if kind == "phi3":
        cfg = transformers.Phi3Config(pad_token_id=None, **common)
        return transformers.Phi3ForCausalLM(cfg).eval()
    if kind == "phi3_window":  # (Phi-3 mini 4k's window is one short of its context)
        cfg = transformers.Phi3Config(pad_token_id=None, sliding_window=24, **common)
        return transformers.Phi3ForCausalLM(cfg).eval()
    raise ValueError(kind)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    made = {}

    def get(kind):
        if kind not in made:
            model = _hf_model(kind)
            folder = tmp_path_factory.mktemp(kind)
            model.save_pretrained(folder)
            made[kind] = model, str(folder)
        return made[kind]
    return get


def _hf_greedy(model, prompt, steps):
    with torch.no_grad():
        ids = torch.tensor([prompt])
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=steps,
                             do_sample=False,
                             output_logits=True, return_dict_in_generate=True,
                             pad_token_id=0, eos_token_id=None)
    tokens = out.sequences[0, len(prompt):].tolist()
    return tokens, np.stack([s[0].float().numpy() for s in out.logits])


@pytest.mark.parametrize("kind", ["llama", "llama3", "qwen2", "mistral", "phi3", "gpt2",
                                  "mistral_window", "qwen2_window", "phi3_window",
                                  "gpt2_flags", "llama_biases"])
def test_every_step_matches_transformers_over_64_tokens(ctx, saved, kind):
    model, folder = saved(kind)
    lm = load(folder, ctx=ctx, context=CONTEXT)
    lm.engine.lookahead = False  # (the logits read are then the pass's own)
    prompt = [3, 17, 42, 8, 64, 5, 11]
    want_tokens, want_logits = _hf_greedy(model, prompt, STEPS)
    got_logits = []
    request = lm.request(prompt, max_new_tokens=STEPS, eos_ids=[])
    request.on_token = lambda t: got_logits.append(
        lm.engine.last.tensor("logits").to_host()[0].copy())
    lm.scheduler.run([request])
    result = request.result
    assert result.finish_reason == "length" and len(result.tokens) == STEPS
    for step, (got, want) in enumerate(zip(got_logits, want_logits)):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg="step %d" % step)
        if result.tokens[step] != want_tokens[step]:  # only where the top two nearly tie
            top = np.sort(want)[-2:]
            assert top[1] - top[0] < 2e-4, "step %d: token %d, transformers %d" % (
                step, result.tokens[step], want_tokens[step])
            break
    else:
        assert result.tokens == want_tokens


def test_prompts_of_different_lengths_in_one_batch_decode_as_alone(ctx, saved):
    model, folder = saved("qwen2")
    prompts = [[5], [9, 2, 33, 4, 70, 1, 8, 8, 12, 40, 3], [60, 61], [7, 7, 7, 7], [1, 2, 3]]
    lm = load(folder, ctx=ctx, context=CONTEXT, batch=2)  # 5 prompts through 2 rows
    results = lm.generate(prompts, max_new_tokens=12, eos_ids=[])
    for prompt, result in zip(prompts, results):
        assert result.tokens == _hf_greedy(model, prompt, 12)[0], prompt
        assert result.prompt_tokens == len(prompt)


def test_draws_follow_transformers_processors(ctx, saved):
    model, folder = saved("llama")
    prompt = [4, 9, 31]
    settings = dict(temperature=0.9, top_k=30, top_p=0.85, repetition_penalty=1.3)
    with torch.no_grad():
        logits = model(torch.tensor([prompt])).logits[0, -1].double().numpy()
    seen = np.zeros(VOCAB, bool)
    seen[prompt] = True
    p, _ = reference(logits, seen, 0.9, 30, 0.85, 1.3)
    lm = load(folder, ctx=ctx, context=32, batch=16)
    counts = np.zeros(VOCAB)
    for seed in range(25):
        for r in lm.generate([prompt] * 64, max_new_tokens=1, seed=seed, eos_ids=[],
                             **settings):
            counts[r.tokens[0]] += 1
    assert counts[p == 0].sum() == 0
    _chi_square_fits(counts, p)
    # the same seed draws the same tokens; the lanes of one call differ
    a = [r.tokens for r in lm.generate([prompt] * 4, max_new_tokens=6, seed=7, **settings)]
    b = [r.tokens for r in lm.generate([prompt] * 4, max_new_tokens=6, seed=7, **settings)]
    assert a == b and len({tuple(t) for t in a}) > 1


def test_ends_eos_and_the_context(ctx, saved):
    model, folder = saved("llama")
    prompt = [3, 17, 42]
    tokens, _ = _hf_greedy(model, prompt, 10)
    lm = load(folder, ctx=ctx, context=16)
    r = lm.generate(prompt, max_new_tokens=10, eos_ids=[tokens[4]])
    first = tokens.index(tokens[4])
    assert r.finish_reason == "stop" and r.tokens == tokens[:first]  # the EOS not kept
    r = lm.generate(prompt, max_new_tokens=50, eos_ids=[])
    assert r.finish_reason == "length" and len(r.tokens) == 16 - len(prompt)
    with pytest.raises(ContextError, match="context of 16"):
        lm.generate(list(range(16)), max_new_tokens=1)
    with pytest.raises(ContextError, match="empty"):
        lm.generate([], max_new_tokens=1)
    with pytest.raises(ValueError, match="vocabulary"):
        lm.generate([VOCAB], max_new_tokens=1)
    for bad in ({"top_p": 0}, {"temperature": -1}, {"max_new_tokens": 0}, {"topk": 3}):
        with pytest.raises(SettingsError):
            lm.generate(prompt, **bad)
    with pytest.raises(ValueError, match="tokenizer.json"):
        lm.generate("text without a tokenizer")


def test_passes_ahead_draw_what_passes_one_by_one_draw(ctx, saved, monkeypatch):
    # each decode pass enqueues the next before its tokens are read (engine.py): the same
    # tokens as without, the seen tokens and draw counts of sampling kept, a pass ahead
    # that an EOS leaves unused dropped, and no pass wasted where the length ends it
    _, folder = saved("llama")
    settings = dict(temperature=0.8, top_k=20, repetition_penalty=1.3, seed=3)
    runs = {}
    for lookahead in (False, True):
        lm = load(folder, ctx=ctx, context=CONTEXT)
        lm.engine.lookahead = lookahead
        passes = []  # True: a pass ahead, fed on the device
        forward, feed = lm.engine._forward, lm.engine.sampler.feed
        monkeypatch.setattr(lm.engine, "_forward", lambda net: passes.append(False) or forward(net))
        monkeypatch.setattr(lm.engine.sampler, "feed",
                            lambda *a: passes.append(True) or feed(*a))
        first = lm.generate([3, 17, 42], max_new_tokens=12, eos_ids=[], **settings).tokens
        firsts = passes.count(False), passes.count(True)
        eos = first[6]
        ended = lm.generate([3, 17, 42], max_new_tokens=12, eos_ids=[eos], **settings)
        again = lm.generate([3, 17, 42], max_new_tokens=12, eos_ids=[], **settings).tokens
        greedy = lm.generate([5, 6], max_new_tokens=9, eos_ids=[]).tokens
        runs[lookahead] = (first, ended.tokens, ended.finish_reason, again, greedy,
                           firsts, (passes.count(False), passes.count(True)))
    first, ended, reason, again, greedy = runs[True][:5]
    assert runs[True][:5] == runs[False][:5]
    assert again == first and reason == "stop" and ended == first[:first.index(first[6])]
    total = 12 + (len(ended) + 1) + 12 + 9
    assert runs[False][5:] == ((12, 0), (total, 0))
    # the first run's 11 decode passes: 10 of them ahead, none lost; the EOS loses one
    assert runs[True][5] == (12, 10) and runs[True][6][0] == total + 1


def test_generation_config_and_folder_errors(ctx, saved, tmp_path):
    model, folder = saved("gpt2")
    lm = load(folder, ctx=ctx, context=32)
    assert lm.eos_ids == {VOCAB - 1}
    assert lm.settings().greedy and lm.settings(temperature=0.7).do_sample
    import json
    import shutil
    from safetensors.numpy import load_file, save_file
    broken = tmp_path / "broken"
    shutil.copytree(folder, broken)
    tensors = load_file(os.path.join(folder, "model.safetensors"))
    del tensors["transformer.h.1.mlp.c_fc.weight"]
    save_file(tensors, str(broken / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(GenerationError, match="h.1.mlp.c_fc.weight"):
        load(broken, ctx=ctx, context=32)
    config = json.loads((broken / "config.json").read_text())
    config.update(architectures=["FalconForCausalLM"], model_type="falcon")
    (broken / "config.json").write_text(json.dumps(config))
    with pytest.raises(ArchitectureError, match="FalconForCausalLM"):
        load(broken, ctx=ctx)


@pytest.fixture(scope="module")
def chat_model(tmp_path_factory):
    """A small Llama with a trained tokenizer in its folder (vocabulary 300)."""
    pytest.importorskip("tokenizers")
    pytest.importorskip("jinja2")
    from test_llm_tokenizer import save_tokenizer
    torch.manual_seed(1)
    cfg = transformers.LlamaConfig(vocab_size=300, hidden_size=32, intermediate_size=48,
                                   num_hidden_layers=2, num_attention_heads=4,
                                   num_key_value_heads=2, max_position_embeddings=128,
                                   initializer_range=0.3, bos_token_id=0, eos_token_id=1)
    model = transformers.LlamaForCausalLM(cfg).eval()
    folder = tmp_path_factory.mktemp("chat")
    model.save_pretrained(folder)
    save_tokenizer(folder)
    return model, transformers.AutoTokenizer.from_pretrained(folder), str(folder)


def test_text_chat_streaming_and_stop_strings(ctx, chat_model):
    model, hf_tok, folder = chat_model
    lm = load(folder, ctx=ctx, context=96)
    text = "Before we proceed any further"
    ids = hf_tok(text)["input_ids"]
    want, _ = _hf_greedy(model, ids, 24)
    if 1 in want:  # (HF stops at the EOS too)
        want = want[:want.index(1)]
    result = lm.generate(text, max_new_tokens=24)
    assert result.tokens == want and result.prompt_tokens == len(ids)
    assert result.text == hf_tok.decode(want, skip_special_tokens=True)
    stream = lm.generate(text, max_new_tokens=24, stream=True)
    pieces = list(stream)
    assert "".join(pieces) == result.text and stream.result.tokens == want
    # a stop string ends the text before it
    cut = result.text[len(result.text) // 3:len(result.text) // 3 + 2]
    if cut and cut.strip():
        stopped = lm.generate(text, max_new_tokens=24, stop=[cut])
        assert stopped.finish_reason == "stop"
        assert stopped.text == result.text[:result.text.index(cut)]
    # chat messages go through the template, as transformers' apply_chat_template
    messages = [{"role": "user", "content": "Who is Caius Marcius?"}]
    chat_ids = hf_tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True,
                                          return_dict=False)
    want, _ = _hf_greedy(model, list(chat_ids), 8)
    if 1 in want:
        want = want[:want.index(1)]
    assert lm.generate(messages, chat=True, max_new_tokens=8).tokens == want


def test_dlprim_generate_command(ctx, chat_model, capsys, monkeypatch):
    from dlprim.cli import generate as cli
    model, hf_tok, folder = chat_model
    monkeypatch.setenv("DLPRIM_DEVICE", os.environ.get("DLPRIM_TEST_DEVICE", ""))
    device = ["--device", os.environ["DLPRIM_TEST_DEVICE"]] \
        if os.environ.get("DLPRIM_TEST_DEVICE") else []
    assert cli.main([folder, "--prompt", "Before we proceed", "--max-new-tokens", "12",
                     "--context", "64"] + device) == 0
    out, err = capsys.readouterr()
    want = load(folder, ctx=ctx, context=64).generate("Before we proceed", max_new_tokens=12)
    assert out == want.text + "\n"
    assert "tokens/s" in err and "decode" in err
    assert cli.main([folder, "--prompt", "x", "--system", "s"] + device) == 2
    assert "--system needs --chat" in capsys.readouterr().err
    assert cli.main([folder + "-missing", "--prompt", "x"] + device) == 2
    assert "no such model folder" in capsys.readouterr().err
    assert cli.main([folder, "--prompt", "x", "--top-p", "2"] + device) == 2
    assert "top_p" in capsys.readouterr().err


@pytest.mark.parametrize("kind,extra", [("llama", {"attention_bias": True, "head_dim": 16}),
                                        ("gpt2", {"n_inner": 40})])
def test_config_variants(ctx, tmp_path, kind, extra):
    """Llama with biases on every attention projection (o_proj too) and a head width of
    its own; GPT-2 with an MLP width other than 4 x dim."""
    torch.manual_seed(2)
    if kind == "llama":
        cfg = transformers.LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=48,
                                       num_hidden_layers=2, num_attention_heads=4,
                                       num_key_value_heads=2, max_position_embeddings=64,
                                       initializer_range=0.3, **extra)
        model = transformers.LlamaForCausalLM(cfg).eval()
    else:
        cfg = transformers.GPT2Config(vocab_size=VOCAB, n_positions=64, n_embd=32, n_layer=2,
                                      n_head=4, initializer_range=0.3, **extra)
        model = transformers.GPT2LMHeadModel(cfg).eval()
    model.save_pretrained(tmp_path)
    prompt = [5, 9, 13, 2]
    want, _ = _hf_greedy(model, prompt, 12)
    assert load(tmp_path, ctx=ctx, context=32).generate(
        prompt, max_new_tokens=12, eos_ids=[]).tokens == want


def test_perplexity_16_bit_and_int8_weights(ctx, saved):
    """Perplexity against transformers' own loss; 16-bit and int8 weights (memory as
    stored) close to float32 in logits and perplexity, and the same greedy start."""
    model, folder = saved("qwen2")
    ids = [int(i) for i in np.random.default_rng(4).integers(0, VOCAB, 40)]
    with torch.no_grad():
        loss = model(torch.tensor([ids]), labels=torch.tensor([ids])).loss.item()
    fp32 = load(folder, ctx=ctx, context=48)
    ppl = fp32.perplexity(ids)
    np.testing.assert_allclose(ppl, np.exp(loss), rtol=1e-4)
    want = fp32.generate(ids[:6], max_new_tokens=4, eos_ids=[]).tokens
    sizes = {"fp32": fp32.engine.memory()}
    for precision, quantize, rtol in (("fp16", None, 1e-2), ("bf16", None, 5e-2),
                                      ("fp32", "int8", 5e-2), ("fp32", "q4", 0.3)):
        lm = load(folder, ctx=ctx, context=48, precision=precision, quantize=quantize)
        sizes[quantize or precision] = lm.engine.memory()
        np.testing.assert_allclose(lm.perplexity(ids), ppl, rtol=rtol)
        if quantize != "q4":  # (4 bits of a random model may move the first choice)
            assert lm.generate(ids[:6], max_new_tokens=1, eos_ids=[]).tokens == want[:1]
    # weights as stored: 16-bit halves the Linears, int8 quarters them and the token
    # table (plus a scale a row)
    linear = sum(p.numel() for n, p in model.named_parameters()
                 if n.endswith("proj.weight") or n == "lm_head.weight")
    table = model.model.embed_tokens.weight
    assert sizes["fp32"]["weights"] - sizes["fp16"]["weights"] == 2 * linear
    assert sizes["fp32"]["weights"] - sizes["int8"]["weights"] == \
        3 * (linear + table.numel()) - 4 * (table.shape[0] + sum(
            p.shape[0] for n, p in model.named_parameters()
            if n.endswith("proj.weight") or n == "lm_head.weight"))
    assert sizes["q4"]["weights"] < sizes["int8"]["weights"]
    with pytest.raises(ValueError, match="q4"):
        load(folder, ctx=ctx, quantize="q3")
