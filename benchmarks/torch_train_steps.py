"""Host cost of a PyTorch training step on ocl: a deep, narrow net (3x3 convolution,
BatchNorm, ReLU blocks) at a small batch, so that the step is mostly per-parameter and
per-operator work: eager ocl and ``dlprim.torch.compile``, each with torch.optim's Adam
on its default multi-tensor (foreach) path and with ``fused=True``.

    python benchmarks/torch_train_steps.py [--blocks 20] [--width 16] [--size 16] [--batch 2]

Prints ms per step: the best and the median of 5 rounds of 5 steps (each round ends
with a synchronisation), after 5 warm-up steps.
"""
import argparse
import time
import warnings


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--blocks", type=int, default=20)
    p.add_argument("--width", type=int, default=16)
    p.add_argument("--size", type=int, default=16)
    p.add_argument("--batch", type=int, default=2)
    args = p.parse_args()
    warnings.simplefilter("ignore")
    import torch
    import torch.nn as nn
    import dlprim.torch

    def make():
        torch.manual_seed(0)
        c = args.width
        blocks = [nn.Sequential(nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c),
                                nn.ReLU()) for _ in range(args.blocks)]
        return nn.Sequential(nn.Conv2d(3, c, 3, padding=1), *blocks, nn.AdaptiveAvgPool2d(1),
                             nn.Flatten(), nn.Linear(c, 10)).to("ocl")
    x = torch.randn(args.batch, 3, args.size, args.size)
    y = torch.randint(0, 10, (args.batch,))
    for how in ("eager", "compiled"):
        for fused in (None, True):
            model = make()
            run = dlprim.torch.compile(model) if how == "compiled" else model
            opt = torch.optim.Adam(model.parameters(), lr=1e-3, fused=fused)

            def step():
                opt.zero_grad()
                torch.nn.functional.cross_entropy(run(x.to("ocl")), y.to("ocl")).backward()
                opt.step()
            for _ in range(5):
                step()
            dlprim.torch.synchronize()
            rounds = []
            for _ in range(5):
                start = time.perf_counter()
                for _ in range(5):
                    step()
                dlprim.torch.synchronize()
                rounds.append((time.perf_counter() - start) / 5 * 1e3)
            rounds.sort()
            print("%-8s %-7s %6.1f ms best  %6.1f ms median"
                  % (how, "fused" if fused else "foreach", rounds[0], rounds[2]), flush=True)


if __name__ == "__main__":
    main()
