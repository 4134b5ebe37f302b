# %% [markdown]
# # A character-level GPT on Shakespeare
#
# A small GPT-style decoder (`dlprim.models.gpt`: token and position embeddings, causal
# multi-head attention on the fused attention kernel, LayerNorm, GELU MLPs) learns to
# write like the ~300 KB of Shakespeare that ships in `examples/charlm/data`. We train
# it with the same `Trainer` that `dlprim-train` runs, plot the curves and sample text
# before and after. Here a short run on part of the text (about a minute on a laptop
# CPU through PoCL); `dlprim-train examples/charlm/config.json` is the full one.

# %%
import os
import numpy as np

import dlprim as dp
import dlprim.plot
from dlprim.data import CharVocab, TextSource
from dlprim.sampling import sample_text
from dlprim.train import Trainer
from dlprim.train.config import validate_config

ctx = dp.Context()
print(ctx.name)

# %% [markdown]
# ## The data
# `TextSource` cuts the file into windows of `context` characters. The input is their
# ids, the target of each position the next character, so the model learns to predict
# every next character of the window at once. The ids come from a `CharVocab`: every
# character of the file, sorted.

# %%
TEXT = os.path.join("..", "charlm", "data", "shakespeare.txt")
CONTEXT = 32
train = TextSource(TEXT, CONTEXT, end=0.4)
print(len(train), "windows;", len(train.vocab), "characters:", repr(train.vocab.chars))
tokens, targets = train[0]
print(repr(train.vocab.decode(tokens)), "->", repr(train.vocab.decode(targets)))

# %% [markdown]
# ## The model, untrained
# The predict-mode twin of the model (batch 1, a Softmax on the logits) is what
# `sample_text` writes with; untrained, every character is about as likely as any other.

# %%
ARGS = {"vocab": len(train.vocab), "context": CONTEXT, "layers": 2, "heads": 4, "dim": 64}


def writer(weights=None):
    cfg = dp.models.gpt(batch=1, train=False, **ARGS)
    cfg.add("Softmax", name="prob", inputs=["logits"], outputs=["prob"])
    cfg.set_outputs(["prob"])
    net = dp.Net(ctx, cfg, mode=dp.PREDICT)
    if weights:
        net.load_parameters(weights)
    return net


print(sample_text(writer(), train.vocab, "ROMEO:", 120, seed=1))

# %% [markdown]
# ## Training
# A training config as a dict (docs/train.md describes every field): the model by name,
# the first 40% of the text to train on and a slice after it to validate on, AdamW
# with a one-cycle schedule. `validate_config` checks it all before any work, as
# `dlprim-train` does.

# %%
config = {
    "net": {"model": {"name": "gpt", "args": ARGS}},
    "data": {"train": {"type": "text", "path": TEXT, "context": CONTEXT, "end": 0.4},
             "val": {"type": "text", "path": TEXT, "context": CONTEXT, "begin": 0.9,
                     "end": 0.93}},
    "solver": {"type": "adamw", "lr": 0.003, "weight_decay": 0.01},
    "schedule": {"type": "onecycle", "max_lr": 0.003},
    "epochs": 3, "batch": 32, "seed": 1,
    "out": os.path.join("runs", "charlm"), "force": True, "plot": False,
}
cfg = validate_config(config, os.getcwd())
result = Trainer(cfg, ctx).run()
print("validation: loss %.3f, next-character accuracy %.3f" % (result.val_loss, result.val_acc))

# %% [markdown]
# The loss per character starts near ln(vocab), a uniform guess, and falls as the
# model learns spelling, then words.

# %%
print("uniform guess: %.2f" % np.log(len(train.vocab)))
dlprim.plot.training_curves(result.metrics)

# %% [markdown]
# ## Writing
# `temperature` below 1 makes the likely characters likelier (safer, more repetitive
# text); `top_k` draws only among the k likeliest. A minute of training on a CPU gives
# the shape of a play: names, line breaks, short words. The full example trains longer.

# %%
vocab = CharVocab.load(os.path.join(cfg["out"], "vocab.json"))
net = writer(os.path.join(cfg["out"], "model.dlp"))
print(sample_text(net, vocab, "ROMEO:", 300, temperature=0.8, seed=1))
