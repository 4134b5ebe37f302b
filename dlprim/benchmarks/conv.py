"""Convolution throughput per layer: dlprim's algorithms beside cuDNN (FP32, TF32 off;
with ``--precision`` tf32, fp16 or bf16: dlprim's products in that precision, activations
stored in 16 bits for fp16 and bf16, beside cuDNN with TF32 on or on half / bfloat16
tensors).

    dlprim-benchmark conv [--device gpu] [--batches 16 64] [--repeat 5] [--out DIR]
                          [--precision fp16]

Shapes: the distinct convolutions of ResNet-50 (v1.5), VGG-16, MobileNet-V2 and AlexNet
on 224x224 inputs. For each shape and batch: GFLOP/s of forward, backward-data and
backward-filter for every algorithm that applies (gemm, winograd, depthwise), and of
``torch.nn.functional.conv2d`` / ``aten.convolution_backward`` in the same process.
Times are medians over ``--repeat`` runs after a warm-up: OpenCL profiling events (first
start to last end of a pass's launches), CUDA events for torch. At the first batch every
result is also compared with torch's (relative L2 error).
"""
import argparse
import json
import os
import statistics
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

import dlprim as dp
from dlprim.core.conv import (ConvBackwardData, ConvBackwardFilter, ConvForward,
                              ConvGeometry, algorithm_applies)

DIRECTIONS = ("forward", "backward_data", "backward_filter")
OPS = {"forward": ConvForward, "backward_data": ConvBackwardData,
       "backward_filter": ConvBackwardFilter}


def net_shapes():
    """(net, cin, cout, k, stride, hw, groups) of every convolution, in net order."""
    out = []
    # ResNet-50 v1.5
    out.append(("resnet50", 3, 64, 7, 2, 224, 1))
    hw, cin = 56, 64
    for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
        for b in range(blocks):
            s = stride if b == 0 else 1
            out.append(("resnet50", cin, width, 1, 1, hw, 1))
            out.append(("resnet50", width, width, 3, s, hw, 1))
            o = hw // s
            out.append(("resnet50", width, width * 4, 1, 1, o, 1))
            if b == 0:
                out.append(("resnet50", cin, width * 4, 1, s, hw, 1))
            cin, hw = width * 4, o
    # VGG-16
    hw, cin = 224, 3
    for width, n in ((64, 2), (128, 2), (256, 3), (512, 3), (512, 3)):
        for _ in range(n):
            out.append(("vgg16", cin, width, 3, 1, hw, 1))
            cin = width
        hw //= 2
    # MobileNet-V2
    out.append(("mobilenet_v2", 3, 32, 3, 2, 224, 1))
    hw, cin = 112, 32
    for t, c, n, s in ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
                       (6, 160, 3, 2), (6, 320, 1, 1)):
        for i in range(n):
            stride = s if i == 0 else 1
            hidden = cin * t
            if t != 1:
                out.append(("mobilenet_v2", cin, hidden, 1, 1, hw, 1))
            out.append(("mobilenet_v2", hidden, hidden, 3, stride, hw, hidden))
            hw = hw // stride
            out.append(("mobilenet_v2", hidden, c, 1, 1, hw, 1))
            cin = c
    out.append(("mobilenet_v2", cin, 1280, 1, 1, hw, 1))
    # AlexNet (DLPrimitives' benchmark net: 64-192-384-256-256)
    for cin, cout, k, s, hw in ((3, 64, 11, 4, 224), (64, 192, 5, 1, 27), (192, 384, 3, 1, 13),
                                (384, 256, 3, 1, 13), (256, 256, 3, 1, 13)):
        out.append(("alexnet", cin, cout, k, s, hw, 1))
    return out


# the padding of the layers whose padding is not k // 2: AlexNet's first
PADDING = {(3, 64, 11, 4, 224, 1): 2}


def distinct_shapes():
    seen = {}
    for net, cin, cout, k, s, hw, g in net_shapes():
        key = (cin, cout, k, s, hw, g)
        seen.setdefault(key, []).append(net)
    return [(key, sorted(set(nets))) for key, nets in seen.items()]


