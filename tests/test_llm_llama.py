"""dlprim.llm.llama.decoder against transformers on the CPU: Llama (grouped-query heads,
a tied head), Qwen2 (q, k and v biases) and Phi-3 from small random configs, with the
rotary scalings (linear, dynamic NTK, YaRN, LongRoPE), a prompt then greedy steps over
the key/value cache, every step's logits within 1e-4."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import dlprim as dp  # noqa: E402
from dlprim.llm import llama  # noqa: E402
from dlprim.errors import FileFormatError  # noqa: E402

VOCAB, CONTEXT, BATCH, PROMPT, STEPS = 64, 16, 2, 5, 4


def _model(kind):
    common = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=CONTEXT,
                  rms_norm_eps=1e-6, attn_implementation="eager")
    if kind == "llama":
        cfg = transformers.LlamaConfig(tie_word_embeddings=True, rope_theta=500.0, **common)
        return transformers.LlamaForCausalLM(cfg).eval()
    if kind in ("linear", "dynamic"):  # dynamic NTK: unscaled within the context
        cfg = transformers.LlamaConfig(rope_scaling={"rope_type": kind, "factor": 3.0},
                                       **common)
        return transformers.LlamaForCausalLM(cfg).eval()
    if kind.startswith("yarn"):  # 8 positions trained, 4x: a ramp over the dimensions
        scaling = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 8}
        if kind == "yarn_mscale":
            scaling.update(mscale=0.7, mscale_all_dim=1.0, beta_fast=16, beta_slow=2)
        cfg = transformers.Qwen2Config(rope_scaling=scaling, **common)
        return transformers.Qwen2ForCausalLM(cfg).eval()
    if kind == "longrope":  # Phi-3 128k's kind: the short factors within the original context
        phi = dict(common, max_position_embeddings=4 * CONTEXT, bos_token_id=1, eos_token_id=2,
                   pad_token_id=0)
        cfg = transformers.Phi3Config(
            rope_scaling={"type": "longrope", "short_factor": [1.0, 1.5, 2.0, 3.0],
                          "long_factor": [2.0, 4.0, 8.0, 16.0]},
            original_max_position_embeddings=CONTEXT, **phi)
        return transformers.Phi3ForCausalLM(cfg).eval()
    cfg = transformers.Qwen2Config(tie_word_embeddings=False, **common)
    return transformers.Qwen2ForCausalLM(cfg).eval()


@pytest.mark.parametrize("kind", ["llama", "qwen2", "linear", "dynamic", "yarn", "yarn_mscale",
                                  "longrope"])
def test_prompt_then_greedy_steps_match_transformers(ctx, kind):
    torch.manual_seed(0)
    model = _model(kind)
    config = model.config.to_dict()
    cfg, tables = llama.decoder(config, batch=BATCH, tokens=PROMPT, context=CONTEXT)
    net = dp.Net(ctx, cfg, mode="predict")
    weights = dict(llama.decoder_names((n, t.detach().float().numpy())
                                       for n, t in model.state_dict().items()))
    if config.get("tie_word_embeddings"):
        weights["lm_head.weight"] = weights["model.embed_tokens.weight"]
    weights.update(tables)
    net.set_parameters(weights, strict=False)
    left = set(net.get_parameters()) - set(weights)
    assert all(".cache." in n for n in left), left  # only the caches are no weights
    seq = np.random.default_rng(1).integers(0, VOCAB, (BATCH, PROMPT))
    out = net(tokens=seq, positions=np.tile(np.arange(PROMPT), (BATCH, 1)),
              pos=np.array([0]))["logits"].reshape(BATCH, PROMPT, VOCAB)
    with torch.no_grad():
        want = model(torch.from_numpy(seq)).logits.numpy()
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)
    net.reshape(tokens=(BATCH, 1), positions=(BATCH, 1))
    for step in range(STEPS):
        nxt = out[:, -1].argmax(-1)[:, None]
        seq = np.concatenate([seq, nxt], axis=1)
        at = seq.shape[1] - 1
        out = net(tokens=nxt, positions=np.full((BATCH, 1), at),
                  pos=np.array([at]))["logits"].reshape(BATCH, 1, VOCAB)
        with torch.no_grad():
            want = model(torch.from_numpy(seq)).logits[:, -1:].numpy()
        np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4, err_msg="step %d" % step)


def test_rotary_scalings_not_built_yet_are_named():
    from dlprim.llm import ArchitectureError
    config = _model("llama").config.to_dict()
    config["rope_parameters"] = {"rope_type": "mrope", "rope_theta": 10000.0, "factor": 4.0}
    with pytest.raises(ArchitectureError, match="mrope"):
        llama.decoder(config, context=CONTEXT)
    # beyond the trained context, LongRoPE and dynamic NTK change every position's
    # frequencies with the sequence's length: refused, naming the longest context
    for kind in ("longrope", "dynamic"):
        with pytest.raises(ArchitectureError, match="at most %d" % CONTEXT):
            llama.decoder(_model(kind).config.to_dict(), context=CONTEXT + 1)
    config = _model("llama").config.to_dict()
    with pytest.raises(ArchitectureError, match="activation 'quick_gelu'"):
        llama.decoder(dict(config, hidden_act="quick_gelu"), context=CONTEXT)
    with pytest.raises(ArchitectureError, match="layer_types .* for each of the 2 layers"):
        llama.decoder(dict(config, sliding_window=4, layer_types=["chunked_attention"] * 2),
                      context=CONTEXT)
    config = _model("longrope").config.to_dict()
    config["rope_parameters"]["short_factor"] = [1.0] * 3
    with pytest.raises(ArchitectureError, match="short_factor must have 4 numbers"):
        llama.decoder(config, context=CONTEXT)
    config["rope_parameters"] = {"rope_type": "default", "rope_theta": 10000.0}
    config["num_key_value_heads"] = 3  # 4 heads
    with pytest.raises(ArchitectureError, match="key/value heads"):
        llama.decoder(config, context=CONTEXT)


def test_decoder_names_join_q_k_v_and_name_a_missing_part():
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((r, 4)).astype(np.float32) for r in (4, 2, 2))
    named = [("model.layers.0.self_attn.k_proj.weight", k),
             ("model.layers.0.self_attn.q_proj.weight", q),
             ("model.layers.0.self_attn.v_proj.weight", v),
             ("model.layers.0.self_attn.rotary_emb.inv_freq", q),
             ("model.norm.weight", q[0])]
    out = dict(llama.decoder_names(named))
    assert sorted(out) == ["model.layers.0.self_attn.qkv_proj.weight", "model.norm.weight"]
    np.testing.assert_array_equal(out["model.layers.0.self_attn.qkv_proj.weight"],
                                  np.concatenate([q, k, v]))
    with pytest.raises(FileFormatError, match="qkv_proj.weight lacks v of the q, k and v"):
        dict(llama.decoder_names(named[:2], "folder"))
