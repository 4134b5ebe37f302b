"""torchvision networks compiled for dlprim beside the alternatives, ms per batch: the
same loop (batch from the host, forward, and for training cross-entropy, backward and an
Adam step, ``--fused`` for Adam(fused=True); the output back to the host) as
benchmarks/side_by_side.py.

    python benchmarks/torch_compile_speed.py --kinds net,ocl_compiled,ocl_eager
    python benchmarks/torch_compile_speed.py --kinds cuda_eager,cuda_inductor   # TF32 off

kinds: ``net`` dlprim's own Net (dlprim.models, as side_by_side.py), ``ocl_compiled``
``dlprim.torch.compile`` of the model on ocl, ``ocl_eager`` the model on ocl,
``cuda_eager`` and ``cuda_inductor`` (torch.compile) on CUDA. ocl and CUDA kinds need
separate processes (PyTorch's autograd cannot mix the two devices in one process).
"""
import argparse
import json
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def loop_ms(model, device, batch, mode, warmup, iters, sync, fused=False):
    import torch
    x_host = torch.randn(batch, 3, 224, 224)
    y_host = torch.randint(0, 1000, (batch,))
    params = [p for p in model.parameters()]
    opt = (torch.optim.Adam(params, lr=1e-4, fused=True if fused else None)
           if mode == "train" else None)

    def iteration():
        x = x_host.to(device)
        if mode == "train":
            opt.zero_grad()
            out = model(x)
            torch.nn.functional.cross_entropy(out, y_host.to(device)).backward()
            opt.step()
        else:
            with torch.no_grad():
                out = model(x)
        return out.cpu()

    for _ in range(warmup):
        iteration()
    sync()
    times = []
    for _ in range(iters):
        start = time.perf_counter()
        iteration()
        sync()
        times.append(time.perf_counter() - start)
    return 1e3 * float(np.mean(times))


def row(kind, net, batch, mode, warmup, iters, fused=False):
    import torch
    import torchvision
    if kind == "net":
        sys.path.insert(0, HERE)
        import dlprim as dp
        from side_by_side import dlprim_ms
        return dlprim_ms(dp.Context(None), net, batch, mode, warmup, iters)[0]
    torch.manual_seed(0)
    model = getattr(torchvision.models, net)().train(mode == "train")
    if kind.startswith("cuda"):
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cudnn.benchmark = True
        model = model.cuda()
        if kind == "cuda_inductor":
            model = torch.compile(model)
        return loop_ms(model, "cuda", batch, mode, warmup, iters, torch.cuda.synchronize, fused)
    import dlprim.torch
    model = model.to("ocl")
    if kind == "ocl_compiled":
        model = dlprim.torch.compile(model)
    ms = loop_ms(model, "ocl", batch, mode, warmup, iters, dlprim.torch.synchronize, fused)
    for report in dlprim.torch.compiler.reports():
        if report.where != "dlprim":
            print("  %s: %s" % (report.where, report.reason), flush=True)
    return ms


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--nets", default="resnet50,mobilenet_v2,vit_b_16")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--modes", default="infer,train")
    p.add_argument("--kinds", default="net,ocl_compiled,ocl_eager")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--fused", action="store_true",
                   help="Adam(fused=True) (one multi-tensor update) instead of the default")
    p.add_argument("--json", help="append the rows to this file (one JSON object per line)")
    args = p.parse_args()
    for net in args.nets.split(","):
        for mode in args.modes.split(","):
            for kind in args.kinds.split(","):
                ms = row(kind, net, args.batch, mode, args.warmup, args.iters, args.fused)
                r = {"net": net, "batch": args.batch, "mode": mode, "kind": kind, "ms": ms,
                     "fused": args.fused}
                print("%-14s %3d %-6s %-14s %9.2f ms" % (net, args.batch, mode, kind, ms),
                      flush=True)
                if args.json:
                    with open(args.json, "a") as f:
                        f.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    main()
