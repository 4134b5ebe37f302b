"""Train the MNIST example net as an ordinary PyTorch script: nn.Module, DataLoader, Adam,
cross-entropy. ``--device ocl`` runs it on dlprim's OpenCL device (``import dlprim.torch``
is the only change); ``--device cpu`` (or cuda) runs it on PyTorch's own.

    python examples/mnist/train_pytorch.py --device ocl
    python examples/mnist/train_pytorch.py --device cpu
"""
import argparse
import gzip
import os
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

HERE = os.path.dirname(os.path.abspath(__file__))


def read_idx(path):
    """An idx file (MNIST's format, gzipped) as a numpy array."""
    with gzip.open(path, "rb") as f:
        data = f.read()
    dims = data[3]
    shape = tuple(int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(dims))
    return np.frombuffer(data, np.uint8, offset=4 + 4 * dims).reshape(shape)


def dataset(split, limit=None):
    images = read_idx(os.path.join(HERE, "data", "%s-images-idx3-ubyte.gz" % split))[:limit]
    labels = read_idx(os.path.join(HERE, "data", "%s-labels-idx1-ubyte.gz" % split))[:limit]
    x = (torch.from_numpy(images.astype(np.float32) / 255.0) - 0.1307) / 0.3081
    return TensorDataset(x.unsqueeze(1), torch.from_numpy(labels.astype(np.int64)))


class LeNet(nn.Module):
    """examples/mnist/lenet.json in PyTorch."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 5, padding=2)
        self.conv2 = nn.Conv2d(16, 32, 5, padding=2)
        self.fc1 = nn.Linear(32 * 7 * 7, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = F.relu(self.fc1(x.flatten(1)))
        return self.fc2(x)


def evaluate(model, loader, device):
    model.eval()
    correct = total = 0
    with torch.no_grad():
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            correct += (model(x).argmax(1) == y).sum().item()
            total += y.shape[0]
    return correct / total


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="ocl", help="ocl, ocl:N, cpu or cuda")
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--limit", type=int, default=None, help="use the first N images only")
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args(argv)
    if args.device.startswith("ocl"):
        import dlprim.torch  # noqa: F401  (makes the ocl device exist)
    torch.manual_seed(args.seed)
    train = DataLoader(dataset("train", args.limit), batch_size=args.batch, shuffle=True)
    val = DataLoader(dataset("val", args.limit), batch_size=256)
    model = LeNet().to(args.device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for epoch in range(args.epochs):
        model.train()
        start, seen, total_loss = time.perf_counter(), 0, 0.0
        for x, y in train:
            x, y = x.to(args.device), y.to(args.device)
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            total_loss += loss.item() * y.shape[0]
            seen += y.shape[0]
        rate = seen / (time.perf_counter() - start)
        print("epoch %d: train loss %.4f, val accuracy %.4f, %.0f images/s"
              % (epoch + 1, total_loss / seen, evaluate(model, val, args.device), rate))
    return evaluate(model, val, args.device)


if __name__ == "__main__":
    main()
