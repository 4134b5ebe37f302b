"""dlprim on a CPU OpenCL driver (PoCL) beside numpy (OpenBLAS) and PyTorch CPU.

Sections (``--only`` picks some):

- gemm: SGEMM C = A·B (n x n, float32) through ``dlprim.core.gemm.Gemm`` and numpy's matmul;
- conv: ResNet-ish convolutions at ``--batch`` (forward, backward-data, backward-filter)
  through ``dlprim.core.conv`` and torch;
- nets: whole ``dlprim.models`` nets at 224x224, ms per batch, beside the same NetConfig
  run by torch (``torch_from_netconfig.py``: torchvision is not needed), and the geometric
  mean of the speed torch_ms / dlprim_ms;
- mnist: images/s of training the MNIST demo net (examples/mnist/lenet.json, batch 64);
- models: a small ViT, a GPT and an LSTM as PyTorch models, PyTorch CPU eager beside
  ``dlprim.torch.compile`` on ``ocl`` (cpu_models.py; needs transformers).

gemm and conv report wall time after ``ctx.finish()``, best of ``--repeat`` after a warm-up:
a CPU shared with other work only ever slows a run down. nets and mnist report the mean
over ``--iters`` after ``--warmup``, with the iteration of ``dlprim-benchmark``
(``dlprim.cli.benchmark.run_net``) on both sides: the batch copied in, forward, and in
training the loss, backward and an Adam step; the output copied out. torch predicts in
eval mode under ``no_grad``. Give the libraries the cores PoCL uses:

    OPENBLAS_NUM_THREADS=2 python benchmarks/cpu_side_by_side.py --threads 2
    python benchmarks/cpu_side_by_side.py --only nets models --isa avx2  # an AVX2 CPU's code
    python benchmarks/cpu_side_by_side.py --only nets --nets resnet18 --iters 2   # quick
    python benchmarks/cpu_side_by_side.py --only nets --nets resnet50:8:train      # any row
"""
import argparse
import gc
import math
import os
import time

import numpy as np

import dlprim as dp
from dlprim.cli.benchmark import build_graph, run_net
from dlprim.core.conv import ConvBackwardData, ConvBackwardFilter, ConvForward, ConvGeometry
from dlprim.core.gemm import Gemm

SECTIONS = ("gemm", "conv", "nets", "mnist", "models")
CONVS = [(64, 64, 56, 3, 1), (64, 256, 56, 1, 0), (128, 128, 28, 3, 1)]  # cin, cout, hw, k, pad
NETS = [("resnet18", 4, "infer"), ("resnet18", 4, "train"), ("mobilenet_v2", 4, "infer"),
        ("mobilenet_v2", 4, "train"), ("alexnet", 4, "infer"), ("vgg16", 2, "infer")]
MNIST_NET = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                         "examples", "mnist", "lenet.json")
MNIST_BATCH = 64
ADAM_LR = 1e-4  # run_net's; the time of a step does not depend on it
LABEL_CLASSES = 2  # run_net's labels are drawn below 2 as well


# ``--isa avx2``: both sides restricted to AVX2 code on a CPU that has more (AVX-512), so
# that one machine shows the ISA's share: Intel's CPU OpenCL runtime generates AVX2 code
# and dlprim tiles for 8-float vectors; PyTorch's own kernels (ATen), its convolutions and
# recurrent layers (oneDNN, which ATen's setting does not reach) and its BLAS (MKL) take
# AVX2. The kernel caches go to a directory of their own: binary caches do not key on the
# target. Caches, clocks and vector units stay the machine's.
ISA_ENV = {"avx2": {"CL_CONFIG_CPU_TARGET_ARCH": "core-avx2", "DLPRIM_CPU_VECTOR_WIDTH": "8",
                    "ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2",
                    "MKL_ENABLE_INSTRUCTIONS": "AVX2"}}


def isa_environment(isa, environ, cache_root):
    """``environ`` with ``isa``'s restrictions (ISA_ENV) and kernel caches under
    ``cache_root``/``isa``."""
    env = dict(environ, **ISA_ENV[isa])
    env["XDG_CACHE_HOME"] = os.path.join(cache_root, isa)
    env["DLPRIM_CACHE_DIR"] = os.path.join(cache_root, isa, "dlprim")
    env["DLPRIM_EMULATED_ISA"] = isa
    return env


def best(run, finish, repeat):
    run()
    finish()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        run()
        finish()
        times.append(time.perf_counter() - start)
    return min(times)


