"""Where a HuggingFace model's converted Net spends its forward pass: the Net that
``dlprim.torch.export_net`` makes (the conversion torch.compile uses), timed per layer
type from OpenCL events, beside the same model's eager forward on CUDA when there is one.

    python benchmarks/converted_net_profile.py [--batch 8] [--seq 256] [--device gpu]

GPT-2 (124M, the default config, random weights), float32, inference.
"""
import argparse
import collections
import time

import torch


class _Logits(torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, ids):
        return self.model(input_ids=ids, use_cache=False).logits


def cuda_ms(model, ids, iters=10):
    model, ids = model.cuda(), ids.cuda()
    with torch.no_grad():
        for _ in range(3):
            model(ids)
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(iters):
            model(ids)
        torch.cuda.synchronize()
    model.cpu()
    return (time.perf_counter() - start) / iters * 1e3


def main(argv=None):
    import transformers
    import dlprim as dp
    import dlprim.torch
    from dlprim.cli.benchmark import _profile
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--device", default=None, help="dlprim device (default: DLPRIM_DEVICE)")
    args = p.parse_args(argv)
    torch.manual_seed(0)
    model = _Logits(transformers.GPT2LMHeadModel(transformers.GPT2Config()).eval())
    ids = torch.randint(0, 50257, (args.batch, args.seq))
    if torch.cuda.is_available():
        print("cuda eager forward: %.2f ms" % cuda_ms(model, ids))
    cfg, weights = dlprim.torch.export_net(model, (ids,))
    ctx = dp.Context(args.device, profiling=True)
    net = dp.Net(ctx, cfg, mode="predict")
    net.set_parameters(weights)
    net(**{cfg.inputs[0]["name"]: ids.numpy()})
    ctx.finish()
    start = time.perf_counter()
    for _ in range(10):
        net.forward()
    ctx.finish()
    print("dlprim Net forward: %.2f ms, %d operators" % ((time.perf_counter() - start) * 100,
                                                         len(cfg.operators)))
    by, count = collections.defaultdict(float), collections.Counter()
    for kind, _, layer, ms in _profile(ctx, net, False):
        if kind == "forward":
            by[layer] += ms
            count[layer] += 1
    total = sum(by.values())
    print("| layer type | operators | ms | share |\n|---|---:|---:|---:|")
    for layer, ms in sorted(by.items(), key=lambda kv: -kv[1]):
        print("| %s | %d | %.2f | %.1f%% |" % (layer, count[layer], ms, 100 * ms / total))


if __name__ == "__main__":
    main()
