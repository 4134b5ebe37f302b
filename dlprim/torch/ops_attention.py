"""``scaled_dot_product_attention`` on ocl devices through dlprim's fused attention kernels
(``core/attention.py``): memory linear in the sequence length, forward and backward.
The fused operators of PyTorch's transformer modules in eval mode without gradients
(``nn.MultiheadAttention``'s and ``nn.TransformerEncoderLayer``'s fast paths) run as
their projections, normalizations and this attention.

PyTorch decomposes SDPA above the device (it is a composite operator), so the fused path
is registered for the ocl device's autograd key and carries its own backward. q, k and v
of one dtype, float32, float16 or bfloat16 (stored so; the row statistics are float32
either way; 16-bit storage runs on tensor cores where the device has them), with a
boolean mask or a float mask of their dtype, and ``dropout_p`` below 1: the weights
dropped are drawn inside the kernels from a Philox key taken from PyTorch's generator
(as ``ops_random``), which the backward pass draws again rather than storing an L x S
mask. Grouped-query heads (``enable_gqa``) repeat k's and v's heads for their groups
first. Calls it does not cover (a mask that needs a gradient, batch dimensions that
broadcast, mixed or other dtypes) take PyTorch's math path, which runs on the device's
matrix products and softmax.
"""
import math

import torch

from ..core.attention import AttentionOps
from ..core.pointwise import memo
from .dispatch import register
from .ops_random import seed_from
from .tensor import OclTensor, as_dlprim, empty, enqueue, numpy_dtype

__all__ = ["register_attention"]

aten = torch.ops.aten
_FUSED_DTYPES = (torch.float32, torch.float16, torch.bfloat16)  # of q, k, v and a float mask


def register_attention(library):
    """Register the fused SDPA for the ocl device on ``library`` (an aten IMPL Library)."""
    library.impl("scaled_dot_product_attention", _sdpa, "AutogradPrivateUse1")


def _sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
          enable_gqa=False):
    if enable_gqa:
        key, value, enable_gqa = _grouped(query, key, value)
    mask = _fusable(query, key, value, attn_mask, dropout_p, is_causal, enable_gqa)
    if mask is False:
        return aten._scaled_dot_product_attention_math.default(
            query, key, value, _math_mask(attn_mask, query.dtype), dropout_p, is_causal, None,
            scale=scale, enable_gqa=enable_gqa)[0]
    return _FusedAttention.apply(query, key, value, mask, bool(is_causal), scale,
                                 float(dropout_p))


def _grouped(q, k, v):
    """Grouped-query heads (``enable_gqa``) as the kernels take them: k and v with each of
    their H heads repeated for the Hq / H query heads that read it (head j reads j // (Hq /
    H), as PyTorch's repeat_interleave), by an expand and a reshape, whose backward sums
    each group's gradients. Memory stays linear in the sequence. Returns (k, v, whether
    PyTorch's path is still needed: shapes this does not cover, which it then refuses or
    runs)."""
    if q.dim() < 3 or k.dim() != q.dim() or v.dim() != q.dim() or \
            k.shape[-3] != v.shape[-3] or k.shape[-3] == 0 or q.shape[-3] % k.shape[-3]:
        return k, v, True
    group = q.shape[-3] // k.shape[-3]
    if group == 1:
        return k, v, False

    def spread(t):
        lead, heads = t.shape[:-3], t.shape[-3]
        wide = t.unsqueeze(-3).expand(*lead, heads, group, *t.shape[-2:])
        return wide.reshape(*lead, heads * group, *t.shape[-2:])
    return spread(k), spread(v), False


def _math_mask(mask, dtype):
    """A boolean mask (True: attend) as the additive mask of ``dtype`` that PyTorch's math
    path takes (0 where True, -inf where False), as the composite SDPA converts it before
    that path; other masks as they are."""
    if mask is None or mask.dtype != torch.bool:
        return mask
    return torch.zeros_like(mask, dtype=dtype).masked_fill_(mask.logical_not(), float("-inf"))


