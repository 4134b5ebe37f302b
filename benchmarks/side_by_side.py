"""dlprim beside PyTorch CUDA on the same GPU, with the protocol of the reference anchors.

For alexnet, resnet18, resnet50, vgg16 and mobilenet_v2 (DLPrimitives' benchmark nets,
tests/data/nets), and on request the other ``dlprim.models`` builders (``--nets vit_b_16``)
and the language models ``gpt2`` (GPT-2 124M over 256 tokens a sequence; beside
transformers' GPT2LMHeadModel) and ``bert_base`` (BERT-base over 128 tokens; beside
BertForSequenceClassification), dropout off on both sides; at batch 16 and 64 (images or
sequences), inference and training:
- infer: host->device copy of the batch, forward, device->host copy of the output (GPT-2:
  the last position's logits, a prompt's pass before generation);
- train: copy in, zero grads, forward, loss, backward, Adam step (GPT-2: next-token loss
  over every position).
PyTorch runs FP32 with TF32 off (the same arithmetic as OpenCL FP32) and with its
defaults (TF32); with ``--precision fp16`` also with automatic mixed precision (autocast
float16 and a GradScaler, TF32 on), the mode dlprim's fp16 is compared with, and with
``--precision bf16`` autocast bfloat16 (no GradScaler); ``--channels-last`` runs those
AMP columns on channels_last tensors (PyTorch's fastest eager mixed precision).
``--precision`` takes a list (``fp32,tf32,fp16``): dlprim runs each row in every one, and
PyTorch's columns are taken once per row, so all ratios of a row come from one run.
Warm-up 5, mean of 20. Prints a table with the ratios (dlprim in a precision against
PyTorch in the same mode: fp32 against TF32 off, tf32 against TF32 on, fp16 and bf16
against AMP), and the DLPrimitives figures of the anchors for comparison.

    python benchmarks/side_by_side.py [--nets resnet18,vgg16] [--batches 16,64] [--modes infer,train]
    python benchmarks/side_by_side.py --precision fp32,tf32,fp16 --channels-last
    python benchmarks/side_by_side.py --nets bert_base,gpt2 --precision fp32,fp16 --torch-compile

``--torch-compile`` adds PyTorch's fastest modes (inductor with TF32, and with each AMP
asked for) and compares dlprim's fastest precision with PyTorch's fastest column.
"""
import argparse
import json
import math
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

NETS = ["alexnet", "resnet18", "resnet50", "vgg16", "mobilenet_v2"]
# DLPrimitives C++ OpenCL on an H200 (reference anchors): (net, batch, mode) -> ms
DLPRIMITIVES = {
    ("alexnet", 16, "infer"): 3.11, ("resnet18", 16, "infer"): 4.33, ("resnet50", 16, "infer"): 12.63,
    ("vgg16", 16, "infer"): 17.27, ("mobilenet_v2", 16, "infer"): 5.17,
    ("alexnet", 16, "train"): 9.51, ("resnet18", 16, "train"): 18.11, ("resnet50", 16, "train"): 55.12,
    ("vgg16", 16, "train"): 77.29, ("mobilenet_v2", 16, "train"): 27.97,
    ("alexnet", 64, "infer"): 8.86, ("resnet18", 64, "infer"): 13.80, ("resnet50", 64, "infer"): 35.56,
    ("vgg16", 64, "infer"): 60.55, ("mobilenet_v2", 64, "infer"): 17.61,
    ("alexnet", 64, "train"): 22.23, ("resnet18", 64, "train"): 58.85, ("resnet50", 64, "train"): 172.69,
    ("vgg16", 64, "train"): 281.74, ("mobilenet_v2", 64, "train"): 80.32,
}


