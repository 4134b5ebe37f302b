"""torchvision networks on PyTorch's ``ocl`` device (dlprim.torch) against PyTorch CPU,
forward and backward, and the training speed of one network on ocl beside dlprim's own
Net and beside another PyTorch device (the same script, the device string changed).

    python benchmarks/torch_ocl_models.py check --size 64 --batch 2
    python benchmarks/torch_ocl_models.py check --models fcn_resnet50 deeplabv3_resnet50
    python benchmarks/torch_ocl_models.py check --size 224 --float64 --models vgg16
    python benchmarks/torch_ocl_models.py speed --model resnet50 --batch 64 --size 224
    python benchmarks/torch_ocl_models.py speed --model resnet50 --batch 64 --size 224 --device cuda
    python benchmarks/torch_ocl_models.py net --model resnet50 --batch 64 --size 224

(one process per device: PyTorch's autograd engine does not take a Python device and CUDA
in the same backward pass.)

``check``: per network, the output in evaluation mode and every parameter's gradient of
a fixed loss, each as the largest difference relative to the CPU's largest magnitude;
"missing" names the first ATen operator without an ocl implementation. ``speed``: ms per
training step (forward, cross-entropy, backward, SGD step) on a device, with the host
time per operator on ocl; ``net``: dlprim's own Net for the same network, same device.
"""
import argparse
import time

import torch
import torch.nn.functional as F

NETWORKS = ["alexnet", "resnet18", "resnet50", "vgg16", "densenet161", "inception_v3",
            "shufflenet_v2_x1_0", "mobilenet_v2", "mobilenet_v3_large", "mobilenet_v3_small",
            "resnext50_32x4d", "wide_resnet50_2", "mnasnet1_0", "efficientnet_b0",
            "efficientnet_b4", "regnet_y_400mf", "squeezenet1_0", "googlenet"]
SEGMENTATION = ["fcn_resnet50", "deeplabv3_resnet50", "lraspp_mobilenet_v3_large"]


def build(name):
    import torchvision
    kw = {"aux_logits": False, "init_weights": True} if name in ("inception_v3", "googlenet") else {}
    torch.manual_seed(0)
    if name in SEGMENTATION:
        return getattr(torchvision.models.segmentation, name)(weights=None,
                                                               weights_backbone=None)
    return getattr(torchvision.models, name)(weights=None, **kw)


def rel(a, b):
    a, b = a.detach().float().cpu(), b.detach().float().cpu()
    return float((a - b).abs().max() / max(float(b.abs().max()), 1e-12))


def _run(model, x, y):
    """(output, parameter gradients) of one forward and cross-entropy backward."""
    out = model(x)
    if isinstance(out, dict):  # a segmentation network: per-pixel classes
        out = out["out"]
        y = y[:, None, None].expand(-1, *out.shape[2:])
    F.cross_entropy(out, y).backward()
    return out, [p.grad for p in model.parameters()]


def check(name, size, batch, device, float64=False):
    """Output and gradient differences of ocl against the CPU, relative to the CPU's
    largest magnitude per tensor; with ``float64`` against a float64 CPU run, and the
    float32 CPU's own differences from it beside (the error a float32 run has anyway)."""
    x = torch.randn(batch, 3, size, size, generator=torch.Generator().manual_seed(1))
    y = torch.arange(batch) % 10
    cpu = build(name).eval()
    ocl = build(name).eval()
    ocl.load_state_dict(cpu.state_dict())
    ocl.to(device)
    out = {"model": name}
    try:
        ref_out, ref_grads = _run(cpu, x, y)
        got_out, got_grads = _run(ocl, x.to(device), y.to(device))
        if float64:
            exact = build(name).eval()
            exact.load_state_dict(cpu.state_dict())
            exact.double()
            ex_out, ex_grads = _run(exact, x.double(), y)
            out["cpu32_forward"] = rel(ref_out, ex_out)
            out["cpu32_backward"] = max(rel(a, b) for a, b in zip(ref_grads, ex_grads)
                                        if b is not None)
            ref_out, ref_grads = ex_out, ex_grads
        out["forward"] = rel(got_out, ref_out)
        out["backward"] = max(rel(a, b) for a, b in zip(got_grads, ref_grads) if b is not None)
    except NotImplementedError as err:
        text = str(err)
        out["missing"] = text.split("operator ")[1].split(" ")[0] if "operator " in text else text
    return out


