"""Kernel time of one of cpu_models.py's models in inference, converted by
``dlprim.torch.compile``: the device's busy time a step and its kernels by name (OpenCL
events), on the default ocl device.

    python benchmarks/compiled_infer_profile.py [--model vit|gpt|lstm] [--steps 5]
"""
import argparse
import os
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="vit", choices=("vit", "gpt", "lstm"))
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--kernels", type=int, default=15, help="kernels listed")
    args = p.parse_args()
    from compiled_step_profile import _Events, _profiled_device
    from cpu_models import build
    import dlprim.torch
    _profiled_device()
    torch.set_num_threads(2)
    model, inputs, loss_of = build(args.model)
    model = model.to("ocl").eval()
    on_ocl = {k: v.to("ocl") for k, v in inputs.items()}
    compiled = dlprim.torch.compile(model)
    with torch.no_grad():
        for _ in range(3):
            float(loss_of(compiled, on_ocl))
        events = _Events()
        with events:
            start = time.perf_counter()
            for _ in range(args.steps):
                float(loss_of(compiled, on_ocl))
            wall = (time.perf_counter() - start) / args.steps
        _, busy, late, _ = events.timeline()
    n = args.steps
    print("%s inference: %.2f ms a step, kernels %.2f ms, device waiting for the host %.2f ms"
          % (args.model, 1e3 * wall, busy / n, late / n))
    print("| kernel | launches a step | ms a step |\n|---|---:|---:|")
    for name, (count, ms) in events.by_kernel()[:args.kernels]:
        print("| %s | %d | %.3f |" % (name, count // n, ms / n))


if __name__ == "__main__":
    main()
