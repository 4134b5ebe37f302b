"""dlprim.models.bert and gpt2 against the same networks written in PyTorch (transformers'
BertForSequenceClassification and GPT2LMHeadModel, layer for layer, with their parameter
names): loss and every parameter's gradient, and GPT-2's last-position logits."""
import numpy as np
import pytest

import dlprim as dp
from dlprim import models
from layer_check import assert_loss_and_grads_match_torch

torch = pytest.importorskip("torch")
nn, F = torch.nn, torch.nn.functional
from gpt_twin import GptTwin  # noqa: E402 (needs torch)

V, P, L, LAYERS, HEADS, D, INNER, CLASSES, B = 13, 9, 7, 2, 2, 16, 24, 3, 2
EPS = 1e-12


class BertLayer(nn.Module):
    """Post-norm: each sub-block's output is added to its input, then normalised."""

    def __init__(self):
        super().__init__()
        self.attention = nn.Module()
        self.attention.self = nn.Module()
        self.attention.self.qkv = nn.Linear(D, 3 * D)
        self.attention.output = nn.Module()
        self.attention.output.dense = nn.Linear(D, D)
        self.attention.output.LayerNorm = nn.LayerNorm(D, eps=EPS)
        self.intermediate = nn.Module()
        self.intermediate.dense = nn.Linear(D, INNER)
        self.output = nn.Module()
        self.output.dense = nn.Linear(INNER, D)
        self.output.LayerNorm = nn.LayerNorm(D, eps=EPS)

    def forward(self, x):
        q, k, v = self.attention.self.qkv(x).split(D, dim=2)
        heads = lambda t: t.view(B, L, HEADS, D // HEADS).transpose(1, 2)
        a = F.scaled_dot_product_attention(heads(q), heads(k), heads(v))
        a = self.attention.output.dense(a.transpose(1, 2).reshape(B, L, D))
        x = self.attention.output.LayerNorm(x + a)
        h = self.output.dense(F.gelu(self.intermediate.dense(x)))
        return self.output.LayerNorm(x + h)


class Bert(nn.Module):
    def __init__(self):
        super().__init__()
        self.bert = nn.Module()
        e = self.bert.embeddings = nn.Module()
        e.word_embeddings = nn.Embedding(V, D)
        e.position_embeddings = nn.Embedding(P, D)
        e.token_type_embeddings = nn.Embedding(2, D)
        e.LayerNorm = nn.LayerNorm(D, eps=EPS)
        self.bert.encoder = nn.Module()
        self.bert.encoder.layer = nn.ModuleList([BertLayer() for _ in range(LAYERS)])
        self.bert.pooler = nn.Module()
        self.bert.pooler.dense = nn.Linear(D, D)
        self.classifier = nn.Linear(D, CLASSES)

    def forward(self, ids):
        e = self.bert.embeddings
        x = e.word_embeddings(ids) + e.position_embeddings.weight[:L] + \
            e.token_type_embeddings.weight[0]
        x = e.LayerNorm(x)
        for layer in self.bert.encoder.layer:
            x = layer(x)
        return self.classifier(torch.tanh(self.bert.pooler.dense(x[:, 0])))


def _twin(ctx, cfg, module, rng):
    """The Net of ``cfg`` and ``module`` with the same random values (the tables that
    start at zeros in the Net made to matter)."""
    net = dp.Net(ctx, cfg.to_dict(), mode=dp.TRAIN if "loss" in cfg.outputs else dp.PREDICT,
                 seed=1)
    arrays = net.get_parameters()
    for name, a in arrays.items():
        if not a.any():
            arrays[name] = (0.3 * rng.standard_normal(a.shape)).astype(np.float32)
    net.set_parameters(arrays)
    module.load_state_dict({k: torch.tensor(v) for k, v in arrays.items()})
    return net, module


def test_bert_loss_and_gradients_match_pytorch(ctx):
    rng = np.random.default_rng(4)
    cfg = models.bert(V, P, L, LAYERS, HEADS, D, INNER, CLASSES, B)
    net, twin = _twin(ctx, cfg, Bert(), rng)
    ids = rng.integers(0, V, (B, L))
    label = np.array([2, 0], np.int32)
    loss = net(input_ids=ids, label=label)["loss"]
    assert_loss_and_grads_match_torch(net, loss, twin, twin(torch.tensor(ids)), label)


def test_bert_inference_gives_the_class_probabilities(ctx):
    rng = np.random.default_rng(5)
    cfg = models.bert(V, P, L, LAYERS, HEADS, D, INNER, CLASSES, B, train=False)
    net, twin = _twin(ctx, cfg, Bert(), rng)
    ids = rng.integers(0, V, (B, L))
    prob = net(input_ids=ids)["prob"]
    with torch.no_grad():
        want = F.softmax(twin(torch.tensor(ids)), dim=1).numpy()
    np.testing.assert_allclose(prob, want, rtol=1e-4, atol=1e-6)


def test_bert_refuses_a_length_past_its_position_table():
    with pytest.raises(ValueError, match="length 10 must be between 1 and positions 9"):
        models.bert(V, P, 10, LAYERS, HEADS, D, INNER, CLASSES, B)


def test_gpt2_loss_gradients_and_last_logits_match_pytorch(ctx):
    rng = np.random.default_rng(6)
    cfg = models.gpt2(B, L, vocab=V, layers=LAYERS, heads=HEADS, dim=D)
    net, twin = _twin(ctx, cfg, GptTwin(V, L, LAYERS, HEADS, D, gelu="tanh", head_bias=False),
                      rng)
    assert "lm_head.bias" not in net.get_parameters()
    tokens = rng.integers(0, V, (B, L))
    targets = np.roll(tokens, -1, axis=1)
    loss = net(tokens=tokens, targets=targets)["loss"]
    logits = twin(torch.tensor(tokens))
    assert_loss_and_grads_match_torch(net, loss, twin, logits, targets)

    infer = dp.Net(ctx, models.gpt2(B, L, train=False, vocab=V, layers=LAYERS, heads=HEADS,
                                    dim=D).to_dict(), mode=dp.PREDICT)
    infer.set_parameters(net.get_parameters())
    last = infer(tokens=tokens)["logits"]
    assert last.shape == (B, V)
    np.testing.assert_allclose(last, logits[:, -1].detach().numpy(), rtol=1e-4, atol=1e-5)


def test_gpt_refuses_last_only_in_training():
    with pytest.raises(ValueError, match="last_only is for inference"):
        models.gpt(V, L, LAYERS, HEADS, D, B, train=True, last_only=True)