def geometry(key):
    cin, cout, k, s, hw, g = key
    p = PADDING.get(key, k // 2)
    return ConvGeometry(cin, cout, (hw, hw), (k, k), (s, s), (p, p, p, p), (1, 1), g)


def algorithms(geom, direction):
    return [a for a in ("gemm", "winograd2", "winograd4", "depthwise")
            if algorithm_applies(geom, a, direction)]


# the activations' storage per precision (core/precision.py)
STORAGE = {"fp32": "float32", "tf32": "float32", "fp16": "float16", "bf16": "bfloat16"}


def build_ops(ctx, key, batch, precision="fp32"):
    geom = geometry(key)
    return {(d, a): OPS[d](ctx, geom, algo=a, batch=batch, precision=precision,
                           dtype=STORAGE[precision])
            for d in DIRECTIONS for a in algorithms(geom, d)}


def stored(ctx, array, precision):
    """A device tensor of ``array`` in the activations' storage of ``precision``."""
    dtype = STORAGE[precision]
    if dtype == "bfloat16":
        return dp.Tensor.from_numpy(ctx, dp.dtypes.to_bfloat16(array))
    return dp.Tensor.from_numpy(ctx, array.astype(dtype))


def time_launches(ctx, launches, repeat, per_launch=None):
    """Median seconds of one pass over ``launches``; with ``per_launch`` (a list), also
    appends (kernel name, global size, median microseconds) of each launch to it."""
    for launch in launches:
        launch(ctx.queue)
    ctx.finish()
    runs = []
    for _ in range(repeat):
        runs.append([launch(ctx.queue) for launch in launches])
    ctx.finish()
    if per_launch is not None:
        for i, launch in enumerate(launches):
            us = statistics.median((r[i].profile.end - r[i].profile.start) * 1e-3 for r in runs)
            per_launch.append((launch.name, launch.gsize, us))
    return statistics.median((r[-1].profile.end - r[0].profile.start) * 1e-9 for r in runs)


def time_torch(torch, fn, repeat):
    fn()
    torch.cuda.synchronize()
    pairs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
             for _ in range(repeat)]
    for start, end in pairs:
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) * 1e-3 for s, e in pairs)


def rel_err(a, b):
    return float(np.linalg.norm(a.astype(np.float64) - b) / max(np.linalg.norm(b), 1e-30))


def run_shape(ctx, torch, key, ops, batch, repeat, check, show_launches=False, precision="fp32"):
    geom = geometry(key)
    F = torch.nn.functional
    # cuDNN on the same storage: half / bfloat16 tensors for fp16 / bf16
    tdtype = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(precision, torch.float32)
    x_t = torch.randn(geom.in_shape(batch), device="cuda").to(tdtype)
    w_t = (torch.randn(geom.weight_shape, device="cuda")
           / np.sqrt(np.prod(geom.weight_shape[1:]))).to(tdtype)
    dy_t = torch.randn(geom.out_shape(batch), device="cuda").to(tdtype)
    stride, pad = (geom.sh, geom.sw), (geom.pad[0], geom.pad[1])
    conv = lambda: F.conv2d(x_t, w_t, None, stride, pad, 1, geom.groups)  # noqa: E731

    def backward(mask):
        return lambda: torch.ops.aten.convolution_backward(
            dy_t, x_t, w_t, None, stride, pad, (1, 1), False, (0, 0), geom.groups, mask)
    torch_fns = {"forward": conv, "backward_data": backward([True, False, False]),
                 "backward_filter": backward([False, True, False])}
    row = {"batch": batch, "gflop": geom.flops(batch) * 1e-9, "torch": {}, "dlprim": {}, "err": {}}
    for d in DIRECTIONS:
        row["torch"][d] = geom.flops(batch) * 1e-9 / time_torch(torch, torch_fns[d], repeat)
    host = lambda t: t.float().cpu().numpy()  # noqa: E731
    x, dy = stored(ctx, host(x_t), precision), stored(ctx, host(dy_t), precision)
    w = dp.Tensor.from_numpy(ctx, host(w_t))  # weights stay float32
    store = STORAGE[precision]
    y = dp.Tensor(ctx, geom.out_shape(batch), store)
    dx = dp.Tensor(ctx, geom.in_shape(batch), store)
    dw = dp.Tensor(ctx, geom.weight_shape)
    refs = None
    if check:
        refs = {"forward": host(conv())}
        gx, gw, _ = torch_fns["backward_data"]()[0], torch_fns["backward_filter"]()[1], None
        refs["backward_data"], refs["backward_filter"] = host(gx), host(gw)
    for (d, a), op in ops.items():
        ws_bytes = op.workspace_bytes(batch)
        ws = dp.Tensor(ctx, (ws_bytes,), "uint8") if ws_bytes else None
        if d == "forward":
            launches, out = op.launches(x, w, y, ws=ws), y
        elif d == "backward_data":
            launches, out = op.launches(dy, w, dx, ws=ws), dx
        else:
            launches, out = op.launches(x, dy, dw, ws=ws, beta=0.0), dw
        per_launch = [] if show_launches else None
        t = time_launches(ctx, launches, repeat, per_launch)
        row["dlprim"]["%s/%s" % (d, a)] = geom.flops(batch) * 1e-9 / t
        if show_launches:
            print("%s N=%d %s/%s: %.1f us = %s" % (
                fmt_shape(key), batch, d, a, t * 1e6,
                " + ".join("%s%s %.1f" % (n, list(g), us) for n, g, us in per_launch)),
                flush=True)
        if check:
            row["err"]["%s/%s" % (d, a)] = rel_err(out.numpy(), refs[d])
        del ws
    return row


