"""Optimizer updates (declarations: see ops/declare.py): one fused kernel per update over
every parameter (the foreach/fused forms torch.optim calls)."""
from .declare import declare

FAMILY = "optim"

for _name, _doc in (("_fused_sgd_", "SGD with momentum, weight decay and nesterov"),
                    ("_fused_adam_", "Adam (amsgrad too)"),
                    ("_fused_adamw_", "AdamW (decoupled weight decay)")):
    declare(_name.strip("_").replace("fused_", ""), FAMILY, "launcher", _doc + ", fused",
            dtypes=("float",), aten=(_name,), launch="dlprim.torch.ops_optim")
