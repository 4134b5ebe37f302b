"""The one-token pass as one launch a decoder block (llm/fused_step.py,
kernels/decoder_layer.cl) against transformers and against the Net's own pass: small
Llama-family and GPT-2 models from their configs (test_llm_generate's), every decoded
step's logits, 16-bit, int8 and 4-bit weights, a position past the cache, and the decoders it
leaves to the Net.

On CPUs the kernel runs as one work-group (``groups=1``: its grid barriers are work-group
barriers there); on a GPU that passes the probe it also runs as the engine chooses it."""
import functools

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import dlprim.llm.model as llm_model  # noqa: E402
from dlprim.dtypes import bfloat16, bfloat16_values  # noqa: E402
from dlprim.llm.fused_step import fused_step  # noqa: E402
from test_llm_generate import _hf_greedy, saved  # noqa: E402,F401 (a fixture)

CONTEXT = 96
PROMPT = [3, 17, 42, 8, 64, 5, 11]


def _saved_llama(folder, **overrides):
    """A small random Llama (``overrides`` of its config) saved into ``folder``."""
    torch.manual_seed(0)
    cfg = dict(vocab_size=96, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
               num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
               initializer_range=0.3, attn_implementation="eager")
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**dict(cfg, **overrides)))
    model.eval().save_pretrained(folder)
    return model


def _needs_rotary_free_blocks(ctx, kind):
    """GPT-2's blocks (no rotary embedding) where the runtime's compiler builds them."""
    if kind.startswith("gpt2") and ctx.facts.vendor_id == "intel" and not ctx.facts.is_gpu:
        pytest.skip("Intel's CPU compiler fails on blocks without a rotary embedding (the "
                    "other CPU driver runs these)")


def _load(monkeypatch, ctx, folder, groups=1, **kw):
    """dlprim.llm.load with the fused pass of ``groups`` work-groups (None: the engine's
    choice; False: the Net's pass)."""
    if groups is False:
        monkeypatch.setenv("DLPRIM_FUSED_DECODE", "0")
    else:
        monkeypatch.delenv("DLPRIM_FUSED_DECODE", raising=False)
        monkeypatch.setattr(llm_model, "fused_step", functools.partial(fused_step, groups=groups))
    return llm_model.load(folder, ctx=ctx, context=CONTEXT, **kw)


def _decode(lm, steps):
    """(tokens, each step's logits) of greedy decoding after PROMPT."""
    got = []
    lm.engine.lookahead = False  # (the logits read are then the pass's own)
    request = lm.request(PROMPT, max_new_tokens=steps, eos_ids=[])
    request.on_token = lambda t: got.append(_floats(lm.engine.last.tensor("logits").to_host()[0]))
    lm.scheduler.run([request])
    return request.result.tokens, np.stack(got)


def _floats(a):
    return bfloat16_values(a) if a.dtype == bfloat16 else np.asarray(a, np.float32)


def _groups(ctx):
    """The launch shapes to test on ``ctx``: one work-group, and the engine's own where the
    device takes it."""
    out = [1]
    if ctx.facts.is_gpu:
        out.append(None)
    return out


# (24 steps after 7 tokens: past the 24-key window.) GPT-2: LayerNorms, no rotary
# embedding, one MLP product with a GELU, a position table; its flags: each layer's
# attention scale, a ReLU. llama_biases: biases in the MLP too, and a GELU in the gate.
@pytest.mark.parametrize("kind", ["llama", "qwen2", "qwen2_window", "phi3", "gpt2",
                                  "gpt2_flags", "llama_biases"])
def test_fused_steps_match_transformers(ctx, saved, monkeypatch, kind):
    _needs_rotary_free_blocks(ctx, kind)
    model, folder = saved(kind)
    want_tokens, want_logits = _hf_greedy(model, PROMPT, 24)
    for groups in _groups(ctx):
        lm = _load(monkeypatch, ctx, folder, groups)
        assert lm.engine.fused is not None, "the pass was left to the Net"
        tokens, logits = _decode(lm, 24)
        np.testing.assert_allclose(logits, want_logits, rtol=1e-4, atol=1e-4,
                                   err_msg="groups %s" % groups)
        assert tokens == want_tokens


def test_biases_on_every_projection_of_attention(ctx, tmp_path, monkeypatch):
    """q, k, v and o with biases (Llama's attention_bias), SiLU, no MLP bias: fused."""
    model = _saved_llama(tmp_path, attention_bias=True)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(".bias"):
                p.normal_(0.0, 0.3)
    model.save_pretrained(tmp_path)
    lm = _load(monkeypatch, ctx, str(tmp_path))
    assert lm.engine.fused is not None
    _, want = _hf_greedy(model, PROMPT, 12)
    _, got = _decode(lm, 12)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("kind,storage", [
    ("qwen2", {"precision": "fp16"}), ("qwen2", {"precision": "bf16"}),
    ("qwen2", {"quantize": "int8"}), ("qwen2", {"quantize": "q4"}),
    ("gpt2", {"precision": "fp16"}), ("gpt2", {"quantize": "int8"}),
    ("gpt2", {"quantize": "q4"})])
