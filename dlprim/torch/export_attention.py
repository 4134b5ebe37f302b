"""What PyTorch's ONNX exporter writes for ``nn.MultiheadAttention`` when dlprim converts
a model: one ``dlprim::PackedAttention`` node over the in-projection's output, which the
importer turns into ScaledDotProductAttention with the packed layout.

Left to itself, the exporter spells a batch-first self-attention as a transpose to
sequence-first, the in-projection without its bias, the bias added apart, five
transposes and three slices to split q, k and v and the heads, the attention, and two
transposes back: eleven copies per layer around a kernel that reads q, k and v in place
from the in-projection's (N, L, 3, H, D) output. ``packed_attention(module)`` gives
every ``nn.MultiheadAttention`` of ``module`` (the copy being exported, never the user's
model) a forward that writes exactly that; calls it does not cover (cross-attention,
masks, weights asked for, dropout in training, separate q/k/v projections or bias_k /
add_zero_attn) run the module's own forward.
"""
import math
import types

import torch

__all__ = ["packed_attention", "DOMAIN"]

DOMAIN = "dlprim"


class _PackedAttention(torch.autograd.Function):
    """softmax(scale q k^T) v over qkv (N, L, 3, H, D), giving (N, L, H, D)."""

    @staticmethod
    def forward(ctx, qkv, scale):
        q, k, v = (qkv[:, :, i].transpose(1, 2) for i in range(3))
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, scale=scale)
        return out.transpose(1, 2)

    @staticmethod
    def symbolic(g, qkv, scale):
        out = g.op(DOMAIN + "::PackedAttention", qkv, scale_f=float(scale))
        sizes = qkv.type().sizes()  # the output's type, which ONNX cannot infer for it
        if sizes is not None and len(sizes) == 5:
            out.setType(qkv.type().with_sizes([sizes[0], sizes[1], sizes[3], sizes[4]]))
        return out


def _forward(self, query, key, value, key_padding_mask=None, need_weights=True,
             attn_mask=None, average_attn_weights=True, is_causal=False):
    plain = (query is key and key is value and query.dim() == 3 and self.batch_first
             and key_padding_mask is None and attn_mask is None and not need_weights
             and not is_causal and (self.dropout == 0 or not self.training)
             and self._qkv_same_embed_dim and self.bias_k is None and not self.add_zero_attn)
    if not plain:
        return type(self).forward(self, query, key, value, key_padding_mask, need_weights,
                                  attn_mask, average_attn_weights, is_causal)
    n, length, embed = query.shape
    heads = self.num_heads
    d = embed // heads
    qkv = torch.nn.functional.linear(query, self.in_proj_weight, self.in_proj_bias)
    out = _PackedAttention.apply(qkv.reshape(n, length, 3, heads, d), 1.0 / math.sqrt(d))
    out = torch.nn.functional.linear(out.reshape(n, length, embed), self.out_proj.weight,
                                     self.out_proj.bias)
    return out, None


def packed_attention(module):
    """Give every nn.MultiheadAttention of ``module`` the packed forward (in place);
    returns how many."""
    count = 0
    for m in module.modules():
        if isinstance(m, torch.nn.MultiheadAttention):
            m.forward = types.MethodType(_forward, m)
            count += 1
    return count
