"""HuggingFace models through ``torch.compile(model_on_ocl, backend="dlprim")`` and
``dlprim.torch.compile(model_on_ocl)``, called as their users call them (``input_ids``,
an ``attention_mask`` with padding, ``labels``, ``pixel_values``; output objects back):
every captured graph becomes a dlprim Net (none left to eager), and outputs, every
parameter's gradient and the outputs after an AdamW step match eager PyTorch on the CPU
in float32 within 1e-4. Small configs from transformers' config classes, random weights
(nothing is downloaded), dropout 0.

``make test`` runs GPT-2 (no mask: transformers' mask code calls ``torch.diff``, which
the exporter lacks; labels: the loss pads with -100) through ``dlprim.torch.compile`` and
BERT with a padding mask through ``torch.compile``, in training (about 8 s);
``DLPRIM_MODELS_FULL=1`` runs GPT-2, BERT, Llama, T5, ViT and CLIP both ways, in inference
and training (about 2 minutes)."""
import copy
import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("onnx")

import dlprim.torch as dt  # noqa: E402
from dlprim.torch.compiler import reports  # noqa: E402

pytestmark = [pytest.mark.filterwarnings("ignore::UserWarning"),
              pytest.mark.filterwarnings("ignore::DeprecationWarning"),
              pytest.mark.filterwarnings("ignore::FutureWarning")]

FULL = os.environ.get("DLPRIM_MODELS_FULL") == "1"
VOCAB, BATCH, SEQ, TOL = 64, 2, 8, 1e-4
SMALL = dict(num_hidden_layers=2, hidden_size=32, num_attention_heads=2, intermediate_size=64)


def gpt2():
    return transformers.GPT2LMHeadModel(transformers.GPT2Config(
        n_layer=2, n_embd=32, n_head=2, vocab_size=VOCAB, n_positions=32, use_cache=False,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, attn_implementation="eager"))


def bert():
    return transformers.BertForMaskedLM(transformers.BertConfig(
        vocab_size=VOCAB, max_position_embeddings=32, hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0, attn_implementation="eager", **SMALL))


def llama():
    return transformers.LlamaForCausalLM(transformers.LlamaConfig(
        num_key_value_heads=1, vocab_size=VOCAB, max_position_embeddings=32, use_cache=False,
        attn_implementation="eager", **SMALL))


def t5():
    return transformers.T5ForConditionalGeneration(transformers.T5Config(
        num_layers=2, num_decoder_layers=2, d_model=32, d_kv=16, num_heads=2, d_ff=64,
        vocab_size=VOCAB, use_cache=False, decoder_start_token_id=0, pad_token_id=0,
        dropout_rate=0.0))


def vit():
    return transformers.ViTForImageClassification(transformers.ViTConfig(
        image_size=16, patch_size=4, num_labels=5, hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0, attn_implementation="eager", **SMALL))


def clip():
    return transformers.CLIPModel(transformers.CLIPConfig(
        text_config=dict(vocab_size=VOCAB, max_position_embeddings=32, **SMALL),
        vision_config=dict(image_size=16, patch_size=4, **SMALL), projection_dim=16,
        attn_implementation="eager"))


def inputs(name):
    """The keyword arguments users pass: token ids with a padded row, labels, pixels."""
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(1, VOCAB, (BATCH, SEQ), generator=g)
    mask = torch.ones(BATCH, SEQ, dtype=torch.long)
    mask[1, -3:] = 0  # the second sequence is padded
    pixels = torch.randn(BATCH, 3, 16, 16, generator=g)
    return {
        "gpt2": dict(input_ids=ids, labels=ids),
        "bert": dict(input_ids=ids, attention_mask=mask, labels=ids),
        "llama": dict(input_ids=ids, attention_mask=mask, labels=ids),
        "t5": dict(input_ids=ids, attention_mask=mask, labels=ids[:, :5].contiguous()),
        "vit": dict(pixel_values=pixels, labels=torch.tensor([1, 3])),
        "clip": dict(input_ids=ids, attention_mask=mask, pixel_values=pixels,
                     return_loss=True),
    }[name]


MODELS = {"gpt2": gpt2, "bert": bert, "llama": llama, "t5": t5, "vit": vit, "clip": clip}
# T5 trains its position bias through the attention scores (a gradient a fused attention's
# mask would not carry): its self-attention stays unfused, its cross-attention (a constant
# bias) is fused
DEFAULT = {("gpt2", "dlprim.torch.compile", "train"), ("bert", "torch.compile", "train"),
           ("t5", "dlprim.torch.compile", "train")}