def _fusable(q, k, v, mask, dropout_p, causal, gqa):
    """The additive float mask to use (None for none), or False where the fused kernels do
    not apply."""
    ts = (q, k, v)
    if not 0 <= dropout_p < 1 or gqa or not all(isinstance(t, OclTensor) and t.dtype == q.dtype
                                   for t in ts) or q.dtype not in _FUSED_DTYPES:
        return False
    if q.dim() not in (3, 4) or k.dim() != q.dim() or v.dim() != q.dim():
        return False
    if q.shape[:-2] != k.shape[:-2] or k.shape[:-2] != v.shape[:-2] or \
            k.shape[-1] != q.shape[-1] or v.shape[-2] != k.shape[-2]:
        return False
    if causal and mask is not None:
        return False  # PyTorch refuses both together; its path says so
    if mask is None:
        return None
    if not isinstance(mask, OclTensor) or mask.requires_grad or mask.dim() > 4:
        return False
    target = (1,) * (4 - q.dim()) + tuple(q.shape[:-1]) + (k.shape[-2],)
    shape = (1,) * (4 - mask.dim()) + tuple(mask.shape)
    if any(m not in (1, t) for m, t in zip(shape, target)):
        return False
    if mask.dtype == torch.bool:
        return torch.where(mask, 0.0, float("-inf"))
    return mask if mask.dtype == q.dtype else False  # PyTorch's path refuses others


def _mask_strides(mask):
    """Element strides of the mask over (batch, head, query, key), 0 where it broadcasts."""
    shape = (1,) * (4 - mask.dim()) + tuple(mask.shape)
    stride = (0,) * (4 - mask.dim()) + tuple(mask.stride())
    return tuple(0 if n == 1 else s for n, s in zip(shape, stride))


def _rows(t):
    """(batch * heads, rows, width) of a contiguous 3-D or 4-D tensor as a dlprim tensor."""
    return as_dlprim(t).view((math.prod(t.shape[:-2]),) + tuple(t.shape[-2:]))


class _FusedAttention(torch.autograd.Function):
    @staticmethod
    def forward(fn, q, k, v, mask, causal, scale, dropout_p):
        q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
        heads = q.shape[1] if q.dim() == 4 else 1
        b, lq, d = math.prod(q.shape[:-2]), q.shape[-2], q.shape[-1]
        lk, dv = k.shape[-2], v.shape[-1]
        storage = q._ocl_storage
        ctx, index = storage.ctx, storage.index
        dtype = numpy_dtype(q.dtype)
        mask_dtype = numpy_dtype(mask.dtype) if mask is not None else dtype
        op = memo(ctx, ("torch_attention", b, lq, lk, d, dv, heads, causal, mask is not None,
                         dtype, mask_dtype, dropout_p),
                   lambda: AttentionOps(ctx, b, lq, lk, d, dv, heads=heads, causal=causal,
                                        mask=mask is not None, dtype=dtype,
                                        mask_dtype=mask_dtype, dropout=dropout_p))
        # a fresh Philox key per call (offset 0), kept for the backward's same mask
        fn.seed = seed_from() if dropout_p else 0
        out = empty(tuple(q.shape[:-1]) + (dv,), q.dtype, index)
        stats = empty(op.stats_shape, torch.float32, index)  # float32 whatever q is
        masks = _mask_args(mask)
        enqueue(ctx, op.launches(_rows(q), _rows(k), _rows(v), _rows(out), as_dlprim(stats),
                                 scale=scale, seed=fn.seed, **masks))
        fn.save_for_backward(q, k, v, out, stats)
        fn.op, fn.scale, fn.mask = op, scale, mask
        return out

    @staticmethod
    def backward(fn, dout):
        q, k, v, out, stats = fn.saved_tensors
        dout = dout.contiguous()
        index = q._ocl_storage.index
        dq, dk, dv = (empty(t.shape, t.dtype, index) for t in (q, k, v))
        b, lq = fn.op.batch, fn.op.lq
        delta = empty((b, lq), torch.float32, index)
        enqueue(q._ocl_storage.ctx, fn.op.backward_launches(
            _rows(q), _rows(k), _rows(v), _rows(out), as_dlprim(stats),
            _rows(dout), _rows(dq), _rows(dk), _rows(dv), as_dlprim(delta),
            scale=fn.scale, seed=fn.seed, **_mask_args(fn.mask)))
        return dq, dk, dv, None, None, None, None