def dlprim_ms(ctx, net, batch, mode, warmup, iters, precision="fp32"):
    """(ms per batch, peak bytes in use) of one row; earlier rows' nets are freed first."""
    import gc
    from dlprim.cli.benchmark import run_net
    gc.collect()
    ctx.memory.peak_bytes = ctx.memory.bytes_in_use
    path = os.path.join(os.path.dirname(HERE), "tests", "data", "nets", "%s-b16.js" % net)
    if os.path.exists(path):  # DLPrimitives' benchmark net
        with open(path) as f:
            graph = json.load(f)
        for inp in graph["inputs"]:
            inp["shape"] = [batch] + inp["shape"][1:]
    else:  # a net DLPrimitives has not: the dlprim.models builder (vit_b_16, gpt2, ...)
        from dlprim import models
        builder = models.BUILDERS.get(net) or models.SEQUENCE_BUILDERS[net]
        graph = builder(batch=batch, train=mode == "train").to_dict()
    res = run_net(ctx, graph, train=mode == "train", warmup=warmup, iters=iters,
                  precision=precision)
    return res["mean_ms"], ctx.memory.peak_bytes


# the language models' tokens a sequence
SEQUENCE_LENGTH = {"gpt2": 256, "bert_base": 128}


def torch_net(net, batch, channels_last=False):
    """PyTorch's twin of a row: (model, host inputs, loss(model, inputs), infer(model,
    inputs)), the inputs a tuple of CPU tensors that each step copies to the GPU."""
    import torch
    if net not in SEQUENCE_LENGTH:
        import torchvision
        fmt = torch.channels_last if channels_last else torch.contiguous_format
        model = getattr(torchvision.models, net)().to(memory_format=fmt)
        inputs = (torch.randn(batch, 3, 224, 224).contiguous(memory_format=fmt),
                  torch.randint(0, 1000, (batch,)))
        loss_fn = torch.nn.CrossEntropyLoss()
        return model, inputs, lambda m, x: loss_fn(m(x[0]), x[1]), lambda m, x: m(x[0])
    import transformers
    length = SEQUENCE_LENGTH[net]
    if net == "gpt2":
        config = transformers.GPT2Config(resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
        model = transformers.GPT2LMHeadModel(config)
        inputs = (torch.randint(0, config.vocab_size, (batch, length)),)
        # the last position's logits alone, as dlprim's gpt2(train=False)
        infer = lambda m, x: m.lm_head(m.transformer(input_ids=x[0]).last_hidden_state[:, -1])
        return model, inputs, lambda m, x: m(input_ids=x[0], labels=x[0]).loss, infer
    config = transformers.BertConfig(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    model = transformers.BertForSequenceClassification(config)
    inputs = (torch.randint(0, config.vocab_size, (batch, length)), torch.randint(0, 2, (batch,)))
    return (model, inputs, lambda m, x: m(input_ids=x[0], labels=x[1]).loss,
            lambda m, x: m(input_ids=x[0]).logits)


def torch_ms(net, batch, mode, tf32, warmup, iters, amp=None, channels_last=False,
             compiled=False):
    """(ms per batch, peak bytes) of PyTorch CUDA; ``amp`` ("fp16" or "bf16"): autocast
    float16 with a GradScaler, or bfloat16 without one (PyTorch's mixed precision);
    ``channels_last``: model and input in that memory format; ``compiled``: the model
    through ``torch.compile`` (inductor; its compilation falls in the warm-up)."""
    import contextlib
    import torch
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    torch.backends.cudnn.benchmark = True
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    model, host, loss_of, infer = torch_net(net, batch, channels_last)
    model = model.cuda()
    if compiled:
        import torch._dynamo
        torch._dynamo.reset()  # each row compiles its own model
        model = torch.compile(model)
    autocast = (lambda: torch.autocast("cuda", dtype={"fp16": torch.float16,
                                                      "bf16": torch.bfloat16}[amp])) \
        if amp else contextlib.nullcontext
    scaler = torch.amp.GradScaler("cuda", enabled=amp == "fp16")
    if mode == "train":
        model.train()
        opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    else:
        model.eval()

    def iteration():
        x = tuple(t.cuda(non_blocking=False) for t in host)
        if mode == "train":
            opt.zero_grad()
            with autocast():
                out = loss_of(model, x)
            scaler.scale(out).backward()
            scaler.step(opt)
            scaler.update()
        else:
            with torch.no_grad(), autocast():
                out = infer(model, x)
        return out.cpu()

    for _ in range(warmup):
        iteration()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        start = time.perf_counter()
        iteration()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return 1e3 * float(np.mean(times)), torch.cuda.max_memory_allocated()


# the PyTorch column each dlprim precision is compared with
SAME_MODE = {"fp32": "torch_fp32", "tf32": "torch_tf32", "fp16": "torch_amp_fp16",
             "bf16": "torch_amp_bf16"}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--nets", default=",".join(NETS))
    p.add_argument("--batches", default="16,64")
    p.add_argument("--modes", default="infer,train")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--no-torch", action="store_true")
    p.add_argument("--precision", default="fp32",
                   help="dlprim's products, one or a comma list of fp32, tf32, fp16, bf16; "
                        "each is compared with PyTorch in the same mode (fp32: TF32 off, "
                        "tf32: TF32 on, fp16: autocast float16, bf16: autocast bfloat16)")
    p.add_argument("--channels-last", action="store_true",
                   help="PyTorch's AMP columns on channels_last tensors")
    p.add_argument("--same-mode-only", action="store_true",
                   help="only PyTorch's modes that --precision names (fp32: TF32 off, tf32: "
                        "TF32 on, fp16/bf16: AMP), not all three for every row")
    p.add_argument("--torch-compile", action="store_true",
                   help="also PyTorch's fastest modes: torch.compile with TF32, and with "
                        "each AMP that --precision names (channels_last with "
                        "--channels-last); the report compares dlprim's fastest precision "
                        "with PyTorch's fastest column")
    p.add_argument("--json", help="also write the rows here")
    args = p.parse_args()
    precisions = args.precision.split(",")
    unknown = [x for x in precisions if x not in SAME_MODE]
    if unknown or len(set(precisions)) != len(precisions):
        p.error("--precision: a comma list of distinct fp32, tf32, fp16, bf16, got %r"
                % args.precision)
    import dlprim as dp
    ctx = dp.Context(os.environ.get("DLPRIM_DEVICE", "gpu"))
    print("dlprim on %s (driver %s)" % (ctx.name, ctx.facts.driver_version), flush=True)
    rows = []
    for mode in args.modes.split(","):
        for batch in (int(b) for b in args.batches.split(",")):
            for net in args.nets.split(","):
                row = {"net": net, "batch": batch, "mode": mode}
                for prec in precisions:
                    try:
                        row["dlprim_" + prec], row["dlprim_peak_bytes_" + prec] = dlprim_ms(
                            ctx, net, batch, mode, args.warmup, args.iters, prec)
                    except Exception as err:  # a failing net is reported in the table
                        row["error_" + prec] = "%s: %s" % (type(err).__name__, str(err)[:120])
                if not args.no_torch:
                    if "fp32" in precisions or not args.same_mode_only:
                        row["torch_fp32"], row["torch_peak_bytes"] = torch_ms(
                            net, batch, mode, False, args.warmup, args.iters)
                    if "tf32" in precisions or not args.same_mode_only:
                        row["torch_tf32"], _ = torch_ms(net, batch, mode, True, args.warmup,
                                                        args.iters)
                    for amp in ("fp16", "bf16"):
                        if amp in precisions:
                            row["torch_amp_" + amp], _ = torch_ms(
                                net, batch, mode, True, args.warmup, args.iters, amp=amp,
                                channels_last=args.channels_last)
                if args.torch_compile and not args.no_torch:
                    row["torch_compiled_tf32"], _ = torch_ms(
                        net, batch, mode, True, args.warmup, args.iters, compiled=True)
                    for amp in ("fp16", "bf16"):
                        if amp in precisions:
                            row["torch_compiled_amp_" + amp], _ = torch_ms(
                                net, batch, mode, True, args.warmup, args.iters, amp=amp,
                                channels_last=args.channels_last, compiled=True)
                row["dlprimitives"] = DLPRIMITIVES.get((net, batch, mode))
                rows.append(row)
                print(json.dumps(row), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    report(rows, precisions)


def report(rows, precisions):
    """The markdown table of the rows, peak memory and the geometric means."""
    fmt = lambda v: "%.2f" % v if v else ""
    amps = [a for a in ("fp16", "bf16") if a in precisions]
    print()
    print("| net | batch | mode | %s | PyTorch fp32 | PyTorch tf32 | %sDLPrimitives | %s |" % (
        " | ".join("dlprim %s" % x for x in precisions),
        "".join("PyTorch AMP %s | " % a for a in amps),
        " | ".join("%s vs PyTorch" % x for x in precisions)))
    print("|---|---|---|" + "---:|" * (2 * len(precisions) + 3 + len(amps)))
    ratios = {x: [] for x in precisions}
    ratios_dlp = []
    for r in rows:
        cells, vs = [], []
        for x in precisions:
            ours, same = r.get("dlprim_" + x), r.get(SAME_MODE[x])
            cells.append(fmt(ours) if ours else ("failed" if "error_" + x in r else ""))
            vs.append("%.2fx" % (same / ours) if ours and same else "")
            if ours and same:
                ratios[x].append(same / ours)
        best = min((r[k] for k in ("dlprim_" + x for x in precisions) if r.get(k)), default=None)
        if best and r.get("dlprimitives"):
            ratios_dlp.append(r["dlprimitives"] / best)
        print("| %s | %d | %s | %s | %s | %s | %s%s | %s |" % (
            r["net"], r["batch"], r["mode"], " | ".join(cells), fmt(r.get("torch_fp32")),
            fmt(r.get("torch_tf32")), "".join(fmt(r.get("torch_amp_" + a)) + " | " for a in amps),
            fmt(r.get("dlprimitives")), " | ".join(vs)))
    print("\npeak device memory in use (MiB): dlprim %s / PyTorch fp32" % "/".join(precisions))
    for r in rows:
        peaks = [r.get("dlprim_peak_bytes_" + x) for x in precisions]
        if all(peaks) and r.get("torch_peak_bytes"):
            print("  %s b%d %s: %s / %.0f" % (r["net"], r["batch"], r["mode"],
                                            " / ".join("%.0f" % (b / 2**20) for b in peaks),
                                            r["torch_peak_bytes"] / 2**20))
    gm = lambda xs: math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")
    fastest = []  # dlprim's fastest precision against PyTorch's fastest mode, per row
    if any(k.startswith("torch_compiled") for r in rows for k in r):
        print("\ndlprim's fastest precision against PyTorch's fastest mode:")
    for r in rows:
        ours = [r[k] for k in ("dlprim_" + x for x in precisions) if r.get(k)]
        theirs = [(v, k[len("torch_"):]) for k, v in r.items()
                  if k.startswith("torch_") and "peak" not in k and v]
        if ours and any(k.startswith("torch_compiled") for k in r):
            best, mode = min(theirs)
            fastest.append(best / min(ours))
            print("  %s b%d %s: dlprim's fastest %.2f ms, PyTorch's fastest %.2f ms (%s): %.2fx"
                  % (r["net"], r["batch"], r["mode"], min(ours), best, mode, fastest[-1]))
    if fastest:
        print("geometric mean of speed, dlprim's fastest against PyTorch's fastest mode: "
              "%.2fx (%d rows)" % (gm(fastest), len(fastest)))
    for x in precisions:
        print("geometric mean of speed, dlprim %s against PyTorch %s: %.2fx (%d rows)"
              % (x, SAME_MODE[x][len("torch_"):], gm(ratios[x]), len(ratios[x])))
    print("geometric mean of speed, dlprim's fastest precision against DLPrimitives: %.2fx "
          "(%d rows)" % (gm(ratios_dlp), len(ratios_dlp)))


if __name__ == "__main__":
    main()
