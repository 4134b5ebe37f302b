"""Host time of a default (foreach) AdamW step on ocl, operator by operator: the calls
``torch.optim.AdamW`` makes each step (its ``_multi_tensor_adam`` path, weight decay
included), over parameters of one size, timed on the host clock with the device's work
left to run behind them.

    python benchmarks/optimizer_host.py [--tensors 200] [--size 64] [--steps 20]

The time that matters where a step is host-bound (a compiled model's optimizer step on
a GPU that finishes its backward pass early); the tensors are small so that the host's
work, not the device's, is measured.
"""
import argparse
import collections
import time

import torch


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tensors", type=int, default=200)
    p.add_argument("--size", type=int, default=64, help="elements per tensor")
    p.add_argument("--steps", type=int, default=20)
    args = p.parse_args()
    import dlprim.torch  # noqa: F401  (the ocl device)
    torch.manual_seed(0)
    n, size = args.tensors, args.size
    params, grads = ([torch.randn(size).to("ocl") for _ in range(n)] for _ in range(2))
    exp_avgs, exp_avg_sqs = ([torch.zeros(size).to("ocl") for _ in range(n)] for _ in range(2))
    steps = [torch.tensor(0.0) for _ in range(n)]
    lr, beta1, beta2, eps, decay = 1e-3, 0.9, 0.999, 1e-8, 1e-2
    times = collections.defaultdict(float)

    def step():
        clock = [time.perf_counter()]

        def tick(name):
            now = time.perf_counter()
            times[name] += now - clock[0]
            clock[0] = now
        torch._foreach_add_(steps, 1)
        tick("step counts (CPU)")
        torch._foreach_mul_(params, 1 - lr * decay)
        tick("mul_ (weight decay)")
        torch._foreach_lerp_(exp_avgs, grads, 1 - beta1)
        tick("lerp_")
        torch._foreach_mul_(exp_avg_sqs, beta2)
        tick("mul_")
        torch._foreach_addcmul_(exp_avg_sqs, grads, grads, 1 - beta2)
        tick("addcmul_")
        step_size = [-lr / (1 - beta1 ** s.item()) for s in steps]
        correction = [(1 - beta2 ** s.item()) ** 0.5 for s in steps]
        tick("bias corrections (Python)")
        denom = torch._foreach_sqrt(exp_avg_sqs)
        tick("sqrt (a new list)")
        torch._foreach_div_(denom, correction)
        tick("div_ (on it)")
        torch._foreach_add_(denom, eps)
        tick("add_ (on it)")
        torch._foreach_addcdiv_(params, exp_avgs, denom, step_size)
        tick("addcdiv_ (with it)")

    for _ in range(5):
        step()
    params[0].cpu()  # the device's work done
    times.clear()
    for _ in range(args.steps):
        step()
    params[0].cpu()
    print("| call | host ms a step |\n|---|---:|")
    for name, t in times.items():
        print("| %s | %.3f |" % (name, 1e3 * t / args.steps))
    print("| **step** | **%.3f** |" % (1e3 * sum(times.values()) / args.steps))


if __name__ == "__main__":
    main()
