"""Decoding's time a token through the changes that moved it, beside the bandwidth floor
and HF compiled: a plot of docs/data/decode_steps_h200.json (numbers measured in the
docs/benchmarks.md sections it names), written as an SVG.

    python benchmarks/plot_decode_steps.py [--out docs/decode_steps_h200.svg]

Needs matplotlib (the ``plot`` extra).
"""
import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "..", "docs", "data", "decode_steps_h200.json")
MODELS = (("tinyllama", "TinyLlama's shape (1.1B)"), ("gpt2", "GPT-2 (124M)"))


def figure(data):
    """A matplotlib Figure: a panel a model, ms a token at each change, the floor, its
    half (the target's 50%) and HF compiled."""
    from matplotlib.figure import Figure
    fig = Figure(figsize=(11, 4.8), layout="constrained")
    axes = fig.subplots(1, len(MODELS), sharex=True)
    changes = [step["change"] for step in data["steps"]]
    for ax, (key, title) in zip(axes, MODELS):
        xs = [i for i, step in enumerate(data["steps"]) if key in step]
        ax.plot(xs, [data["steps"][i][key] for i in xs], "o-", label="dlprim fp16")
        floor = data["floors_ms"][key]
        ax.axhline(data["hf_compiled_ms"][key], color="tab:red", ls="--",
                   label="HF compiled, static cache")
        ax.axhline(2 * floor, color="tab:gray", ls=":", label="50% of the bandwidth floor")
        ax.axhline(floor, color="black", ls="-", lw=0.8, label="bandwidth floor")
        ax.set_ylim(0, None)
        ax.set_title(title)
        ax.set_ylabel("ms a token")
        ax.set_xticks(range(len(changes)))
        ax.set_xticklabels(changes, rotation=35, ha="right", fontsize=7)
        ax.grid(axis="y", alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle("Batch-1 decoding at 512 tokens of context, H200")
    return fig


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", default=DATA)
    p.add_argument("--out", default=os.path.join(HERE, "..", "docs", "decode_steps_h200.svg"))
    args = p.parse_args(argv)
    with open(args.data) as f:
        data = json.load(f)
    tmp = args.out + ".tmp"
    figure(data).savefig(tmp, format="svg", metadata={"Date": None})
    os.replace(tmp, args.out)  # (no half-written plot)
    print("wrote %s" % os.path.relpath(args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