def speed(model, batch, size, device, steps, fused=False):
    net = build(model).to(device).train()
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9, fused=fused or None)
    x = torch.randn(batch, 3, size, size).to(device)
    y = (torch.arange(batch) % 1000).to(device)

    def step():
        opt.zero_grad()
        F.cross_entropy(net(x), y).backward()
        opt.step()

    def sync():
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        elif device.startswith("ocl"):
            import dlprim.torch
            dlprim.torch.synchronize()

    for _ in range(2):
        step()
    sync()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    sync()
    return 1e3 * (time.perf_counter() - start) / steps


def host_us_per_op(model, device):
    """(µs per operator, operators per step) of a step at batch 2 and 32x32, where the
    device's work is small: an upper bound on the host's time per operator."""
    from dlprim.torch.dispatch import counting_operators
    with counting_operators() as calls:
        ms = speed(model, 2, 32, device, 3)
    per_step = calls[0] / 5  # speed() runs 2 warm-up steps and 3 timed ones
    return 1e3 * ms / max(per_step, 1), per_step


def dlprim_net_ms(model, batch, size):
    """ms per training step of dlprim's own Net for the same network on the ocl device."""
    import dlprim.torch
    from dlprim import models
    from dlprim.cli.benchmark import run_net
    graph = getattr(models, model)(batch=batch, image_size=size, train=True).to_dict()
    return run_net(dlprim.torch.context(), graph, train=True, warmup=2, iters=5)["mean_ms"]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("what", choices=["check", "speed", "net"])
    p.add_argument("--models", nargs="*", default=NETWORKS + SEGMENTATION)
    p.add_argument("--model", default="resnet50")
    p.add_argument("--size", type=int, default=64)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--device", default="ocl")
    p.add_argument("--fused", action="store_true", help="speed: SGD(fused=True)")
    p.add_argument("--float64", action="store_true",
                   help="check: compare with a float64 CPU run (and show the float32 CPU's error)")
    args = p.parse_args(argv)
    print("PyTorch %s" % torch.__version__)
    if args.what == "net":
        ms = dlprim_net_ms(args.model, args.batch, args.size)
        print("dlprim Net %s batch %d %dx%d training (dlprim-benchmark's step, Adam): %.1f ms "
              "per step" % (args.model, args.batch, args.size, args.size, ms))
        return
    if args.device.startswith("ocl"):
        import dlprim.torch
        print("ocl device: %s" % dlprim.torch.context().name)
    if args.what == "check":
        f = lambda r, k: "%.1e" % r[k] if k in r else "-"
        if args.float64:
            print("| network | ocl forward | ocl backward | CPU float32 forward | CPU float32 "
                  "backward | missing |  (all against a float64 CPU run)")
            print("|---|---|---|---|---|---|")
        else:
            print("| network | forward | backward | missing |")
            print("|---|---|---|---|")
        for name in args.models:
            size = max(args.size, 75) if name == "inception_v3" else args.size
            r = check(name, size, args.batch, args.device, args.float64)
            cols = [f(r, "forward"), f(r, "backward")]
            if args.float64:
                cols += [f(r, "cpu32_forward"), f(r, "cpu32_backward")]
            print("| %s | %s | %s |" % (name, " | ".join(cols), r.get("missing", "")), flush=True)
        return
    ms = speed(args.model, args.batch, args.size, args.device, args.steps, args.fused)
    print("%s batch %d %dx%d training on %s%s: %.1f ms per step" % (
        args.model, args.batch, args.size, args.size, args.device,
        " (SGD fused=True)" if args.fused else "", ms), flush=True)
    if args.device.startswith("ocl"):
        us, ops = host_us_per_op(args.model, args.device)
        print("host: %.0f operators per step, at most %.0f us per operator (batch 2, 32x32)"
              % (ops, us), flush=True)


if __name__ == "__main__":
    main()