def gemm_rows(ctx, sizes, repeat):
    rng = np.random.default_rng(0)
    for n in sizes:
        a, b = (rng.standard_normal((n, n), dtype=np.float32) for _ in range(2))
        A, B, C = dp.Tensor.from_numpy(ctx, a), dp.Tensor.from_numpy(ctx, b), dp.Tensor(ctx, (n, n))
        op = Gemm(ctx, n, n, n)
        t = best(lambda: op(A, B, C), ctx.finish, repeat)
        t_np = best(lambda: a @ b, lambda: None, repeat)
        flop = 2.0 * n ** 3 * 1e-9
        print("gemm %5d: dlprim %6.1f GFLOP/s, numpy %6.1f GFLOP/s (%.0f%%)"
              % (n, flop / t, flop / t_np, 100 * t_np / t))


def conv_rows(ctx, torch, batch, repeat):
    rng = np.random.default_rng(0)
    for cin, cout, hw, k, p in CONVS:
        g = ConvGeometry(cin, cout, (hw, hw), (k, k), (1, 1), (p,) * 4)
        x, w, dy = (rng.standard_normal(s, dtype=np.float32)
                    for s in (g.in_shape(batch), g.weight_shape, g.out_shape(batch)))
        X, W, DY = (dp.Tensor.from_numpy(ctx, v) for v in (x, w, dy))
        Y, DX, DW = (dp.Tensor(ctx, s) for s in (g.out_shape(batch), g.in_shape(batch),
                                                  g.weight_shape))
        xt, wt, dyt = (torch.from_numpy(v) for v in (x, w, dy))
        ops = {"forward": (ConvForward(ctx, g, batch=batch), lambda op, ws: op(X, W, Y, ws=ws)),
               "backward_data": (ConvBackwardData(ctx, g, batch=batch),
                                 lambda op, ws: op(DY, W, DX, ws=ws)),
               "backward_filter": (ConvBackwardFilter(ctx, g, batch=batch),
                                   lambda op, ws: op(X, DY, DW, ws=ws, beta=0.0))}
        masks = {"backward_data": [True, False, False], "backward_filter": [False, True, False]}
        cells = []
        for name, (op, call) in ops.items():
            need = op.workspace_bytes(batch)
            ws = dp.Tensor(ctx, (need,), "uint8") if need else None
            t = best(lambda: call(op, ws), ctx.finish, repeat)
            if name == "forward":
                ref = lambda: torch.nn.functional.conv2d(xt, wt, padding=p)  # noqa: E731
            else:
                ref = lambda: torch.ops.aten.convolution_backward(  # noqa: E731
                    dyt, xt, wt, None, [1, 1], [p, p], [1, 1], False, [0, 0], 1, masks[name])
            cells.append("%s %.1f ms (torch %.1f)" % (name, t * 1e3,
                                                      best(ref, lambda: None, repeat) * 1e3))
        print("conv %d->%d %dx%d at %dx%d, batch %d: %s"
              % (cin, cout, k, k, hw, hw, batch, "; ".join(cells)))


def random_inputs(graph, rng):
    """{input name: array}: normal floats, and integer labels below LABEL_CLASSES."""
    out = {}
    for spec in graph["inputs"]:
        if spec.get("dtype", "float") == "float":
            out[spec["name"]] = rng.standard_normal(spec["shape"], dtype=np.float32)
        else:
            out[spec["name"]] = rng.integers(0, LABEL_CLASSES, spec["shape"]).astype(np.int32)
    return out


def torch_net_ms(torch, graph, train, warmup, iters, seed=0):
    """Mean ms of one iteration of ``graph`` run by torch, as run_net's."""
    from torch_from_netconfig import TorchNet
    model = TorchNet(graph, seed=seed)
    model.train(train)
    arrays = random_inputs(graph, np.random.default_rng(seed))
    losses = [n for n in model.output_names if n.startswith("loss")]
    if train and not losses:
        raise SystemExit("training needs a net output named loss..., got %s" % model.output_names)
    shown = [n for n in model.output_names if n not in losses] or model.output_names
    opt = torch.optim.Adam(model.parameters(), lr=ADAM_LR) if train else None

    def iteration():
        inputs = {k: torch.from_numpy(a) for k, a in arrays.items()}
        if train:
            opt.zero_grad()
            out = model(**inputs)
            sum(out[n].sum() for n in losses).backward()
            opt.step()
        else:
            with torch.no_grad():
                out = model(**inputs)
        out[shown[0]].detach().numpy()

    for _ in range(warmup):
        iteration()
    times = []
    for _ in range(iters):
        start = time.perf_counter()
        iteration()
        times.append(time.perf_counter() - start)
    return 1e3 * float(np.mean(times))


