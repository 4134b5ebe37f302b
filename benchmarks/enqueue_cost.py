"""Host time of one kernel launch on a device's driver: a kernel whose arguments are bound
once, enqueued N times through PyOpenCL (which asks the driver for an event each time),
then through the OpenCL library itself (ctypes, with and without an event); for a kernel of
3 arguments and one of 30 (12 buffers with their offsets, 6 sizes). It says how much of a
planned Net's host time per launch is the driver's, which no change in dlprim removes.

    DLPRIM_DEVICE=gpu python benchmarks/enqueue_cost.py --launches 20000
"""
import argparse
import ctypes
import sys
import time

import numpy as np


def opencl_library():
    """The OpenCL library PyOpenCL loaded (the ICD loader), from the process's mappings."""
    with open("/proc/self/maps") as maps:
        for line in maps:
            path = line.split()[-1]
            if "libOpenCL" in path:
                return ctypes.CDLL(path)
    return ctypes.CDLL("libOpenCL.so.1")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default=None)
    p.add_argument("--launches", type=int, default=20000)
    args = p.parse_args(argv)
    import pyopencl as cl
    import dlprim as dp
    ctx = dp.Context(args.device)
    queue, n = ctx.queue, args.launches
    lib = opencl_library()
    enqueue = lib.clEnqueueNDRangeKernel
    enqueue.restype = ctypes.c_int32
    enqueue.argtypes = [ctypes.c_void_p] * 2 + [ctypes.c_uint] + [ctypes.c_void_p] * 3 + \
        [ctypes.c_uint] + [ctypes.c_void_p] * 2
    release = lib.clReleaseEvent
    release.argtypes = [ctypes.c_void_p]
    pairs = ", ".join("__global float *a%d, ulong o%d" % (i, i) for i in range(12))
    sizes = ", ".join("int n%d" % i for i in range(6))
    source = ("__kernel void few(__global float *a, ulong o, int n)"
              "{ int i = get_global_id(0); if (i < n) a[o + i] += 1.0f; }\n"
              "__kernel void many(%s, %s)"
              "{ int i = get_global_id(0); if (i < n0) a0[o0 + i] += a1[o1 + i]; }" % (pairs, sizes))
    prg = cl.Program(ctx.cl_context, source).build()
    bufs = [cl.Buffer(ctx.cl_context, cl.mem_flags.READ_WRITE, 4 * 256) for _ in range(12)]
    few = cl.Kernel(prg, "few")
    few.set_scalar_arg_dtypes([None, np.uint64, np.int32])
    few.set_args(bufs[0], np.uint64(0), np.int32(256))
    many = cl.Kernel(prg, "many")
    many.set_scalar_arg_dtypes([None, np.uint64] * 12 + [np.int32] * 6)
    many.set_args(*[a for b in bufs for a in (b, np.uint64(0))], *[np.int32(256)] * 6)
    gsize, lsize = (ctypes.c_size_t * 1)(256), (ctypes.c_size_t * 1)(64)
    event = ctypes.c_void_p()
    print("%s, %d launches a way; host us a launch (and the wait after them)" % (
        ctx.device.name, n))
    for name, kernel, arguments in (("3 arguments", few, 3), ("30 arguments", many, 30)):
        q, k = queue.int_ptr, kernel.int_ptr
        ways = {
            "PyOpenCL": lambda: cl.enqueue_nd_range_kernel(queue, kernel, (256,), (64,)),
            "library, no event": lambda: enqueue(q, k, 1, None, gsize, lsize, 0, None, None),
            "library, event": lambda: (enqueue(q, k, 1, None, gsize, lsize, 0, None,
                                               ctypes.byref(event)), release(event)),
        }
        for way, call in ways.items():
            for _ in range(2):  # (the second of two)
                queue.finish()
                start = time.perf_counter()
                for _ in range(n):
                    call()
                enqueued = time.perf_counter()
                queue.finish()
                done = time.perf_counter()
            print("  %-13s %-18s %6.2f us (+%.2f)" % (name, way, (enqueued - start) / n * 1e6,
                                                      (done - enqueued) / n * 1e6))
    return 0


if __name__ == "__main__":
    sys.exit(main())
