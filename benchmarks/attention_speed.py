"""Scaled dot-product attention, forward and backward (or forward alone), in float32,
float16 or bfloat16, causal or not: PyTorch's
``F.scaled_dot_product_attention`` on the ``ocl`` device (dlprim's fused kernels) or on
another device, one process per device. Prints ms per forward+backward and the device
memory the call added (ocl: dlprim's pool; cuda: PyTorch's allocator peak).

    python benchmarks/attention_speed.py --device ocl --lengths 1024 4096
    python benchmarks/attention_speed.py --device cuda --lengths 1024 4096   # TF32 off
    python benchmarks/attention_speed.py --device ocl --dtype float16 --causal --dim 128
"""
import argparse
import time

import torch
import torch.nn.functional as F


def run(device, batch, heads, length, dim, iters, dtype=torch.float32, causal=False,
        forward=False):
    sync, used = _device_tools(device)  # imports dlprim.torch for ocl
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(batch, heads, length, dim, generator=g).to(device, dtype)
               .requires_grad_(not forward) for _ in range(3))
    grad = torch.randn(batch, heads, length, dim, generator=g).to(device, dtype)

    def step():
        if forward:
            with torch.no_grad():
                F.scaled_dot_product_attention(q, k, v, is_causal=causal)
            return
        for t in (q, k, v):
            t.grad = None
        F.scaled_dot_product_attention(q, k, v, is_causal=causal).backward(grad)
    step()
    sync()
    before = used(reset=True)
    start = time.perf_counter()
    for _ in range(iters):
        step()
    sync()
    ms = 1e3 * (time.perf_counter() - start) / iters
    return ms, used() - before


def _device_tools(device):
    if device.startswith("cuda"):
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False

        def used(reset=False):
            if reset:
                torch.cuda.reset_peak_memory_stats()
                return torch.cuda.memory_allocated()
            return torch.cuda.max_memory_allocated()
        return torch.cuda.synchronize, used
    import dlprim.torch
    memory = dlprim.torch.context().memory

    def used(reset=False):
        if reset:
            memory.peak_bytes = memory.bytes_in_use
        return memory.peak_bytes
    return dlprim.torch.synchronize, used


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="ocl")
    p.add_argument("--lengths", type=int, nargs="*", default=[1024, 4096])
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--iters", type=int, default=5)
    p.add_argument("--dtype", default="float32", choices=["float32", "float16", "bfloat16"])
    p.add_argument("--causal", action="store_true")
    p.add_argument("--forward", action="store_true", help="the forward pass alone")
    args = p.parse_args()
    what = "fwd" if args.forward else "fwd+bwd"
    print("| device | dtype | causal | N x H | L | D | ms %s | TFLOP/s | extra memory MiB |"
          % what)
    print("|---|---|---|---|---|---|---|---|---|")
    for length in args.lengths:
        ms, extra = run(args.device, args.batch, args.heads, length, args.dim, args.iters,
                        getattr(torch, args.dtype), args.causal, args.forward)
        # the products' FLOPs as FlashAttention counts them: 4 N H L^2 D forward (QK^T,
        # PV), 2.5x that forward+backward, halved where causal
        flops = 4 * args.batch * args.heads * length ** 2 * args.dim
        flops *= (1 if args.forward else 3.5) / (2 if args.causal else 1)
        print("| %s | %s | %s | %dx%d | %d | %d | %.2f | %.1f | %.1f |"
              % (args.device, args.dtype, "yes" if args.causal else "no", args.batch,
                 args.heads, length, args.dim, ms, flops / ms / 1e9, extra / 2**20), flush=True)


if __name__ == "__main__":
    main()
