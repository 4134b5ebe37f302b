"""Kernel time of one of cpu_models.py's models converted by ``dlprim.torch.compile``, in
inference or training (forward, loss, backward and a default AdamW step): the device's
busy time a step and its kernels by name (OpenCL events), on the default ocl device.

    python benchmarks/compiled_model_profile.py [--model vit|gpt|lstm] [--train] [--steps 5]
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
    p.add_argument("--train", action="store_true", help="training steps (else inference)")
    args = p.parse_args()
    from compiled_step_profile import _Events, _profiled_device
    from cpu_models import build
    import dlprim.torch
    _profiled_device()
    torch.set_num_threads(2)
    model, inputs, loss_of = build(args.model)
    model = model.to("ocl").train(args.train)
    on_ocl = {k: v.to("ocl") for k, v in inputs.items()}
    compiled = dlprim.torch.compile(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def step():
        if not args.train:
            with torch.no_grad():
                return float(loss_of(compiled, on_ocl))
        opt.zero_grad(set_to_none=True)
        loss = loss_of(compiled, on_ocl)
        loss.backward()
        opt.step()
        return float(loss)
    for _ in range(3):
        step()
    events = _Events()
    with events:
        start = time.perf_counter()
        for _ in range(args.steps):
            step()
        wall = (time.perf_counter() - start) / args.steps
    _, busy, late, _ = events.timeline()
    n = args.steps
    print("%s %s: %.2f ms a step, kernels %.2f ms, device waiting for the host %.2f ms"
          % (args.model, "training" if args.train else "inference", 1e3 * wall, busy / n,
             late / n))
    print("| kernel | launches a step | ms a step |\n|---|---:|---:|")
    for name, (count, ms) in events.by_kernel()[:args.kernels]:
        print("| %s | %d | %.3f |" % (name, count // n, ms / n))


if __name__ == "__main__":
    main()
