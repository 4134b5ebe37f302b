"""The few-rows product (kernels/gemv.cl) one launch at a time over weights that come
from memory, not the caches (copies of B cycled past the device's L2), at a decoder's
shapes: device time per launch (a profiling queue, the median) and the weights' GB/s.

    python benchmarks/gemv_cold.py --dtype float16
    python benchmarks/gemv_cold.py --dtype q4 --activations float32 --device cpu
    python benchmarks/gemv_cold.py --activations float32 --norm rms   # a decoder's head
    DLPRIM_GEMV_SHUFFLE=0 python benchmarks/gemv_cold.py   # sums through local memory
"""
import argparse
import os
import sys

import numpy as np

SHAPES = [(2560, 2048), (2048, 2048), (5632, 2048), (2048, 5632), (32000, 2048),
          (2304, 768), (768, 3072), (50257, 768)]  # (N, K): TinyLlama's, then GPT-2's


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dtype", default="float16", help="the weights' storage (and the rows'): "
                   "float32, float16, bfloat16, int8 (a scale a row) or q4 (4-bit, a scale a "
                   "group of 32)")
    p.add_argument("--activations", default=None, help="the rows' storage (default: float32 "
                   "where the weights are int8 or q4, else the weights')")
    p.add_argument("--norm", default=None, choices=("rms", "layer"), help="the rows normalized "
                   "on the way (a decoder's final norm before its head)")
    p.add_argument("--rows", type=int, default=1)
    p.add_argument("--device", default=None)
    p.add_argument("--cycle-mb", type=int, default=256, help="bytes of B copies cycled")
    args = p.parse_args(argv)
    import dlprim as dp
    from dlprim.core.gemm import Gemm
    from dlprim.tensor import Tensor
    ctx = dp.Context(args.device, profiling=True)
    from dlprim.core.quantize import quantize_q4
    quantized = args.dtype in ("int8", "q4")
    dt = np.dtype(args.activations or ("float32" if quantized else args.dtype))
    bt = {"int8": np.int8, "q4": np.uint8}.get(args.dtype, np.dtype(args.dtype))
    rng = np.random.default_rng(0)
    for n, k in SHAPES:
        norm = {} if args.norm is None else {"a_norm": 1e-5, "a_norm_kind": args.norm}
        g = Gemm(ctx, args.rows, n, k, trans_b=True, dtypes=(dt, bt, dt), b_scale=quantized,
                 **norm)
        vectors = {} if args.norm is None else {
            "a_norm_weight": Tensor.from_numpy(ctx, np.ones(k, np.float32))}
        if args.norm == "layer":
            vectors["a_norm_bias"] = Tensor.from_numpy(ctx, np.zeros(k, np.float32))
        a, c = Tensor(ctx, (args.rows, k), dt), Tensor(ctx, (args.rows, n), dt)
        a.to_device(np.ones((args.rows, k), dt))
        w = (rng.standard_normal((n, k)) * 0.01).astype(np.float32)
        scale = None
        if args.dtype == "q4":
            w, scale = quantize_q4(w)
        elif args.dtype == "int8":
            w, scale = rng.integers(-127, 128, (n, k)).astype(np.int8), np.full(n, 1e-3, np.float32)
        else:
            w = w.astype(bt)
        if scale is not None:
            scale = Tensor.from_numpy(ctx, scale.ravel())
        launches = []
        for _ in range(max(1, -(-(args.cycle_mb << 20) // w.nbytes))):
            b = Tensor(ctx, w.shape, w.dtype)
            b.to_device(w)
            launches += g.launches(a, b, c, b_scale=scale, **vectors)
        reps = max(2, 200 // len(launches))
        events = [launch(ctx.queue) for _ in range(reps) for launch in launches]
        ctx.queue.finish()
        times = sorted((e.profile.end - e.profile.start) * 1e-3 for e in events[len(launches):])
        us = times[len(times) // 2]
        print("%6d x %-5d %s  %7.1f us  %6.0f GB/s" % (n, k, args.dtype, us, w.nbytes / us / 1e3),
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
