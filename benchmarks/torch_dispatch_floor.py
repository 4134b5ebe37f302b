"""Host time per operator on a PyTorch device, beside the floor of any device written in
Python: a tensor subclass whose ``__torch_dispatch__`` only makes the result tensor (no
kernel, no shape work). What a Python operator path can save is the difference.

    python benchmarks/torch_dispatch_floor.py [--device ocl] [--calls 20000]
"""
import argparse
import time

import torch


class NothingTensor(torch.Tensor):
    """Every operator returns a new tensor shaped as its first argument, on "meta"."""

    @staticmethod
    def __new__(cls, size, stride, dtype, requires_grad=False):
        return torch.Tensor._make_wrapper_subclass(cls, size, strides=stride, dtype=dtype,
                                                   device="meta", requires_grad=requires_grad)

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        a = args[0]
        return NothingTensor(a.shape, a.stride(), a.dtype)


def per_call_us(fn, calls):
    for _ in range(min(calls // 10, 500)):
        fn()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls * 1e6


def operands(make):
    a, b = make(), make()
    g = make().requires_grad_()
    return {"add": lambda: a + b, "mul, requires grad": lambda: g * b,
            "view": lambda: a.view(-1)}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", nargs="*", default=["ocl"],
                   help="devices to time beside the floor (ocl, cuda, cpu)")
    p.add_argument("--calls", type=int, default=20000)
    args = p.parse_args(argv)
    rows = {"a device that does nothing": operands(
        lambda: NothingTensor((64, 64), (64, 1), torch.float32))}
    for dev in args.device:
        if dev.startswith("ocl"):
            import dlprim.torch  # noqa: F401  (registers the device)
        rows[dev] = operands(lambda dev=dev: torch.randn(64, 64).to(dev))
    print("| path | " + " | ".join(next(iter(rows.values()))) + " |")
    for name, ops in rows.items():
        times = [per_call_us(fn, args.calls) for fn in ops.values()]
        print("| %s | %s |" % (name, " | ".join("%.1f µs" % t for t in times)))


if __name__ == "__main__":
    main()
