"""Arithmetic precision of products: the settings and what the device can do.

``"fp32"`` (the default) multiplies in float32 exactly as written. ``"tf32"`` keeps float32
storage and accumulation but rounds the operands of GEMM products to TF32 (10-bit
mantissa, float32's range) and runs them on tensor cores, as PyTorch does with TF32 on;
where a device has no tensor cores this runtime can drive, "tf32" runs the float32
kernels (exact, and slower than tensor cores would be).

Tensor cores are found by a probe on first use per context: NVIDIA devices only, a
build of ``kernels/gemm_mma.cl`` (inline PTX ``mma.sync``, which the driver's compiler
must accept for the device's architecture) and a numeric self-test of it against
float64 on a small product that crosses its tile edges; any failure means "no".
"""
import logging

import numpy as np

__all__ = ["PRECISIONS", "check_precision", "tensor_cores"]

PRECISIONS = ("fp32", "tf32")
log = logging.getLogger(__name__)

# TF32 keeps 10 explicit mantissa bits: one rounding per operand, relative error 2^-11
# each; a dot product of such products stays within a few 2^-11 of its magnitude
_SELF_TEST_TOLERANCE = 4e-3


def check_precision(precision, who="precision"):
    """``precision`` if it is one of ``PRECISIONS``, else a ValueError naming them."""
    if precision not in PRECISIONS:
        raise ValueError("%s must be one of %s, got %r" % (who, ", ".join(PRECISIONS), precision))
    return precision


def tensor_cores(ctx):
    """Whether ``ctx``'s device runs ``kernels/gemm_mma.cl`` correctly (memoized)."""
    known = getattr(ctx, "_tensor_cores", None)
    if known is None:
        known = ctx._tensor_cores = _probe(ctx)
    return known


def _probe(ctx):
    if ctx.facts.vendor_id != "nvidia" or not ctx.facts.is_gpu:
        return False
    from ..tensor import Tensor
    from .gemm import Gemm
    rng = np.random.default_rng(0)
    M, N, K = 130, 136, 40  # a partial tile on every side
    a = rng.standard_normal((M, K)).astype(np.float32)
    b = rng.standard_normal((N, K)).astype(np.float32)
    try:
        op = Gemm(ctx, M, N, K, trans_b=True, precision="tf32", _mma=True)
        C = Tensor(ctx, (M, N))
        op(Tensor.from_numpy(ctx, a), Tensor.from_numpy(ctx, b), C)
        got = C.numpy()
    except Exception as err:  # a compiler without mma.sync, or a failing launch
        log.info("tensor cores: not used on %s (%s)", ctx.facts.name, str(err).splitlines()[0])
        return False
    want = a.astype(np.float64) @ b.astype(np.float64).T
    err = np.abs(got - want).max() / np.abs(want).max()
    if not np.isfinite(err) or err > _SELF_TEST_TOLERANCE:
        log.warning("tensor cores: the TF32 self-test on %s failed (relative error %.2g); "
                    "precision 'tf32' runs the float32 kernels", ctx.facts.name, err)
        return False
    return True
