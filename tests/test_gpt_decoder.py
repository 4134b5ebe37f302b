"""dlprim.models.gpt_decoder, generation over a KV cache in one Net, against HuggingFace's
GPT-2 (random weights from a small config, on the CPU): the prompt's logits, then greedy
decoding one token a pass, each step's logits within 1e-4 of transformers' over the whole
sequence so far, and the same tokens."""
import numpy as np
import pytest

import dlprim as dp
from dlprim import models

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

VOCAB, CONTEXT, LAYERS, HEADS, DIM, BATCH, PROMPT, STEPS = 50, 16, 2, 4, 32, 2, 5, 6


def hf_gpt2():
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(vocab_size=VOCAB, n_positions=CONTEXT, n_embd=DIM,
                                  n_layer=LAYERS, n_head=HEADS, attn_implementation="eager")
    return transformers.GPT2LMHeadModel(cfg).eval()


def weights_of(model):
    """GPT-2's state dict as the decoder's parameters: Conv1D weights are stored (in, out),
    InnerProduct's (out, in); the head is the token table; the causal-mask buffers go."""
    out = {}
    for name, t in model.state_dict().items():
        a = t.detach().numpy()
        if name.endswith(".attn.bias") or name.endswith(".attn.masked_bias"):
            continue
        if name.endswith(".weight") and (".attn.c_" in name or ".mlp.c_" in name):
            a = a.T
        out[name] = np.ascontiguousarray(a)
    out["lm_head.weight"] = out["transformer.wte.weight"]
    return out


def test_greedy_decoding_over_the_cache_matches_transformers(ctx):
    model = hf_gpt2()
    cfg = models.gpt_decoder(VOCAB, CONTEXT, LAYERS, HEADS, DIM, BATCH, PROMPT)
    net = dp.Net(ctx, cfg, mode="predict")
    weights = weights_of(model)
    net.set_parameters(weights, strict=False)  # (the caches are no weights: they stay zero)
    assert set(net.get_parameters()) - set(weights) == {
        "transformer.h.%d.attn.cache.%s" % (i, w) for i in range(LAYERS) for w in ("keys", "values")}
    rng = np.random.default_rng(1)
    seq = rng.integers(0, VOCAB, (BATCH, PROMPT))
    logits = net(tokens=seq, positions=np.tile(np.arange(PROMPT), (BATCH, 1)),
                 pos=np.array([0]))["logits"].reshape(BATCH, PROMPT, VOCAB)
    with torch.no_grad():
        want = model(torch.tensor(seq)).logits.numpy()
    np.testing.assert_allclose(logits, want, rtol=1e-4, atol=1e-4)
    for step in range(STEPS):
        n = seq.shape[1]
        nxt = logits[:, -1].argmax(-1)[:, None]
        with torch.no_grad():
            ref = model(torch.tensor(seq)).logits.numpy()[:, -1]
        assert (nxt[:, 0] == ref.argmax(-1)).all()
        seq = np.concatenate([seq, nxt], axis=1)
        logits = net(tokens=nxt, positions=np.full((BATCH, 1), n),
                     pos=np.array([n]))["logits"].reshape(BATCH, 1, VOCAB)
        with torch.no_grad():
            want = model(torch.tensor(seq)).logits.numpy()[:, -1:]
        np.testing.assert_allclose(logits, want, rtol=1e-4, atol=1e-4, err_msg="step %d" % step)
    assert len(net._shape_plans) == 2  # the prompt's plan and the step's, one cache
