"""A small ViT, a GPT and an LSTM as PyTorch models: PyTorch CPU eager beside the same
model moved to ``ocl`` on the CPU driver and converted by ``dlprim.torch.compile`` (what a
user who brings a model gets), ms per step on the same cores. The section ``models`` of
cpu_side_by_side.py; alone:

    python benchmarks/cpu_models.py [--models vit gpt lstm] [--threads 2] [--iters 5]

Inference: the forward pass under ``no_grad`` in eval mode. Training: forward, the loss,
backward and an AdamW step (the default, foreach, optimizer), the loss read back each
step. The ViT and the GPT are HuggingFace ``transformers`` models (random weights, small
configs, dropout off); the LSTM is ``nn.LSTM`` with a linear head. Each step ends with
its results on the host, so both sides' times are complete.
"""
import argparse
import math
import time

import numpy as np
import torch

# (name, batch, what it is)
MODELS = {"vit": (8, "ViT 4x192, 3 heads, 64x64 images in 8x8 patches, 100 classes"),
          "gpt": (4, "GPT-2 4x256, 4 heads, 128 tokens of a 512-token vocabulary"),
          "lstm": (8, "LSTM 2x256 over 64 steps of 64 features, a 10-class head")}


def build(name):
    """(model, inputs {name: tensor}, loss(model, inputs) -> scalar tensor) on the CPU."""
    g = torch.Generator().manual_seed(0)
    batch = MODELS[name][0]
    if name == "vit":
        import transformers
        cfg = transformers.ViTConfig(image_size=64, patch_size=8, num_channels=3, hidden_size=192,
                                     num_hidden_layers=4, num_attention_heads=3,
                                     intermediate_size=768, num_labels=100,
                                     hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
        model = transformers.ViTForImageClassification(cfg)
        inputs = {"pixel_values": torch.randn(batch, 3, 64, 64, generator=g),
                  "labels": torch.randint(0, 100, (batch,), generator=g)}
        return model, inputs, lambda m, x: m(**x).loss
    if name == "gpt":
        import transformers
        cfg = transformers.GPT2Config(n_layer=4, n_embd=256, n_head=4, vocab_size=512,
                                      n_positions=128, resid_pdrop=0.0, embd_pdrop=0.0,
                                      attn_pdrop=0.0, use_cache=False)
        model = transformers.GPT2LMHeadModel(cfg)
        ids = torch.randint(0, 512, (batch, 128), generator=g)
        return model, {"input_ids": ids, "labels": ids}, lambda m, x: m(**x).loss

    class Lstm(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lstm = torch.nn.LSTM(64, 256, num_layers=2, batch_first=True)
            self.head = torch.nn.Linear(256, 10)

        def forward(self, x, labels):
            h, _ = self.lstm(x)
            return torch.nn.functional.cross_entropy(self.head(h[:, -1]), labels)
    inputs = {"x": torch.randn(batch, 64, 64, generator=g),
              "labels": torch.randint(0, 10, (batch,), generator=g)}
    return Lstm(), inputs, lambda m, x: m(**x)


def step_ms(model, inputs, loss_of, train, warmup, iters, compiled=None):
    """Mean ms of a step of ``model`` (``compiled``: what runs it) over ``inputs``."""
    run = compiled or model
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4) if train else None
    model.train(train)

    def step():
        if train:
            opt.zero_grad(set_to_none=True)
            loss = loss_of(run, inputs)
            loss.backward()
            opt.step()
            return float(loss)
        with torch.no_grad():
            return float(loss_of(run, inputs))
    for _ in range(warmup):
        step()
    start = time.perf_counter()
    for _ in range(iters):
        step()
    return 1e3 * (time.perf_counter() - start) / iters


def rows(names, warmup, iters):
    """The table, a row printed as soon as it is measured."""
    import dlprim.torch as dt
    print("\n| model | batch | mode | dlprim.torch.compile, CPU driver | PyTorch CPU eager | speed |")
    print("|---|---|---|---|---|---|")
    speeds = []
    for name in names:
        for mode in ("infer", "train"):
            train = mode == "train"
            model, inputs, loss_of = build(name)
            ref = step_ms(model, inputs, loss_of, train, warmup, iters)
            model, inputs, loss_of = build(name)  # the same weights again (seeded)
            model = model.to("ocl")
            on_ocl = {k: v.to("ocl") for k, v in inputs.items()}
            model.train(train)
            compiled = dt.compile(model)
            ms = step_ms(model, on_ocl, loss_of, train, warmup, iters, compiled)
            speeds.append(ref / ms)
            print("| %s | %d | %s | %.1f ms | %.1f ms | %.2fx |" % (
                name, MODELS[name][0], mode, ms, ref, ref / ms), flush=True)
    if speeds:
        print("geometric mean of speed (torch ms / dlprim ms, above 1: dlprim faster): %.2fx"
              % math.exp(np.mean(np.log(speeds))))
    for name in names:
        print("- %s: %s" % (name, MODELS[name][1]))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", nargs="+", choices=sorted(MODELS), default=list(MODELS))
    p.add_argument("--threads", type=int, default=2, help="torch.set_num_threads")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--iters", type=int, default=5)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    rows(args.models, args.warmup, args.iters)


if __name__ == "__main__":
    main()
