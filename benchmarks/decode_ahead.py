"""What enqueuing the next decode pass before reading the last one's tokens gains
(``llm/engine.py``'s passes ahead): one process, each model loaded once, greedy decoding
after a prompt with the engine's ``lookahead`` off and on in turn, the median of --reps
calls each (a host's speed drifts between processes more than the gain). Beside them, the
same passes (the one-token pass and the sampler) enqueued back to back with nothing
read: the device's own time a token, which passes ahead approach.

    python benchmarks/decode_ahead.py --folder /tmp/llmb [--models tinyllama,gpt2]
"""
import argparse
import json
import os
import statistics
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="tinyllama,gpt2")
    p.add_argument("--folder", default=None)
    p.add_argument("--context", type=int, default=512)
    p.add_argument("--new", type=int, default=32)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--precision", default="fp16")
    p.add_argument("--quantize", default=None)
    p.add_argument("--device", default=None)
    args = p.parse_args(argv)
    import dlprim as dp
    from dlprim.llm import load
    from llm_decode import save_model
    folder = args.folder or tempfile.mkdtemp()
    ctx = dp.Context(args.device)
    for name in args.models.split(","):
        path = os.path.join(folder, name)
        if not os.path.exists(os.path.join(path, "config.json")):
            save_model(name, path)
        lm = load(path, ctx=ctx, context=args.context + args.new + 8,
                  precision=args.precision, quantize=args.quantize)
        engine = lm.engine
        prompt = np.random.default_rng(0).integers(1, 1000, args.context).tolist()

        def run(n):
            start = time.perf_counter()
            lm.generate(prompt, max_new_tokens=n, eos_ids=[])
            return time.perf_counter() - start
        run(2), run(args.new)  # (plans and kernels built)
        ms = {False: [], True: []}
        for _ in range(args.reps):
            for ahead in (False, True):
                engine.lookahead = ahead
                one, full = run(1), run(args.new)
                ms[ahead].append((full - one) / (args.new - 1) * 1e3)
        # the device alone: the one-token pass and the sampler, nothing read back
        queue = ctx.queue
        queue.finish()
        start = time.perf_counter()
        for _ in range(args.new):
            if engine.fused is not None:
                engine.fused.forward()
            else:
                engine.net.forward()
            engine.sampler.next(engine.net.tensor("logits"))
        queue.finish()
        device = (time.perf_counter() - start) / args.new * 1e3
        print(json.dumps(dict(
            model=name, precision=args.precision, quantize=args.quantize,
            fused=engine.fused is not None, one_by_one_ms=round(statistics.median(ms[False]), 3),
            ahead_ms=round(statistics.median(ms[True]), 3), back_to_back_ms=round(device, 3),
            spread_ms=[round(min(v), 3) for v in ms.values()] +
            [round(max(v), 3) for v in ms.values()])), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
