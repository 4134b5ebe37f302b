"""GEMM throughput: dlprim's OpenCL kernel beside torch.matmul (FP32, TF32 off; with
``--precision tf32`` dlprim's tensor-core kernel beside torch.matmul with TF32 on; with
``--precision fp16`` its FP16 tensor-core kernel on half operands and C beside
torch.matmul on half tensors).

    dlprim-benchmark gemm [--device gpu] [--repeat 20] [--sweep] [--transformer | --gpt2 |
                          --classifier] [--each-tile] [--ptx DIR]

Shapes: square 1024..8192 and every distinct convolution of ResNet-50 at batch 64
(224x224 input) as conv-by-GEMM: M = out channels, N = batch*Ho*Wo, K = in_ch*kh*kw;
then its final fully connected layer's shapes (few tiles, long K: split-K).
``--transformer``: a ViT-B encoder layer's GEMMs instead (forward, data and weight
gradients of its four Linears at batch 64, with their transposes); ``--classifier``:
AlexNet's three fully connected layers alike at batch 16 and 64; ``--gpt2``: GPT-2
(124M) training at 8x256, its four Linears and the tied LM head.
``--each-tile`` also times every tuner candidate tile on every shape and names the best.
Times are medians of OpenCL profiling events (CUDA events for torch) after a warm-up.
``--sweep`` also times every tuner candidate tile at 4096³.
"""
import argparse
import json
import os
import statistics

import numpy as np

import dlprim as dp
from dlprim.cli import tune
from dlprim.core import tuning
from dlprim.core.gemm import Gemm


def resnet50_convs(batch=64, size=224):
    """Distinct (M, N, K, name) of ResNet-50 (v1.5: stride on the 3x3) convolutions."""
    shapes = {}

    def conv(cin, cout, k, stride, hw, name):
        pad = k // 2
        out = (hw + 2 * pad - k) // stride + 1
        key = (cout, batch * out * out, cin * k * k)
        shapes.setdefault(key, name)
        return out

    hw = conv(3, 64, 7, 2, size, "conv1 7x7/2")
    hw = (hw + 2 - 3) // 2 + 1  # max pool 3x3/2
    cin = 64
    for stage, (width, blocks, stride) in enumerate(((64, 3, 1), (128, 4, 2), (256, 6, 2),
                                                      (512, 3, 2)), start=1):
        for b in range(blocks):
            s = stride if b == 0 else 1
            tag = "layer%d.%d" % (stage, min(b, 1))
            conv(cin, width, 1, 1, hw, tag + " 1x1 reduce")
            out = conv(width, width, 3, s, hw, tag + " 3x3/%d" % s)
            conv(width, width * 4, 1, 1, out, tag + " 1x1 expand")
            if b == 0:
                conv(cin, width * 4, 1, s, hw, tag + " downsample/%d" % s)
            cin, hw = width * 4, out
    return [(m, n, k, name) for (m, n, k), name in shapes.items()]


def linear_gemms(rows, layers):
    """(M, N, K, trans_a, trans_b, name) of Linears (``layers``: (name, inputs, outputs))
    over ``rows`` rows: each one's forward (X Wᵀ), data gradient (G W) and weight
    gradient (Gᵀ X), as InnerProduct runs them."""
    out = []
    for name, n_in, n_out in layers:
        out += [(rows, n_out, n_in, False, True, name + " forward"),
                (rows, n_in, n_out, False, False, name + " data grad"),
                (n_out, n_in, rows, True, False, name + " weight grad")]
    return out


def transformer_gemms(batch=64, tokens=197, width=768, mlp=3072):
    """A ViT-B encoder layer's GEMMs (vit_b_16 at ``batch``), as ``linear_gemms``."""
    return linear_gemms(batch * tokens, (("qkv", width, 3 * width), ("out_proj", width, width),
                                         ("fc1", width, mlp), ("fc2", mlp, width)))


def gpt2_gemms(batch=8, seq=256, width=768, vocab=50257):
    """GPT-2 (124M) training's GEMMs at ``batch`` x ``seq`` tokens, as ``linear_gemms``:
    the four Linears of a block and the LM head (tied to the token embedding)."""
    return linear_gemms(batch * seq, (("qkv", width, 3 * width), ("attn proj", width, width),
                                      ("fc", width, 4 * width), ("mlp proj", 4 * width, width),
                                      ("lm head", width, vocab)))