def compare_vec(ctx, shapes, batch, repeat):
    """GFLOP/s of the implicit-GEMM kernels with scalar and with float4 local reads."""
    from dlprim.core import tuning
    print("| shape | N | fwd scalar | fwd float4 | bwd-filter scalar | bwd-filter float4 |")
    picked = [k for k, _ in shapes if k[2] > 1 and k[5] == 1 and k[0] >= 64][:10]
    for key in picked:
        geom = geometry(key)
        x = dp.Tensor.from_numpy(ctx, np.random.default_rng(0).standard_normal(
            geom.in_shape(batch), np.float32))
        w = dp.Tensor.from_numpy(ctx, np.ones(geom.weight_shape, np.float32))
        y = dp.Tensor(ctx, geom.out_shape(batch))
        cells = []
        for d in ("forward", "backward_filter"):
            for vec in (False, True):
                tuning.CONV_VEC_READS = vec
                op = OPS[d](ctx, geom, algo="gemm", batch=batch)
                ws_bytes = op.workspace_bytes(batch)
                ws = dp.Tensor(ctx, (ws_bytes,), "uint8") if ws_bytes else None
                launches = op.launches(x, w, y, ws=ws) if d == "forward" else \
                    op.launches(x, y, w, ws=ws)
                cells.append("%.0f" % (geom.flops(batch) * 1e-9 / time_launches(ctx, launches,
                                                                                 repeat)))
        tuning.CONV_VEC_READS = True
        print("| %s | %d | %s |" % (fmt_shape(key), batch, " | ".join(cells)), flush=True)
        ctx.memory.free_held()


def compare_filter_sum(ctx, shapes, batches, repeat):
    """GFLOP/s of Winograd backward-filter with its transform-domain sum on each path."""
    from dlprim.core import tuning
    print("| shape | N | wino bwd-filter split-K | wino bwd-filter Gemm |")
    picked = [k for k, _ in shapes if k[2] == 3 and k[3] == 1 and k[0] >= 64 and k[5] == 1]
    for key in picked:
        geom = geometry(key)
        for batch in batches:
            rng = np.random.default_rng(0)
            x = dp.Tensor.from_numpy(ctx, rng.standard_normal(geom.in_shape(batch), np.float32))
            dy = dp.Tensor.from_numpy(ctx, rng.standard_normal(geom.out_shape(batch), np.float32))
            dw = dp.Tensor(ctx, geom.weight_shape)
            cells = []
            for mode in ("split", "gemm"):
                tuning.WINOGRAD_FILTER_SUM = mode
                op = OPS["backward_filter"](ctx, geom, algo="winograd4", batch=batch)
                ws = dp.Tensor(ctx, (op.workspace_bytes(batch),), "uint8")
                t = time_launches(ctx, op.launches(x, dy, dw, ws=ws, beta=0.0), repeat)
                cells.append("%.0f" % (geom.flops(batch) * 1e-9 / t))
                del ws
            tuning.WINOGRAD_FILTER_SUM = "auto"
            print("| %s | %d | %s |" % (fmt_shape(key), batch, " | ".join(cells)), flush=True)
            ctx.memory.free_held()