def _mask_args(mask):
    if mask is None:
        return {}
    start = mask._ocl_storage.at(mask.storage_offset(), (1,))
    return {"mask": start, "mask_strides": _mask_strides(mask)}


# ----- the eval-mode fast paths of nn.MultiheadAttention / nn.TransformerEncoderLayer
def _additive(mask, mask_type, n):
    """The fast paths' mask (True or -inf where a key is hidden) as an additive mask that
    broadcasts over (batch, head, query, key): type 1 is a key padding mask (N, S)."""
    if mask is None:
        return None
    if mask.dtype == torch.bool:
        mask = torch.where(mask, float("-inf"), 0.0)
    if mask_type == 1 or (mask_type is None and mask.dim() == 2 and mask.shape[0] == n):
        mask = mask.reshape(mask.shape[0], 1, 1, mask.shape[-1])
    return mask


def _attention(query, key, value, embed_dim, num_head, qkv_weight, qkv_bias, proj_weight,
               proj_bias, mask, mask_type, need_weights=False, average=True):
    F = torch.nn.functional
    n, d = query.shape[0], embed_dim // num_head
    wq, wk, wv = qkv_weight.chunk(3)
    bq, bk, bv = qkv_bias.chunk(3) if qkv_bias is not None else (None,) * 3

    def heads(t, w, b):  # (N, L, E) -> (N, H, L, D)
        return F.linear(t, w, b).reshape(n, t.shape[1], num_head, d).transpose(1, 2)
    q, k, v = heads(query, wq, bq), heads(key, wk, bk), heads(value, wv, bv)
    mask = _additive(mask, mask_type, n)
    weights = None
    if need_weights:  # the probabilities themselves: the plain path
        scores = q @ k.transpose(-2, -1) / math.sqrt(d)
        if mask is not None:
            scores = scores + mask
        weights = torch.softmax(scores, -1)
        out = weights @ v
        if average:
            weights = weights.mean(1)
    else:
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    out = F.linear(out.transpose(1, 2).reshape(n, query.shape[1], embed_dim), proj_weight,
                   proj_bias)
    return out, weights


@register(aten._native_multi_head_attention.default)
def _native_multi_head_attention(query, key, value, embed_dim, num_head, qkv_weight, qkv_bias,
                                 proj_weight, proj_bias, mask=None, need_weights=True,
                                 average_attn_weights=True, mask_type=None):
    out, weights = _attention(query, key, value, embed_dim, num_head, qkv_weight, qkv_bias,
                              proj_weight, proj_bias, mask, mask_type, need_weights,
                              average_attn_weights)
    if weights is None:
        weights = empty((0,), query.dtype, query._ocl_storage.index)
    return out, weights


@register(aten._transformer_encoder_layer_fwd.default)
def _transformer_encoder_layer_fwd(src, embed_dim, num_heads, qkv_weight, qkv_bias, proj_weight,
                                   proj_bias, use_gelu, norm_first, eps, norm_weight_1,
                                   norm_bias_1, norm_weight_2, norm_bias_2, ffn_weight_1,
                                   ffn_bias_1, ffn_weight_2, ffn_bias_2, mask=None,
                                   mask_type=None):
    F = torch.nn.functional

    def attend(x):
        return _attention(x, x, x, embed_dim, num_heads, qkv_weight, qkv_bias, proj_weight,
                          proj_bias, mask, mask_type)[0]

    def feed_forward(x):
        h = F.linear(x, ffn_weight_1, ffn_bias_1)
        return F.linear(F.gelu(h) if use_gelu else F.relu(h), ffn_weight_2, ffn_bias_2)

    def norm(x, w, b):
        return F.layer_norm(x, (embed_dim,), w, b, eps)
    if norm_first:
        x = src + attend(norm(src, norm_weight_1, norm_bias_1))
        return x + feed_forward(norm(x, norm_weight_2, norm_bias_2))
    x = norm(src + attend(src), norm_weight_1, norm_bias_1)
    return norm(x + feed_forward(x), norm_weight_2, norm_bias_2)