def test_16_bit_and_quantized_weights_follow_the_nets_pass(ctx, saved, monkeypatch, kind,
                                                           storage):
    """The same weights and caches as the Net's pass; the fused blocks keep the residual
    in float32 where the Net stores 16-bit activations, so the two differ by that rounding."""
    _needs_rotary_free_blocks(ctx, kind)
    _, folder = saved(kind)
    ref_tokens, ref = _decode(_load(monkeypatch, ctx, folder, False, **storage), 24)
    lm = _load(monkeypatch, ctx, folder, 1, **storage)
    assert lm.engine.fused is not None
    tokens, got = _decode(lm, 24)
    scale = np.abs(ref).max()
    tol = 2e-3 if "quantize" in storage else 3e-2
    assert np.abs(got[0] - ref[0]).max() <= tol * scale
    # (later steps may part where a token's top two logits nearly tie)
    same = next((i for i, (a, b) in enumerate(zip(tokens, ref_tokens)) if a != b), len(tokens))
    np.testing.assert_allclose(got[:same], ref[:same], atol=tol * scale)
    assert same == len(tokens) or np.ptp(np.sort(ref[same])[-2:]) < 0.05 * scale


@pytest.mark.parametrize("max_blocks,launches", [(64, 1), (2, 2)])
def test_blocks_share_launches(ctx, tmp_path, monkeypatch, max_blocks, launches):
    """Three blocks whose tensors share the Net's buffer: one launch, or runs of at most
    ``MAX_BLOCKS`` (the first run alone reads the token's row), with transformers' logits."""
    import dlprim.core.decoder_layer as decoder_layer
    monkeypatch.setattr(decoder_layer, "MAX_BLOCKS", max_blocks)
    model = _saved_llama(tmp_path, num_hidden_layers=3)
    lm = _load(monkeypatch, ctx, str(tmp_path))
    blocks = [launch for launch in lm.engine.fused.launches if launch.name == "decoder_layer"]
    assert len(blocks) == launches
    _, want = _hf_greedy(model, PROMPT, 8)
    _, got = _decode(lm, 8)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_a_position_past_the_cache_gives_nan_and_writes_nothing(ctx, saved, monkeypatch):
    _, folder = saved("llama")
    lm = _load(monkeypatch, ctx, folder)
    net = lm.engine.net
    caches = {n: net.param(n).to_host().copy() for n in net.store.dtypes if ".cache." in n}
    net.tensor("tokens").to_device(np.array([[5]], np.int64))
    net.tensor("pos").to_device(np.array([CONTEXT], np.int64))
    lm.engine.fused.forward()
    assert np.isnan(net.tensor("logits").to_host()).all()
    assert not lm.engine.fused.failed()  # (the position's NaN, not a barrier's)
    for name, before in caches.items():
        np.testing.assert_array_equal(net.param(name).to_host(), before, err_msg=name)


def test_decoders_the_kernel_does_not_take_stay_on_the_net(ctx, tmp_path, monkeypatch):
    """Heads of 4 (the kernel loads 8 values a step)."""
    model = _saved_llama(tmp_path, hidden_size=16, intermediate_size=24)
    lm = _load(monkeypatch, ctx, str(tmp_path))
    assert lm.engine.fused is None
    _, want = _hf_greedy(model, PROMPT, 4)
    _, got = _decode(lm, 4)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_products_of_another_storage_than_the_first_stay_on_the_net(ctx, saved, monkeypatch):
    """The kernel reads every product of every block as the first q/k/v weight's storage: a
    block whose down product is stored otherwise leaves the pass to the Net."""
    import dlprim.llm.llama as llama
    _, folder = saved("llama")
    lm = _load(monkeypatch, ctx, folder, False, quantize="q4")
    monkeypatch.delenv("DLPRIM_FUSED_DECODE")
    net, spec = lm.engine.net, llama.fused_spec(lm.config, CONTEXT)
    assert fused_step(net, spec, groups=1) is not None
    monkeypatch.setitem(net.store.dtypes, "model.layers.1.mlp.down_proj.weight", np.int8)
    assert fused_step(net, spec, groups=1) is None


def test_a_small_blocks_later_weights_are_prefetched_on_nvidia(ctx, saved, monkeypatch):
    """NVIDIA GPUs ask the L2 cache for a block's output, MLP and down weights as attention
    ends, where they fit PREFETCH_BYTES (inline PTX: other devices never); the same logits
    either way, and a budget the block does not fit turns it off."""
    _, folder = saved("llama")
    nvidia = ctx.facts.is_gpu and ctx.facts.vendor_id == "nvidia"
    lm = _load(monkeypatch, ctx, folder, None if nvidia else 1)
    assert {ops.params["PREFETCH"] for ops in lm.engine.fused.ops.values()} == {int(nvidia)}
    _, logits = _decode(lm, 8)
    monkeypatch.setenv("DLPRIM_DECODE_PREFETCH_MB", "0.001")
    lm = _load(monkeypatch, ctx, folder, None if nvidia else 1)
    assert {ops.params["PREFETCH"] for ops in lm.engine.fused.ops.values()} == {0}
    np.testing.assert_array_equal(_decode(lm, 8)[1], logits)


