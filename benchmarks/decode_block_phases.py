"""Where a fused decoder block's time goes (kernels/decoder_layer.cl built with TIMING): a
TinyLlama-shaped model (random weights, llm_decode.py's) decodes after a prompt, and the
first work-item of each work-group writes the device's clock at each phase's end; the
tool prints microseconds a phase (the median work-group / the slowest, the median over
the blocks), and the whole step's time with and without TIMING. NVIDIA GPUs only.

    python benchmarks/decode_block_phases.py --folder /tmp/llmb [--teams 8,16] [--unroll 4,8] \
        [--quantize int8|q4]
"""
import argparse
import functools
import os
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

PHASES = ["q/k/v product, rotary, cache", "barrier", "attention, heads merged", "barrier",
          "output product", "barrier", "MLP product(s)", "barrier", "down product"]
STAMPS = len(PHASES) + 1


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="tinyllama")
    p.add_argument("--folder", default=None)
    p.add_argument("--context", type=int, default=512)
    p.add_argument("--teams", default="16")
    p.add_argument("--unroll", default="4")
    p.add_argument("--dtype", default="fp16")
    p.add_argument("--quantize", default=None, help="int8 or q4 weights")
    p.add_argument("--steps", type=int, default=32)
    args = p.parse_args(argv)
    import dlprim as dp
    import dlprim.llm.model as llm_model
    from dlprim.llm.fused_step import fused_step
    from llm_decode import save_model
    folder = args.folder or tempfile.mkdtemp()
    if not os.path.exists(os.path.join(folder, args.model, "config.json")):
        save_model(args.model, os.path.join(folder, args.model))
    ctx = dp.Context()
    rng = np.random.default_rng(0)
    prompt = rng.integers(1, 1000, args.context).tolist()
    shapes = [(int(t), int(u)) for t in args.teams.split(",") for u in args.unroll.split(",")]
    for teams, unroll in shapes:
        for timing in (False, True):
            llm_model.fused_step = functools.partial(fused_step, teams=teams, unroll=unroll,
                                                     timing=timing)
            lm = llm_model.load(os.path.join(folder, args.model), ctx=ctx,
                                context=args.context + args.steps + 8, precision=args.dtype,
                                quantize=args.quantize)
            step = lm.engine.fused
            if step is None:
                print("teams %d: the device does not take the fused blocks" % teams)
                return 1
            lm.generate(prompt, max_new_tokens=2, eos_ids=[])  # (builds, the cache filled)
            times = []
            for _ in range(3):
                start = time.perf_counter()
                lm.generate(prompt, max_new_tokens=args.steps, eos_ids=[])
                t_all = time.perf_counter() - start
                start = time.perf_counter()
                lm.generate(prompt, max_new_tokens=2, eos_ids=[])
                times.append((t_all - (time.perf_counter() - start)) / (args.steps - 2))
            ms = 1e3 * min(times)
            print("teams %d (%d work-items), unroll %d, %d work-groups, timing %s: %.3f ms a "
                  "token" % (teams, teams * 32, unroll, next(iter(step.ops.values())).groups,
                             timing, ms))
            if not timing:
                continue
            per_block, between = [], []
            for clocks in step.clocks:  # (a launch's: blocks x groups x 16)
                launch = clocks.to_host().astype(np.int64)[:, :, :STAMPS]
                for c in launch:
                    d = np.diff(c, axis=1) / 1e3  # us, (groups, phases)
                    per_block.append((np.median(d, axis=0), d.max(axis=0),
                                      (c[:, -1].max() - c[:, 0].min()) / 1e3))
                # (the grid barrier between a launch's blocks: a block's end to the next's start)
                between += [(b[:, 0] - a[:, -1]) / 1e3 for a, b in zip(launch, launch[1:])]
            med = np.median([b[0] for b in per_block], axis=0)
            worst = np.median([b[1] for b in per_block], axis=0)
            for name, m, w in zip(PHASES, med, worst):
                print("  %-30s %7.2f / %7.2f us" % (name, m, w))
            if between:
                print("  %-30s %7.2f / %7.2f us" % ("barrier between blocks", np.median(
                    [np.median(b) for b in between]), np.median([b.max() for b in between])))
            print("  a block: %.2f us (median over %d blocks, %d launches)"
                  % (np.median([b[2] for b in per_block]), len(per_block), len(step.clocks)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