def fmt_shape(key):
    cin, cout, k, s, hw, g = key
    return "%d->%d k%d s%d %d%s" % (cin, cout, k, s, hw, " dw" if g > 1 else "")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default=None)
    ap.add_argument("--batches", type=int, nargs="+", default=[16, 64])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--limit", type=int, default=0, help="only the first N distinct shapes")
    ap.add_argument("--only", nargs="+", default=[],
                    help='shapes as the table names them, e.g. "256->256 k3 s2 28"')
    ap.add_argument("--launches", action="store_true",
                    help="print each dlprim launch's time (kernel, global size, microseconds)")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--compare", action="store_true",
                    help="first time kernel variants: gemm with scalar / float4 local reads, "
                         "Winograd backward-filter sums on split-K / the batched Gemm")
    ap.add_argument("--precision", default="fp32", choices=sorted(STORAGE),
                    help="dlprim's products and activations' storage (cuDNN: TF32 on for all "
                         "but fp32, half / bfloat16 tensors for fp16 / bf16)")
    args = ap.parse_args(argv)
    import torch
    torch.backends.cuda.matmul.allow_tf32 = args.precision != "fp32"
    torch.backends.cudnn.allow_tf32 = args.precision != "fp32"
    torch.backends.cudnn.benchmark = True
    ctx = dp.Context(args.device, profiling=True)
    shapes = distinct_shapes()
    if args.compare:
        compare_vec(ctx, shapes, args.batches[-1], args.repeat)
        compare_filter_sum(ctx, shapes, args.batches, args.repeat)
    if args.only:
        shapes = [s for s in shapes if fmt_shape(s[0]) in args.only]
        if not shapes:
            ap.error("--only matched no shape; names look like %r" % fmt_shape(distinct_shapes()[0][0]))
    if args.limit:
        shapes = shapes[:args.limit]
    t0 = time.time()
    with ThreadPoolExecutor(16) as pool:  # kernel builds release the GIL
        jobs = [(s[0], b) for s in shapes for b in args.batches]
        built = dict(zip(jobs, pool.map(lambda j: build_ops(ctx, *j, args.precision), jobs)))
    print("device: %s, driver %s; torch %s cudnn %s; %d shapes, kernels built in %.1f s"
          % (ctx.facts.name, ctx.facts.driver_version, torch.__version__,
             torch.backends.cudnn.version(), len(shapes), time.time() - t0), flush=True)
    rows = []
    for key, nets in shapes:
        for i, batch in enumerate(args.batches):
            try:
                row = run_shape(ctx, torch, key, built[key, batch], batch, args.repeat,
                                check=i == 0, show_launches=args.launches,
                                precision=args.precision)
            except Exception as err:  # keep the sweep going; the table shows the failure
                row = {"batch": batch, "error": "%s: %s" % (type(err).__name__, err)}
            row.update(shape=fmt_shape(key), nets=nets)
            rows.append(row)
            ctx.memory.free_held()
            torch.cuda.empty_cache()
    with open(os.path.join(args.out, "conv_bench.json"), "w") as f:
        json.dump({"device": ctx.facts.name, "driver": ctx.facts.driver_version,
                   "precision": args.precision,
                   "torch": torch.__version__, "rows": rows}, f, indent=1)
    print(table(rows))
    print("total %.1f s" % (time.time() - t0))


def table(rows):
    """Markdown: GFLOP/s per direction, best dlprim algorithm and cuDNN, ratio best/cuDNN."""
    short = {"gemm": "g", "winograd2": "w2", "winograd4": "w4", "depthwise": "d"}
    lines = ["| shape | N | fwd dlprim | fwd cuDNN | bwd-data dlprim | bwd-data cuDNN | "
             "bwd-filter dlprim | bwd-filter cuDNN | max err |", "|" + "---|" * 9]
    for r in rows:
        if "error" in r:
            lines.append("| %s | %d | %s |" % (r["shape"], r["batch"], r["error"][:150]))
            continue
        cells = []
        for d in DIRECTIONS:
            mine = {a.split("/")[1]: v for a, v in r["dlprim"].items() if a.startswith(d)}
            best = max(mine.values())
            cells.append("%s (%.2fx)" % (" ".join("%s:%.0f" % (short[a], v)
                                                   for a, v in sorted(mine.items())),
                                          best / r["torch"][d]))
            cells.append("%.0f" % r["torch"][d])
        err = max(r["err"].values()) if r["err"] else float("nan")
        lines.append("| %s | %d | %s | %.1e |" % (r["shape"], r["batch"], " | ".join(cells), err))
    return "\n".join(lines)


if __name__ == "__main__":
    main()