def net_rows(ctx, torch, rows, image_size, warmup, iters):
    """The whole-net table, a row printed as soon as it is measured."""
    print("\n| net | batch | mode | dlprim PoCL | PyTorch CPU | speed |")
    print("|---|---|---|---|---|---|")
    speeds = []
    for name, batch, mode in rows:
        graph = build_graph(name, batch, image_size, 1000, mode == "train")
        gc.collect()  # the previous row's net and buffers go first
        ms = run_net(ctx, graph, train=mode == "train", warmup=warmup, iters=iters)["mean_ms"]
        ref = torch_net_ms(torch, graph, mode == "train", warmup, iters) if torch else None
        if ref is None:
            print("| %s | %d | %s | %.1f ms | - | - |" % (name, batch, mode, ms), flush=True)
            continue
        speeds.append(ref / ms)
        print("| %s | %d | %s | %.1f ms | %.1f ms | %.2fx |" % (name, batch, mode, ms, ref,
                                                                ref / ms), flush=True)
    if speeds:
        print("geometric mean of speed (torch ms / dlprim ms, above 1: dlprim faster): %.2fx"
              % math.exp(np.mean(np.log(speeds))))


def mnist_rows(ctx, torch, net, warmup, iters):
    """Training throughput of the MNIST demo net at its batch, Adam, on both sides."""
    graph, batch = build_graph(net, MNIST_BATCH, 28, 10, True), MNIST_BATCH
    ms = run_net(ctx, graph, train=True, warmup=warmup, iters=iters)["mean_ms"]
    line = "mnist %s, batch %d, train: dlprim %.0f images/s" % (os.path.basename(net), batch,
                                                                 1e3 * batch / ms)
    if torch:
        ref = torch_net_ms(torch, graph, True, warmup, iters)
        line += ", torch %.0f images/s (speed %.2fx)" % (1e3 * batch / ref, ref / ms)
    print(line)


def parse_rows(specs):
    """--nets: a name picks its rows of NETS; ``name:batch:mode`` is a row of its own."""
    rows = []
    for spec in specs:
        if ":" in spec:
            name, batch, mode = spec.split(":")
            if mode not in ("infer", "train"):
                raise SystemExit("--nets %s: the mode must be infer or train" % spec)
            rows.append((name, int(batch), mode))
            continue
        mine = [r for r in NETS if r[0] == spec]
        if not mine:
            raise SystemExit("--nets %s: no default row; known: %s (or give name:batch:mode)"
                             % (spec, ", ".join(sorted({r[0] for r in NETS}))))
        rows += mine
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", choices=SECTIONS, default=list(SECTIONS))
    parser.add_argument("--sizes", type=int, nargs="+", default=[256, 512, 1024, 2048])
    parser.add_argument("--batch", type=int, default=2, help="of the conv section")
    parser.add_argument("--repeat", type=int, default=5, help="gemm and conv: best of")
    parser.add_argument("--nets", nargs="+", default=list(dict.fromkeys(r[0] for r in NETS)),
                        help="names of NETS rows, or name:batch:mode")
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--warmup", type=int, default=1, help="nets and mnist")
    parser.add_argument("--iters", type=int, default=3, help="nets: mean of")
    parser.add_argument("--mnist-iters", type=int, default=20)
    parser.add_argument("--mnist-net", default=MNIST_NET, help="a net JSON or dlprim.models name")
    parser.add_argument("--threads", type=int, default=2, help="torch.set_num_threads")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--isa", choices=sorted(ISA_ENV),
                        help="run both sides restricted to this ISA's code (ISA_ENV)")
    args = parser.parse_args()
    if args.isa and os.environ.get("DLPRIM_EMULATED_ISA") != args.isa:
        import sys
        import tempfile
        env = isa_environment(args.isa, os.environ, os.path.join(tempfile.gettempdir(),
                                                                 "dlprim-isa"))
        os.execve(sys.executable, [sys.executable] + sys.argv, env)  # (set before any import)
    rows = parse_rows(dict.fromkeys(args.nets))  # a name given twice counts once
    ctx = dp.Context(args.device)
    print(ctx.name)
    try:
        import torch
        torch.set_num_threads(args.threads)
        if "models" in args.only:  # before the nets' PyTorch backward passes (autograd_engine)
            import dlprim.torch  # noqa: F401
    except ImportError:
        torch = None
        print("torch is not installed: dlprim figures only")
    if "gemm" in args.only:
        gemm_rows(ctx, args.sizes, args.repeat)
    if "conv" in args.only and torch:
        conv_rows(ctx, torch, args.batch, args.repeat)
    if "nets" in args.only:
        net_rows(ctx, torch, rows, args.image_size, args.warmup, args.iters)
    if "mnist" in args.only:
        mnist_rows(ctx, torch, args.mnist_net, args.warmup, args.mnist_iters)
    if "models" in args.only and torch:
        import cpu_models  # (beside this script)
        cpu_models.rows(list(cpu_models.MODELS), args.warmup + 1, max(args.iters, 3))


if __name__ == "__main__":
    main()
