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


class _Events:
    """Every command enqueued while active (PyOpenCL's enqueue functions wrapped), with its
    event: the device time of code that runs outside a Net (the optimizer), and where the
    device waits for the host (a command queued after the one before it had finished)."""

    NAMES = ("enqueue_nd_range_kernel", "enqueue_copy", "enqueue_fill_buffer")

    def __init__(self):
        self.events = []

    def __enter__(self):
        import pyopencl as cl
        self._saved = {n: getattr(cl, n) for n in self.NAMES}
        events = self.events

        def wrap(name, fn):
            def enqueue(queue, *args, **kwargs):
                event = fn(queue, *args, **kwargs)
                what = args[0].function_name if name == "enqueue_nd_range_kernel" else name[8:]
                events.append((what, event))
                return event
            return enqueue
        for n, fn in self._saved.items():
            setattr(cl, n, wrap(n, fn))
        return self

    def __exit__(self, *exc):
        import pyopencl as cl
        for n, fn in self._saved.items():
            setattr(cl, n, fn)

    def _timed(self):
        out = []
        for name, e in self.events:
            if e is not None:
                e.wait()
                p = e.profile
                out.append((name, p.queued * 1e-6, p.start * 1e-6, p.end * 1e-6))
        return out

    def by_kernel(self):
        out = collections.defaultdict(lambda: [0, 0.0])
        for name, _, start, end in self._timed():
            out[name][0] += 1
            out[name][1] += end - start
        return sorted(out.items(), key=lambda kv: -kv[1][1])

    def timeline(self, top=12):
        """(span ms, busy ms, idle ms the host was late for, the largest such gaps as
        (ms, the command before, the command after))."""
        timed = sorted(self._timed(), key=lambda r: r[2])
        if not timed:
            return 0.0, 0.0, 0.0, []
        busy, late, gaps = 0.0, 0.0, []
        end = timed[0][2]
        before = "(start)"
        for name, queued, start, stop in timed:
            if start > end:
                gap = start - end
                if queued > end:  # the device was idle until the host enqueued this
                    late += gap
                    gaps.append((gap, before, name))
            busy += max(0.0, stop - max(start, end))
            end, before = max(end, stop), name
        span = end - timed[0][2]
        return span, busy, late, sorted(gaps, reverse=True)[:top]


def main(argv=None):
    import dlprim.torch
    from dlprim.cli.benchmark import _profile
    from torch_compile_speed import HF, hf_model, timed_ms
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--net", default="gpt2", choices=sorted(HF))
    p.add_argument("--batch", type=int)
    p.add_argument("--seq", type=int)
    p.add_argument("--iters", type=int, default=5)
    p.add_argument("--small", action="store_true", help="two-layer configs (a quick check)")
    p.add_argument("--fused", action="store_true", help="AdamW(fused=True)")
    p.add_argument("--kernels", type=int, default=25, help="backward kernels listed")
    args = p.parse_args(argv)
    batch, seq = HF[args.net]
    batch, seq = args.batch or batch, args.seq or seq
    ctx = _profiled_device()
    torch.manual_seed(0)
    model, vocab = hf_model(args.net, args.small)
    model = model.to("ocl").train()
    compiled = dlprim.torch.compile(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=args.fused or None)
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
    # (each closed by a sync, as torch_compile_speed.py times its steps)
    step_ms = timed_ms(step, 0, args.iters, sync)
    fwd_bwd_ms = timed_ms(fwd_bwd, 0, args.iters, sync)
    opt_ms = timed_ms(opt.step, 0, args.iters, sync)
    sync()
    with _Events() as seen:
        opt.step()
        sync()
    with _Events() as whole:
        step()
        sync()
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
    span, busy, late, gaps = whole.timeline()
    print("one step on the device: %.2f ms from first to last command, busy %.2f, idle "
          "waiting for the host %.2f" % (span, busy, late))
    print("| idle gap ms | after | before |\n|---:|---|---|")
    for gap, before, after in gaps:
        print("| %.3f | %s | %s |" % (gap, before, after))
    print("| optimizer kernel | launches | ms |\n|---|---:|---:|")
    for name, (n, ms) in seen.by_kernel():
        print("| %s | %d | %.2f |" % (name, n, ms))
    launches = {p: collections.Counter(getattr(launch, "name", type(launch).__name__)
                                       for launch in getattr(net.plan, p))
                for p in ("forward", "backward")}
    print("launches of the forward pass by kernel: %s" % ", ".join(
        "%s %d" % kv for kv in launches["forward"].most_common(args.kernels)))
    print("| backward kernel | launches | ms |\n|---|---:|---:|")
    kernels = [(name, ms) for kind, name, _, ms in rows if kind == "bwd-kernel"]
    for name, ms in kernels[:args.kernels]:
        print("| %s | %d | %.2f |" % (name, launches["backward"][name], ms))


if __name__ == "__main__":
    main()