CASES = [pytest.param(m, h, mode, marks=() if FULL or (m, h, mode) in DEFAULT else
                      pytest.mark.skip(reason="DLPRIM_MODELS_FULL=1 runs it"))
         for m in MODELS for h in ("torch.compile", "dlprim.torch.compile")
         for mode in ("infer", "train")]


@pytest.fixture(autouse=True)
def fresh_dynamo():
    import torch._dynamo
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def close(a, b, what):
    a, b = a.detach().cpu().numpy(), b.detach().cpu().numpy()
    np.testing.assert_allclose(a, b, rtol=TOL, atol=TOL * max(1.0, float(np.abs(b).max())),
                               err_msg=what)


def same_outputs(got, want):
    assert type(got) is type(want) and list(got.keys()) == list(want.keys())
    for key, value in want.items():
        if isinstance(value, torch.Tensor):
            assert got[key].device.type == "ocl", key
            close(got[key], value, key)


@pytest.mark.parametrize("name,how,mode", CASES)
def test_model_is_all_nets_and_matches_eager(name, how, mode):
    torch.manual_seed(0)
    ref = MODELS[name]().train(mode == "train")
    model = copy.deepcopy(ref).to("ocl")
    compiled = torch.compile(model, backend="dlprim") if how == "torch.compile" else \
        dt.compile(model)
    kwargs = inputs(name)
    on_ocl = {k: v.to("ocl") if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()}
    start = len(reports())
    if mode == "infer":
        with torch.no_grad():
            same_outputs(compiled(**on_ocl), ref(**kwargs))
    else:
        got, want = compiled(**on_ocl), ref(**kwargs)
        same_outputs(got, want)
        got.loss.backward()
        want.loss.backward()
        for (key, p), q in zip(model.named_parameters(), ref.parameters()):
            if q.grad is None:
                continue
            assert p.grad is not None, key
            close(p.grad, q.grad, key)
        for net in (model, ref):
            torch.optim.AdamW(net.parameters(), lr=1e-3).step()
        same_outputs(compiled(**on_ocl), ref(**kwargs))
    graphs = reports()[start:]
    assert graphs and all(g.where == "dlprim" for g in graphs), graphs
    assert any("ScaledDotProductAttention" in g.layers for g in graphs)
    if name != "t5":  # every attention fused, in training graphs too (their Casts and
        assert not any("Softmax" in g.layers for g in graphs), graphs  # Dropouts folded)


@pytest.mark.parametrize("name", ["gpt2", "bert"])
def test_attention_dropout_is_the_fused_attentions(name):
    """Attention-probability dropout (``attn_pdrop``, ``attention_probs_dropout_prob``) of a
    training graph is the fused attention's ``dropout`` option, of the same p; in eval the
    fused layer drops nothing and matches eager."""
    p = 0.125
    torch.manual_seed(0)
    ref = MODELS[name]()
    ref.config.update({"attn_pdrop" if name == "gpt2" else "attention_probs_dropout_prob": p})
    ref = type(ref)(ref.config).train()
    model = copy.deepcopy(ref).to("ocl")
    compiled = dt.compile(model)
    kwargs = inputs(name)
    on_ocl = {k: v.to("ocl") for k, v in kwargs.items()}
    compiled(**on_ocl).loss.backward()
    nets = [r.net for rs in compiled._runners.values() for r in rs if r is not None]
    ops = [op for net in nets for op in net.graph.ops]
    fused = [op.options.get("dropout") for op in ops if op.type == "ScaledDotProductAttention"]
    assert fused == [p] * 2, [op.type for op in ops]
    assert not any(op.type in ("Softmax", "Dropout") for op in ops), [op.type for op in ops]
    # GPT-2's eager mask (finfo.min above the diagonal, per sequence) is the causal
    # option, read by no kernel; BERT's padding mask is the layer's mask input
    attention = [op for op in ops if op.type == "ScaledDotProductAttention"]
    assert [(op.options["causal"], len(op.inputs)) for op in attention] == \
        [(True, 3) if name == "gpt2" else (False, 4)] * 2
    model.eval(), ref.eval()
    with torch.no_grad():
        same_outputs(compiled(**on_ocl), ref(**kwargs))
