"""Training accuracy of precision "fp16" beside "fp32": resnet18 at 32x32 (a CIFAR-size
CNN) on a synthetic 10-class task, the same data, seeds and steps for both.

Each class is a fixed random 3x32x32 template; a sample is its class's template times
``--signal`` plus unit Gaussian noise, rolled by up to 3 pixels each way, so the net has
to learn shift-tolerant features and the task is not solved by the first epoch. Prints
each epoch's validation accuracy and training loss per precision, and the loss scale.

    python benchmarks/fp16_accuracy.py [--epochs 8] [--signal 0.4] [--device gpu]
"""
import argparse
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

CLASSES = 10


def make(templates, n, signal, seed):
    """n shifted, noisy samples of random classes and their labels."""
    r = np.random.default_rng(seed)
    y = r.integers(0, CLASSES, n)
    x = templates[y] * signal + r.standard_normal((n, 3, 32, 32)).astype(np.float32)
    shifts = r.integers(-3, 4, (n, 2))
    for i in range(n):
        x[i] = np.roll(x[i], tuple(shifts[i]), axis=(1, 2))
    return x, y.astype(np.int32)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default=os.environ.get("DLPRIM_DEVICE", "gpu"))
    p.add_argument("--epochs", type=int, default=8)
    p.add_argument("--signal", type=float, default=0.4)
    p.add_argument("--train", type=int, default=20000)
    p.add_argument("--val", type=int, default=4000)
    p.add_argument("--batch", type=int, default=128)
    args = p.parse_args()
    import dlprim as dp
    from dlprim import models
    ctx = dp.Context(args.device)
    templates = np.random.default_rng(0).standard_normal((CLASSES, 3, 32, 32)).astype(np.float32)
    xtr, ytr = make(templates, args.train, args.signal, 1)
    xva, yva = make(templates, args.val, args.signal, 2)
    print("%s, driver %s" % (ctx.name, ctx.facts.driver_version))
    for precision in ("fp32", "fp16"):
        net = dp.Net(ctx, models.resnet18(batch=args.batch, image_size=32, classes=CLASSES),
                     mode="train", precision=precision, seed=0)
        start = time.time()
        h = dp.fit(net, xtr, ytr, epochs=args.epochs, batch_size=args.batch,
                   validation=(xva, yva), seed=0, progress=False)
        print("%s: validation accuracy %s; training loss %s; %.1f s; %s" % (
            precision, " ".join("%.4f" % a for a in h["val_accuracy"]),
            " ".join("%.3f" % v for v in h["loss"]), time.time() - start, net.loss_scale),
            flush=True)


if __name__ == "__main__":
    main()
