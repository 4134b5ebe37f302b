"""Where a compiled HuggingFace training step spends its time: ``dlprim.torch.compile`` of
GPT-2 or BERT (random weights, the default configs) trained with AdamW, split into the
whole step (wall time), the Net's forward and backward launches (OpenCL events, per layer
type and per backward kernel) and the optimizer step.

    python benchmarks/compiled_step_profile.py [--net gpt2|bert] [--batch B] [--seq S]

The step is torch_compile_speed.py's ``ocl_compiled`` loop; the queue has profiling on, so
the wall times here are a little above that script's.
"""
import argparse
import collections
import sys
import time
import os

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


def _profiled_device():
    """ocl:0 with a profiling queue (before anything else makes its context)."""
    import dlprim as dp
    from dlprim.torch import device as ocl_device
    ocl_device._contexts[0] = dp.Context(ocl_device.location(0), profiling=True)
    return ocl_device._contexts[0]


def _timed(fn, sync, iters):
    sync()
    start = time.perf_counter()
    for _ in range(iters):
        fn()
    sync()
    return (time.perf_counter() - start) / iters * 1e3


def main(argv=None):
    import dlprim.torch
    from dlprim.cli.benchmark import _profile
    from torch_compile_speed import HF, hf_model
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--net", default="gpt2", choices=sorted(HF))
    p.add_argument("--batch", type=int)
    p.add_argument("--seq", type=int)
    p.add_argument("--iters", type=int, default=5)
    p.add_argument("--small", action="store_true", help="two-layer configs (a quick check)")
    p.add_argument("--kernels", type=int, default=25, help="backward kernels listed")
    args = p.parse_args(argv)
    batch, seq = HF[args.net]
    batch, seq = args.batch or batch, args.seq or seq
    ctx = _profiled_device()
    torch.manual_seed(0)
    model, vocab = hf_model(args.net, args.small)
    model = model.to("ocl").train()
    compiled = dlprim.torch.compile(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids = torch.randint(0, vocab, (batch, seq)).to("ocl")
    sync = dlprim.torch.synchronize

    def fwd_bwd():
        opt.zero_grad()
        compiled(input_ids=ids, labels=ids).loss.backward()

    def step():
        fwd_bwd()
        opt.step()

    for _ in range(2):
        step()
    step_ms = _timed(step, sync, args.iters)
    fwd_bwd_ms = _timed(fwd_bwd, sync, args.iters)
    opt_ms = _timed(opt.step, sync, args.iters)
    runners = [r for rs in compiled._runners.values() for r in rs if r is not None]
    net = runners[0].net
    rows = _profile(ctx, net, True)
    by = collections.defaultdict(float)
    count = collections.Counter()
    for kind, _, layer, ms in rows:
        if kind in ("forward", "backward"):
            by[kind, layer] += ms
            count[kind, layer] += 1
    passes = {k: sum(ms for (p_, _), ms in by.items() if p_ == k) for k in ("forward", "backward")}
    print("%s %dx%d train step (AdamW): %.2f ms wall; forward+backward %.2f, optimizer %.2f"
          % (args.net, batch, seq, step_ms, fwd_bwd_ms, opt_ms))
    print("Net launches (events): forward %.2f ms, backward %.2f ms, %d forward launches, "
          "%d backward" % (passes["forward"], passes["backward"], len(net.plan.forward),
                           len(net.plan.backward)))
    print("| pass | layer type | operators | ms | share of pass |\n|---|---|---:|---:|---:|")
    for (pass_, layer), ms in sorted(by.items(), key=lambda kv: (kv[0][0], -kv[1])):
        print("| %s | %s | %d | %.2f | %.1f%% |" % (pass_, layer, count[pass_, layer], ms,
                                                 100 * ms / max(passes[pass_], 1e-9)))
    print("| backward kernel | ms |\n|---|---:|")
    kernels = [(name, ms) for kind, name, _, ms in rows if kind == "bwd-kernel"]
    for name, ms in kernels[:args.kernels]:
        print("| %s | %.2f |" % (name, ms))


if __name__ == "__main__":
    main()
