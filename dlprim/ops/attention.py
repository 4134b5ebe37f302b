"""Attention (declarations: see ops/declare.py): the fused kernels that never store the
L x S scores (kernels/attention.cl)."""
from .declare import declare

FAMILY = "attention"

declare("scaled_dot_product_attention", FAMILY, "launcher",
        "softmax(scale q k^T + mask) v, causal or masked, with dropout",
        dtypes=("float",), aten=("scaled_dot_product_attention", "_native_multi_head_attention",
                                 "_transformer_encoder_layer_fwd"),
        layer="ScaledDotProductAttention", launch="dlprim.core.attention.AttentionOps")
declare("rotary_embedding", FAMILY, "launcher",
        "a decoder's rotary position embedding: x cos + swap(x) sin over the last axis, "
        "optionally from (N, T, H, D) to heads-major", dtypes=("float",), aten=(),
        layer="Rotary", launch="dlprim.core.rotary.RotaryOps")
