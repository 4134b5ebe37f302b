"""Arithmetic precision of products: the settings.

``"fp32"`` (the default) multiplies in float32. Its large GEMMs on Hopper run on tensor
cores with float32's accuracy (``core.gemm``'s ``split_tf32``): each operand the sum of two
TF32 values, three TF32 products summed, and the tensor cores' sums taken into float32
adds every 128 values of K; measured against float64 it is as accurate as the float32
kernels and cuBLAS FP32, or more (docs/benchmarks.md). ``"tf32"`` keeps float32
storage and accumulation but rounds the operands of GEMM products to TF32 (10-bit
mantissa, float32's range) and runs them on tensor cores, as PyTorch does with TF32 on;
where a device has no tensor cores this runtime can drive, "tf32" runs the float32
kernels (exact, and slower than tensor cores would be).

``"fp16"`` and ``"bf16"`` are a Net's settings too (``net/mixed_precision.py``):
activations stored as half or bfloat16 where layers take it, parameters and sums
float32; their GEMMs and implicit-GEMM convolutions multiply FP16 or BF16 operands on
tensor cores where the device has them, float32 elsewhere.

Whether a device has tensor cores is ``core.gemm.tensor_cores(ctx)``, a probe of the
kernel that uses them.
"""
__all__ = ["PRECISIONS", "HALF_STORAGE_TYPES", "check_precision"]

PRECISIONS = ("fp32", "tf32", "fp16", "bf16")
# the 16-bit storage of each mixed precision
HALF_STORAGE_TYPES = {"fp16": "float16", "bf16": "bfloat16"}


def check_precision(precision, who="precision"):
    """``precision`` if it is one of ``PRECISIONS``, else a ValueError naming them."""
    if precision not in PRECISIONS:
        raise ValueError("%s must be one of %s, got %r" % (who, ", ".join(PRECISIONS), precision))
    return precision
