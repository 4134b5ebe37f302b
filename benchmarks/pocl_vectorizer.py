"""What PoCL's compiler does with dlprim's CPU kernels: per kernel, the loops LLVM's loop
vectorizer vectorised (and at which width) and those it left scalar, from PoCL's
vectorizer remarks (``POCL_VECTORIZER_REMARKS=1``: PoCL prints them on stdout while it
compiles a kernel for its first launch; each remark is credited to the kernel the
inliner remarks before it name). Each case runs in a fresh process with PoCL's and
pyopencl's caches off, so that everything is compiled there.

    python benchmarks/pocl_vectorizer.py            # every case
    python benchmarks/pocl_vectorizer.py gemm bn_apply

Explicit vector types (float8 accumulators, vload8) are vectorised by hand and show no
remark; what this shows is whether the plain loops around them (pointwise rows,
reductions, im2col rows, packing) became vector code. "Left scalar" counts LLVM's "loop
not vectorized" remarks, which include the remainder loops of vectorised ones.
"""
import os
import re
import subprocess
import sys

CASES = {
    "bn_apply": "from dlprim.core.batchnorm import BatchNormOps\n"
                "b = BatchNormOps(ctx, (4, 96, 3136), 1e-5, True)\n"
                "x, y, m = T(4, 96, 3136), T(4, 96, 3136), T(96)\n"
                "run(b.apply_launches(x, y, m, m, m, m))",
    "bn_moments": "from dlprim.core.batchnorm import BatchNormOps\n"
                  "b = BatchNormOps(ctx, (4, 96, 3136), 1e-5, True)\n"
                  "run(b.stats_launches(T(4, 96, 3136), T(96), T(96), T(96), T(96), 0.1, T(96)))",
    "gemm": "from dlprim.core.gemm import Gemm\n"
            "run(Gemm(ctx, 256, 256, 256).launches(T(256, 256), T(256, 256), T(256, 256)))",
    "gemm_small_m": "from dlprim.core.gemm import Gemm\n"
                    "run(Gemm(ctx, 4, 512, 512, trans_b=True).launches(T(4, 512), T(512, 512), T(4, 512)))",
    "conv_im2col": "from dlprim.core.conv import ConvForward, ConvGeometry\n"
                   "g = ConvGeometry(64, 64, (28, 28), (3, 3), pad=(1, 1, 1, 1))\n"
                   "op = ConvForward(ctx, g, algo='im2col', batch=2)\n"
                   "ws = dp.Tensor(ctx, (op.workspace_bytes(2),), 'uint8')\n"
                   "run(op.launches(T(*g.in_shape(2)), T(*g.weight_shape), T(*g.out_shape(2)), None, ws))",
    "depthwise": "from dlprim.core.conv import ConvForward, ConvGeometry\n"
                 "g = ConvGeometry(32, 32, (56, 56), (3, 3), pad=(1, 1, 1, 1), groups=32)\n"
                 "op = ConvForward(ctx, g, batch=2)\n"
                 "run(op.launches(T(*g.in_shape(2)), T(*g.weight_shape), T(*g.out_shape(2)), None, None))",
    "pooling": "from dlprim.core.pooling import Pool2D\n"
               "p = Pool2D(ctx, 'max', (3, 3), (2, 2), (1, 1))\n"
               "run(p.launches(T(2, 16, 56, 56), T(2, 16, 28, 28)))",
}

PRELUDE = """
import numpy as np
import dlprim as dp
ctx = dp.Context("cpu")
def T(*shape):
    return dp.Tensor.from_numpy(ctx, np.zeros(shape, np.float32))
def run(launches):
    for launch in launches:
        launch(ctx.queue)
    ctx.finish()
"""

VECTORIZED = re.compile(r"vectorized loop \(vectorization width: (\d+)")
SCALAR = re.compile(r"loop not vectorized")
INLINED = re.compile(r"inlined into '([A-Za-z]\w*)'")  # a kernel, not a builtin (_Z...)


def remarks(code):
    """{kernel: [remark, ...]} of one case, run in a fresh process."""
    env = dict(os.environ, POCL_VECTORIZER_REMARKS="1", POCL_KERNEL_CACHE="0",
               PYOPENCL_NO_CACHE="1", PYTHONWARNINGS="ignore")
    proc = subprocess.run([sys.executable, "-c", PRELUDE + code], env=env,
                          capture_output=True, text=True, timeout=600)
    if proc.returncode:
        raise SystemExit(proc.stderr[-2000:])
    out, kernel = {}, "?"
    for remark in proc.stdout.split("<unknown>:0:0: "):
        named = INLINED.search(remark)
        if named:
            kernel = named.group(1)
        out.setdefault(kernel, []).append(remark)
    return out


def main():
    names = sys.argv[1:] or list(CASES)
    unknown = [n for n in names if n not in CASES]
    if unknown:
        raise SystemExit("unknown case %s; known: %s" % (", ".join(unknown), ", ".join(CASES)))
    print("%-14s %-28s %-26s %s" % ("case", "kernel", "vectorized loops (widths)",
                                      "loops left scalar"))
    for name in names:
        for kernel, texts in sorted(remarks(CASES[name]).items()):
            text = " ".join(texts)
            widths = VECTORIZED.findall(text)
            if kernel == "?" and not widths and not SCALAR.search(text):
                continue  # the remarks before the first kernel's: builtins only
            print("%-14s %-28s %-26s %d" % (
                name, kernel, "%d (%s)" % (len(widths), ", ".join(sorted(set(widths))) or "-"),
                len(SCALAR.findall(text))))

if __name__ == "__main__":
    main()
