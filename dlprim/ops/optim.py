"""Optimizer updates (declarations: see ops/declare.py): one fused kernel per update over
every parameter (the foreach/fused forms torch.optim calls)."""
from .declare import declare

FAMILY = "optim"

for _name, _doc in (("_fused_sgd_", "SGD with momentum, weight decay and nesterov"),
                    ("_fused_adam_", "Adam (amsgrad too)"),
                    ("_fused_adamw_", "AdamW (decoupled weight decay)")):
    declare(_name.strip("_").replace("fused_", ""), FAMILY, "launcher", _doc + ", fused",
            dtypes=("float",), aten=(_name,), launch="dlprim.torch.ops_optim")

# torch.amp.GradScaler's two steps, on the device (nothing waits for the host)
declare("amp_unscale", FAMILY, "launcher",
        "gradients multiplied by 1/scale in place, and whether any is inf or nan noted",
        dtypes=("float",), aten=("_amp_foreach_non_finite_check_and_unscale_",),
        launch="dlprim.torch.ops_optim.amp_unscale_")
declare("amp_update_scale", FAMILY, "launcher",
        "the loss scale backed off after an overflow, grown after growth_interval clean steps",
        dtypes=("float",), aten=("_amp_update_scale_",),
        launch="dlprim.torch.ops_optim.amp_update_scale_")
