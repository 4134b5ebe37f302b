"""Where a decoder's one-token pass goes: the launches of ``dlprim.llm``'s step, the host
time each kernel's enqueue takes (no profiling queue), the device time of each kernel and
the gaps between them (a profiling queue), and 20 passes back to back.

    python benchmarks/decode_profile.py --model tinyllama --dtype fp16
    python benchmarks/decode_profile.py --model gpt2 --dtype fp32 --device cpu
    python benchmarks/decode_profile.py --model tinyllama --prompt 2040 --pass prefill

The model is saved with random weights from llm_decode.py's configs (nothing downloaded)
into --folder (kept, so later calls reuse it).
"""
import argparse
import collections
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


class _Sampler:
    """The sampler's launch after a step (``feed``: the feed of the pass after it) as a
    launch of the profile: called with a queue, it returns its event."""

    def __init__(self, engine, net, feed):
        self.sampler, self.context, self.net, self.feed = engine.sampler, engine.context, net, feed
        self.name = "sampler.feed_next" if feed else "sampler.sample_next"

    def __call__(self, queue):
        t = self.net.tensor
        if self.feed:
            self.sampler.feed(t("tokens"), t("pos"), t("positions"), self.context,
                              queue=queue)
        else:
            self.sampler.next(t("logits"), queue=queue)
        return self.sampler.event


def profile(folder, dtype, device, profiling, context=600, prompt=512, which="step"):
    import dlprim as dp
    from dlprim.llm import load
    ctx = dp.Context(device, profiling=profiling)
    lm = load(folder, ctx=ctx, context=context, batch=1, precision=dtype)
    lm.generate(list(np.random.default_rng(0).integers(1, 1000, prompt)), max_new_tokens=8,
                eos_ids=[])  # (the one-token plan made, its kernels built)
    # the one-token step, or the prompt's pass (the Net of the largest length bucket)
    net = lm.engine.net if which == "step" else max(lm.engine._nets.items())[1]
    # (a step the engine runs as one launch of the blocks: that launch and the head's)
    fused = lm.engine.fused if which == "step" else None
    launches = net.plan.forward if fused is None else fused.launches
    print("the step's launches: %s" % ("the Net's plan" if fused is None else
                                       "the blocks' launches (llm/fused_step.py)"))
    if which == "step":  # (then the sampler's choice and the next pass's feed)
        launches = list(launches) + [_Sampler(lm.engine, net, feed)
                                     for feed in (False, True)]
    queue = ctx.queue
    host, events = collections.defaultdict(float), []
    for _ in range(3):  # (the last of three)
        queue.finish()
        host.clear()
        events = []
        start = time.perf_counter()
        for launch in launches:
            t = time.perf_counter()
            events.append((getattr(launch, "name", type(launch).__name__), launch(queue)))
            host[events[-1][0]] += time.perf_counter() - t
        enqueued = time.perf_counter() - start
        queue.finish()
    print("%s queue: %d launches, host enqueue %.3f ms"
          % ("profiling" if profiling else "plain", len(events), enqueued * 1e3))
    counts = collections.Counter(name for name, _ in events)
    if not profiling:
        for name, s in sorted(host.items(), key=lambda kv: -kv[1]):
            print("  host   %-36s x%-4d %.3f ms  %.1f us a launch"
                  % (name, counts[name], s * 1e3, s * 1e6 / counts[name]))
    else:
        device, spans = collections.defaultdict(float), []
        for name, e in events:
            if e is not None and hasattr(e, "profile"):
                device[name] += (e.profile.end - e.profile.start) * 1e-6
                spans.append((e.profile.start, e.profile.end))
        spans.sort()
        busy = sum(b - a for a, b in spans) * 1e-6
        span = (spans[-1][1] - spans[0][0]) * 1e-6
        print("  device busy %.3f ms over %.3f ms (gaps %.3f)" % (busy, span, span - busy))
        for name, ms in sorted(device.items(), key=lambda kv: -kv[1]):
            print("  device %-36s x%-4d %.3f ms  %.1f us each"
                  % (name, counts[name], ms, ms * 1e3 / counts[name]))
    queue.finish()
    start = time.perf_counter()
    for _ in range(20):
        (net if fused is None else fused).forward()
    enqueued = time.perf_counter() - start
    ctx.finish()
    wall = time.perf_counter() - start
    print("  20 passes: enqueue %.3f ms a pass, wall %.3f ms a pass"
          % (enqueued / 20e-3, wall / 20e-3))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="tinyllama", help="tinyllama or gpt2")
    p.add_argument("--dtype", default="fp16", help="fp32, fp16 or bf16")
    p.add_argument("--device", default=None)
    p.add_argument("--prompt", type=int, default=512, help="prompt tokens")
    p.add_argument("--pass", dest="which", default="step", choices=("step", "prefill"),
                   help="the one-token step or the prompt's pass")
    p.add_argument("--folder", default=None, help="where the model is saved (default: a "
                   "folder under the temporary directory, kept)")
    args = p.parse_args(argv)
    from llm_decode import save_model
    import tempfile
    folder = args.folder or os.path.join(tempfile.gettempdir(), "dlprim-llm-" + args.model)
    if not os.path.isfile(os.path.join(folder, "config.json")):
        save_model(args.model, folder)
    for profiling in (False, True):
        profile(folder, args.dtype, args.device, profiling, context=args.prompt + 88,
                prompt=args.prompt, which=args.which)
    return 0


if __name__ == "__main__":
    sys.exit(main())
