"""Matrix products of one dtype on a PyTorch device: ms, TFLOP/s and the error against a
float64 product on the CPU (the largest difference over sqrt(n)).

    python benchmarks/torch_matmul_speed.py --device ocl|cuda [--sizes 1024 4096] [--repeat 20]
"""
import argparse
import time

import torch

DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="ocl")
    p.add_argument("--sizes", type=int, nargs="*", default=[1024, 4096])
    p.add_argument("--dtypes", nargs="*", default=list(DTYPES), choices=list(DTYPES))
    p.add_argument("--repeat", type=int, default=20)
    args = p.parse_args(argv)
    if args.device.startswith("ocl"):
        import dlprim.torch
        sync = dlprim.torch.synchronize
    else:
        sync = torch.cuda.synchronize
    print("| dtype | n | ms | TFLOP/s | error |")
    print("|---|---:|---:|---:|---:|")
    for name in args.dtypes:
        for n in args.sizes:
            g = torch.Generator().manual_seed(0)
            a, b = (torch.randn(n, n, generator=g).to(DTYPES[name]) for _ in range(2))
            da, db = a.to(args.device), b.to(args.device)
            for _ in range(3):
                c = da @ db
            sync()
            start = time.perf_counter()
            for _ in range(args.repeat):
                c = da @ db
            sync()
            s = (time.perf_counter() - start) / args.repeat
            exact = a.double() @ b.double()
            err = float((c.cpu().double() - exact).abs().max()) / n ** 0.5
            print("| %s | %d | %.3f | %.1f | %.2e |" % (name, n, 1e3 * s, 2 * n ** 3 / s / 1e12,
                                                       err), flush=True)


if __name__ == "__main__":
    main()