def classifier_gemms(batches=(16, 64)):
    """AlexNet's classifier (9216 -> 4096 -> 4096 -> 1000) at each batch, as
    ``linear_gemms``: few rows, long K, weights far larger than the activations."""
    return [(m, n, k, ta, tb, "b%d %s" % (b, name)) for b in batches
            for m, n, k, ta, tb, name in linear_gemms(b, (("fc6", 9216, 4096), ("fc7", 4096, 4096),
                                                          ("fc8", 4096, 1000)))]


def time_dlprim(ctx, op, A, B, C, repeat):
    launches = op.launches(A, B, C)
    for launch in launches:  # warm-up
        launch(ctx.queue)
    ctx.finish()
    # split-K is two launches: time from the first one's start to the last one's end
    runs = [[launch(ctx.queue) for launch in launches] for _ in range(repeat)]
    ctx.finish()
    return statistics.median((r[-1].profile.end - r[0].profile.start) * 1e-9 for r in runs)


def time_torch(torch, a, b, repeat):
    torch.matmul(a, b)
    torch.cuda.synchronize()
    pairs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
             for _ in range(repeat)]
    for start, end in pairs:
        start.record()
        c = torch.matmul(a, b)
        end.record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) * 1e-3 for s, e in pairs), c


def run_shape(ctx, torch, M, N, K, repeat, tile=None, split_k=None, trans_a=False,
              trans_b=False, precision="fp32"):
    rng = np.random.default_rng(0)
    dt = np.float16 if precision == "fp16" else np.float32  # fp16: half operands and C
    a = rng.standard_normal((K, M) if trans_a else (M, K), np.float32).astype(dt)  # as stored
    b = rng.standard_normal((N, K) if trans_b else (K, N), np.float32).astype(dt)
    A, B = dp.Tensor.from_numpy(ctx, a), dp.Tensor.from_numpy(ctx, b)
    C = dp.Tensor.from_numpy(ctx, np.full((M, N), np.nan, dt))  # every element written
    op = Gemm(ctx, M, N, K, trans_a, trans_b, tile=tile, split_k=split_k, precision=precision,
              dtypes=(dt, dt, dt))
    t_ours = time_dlprim(ctx, op, A, B, C, repeat)
    row = {"M": M, "N": N, "K": K, "dlprim_s": t_ours, "splits": op.splits,
           "tile": op.wg_tile if op.wgmma else op.tile}  # the warpgroup kernel plans its own
    if torch is not None:
        ta, tb = torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()
        ta, tb = ta.t() if trans_a else ta, tb.t() if trans_b else tb
        row["torch_s"], tc = time_torch(torch, ta, tb, repeat)
        ours = torch.from_numpy(C.numpy()).cuda()
        row["rel_err"] = float(torch.linalg.norm((ours - tc).float()) /
                               torch.linalg.norm(tc.float()))
        del ta, tb, tc, ours
    return row


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default=None)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--sweep", action="store_true", help="time every tuner candidate at 4096³")
    parser.add_argument("--tiles", help="JSON list of extra tiles for --sweep")
    parser.add_argument("--split-sweep", action="store_true",
                        help="time split-K 1..16 on shapes with few tiles or long K")
    parser.add_argument("--transformer", action="store_true",
                        help="time a ViT-B encoder layer's GEMMs (vit_b_16, batch 64) instead")
    parser.add_argument("--gpt2", action="store_true",
                        help="time GPT-2 (124M) training's GEMMs at 8x256 tokens instead")
    parser.add_argument("--each-tile", action="store_true",
                        help="also time every tuner candidate tile on every shape")
    parser.add_argument("--classifier", action="store_true",
                        help="time AlexNet's fully connected GEMMs (batch 16 and 64) instead")
    parser.add_argument("--precision", default="fp32", choices=["fp32", "tf32", "fp16"],
                        help="tf32: dlprim on tensor cores, torch.matmul with TF32 on; fp16: "
                             "half operands and C on FP16 tensor cores, torch.matmul in half")
    parser.add_argument("--json", help="write all rows here")
    parser.add_argument("--ptx", help="write the built gemm programs' binaries (PTX on NVIDIA) here")
    args = parser.parse_args(argv)
    ctx = dp.Context(args.device, profiling=True)
    try:
        import torch
        torch.backends.cuda.matmul.allow_tf32 = args.precision == "tf32"
        torch.backends.cudnn.allow_tf32 = args.precision == "tf32"
        if not torch.cuda.is_available():
            torch = None
    except ImportError:
        torch = None
    print("device: %s, driver %s" % (ctx.name, ctx.facts.driver_version))
    rows = []
    if args.sweep:
        extra = json.loads(args.tiles) if args.tiles else []
        for tile in tuning.candidates(ctx.facts) + extra:
            row = run_shape(ctx, None, 4096, 4096, 4096, max(5, args.repeat // 2), tile)
            print("sweep 4096³ %-40s %7.2f TFLOP/s" % (tune._describe(row["tile"]),
                                                      2 * 4096 ** 3 / row["dlprim_s"] / 1e12))
            rows.append(dict(row, sweep=True))
    if args.split_sweep:
        for M, N, K in ((1024, 1024, 1024), (512, 3136, 4608), (512, 3136, 2048),
                        (256, 12544, 2304), (256, 12544, 1024), (2048, 3136, 512),
                        (64, 1000, 2048), (32, 8192, 2048), (32, 32, 4096), (1024, 1024, 4096)):
            line = []
            for split in (1, 2, 3, 4, 8, 16):
                row = run_shape(ctx, None, M, N, K, args.repeat, split_k=split)
                line.append("%d:%.1f" % (row["splits"], 2 * M * N * K / row["dlprim_s"] / 1e12))
            auto = run_shape(ctx, None, M, N, K, args.repeat)
            print("split %5dx%6dx%5d auto=%d  %s" % (M, N, K, auto["splits"], "  ".join(line)))
    shapes = [(s, s, s, False, False, "square %d" % s) for s in (1024, 2048, 4096, 8192)] \
        + [(m, n, k, False, False, name) for m, n, k, name in resnet50_convs()] \
        + [(64, 1000, 2048, False, False, "fc (X·Wᵀ as M=batch)"),
           (2048, 64, 1000, False, False, "fc backward-data-like")]
    if args.transformer:
        shapes = transformer_gemms()
    if args.gpt2:
        shapes = gpt2_gemms()
    if args.classifier:
        shapes = classifier_gemms()
    table = []
    for M, N, K, ta, tb, name in shapes:
        row = dict(run_shape(ctx, torch, M, N, K, args.repeat, trans_a=ta, trans_b=tb,
                             precision=args.precision), name=name)
        rows.append(row)
        flop = 2.0 * M * N * K
        ours = flop / row["dlprim_s"] / 1e12
        theirs = flop / row["torch_s"] / 1e12 if "torch_s" in row else float("nan")
        tile = "%dx%d%s" % (row["tile"]["TILE_M"], row["tile"]["TILE_N"],
                            ", split %d" % row["splits"] if row["splits"] > 1 else "")
        table.append("| %-26s | %4d | %6d | %4d | %-16s | %6.2f | %6.2f | %5.2f | %.1e |"
                     % (name, M, N, K, tile, ours, theirs, ours / theirs,
                        row.get("rel_err", np.nan)))
        if args.each_tile and args.precision == "fp32":
            timed = []
            for cand in tuning.candidates(ctx.facts):
                r = run_shape(ctx, None, M, N, K, args.repeat, cand, trans_a=ta, trans_b=tb)
                timed.append((flop / r["dlprim_s"] / 1e12, tune._describe(r["tile"])))
                rows.append(dict(r, name=name, each_tile=True))
            best = max(timed)
            print("%-26s auto %6.2f, best %6.2f TFLOP/s: %s; %s" % (
                name, ours, best[0], best[1],
                ", ".join("%.1f" % t for t, _ in timed)), flush=True)
    if args.ptx:
        os.makedirs(args.ptx, exist_ok=True)
        for i, (key, prg) in enumerate(ctx.programs.items()):
            with open(os.path.join(args.ptx, "gemm%d.ptx" % i), "wb") as f:
                f.write(prg.binaries[0])
            with open(os.path.join(args.ptx, "gemm%d.key" % i), "w") as f:
                f.write(repr(key))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    print("| shape                      |    M |      N |    K | tile             "
          "| dlprim TFLOP/s | torch TFLOP/s | ratio | rel err |")
    print("|---|---:|---:|---:|---|---:|---:|---:|---:|")
    print("\n".join(table))


if __name__ == "__main__":
    main()
