"""dlprim.models.vision_transformer against the same network in PyTorch, laid out and
named as torchvision's VisionTransformer (nn.MultiheadAttention, MLP indices 0 and 3):
logits, loss and every parameter's gradient."""
import numpy as np
import pytest

import dlprim as dp
from dlprim import models
from layer_check import assert_loss_and_grads_match_torch

torch = pytest.importorskip("torch")
nn = torch.nn

IMAGE, PATCH, LAYERS, HEADS, HIDDEN, MLP, CLASSES, B = 16, 4, 2, 2, 16, 32, 5, 2


class EncoderLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1 = nn.LayerNorm(HIDDEN, eps=1e-6)
        self.self_attention = nn.MultiheadAttention(HIDDEN, HEADS, batch_first=True)
        self.ln_2 = nn.LayerNorm(HIDDEN, eps=1e-6)
        self.mlp = nn.Sequential(nn.Linear(HIDDEN, MLP), nn.GELU(), nn.Dropout(0.0),
                                 nn.Linear(MLP, HIDDEN), nn.Dropout(0.0))

    def forward(self, x):
        h = self.ln_1(x)
        x = x + self.self_attention(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.ln_2(x))


class ViT(nn.Module):
    def __init__(self):
        super().__init__()
        length = (IMAGE // PATCH) ** 2 + 1
        self.conv_proj = nn.Conv2d(3, HIDDEN, PATCH, PATCH)
        self.class_token = nn.Parameter(torch.zeros(1, 1, HIDDEN))
        self.encoder = nn.Module()
        self.encoder.pos_embedding = nn.Parameter(torch.zeros(1, length, HIDDEN))
        self.encoder.layers = nn.Module()
        for i in range(LAYERS):
            self.encoder.layers.add_module("encoder_layer_%d" % i, EncoderLayer())
        self.encoder.ln = nn.LayerNorm(HIDDEN, eps=1e-6)
        self.heads = nn.Module()
        self.heads.head = nn.Linear(HIDDEN, CLASSES)

    def forward(self, x):
        x = self.conv_proj(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.class_token.expand(x.shape[0], -1, -1), x], dim=1)
        x = x + self.encoder.pos_embedding
        for layer in self.encoder.layers.children():
            x = layer(x)
        return self.heads.head(self.encoder.ln(x)[:, 0])


def test_vision_transformer_matches_pytorch(ctx):
    cfg = models.vision_transformer(IMAGE, PATCH, LAYERS, HEADS, HIDDEN, MLP, CLASSES, B)
    net = dp.Net(ctx, cfg.to_dict(), mode=dp.TRAIN, seed=1)
    rng = np.random.default_rng(2)
    arrays = net.get_parameters()
    for name in ("class_token", "encoder.pos_embedding"):  # not zeros: let them matter
        arrays[name] = (0.1 * rng.standard_normal(arrays[name].shape)).astype(np.float32)
    net.set_parameters(arrays)
    twin = ViT()
    twin.load_state_dict({k: torch.tensor(v) for k, v in arrays.items()})
    x = rng.standard_normal((B, 3, IMAGE, IMAGE)).astype(np.float32)
    label = np.array([1, 4], np.int32)
    loss = net(data=x, label=label)["loss"]
    assert_loss_and_grads_match_torch(net, loss, twin, twin(torch.tensor(x)), label)


def test_vit_b_16_names_follow_torchvision():
    ops = models.vit_b_16(batch=1).to_dict()["operators"]
    names = {n for op in ops for n in op.get("params", [])}
    for expected in ("conv_proj.weight", "class_token", "encoder.pos_embedding",
                     "encoder.layers.encoder_layer_11.self_attention.in_proj_weight",
                     "encoder.layers.encoder_layer_0.self_attention.out_proj.bias",
                     "encoder.layers.encoder_layer_3.mlp.3.weight", "encoder.ln.bias",
                     "heads.head.weight"):
        assert expected in names, expected
    assert len(names) == 4 + 12 * 12 + 2 + 2  # torchvision's vit_b_16 has 152 tensors


def test_multi_head_attention_loads_pytorch_weights(ctx):
    """models.multi_head_attention in a NetConfig of its own against nn.MultiheadAttention
    with the same state dict, causal and not."""
    for causal in (False, True):
        cfg = dp.NetConfig()
        x = cfg.add_input("x", (2, 5, HIDDEN))
        cfg.set_outputs([models.multi_head_attention(cfg, "mha", x, 5, HIDDEN, HEADS, causal)])
        net = dp.Net(ctx, cfg, mode=dp.PREDICT, seed=0)
        torch.manual_seed(3)
        mha = nn.MultiheadAttention(HIDDEN, HEADS, batch_first=True)
        net.set_parameters({"mha." + k: v.detach().numpy() for k, v in mha.state_dict().items()})
        data = np.random.default_rng(4).standard_normal((2, 5, HIDDEN)).astype(np.float32)
        t = torch.tensor(data)
        mask = torch.ones(5, 5, dtype=torch.bool).triu(1) if causal else None
        want = mha(t, t, t, attn_mask=mask, need_weights=False)[0].detach().numpy()
        got = next(iter(net(x=data).values()))
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
