"""Full-size torchvision models through ONNX: exported by PyTorch (random weights, eval
mode; a Linear initialised to zeros gets random weights) at the given opsets, imported by dlprim on its device and run beside onnxruntime
(CPU) on the same file; prints the largest difference relative to the largest output,
whether the attention was fused, and the seconds each side took.

    python benchmarks/onnx_torchvision.py --models vit_b_16 convnext_tiny --opsets 17 18

Needs torch, torchvision, onnx and onnxruntime.
"""
import argparse
import io
import time
import warnings

import numpy as np


def export(model, x, opset):
    import torch
    f = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, x, f, opset_version=opset, dynamo=False,
                          input_names=["data"], output_names=["logits"])
    return f.getvalue()


def compare(ctx, name, opset, batch, seed=0):
    """One row: model, opset, max |dlprim - onnxruntime| / max |onnxruntime|, ..."""
    import onnxruntime as ort
    import torch
    import torchvision

    import dlprim.onnx as dox
    torch.manual_seed(seed)
    model = getattr(torchvision.models, name)(weights=None).eval()
    for m in model.modules():  # vit's head starts at zeros: the logits would all be 0
        if isinstance(m, torch.nn.Linear) and not m.weight.detach().any():
            torch.nn.init.normal_(m.weight, std=0.02)
    x = np.random.default_rng(seed).standard_normal((batch, 3, 224, 224), dtype=np.float32)
    data = export(model, torch.from_numpy(x), opset)
    cfg, _ = dox.to_netconfig(data)
    fused = sum(op["type"] == "ScaledDotProductAttention" for op in cfg.operators)
    start = time.perf_counter()
    ref = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(
        None, {"data": x})[0]
    ort_s = time.perf_counter() - start
    start = time.perf_counter()
    y = dox.load(data, ctx)(data=x)["logits"]
    dlprim_s = time.perf_counter() - start
    rel = float(np.abs(y - ref).max() / np.abs(ref).max())
    return {"model": name, "opset": opset, "batch": batch, "rel_err": rel,
            "fused_attention": fused, "operators": len(cfg.operators),
            "dlprim_s": dlprim_s, "onnxruntime_s": ort_s}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--models", nargs="*", default=["vit_b_16", "convnext_tiny"])
    p.add_argument("--opsets", type=int, nargs="*", default=[17, 18])
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--device", default=None, help='dlprim device: "gpu", "cpu", "P:D"')
    args = p.parse_args()
    import dlprim as dp
    ctx = dp.Context(args.device)
    print("dlprim on", ctx.name)
    rows = [compare(ctx, m, o, args.batch) for m in args.models for o in args.opsets]
    print("%-14s %5s %5s %10s %6s %9s %8s" % ("model", "opset", "batch", "rel err", "fused",
                                             "dlprim s", "ort s"))
    for r in rows:
        print("%-14s %5d %5d %10.2e %6d %9.1f %8.1f" % (
            r["model"], r["opset"], r["batch"], r["rel_err"], r["fused_attention"],
            r["dlprim_s"], r["onnxruntime_s"]))


if __name__ == "__main__":
    main()
