"""A stacked LSTM (or GRU) in float32, forward (predict) and forward + backward (training),
dlprim's layer beside torch.nn.LSTM / GRU (cuDNN on CUDA, TF32 off; PyTorch's CPU kernels
where no CUDA device is found). Prints a markdown table of milliseconds per call.

    python benchmarks/rnn_speed.py                      # L=256, N=64, 2 layers, 512 wide
    python benchmarks/rnn_speed.py --device gpu --torch-device cuda
    python benchmarks/rnn_speed.py --small              # tiny sizes: checks that it runs
    python benchmarks/rnn_speed.py --cell gru
"""
import argparse
import time

import numpy as np

import dlprim as dp


def time_calls(fn, sync, iters, warmup=2):
    """Milliseconds per call of ``fn`` after ``warmup`` calls: a Net's first pass builds its
    kernels and its second gives each launch a kernel object of its own with its arguments
    bound (on Intel's CPU runtime a 2-layer LSTM's second pass took 47 ms against 6: one
    warm-up call left that in the timed calls)."""
    for _ in range(warmup):
        fn()
    sync()
    start = time.perf_counter()
    for _ in range(iters):
        fn()
    sync()
    return 1e3 * (time.perf_counter() - start) / iters


def dlprim_times(device, steps, batch, layers, hidden, inputs, iters, cell="LSTM"):
    """(forward ms, forward + backward ms) of dlprim's LSTM (or GRU), with the output
    sequence as the loss so that backward runs every gradient."""
    ctx = dp.Context(device)
    cfg = dp.NetConfig()
    cfg.add_input("data", [steps, batch, inputs], requires_grad=True)
    cfg.add(cell, name="rnn", inputs=["data"], outputs=["loss"],
            options={"hidden_size": hidden, "num_layers": layers})
    cfg.set_outputs(["loss"])
    net = dp.Net(ctx, cfg, mode=dp.PREDICT, seed=0)
    x = np.random.default_rng(0).standard_normal((steps, batch, inputs)).astype(np.float32)
    net.tensor("data").to_device(x)
    forward = time_calls(net.forward, ctx.finish, iters)
    net.mode = dp.TRAIN

    def train_step():
        net.forward()
        net.backward()
    return forward, time_calls(train_step, ctx.finish, iters), ctx.name


def torch_times(device, steps, batch, layers, hidden, inputs, iters, cell="LSTM"):
    """The same two timings for torch.nn.LSTM (or GRU) on ``device``."""
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    lstm = getattr(torch.nn, cell)(inputs, hidden, num_layers=layers).to(device)
    x = torch.randn(steps, batch, inputs, device=device, requires_grad=True)

    def forward():
        with torch.no_grad():
            lstm(x)

    def train_step():
        lstm.zero_grad(set_to_none=True)
        y, _ = lstm(x)
        y.sum().backward()
    name = torch.cuda.get_device_name() if device.startswith("cuda") else "CPU"
    return time_calls(forward, sync, iters), time_calls(train_step, sync, iters), name


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default=None, help="dlprim's device (default: DLPRIM_DEVICE "
                   "or the first GPU)")
    p.add_argument("--torch-device", default=None, help="default: cuda when available, else cpu")
    p.add_argument("--steps", type=int, default=256)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--hidden", type=int, default=512)
    p.add_argument("--inputs", type=int, default=512)
    p.add_argument("--iters", type=int, default=5)
    p.add_argument("--cell", choices=["lstm", "gru"], default="lstm")
    p.add_argument("--small", action="store_true", help="L=8, N=4, 2 layers of 16, 2 iterations")
    p.add_argument("--no-torch", action="store_true", help="time dlprim only")
    args = p.parse_args()
    if args.small:
        args.steps, args.batch, args.hidden, args.inputs, args.iters = 8, 4, 16, 16, 2
    sizes = (args.steps, args.batch, args.layers, args.hidden, args.inputs)
    cell = args.cell.upper()
    rows = [("dlprim " + cell,) + dlprim_times(args.device, *sizes, args.iters, cell)]
    if not args.no_torch:
        try:
            import torch
        except ImportError:
            torch = None
        if torch is not None:
            device = args.torch_device or ("cuda" if torch.cuda.is_available() else "cpu")
            rows.append(("torch %s (%s)" % (cell, "cuDNN" if device.startswith("cuda")
                                             else device),)
                        + torch_times(device, *sizes, args.iters, cell))
    print("| implementation | device | L | N | layers | hidden | input | forward ms | "
          "forward+backward ms |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, fwd, both, device in rows:
        print("| %s | %s | %d | %d | %d | %d | %d | %.2f | %.2f |"
              % ((name, device) + sizes + (fwd, both)), flush=True)


if __name__ == "__main__":
    main()
