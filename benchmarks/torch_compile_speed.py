"""torchvision and HuggingFace networks compiled for dlprim beside the alternatives, ms per
batch: the same loop (batch from the host, forward, and for training the loss, backward
and an optimizer step, ``--fused`` for the fused one; the output back to the host) as
benchmarks/side_by_side.py.

    python benchmarks/torch_compile_speed.py --device ocl     # dlprim's kinds on ocl
    python benchmarks/torch_compile_speed.py --device cuda    # PyTorch on CUDA, TF32 off
    python benchmarks/torch_compile_speed.py --device ocl --nets gpt2,bert --modes train

kinds: ``net`` dlprim's own Net (dlprim.models, as side_by_side.py; torchvision nets
only), ``ocl_compiled`` ``dlprim.torch.compile`` of the model on ocl, ``ocl_dynamo``
``torch.compile(model_on_ocl, backend="dlprim")``, ``ocl_eager`` the model on ocl,
``cuda_eager`` and ``cuda_inductor`` (torch.compile) on CUDA. ocl and CUDA kinds need
separate processes (PyTorch's autograd cannot mix the two devices in one process).

torchvision nets (resnet50, mobilenet_v2, vit_b_16, ...): images of 224x224, batch 64,
cross-entropy and Adam. HuggingFace nets, random weights from the default configs
(nothing is downloaded), called with ``input_ids`` and ``labels`` (the model's own loss)
and trained with AdamW, the loss read back each step: ``gpt2`` (GPT2LMHeadModel, 124M) at 8x256 and ``bert``
(BertForMaskedLM, BERT-base) at 16x128; ``--batch`` and ``--seq`` override the sizes,
``--small`` takes two-layer configs (a quick check of the script).
"""
import argparse
import json
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def timed_ms(iteration, warmup, iters, sync):
    """Mean ms of ``iteration`` (closed by ``sync``) over ``iters`` after ``warmup``."""
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

    return timed_ms(iteration, warmup, iters, sync)


HF = {"gpt2": (8, 256), "bert": (16, 128)}  # net -> (batch, sequence length)


def hf_model(net, small):
    """A HuggingFace model of ``net``'s default config (two layers with ``small``),
    random weights, eager attention (the same computation on every device)."""
    import transformers
    if net == "gpt2":
        config = transformers.GPT2Config(use_cache=False, attn_implementation="eager",
                                         **(dict(n_layer=2) if small else {}))
        return transformers.GPT2LMHeadModel(config), config.vocab_size
    config = transformers.BertConfig(attn_implementation="eager",
                                     **(dict(num_hidden_layers=2) if small else {}))
    return transformers.BertForMaskedLM(config), config.vocab_size


def hf_loop_ms(model, device, batch, seq, vocab, mode, warmup, iters, sync, fused=False):
    """The loop of ``loop_ms`` for a model called with ``input_ids`` and ``labels``."""
    import torch
    ids_host = torch.randint(0, vocab, (batch, seq))
    opt = (torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True if fused else None)
           if mode == "train" else None)

    def iteration():
        ids = ids_host.to(device)
        if mode == "train":
            opt.zero_grad()
            out = model(input_ids=ids, labels=ids)
            out.loss.backward()
            opt.step()
        else:
            with torch.no_grad():
                out = model(input_ids=ids, labels=ids)
        # the loss back to the host: the logits of a language model (8x256x50257 floats
        # for GPT-2) would time the copy, not the model
        return out.loss.detach().cpu()

    return timed_ms(iteration, warmup, iters, sync)


def _compiled(kind, model):
    """``model`` as ``kind`` runs it (on its device already)."""
    import torch
    if kind == "cuda_inductor":
        return torch.compile(model)
    if kind == "ocl_dynamo":
        return torch.compile(model, backend="dlprim")
    if kind == "ocl_compiled":
        import dlprim.torch
        return dlprim.torch.compile(model)
    return model


def _device_of(kind):
    import torch
    if kind.startswith("cuda"):
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cudnn.benchmark = True
        return "cuda", torch.cuda.synchronize
    import dlprim.torch
    return "ocl", dlprim.torch.synchronize


def _fallbacks():
    """Print the graphs that stayed eager (a compiled kind should have none)."""
    import sys
    if "dlprim.torch" not in sys.modules:
        return
    import dlprim.torch
    for report in dlprim.torch.compiler.reports():
        if report.where != "dlprim":
            print("  %s: %s" % (report.where, report.reason), flush=True)


def hf_row(kind, net, batch, seq, mode, warmup, iters, fused=False, small=False):
    import torch
    if kind == "net":
        return None  # dlprim.models has no HuggingFace nets
    torch.manual_seed(0)
    model, vocab = hf_model(net, small)
    model.train(mode == "train")
    device, sync = _device_of(kind)
    model = _compiled(kind, model.to(device))
    ms = hf_loop_ms(model, device, batch, seq, vocab, mode, warmup, iters, sync, fused)
    _fallbacks()
    return ms


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
    device, sync = _device_of(kind)
    model = _compiled(kind, model.to(device))
    ms = loop_ms(model, device, batch, mode, warmup, iters, sync, fused)
    _fallbacks()
    return ms


KINDS = {"ocl": "net,ocl_compiled,ocl_dynamo,ocl_eager", "cuda": "cuda_eager,cuda_inductor"}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--nets", default="resnet50,mobilenet_v2,vit_b_16",
                   help="torchvision names, or gpt2 and bert (HuggingFace)")
    p.add_argument("--device", choices=sorted(KINDS), default="ocl",
                   help="the kinds to run when --kinds is not given: %s" % KINDS)
    p.add_argument("--kinds", help="comma-separated kinds (the docstring lists them)")
    p.add_argument("--batch", type=int, help="64 for torchvision; gpt2 8, bert 16")
    p.add_argument("--seq", type=int, help="sequence length: gpt2 256, bert 128")
    p.add_argument("--small", action="store_true", help="two-layer HuggingFace configs")
    p.add_argument("--modes", default="infer,train")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--fused", action="store_true",
                   help="Adam/AdamW(fused=True) (one multi-tensor update) instead of the default")
    p.add_argument("--json", help="append the rows to this file (one JSON object per line)")
    args = p.parse_args()
    kinds = (args.kinds or KINDS[args.device]).split(",")
    for net in args.nets.split(","):
        for mode in args.modes.split(","):
            for kind in kinds:
                if net in HF:
                    batch, seq = args.batch or HF[net][0], args.seq or HF[net][1]
                    ms = hf_row(kind, net, batch, seq, mode, args.warmup, args.iters,
                                args.fused, args.small)
                    if ms is None:
                        continue
                    size = "%dx%d" % (batch, seq)
                else:
                    batch, seq = args.batch or 64, None
                    ms = row(kind, net, batch, mode, args.warmup, args.iters, args.fused)
                    size = "%d" % batch
                r = {"net": net, "batch": batch, "seq": seq, "mode": mode, "kind": kind,
                     "ms": ms, "fused": args.fused, "small": args.small}
                print("%-14s %7s %-6s %-14s %9.2f ms" % (net, size, mode, kind, ms), flush=True)
                if args.json:
                    with open(args.json, "a") as f:
                        f.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    main()
