"""The normalization operators (declarations: see ops/declare.py). Each runs on the ocl
device through its ``launch`` in dlprim/torch/ops_norm.py (core/batchnorm.py and
core/normalization.py's launchers). instance_norm, rms_norm and local_response_norm are
composite in PyTorch (batch norm on a reshaped view, reductions, pooling) and need no
declaration."""
from .declare import declare

FAMILY = "normalization"
_OCL = "dlprim.torch.ops_norm."


def _norm(name, doc, launch, aten, onnx):
    return declare(name, FAMILY, "launcher", doc, dtypes=("float",), aten=aten, onnx=onnx,
                   launch=_OCL + launch)


_norm("batch_norm", "per-channel normalisation over the batch (batch or running statistics, "
      "updated in place)", "_forward",
      ("native_batch_norm", "native_batch_norm_backward", "_native_batch_norm_legit",
       "_native_batch_norm_legit_no_training", "_batch_norm_with_update",
       "_batch_norm_no_update", "batch_norm_backward"), "BatchNormalization")
_norm("layer_norm", "normalisation over the trailing dims of each sample", "_layer_norm",
      ("native_layer_norm", "native_layer_norm_backward"), "LayerNormalization")
_norm("group_norm", "normalisation over groups of channels of each sample", "_group_norm",
      ("native_group_norm", "native_group_norm_backward"), "GroupNormalization")
_norm("weight_norm", "a weight as g * v / ||v|| over every dim but one (nn.utils.weight_norm, "
      "its parametrization): the backward pass (PyTorch decomposes the forward)",
      "weight_norm_backward", ("_weight_norm_interface_backward",), None)
