"""Scaled dot-product attention, forward and backward, in float32: PyTorch's
``F.scaled_dot_product_attention`` on the ``ocl`` device (dlprim's fused kernels) or on
another device, one process per device. Prints ms per forward+backward and the device
memory the call added (ocl: dlprim's pool; cuda: PyTorch's allocator peak).

    python benchmarks/attention_speed.py --device ocl --lengths 1024 4096
    python benchmarks/attention_speed.py --device cuda --lengths 1024 4096   # TF32 off
"""
import argparse
import time

import torch
import torch.nn.functional as F


def run(device, batch, heads, length, dim, iters):
    sync, used = _device_tools(device)  # imports dlprim.torch for ocl
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(batch, heads, length, dim, generator=g).to(device).requires_grad_()
               for _ in range(3))
    grad = torch.randn(batch, heads, length, dim, generator=g).to(device)

    def step():
        for t in (q, k, v):
            t.grad = None
        F.scaled_dot_product_attention(q, k, v).backward(grad)
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
    args = p.parse_args()
    print("| device | N x H | L | D | ms fwd+bwd | extra memory MiB |")
    print("|---|---|---|---|---|---|")
    for length in args.lengths:
        ms, extra = run(args.device, args.batch, args.heads, length, args.dim, args.iters)
        print("| %s | %dx%d | %d | %d | %.2f | %.1f |" % (args.device, args.batch, args.heads,
                                                          length, args.dim, ms, extra / 2**20),
              flush=True)


if __name__ == "__main__":
    main()