def test_the_engine_leaves_cpus_to_the_net(ctx, saved, monkeypatch):
    """Without a forced shape, CPUs decode through the Net (their runtimes do not keep
    work-groups resident together)."""
    if ctx.facts.is_gpu:
        pytest.skip("a GPU")
    _, folder = saved("llama")
    assert _load(monkeypatch, ctx, folder, None).engine.fused is None


def test_more_chunks_than_a_team_merges(ctx, saved, monkeypatch):
    """Past 32 x 32 positions the merge takes the chunks a team's width at a time."""
    _, folder = saved("llama")
    rng = np.random.default_rng(1)
    prompt = rng.integers(1, 90, 1040).tolist()
    outs = []
    for groups in (False, 1):
        if groups is False:
            monkeypatch.setenv("DLPRIM_FUSED_DECODE", "0")
        else:
            monkeypatch.delenv("DLPRIM_FUSED_DECODE", raising=False)
            monkeypatch.setattr(llm_model, "fused_step",
                                functools.partial(fused_step, groups=groups))
        lm = llm_model.load(folder, ctx=ctx, context=1056)
        assert (lm.engine.fused is None) == (groups is False)
        got = []
        lm.engine.lookahead = False
        request = lm.request(prompt, max_new_tokens=4, eos_ids=[])
        request.on_token = lambda t: got.append(lm.engine.last.tensor("logits").to_host()[0].copy())
        lm.scheduler.run([request])
        outs.append(np.stack(got))
    np.testing.assert_allclose(outs[1], outs[0], rtol=1e-4, atol=1e-4)


def test_heads_wider_than_a_team(ctx, tmp_path, monkeypatch):
    """Heads of 40 (more than a team's 32 work-items, not a multiple of them)."""
    model = _saved_llama(tmp_path, hidden_size=80, intermediate_size=64,
                         num_attention_heads=2, num_key_value_heads=1)
    lm = _load(monkeypatch, ctx, str(tmp_path))
    assert lm.engine.fused is not None
    _, want = _hf_greedy(model, PROMPT, 16)
    _, got = _decode(lm, 16)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("family,weights,blocks", [
    ("llama", "float32", 1), ("gpt2", "float32", 1), ("llama", "int8", 1), ("llama", "q4", 1),
    ("gpt2", "q4", 1), ("llama", "float32", 3), ("gpt2", "int8", 2)])
def test_blocks_match_float64(ctx, rng, family, weights, blocks):
    """The kernel alone against decoder_block_check's float64 blocks: a cache of two
    chunks, the new token's key and value written at its position; int8 and 4-bit weights
    against the values they stand for; several blocks in one launch, each tensor's blocks
    in one buffer, each block's attention scale its own (GPT-2's: only the first block
    reads the token's rows)."""
    import decoder_block_check
    _needs_rotary_free_blocks(ctx, family)
    decoder_block_check.check_block(ctx, rng, family, weights, blocks)


def test_a_launchs_blocks_must_share_each_tensors_buffer(ctx):
    """The kernel finds a block's tensors past the first block's: a block whose tensor lies
    in another buffer, or that lacks one the first has, is refused by name."""
    from dlprim.core.decoder_layer import DecoderBlockDims, DecoderLayerOps
    import dlprim as dp
    ops = DecoderLayerOps(ctx, DecoderBlockDims(32, 24, 4, 2, 8, 40, 11), np.float32,
                          np.float32, np.float32, np.float32, groups=1)
    scratch = ops.scratch()

    def block():
        return {"norm1": dp.Tensor.zeros(ctx, (32,)), "w_qkv": dp.Tensor.zeros(ctx, (64, 32))}
    one, two = block(), block()
    with pytest.raises(ValueError, match="block 1's norm1 is not in the first block's buffer"):
        ops.launch(False, scratch, scratch["x"], scratch["x"], scratch["x"], None, [one, two],
                   None, 1e-5)
    del two["w_qkv"]
    two["norm1"] = one["norm1"]
    with pytest.raises(ValueError, match="block 1's w_qkv"):
        ops.launch(False, scratch, scratch["x"], scratch["x"], scratch["x"], None, [one, two],
                   None, 1e-5)
    with pytest.raises(ValueError, match="1 to"):
        ops.launch(False, scratch, scratch["x"], scratch["x"], scratch["x"], None,
                   [one] * (ops.max_blocks + 1), None, 1e-5)
