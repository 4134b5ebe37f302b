"""The decoder of ``dlprim.models.gpt`` written in PyTorch, with nanoGPT's (and GPT-2's)
parameter names: the twin that test_gpt.py and test_bert.py (GPT-2) check the Net
against. Its forward gives the logits (batch, context, vocab)."""
import torch

nn, F = torch.nn, torch.nn.functional


class Block(nn.Module):
    def __init__(self, dim, heads, gelu):
        super().__init__()
        self.dim, self.heads, self.gelu = dim, heads, gelu
        self.ln_1, self.ln_2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = nn.Module()
        self.attn.c_attn, self.attn.c_proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.mlp = nn.Module()
        self.mlp.c_fc, self.mlp.c_proj = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)

    def forward(self, x):
        b, length, d = x.shape
        q, k, v = self.attn.c_attn(self.ln_1(x)).split(d, dim=2)
        heads = lambda t: t.view(b, length, self.heads, d // self.heads).transpose(1, 2)
        a = F.scaled_dot_product_attention(heads(q), heads(k), heads(v), is_causal=True)
        x = x + self.attn.c_proj(a.transpose(1, 2).reshape(b, length, d))
        return x + self.mlp.c_proj(F.gelu(self.mlp.c_fc(self.ln_2(x)), approximate=self.gelu))


class GptTwin(nn.Module):
    """``gelu``: PyTorch's ``approximate`` ("none", or "tanh" for GPT-2); ``head_bias``:
    whether the head has a bias (GPT-2's has none)."""

    def __init__(self, vocab, context, layers, heads, dim, gelu="none", head_bias=True):
        super().__init__()
        self.transformer = nn.Module()
        self.transformer.wte = nn.Embedding(vocab, dim)
        self.transformer.wpe = nn.Embedding(context, dim)
        self.transformer.h = nn.ModuleList([Block(dim, heads, gelu) for _ in range(layers)])
        self.transformer.ln_f = nn.LayerNorm(dim)
        self.lm_head = nn.Linear(dim, vocab, bias=head_bias)

    def forward(self, tokens):
        t = self.transformer
        x = t.wte(tokens) + t.wpe.weight
        for block in t.h:
            x = block(x)
        return self.lm_head(t.ln_f(x))
