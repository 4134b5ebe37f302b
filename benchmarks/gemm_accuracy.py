"""Accuracy of dlprim's "fp32" GEMM against float64, beside the float32 kernels and (where
PyTorch has CUDA) cuBLAS FP32 with TF32 off.

Where a device runs large "fp32" products on tensor cores (core/gemm.py's
``split_tf32``: each operand as two TF32 parts, three TF32 products), this says whether
that is as accurate as float32 arithmetic; the float32 kernels are the same products
with ``tuning.FP32_SPLIT_TF32`` off. Each row prints the largest |C - C64| / (|A| |B|)
and the largest relative error where |C64| is above 1e-3 of its maximum.

    python benchmarks/gemm_accuracy.py [--device gpu]

Data: normal, log-normal magnitudes (sigma 4) with random signs, and uniform [0, 1)
(no cancellation, so an error of the sums' rounding shows).
"""
import argparse
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

CASES = ((2048, 768, 768, "normal"), (2048, 3072, 768, "normal"), (2048, 768, 3072, "normal"),
         (1024, 1024, 16384, "normal"), (2048, 768, 768, "lognormal"),
         (1024, 1024, 8192, "uniform"))


def operands(rng, M, N, K, data):
    if data == "normal":
        a, b = rng.standard_normal((M, K)), rng.standard_normal((K, N))
    elif data == "lognormal":
        a = rng.lognormal(0, 4, (M, K)) * rng.choice([-1, 1], (M, K))
        b = rng.lognormal(0, 4, (K, N)) * rng.choice([-1, 1], (K, N))
    else:
        a, b = rng.uniform(0, 1, (M, K)), rng.uniform(0, 1, (K, N))
    return a.astype(np.float32), b.astype(np.float32)


def dlprim_product(ctx, a, b, split):
    import dlprim as dp
    from dlprim.core import tuning
    from dlprim.core.gemm import Gemm
    saved = tuning.FP32_SPLIT_TF32
    tuning.FP32_SPLIT_TF32 = split
    try:
        op = Gemm(ctx, a.shape[0], b.shape[1], a.shape[1])
        C = dp.Tensor(ctx, (a.shape[0], b.shape[1]))
        op(dp.Tensor.from_numpy(ctx, a), dp.Tensor.from_numpy(ctx, b), C)
        return C.numpy().astype(np.float64), op.split_tf32
    finally:
        tuning.FP32_SPLIT_TF32 = saved


def cublas_product(a, b):
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    torch.backends.cuda.matmul.allow_tf32 = False
    return (torch.from_numpy(a).cuda() @ torch.from_numpy(b).cuda()).cpu().double().numpy()


def errors(got, want, scale):
    big = np.abs(want) > 1e-3 * np.abs(want).max()
    return ((np.abs(got - want) / scale).max(),
            (np.abs(got - want)[big] / np.abs(want)[big]).max())


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default=os.environ.get("DLPRIM_DEVICE", "gpu"))
    args = p.parse_args()
    import dlprim as dp
    ctx = dp.Context(args.device)
    rng = np.random.default_rng(0)
    print("| M x N x K, data | split TF32 | float32 kernels | cuBLAS FP32 |")
    print("|---|---|---|---|")
    for M, N, K, data in CASES:
        a, b = operands(rng, M, N, K, data)
        want = a.astype(np.float64) @ b.astype(np.float64)
        scale = np.abs(a).astype(np.float64) @ np.abs(b).astype(np.float64)
        split, used = dlprim_product(ctx, a, b, True)
        plain, _ = dlprim_product(ctx, a, b, False)
        cublas = cublas_product(a, b)
        cells = ["%.1e / %.1e" % errors(x, want, scale) if x is not None else "-"
                 for x in (split if used else None, plain, cublas)]
        print("| %d x %d x %d, %s | %s |" % (M, N, K, data, " | ".join(cells)), flush=True)


if __name__ == "__main__":
    main()
