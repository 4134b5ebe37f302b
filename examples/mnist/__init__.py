"""MNIST: a LeNet-style net on a 4,000-digit subset (config.json, lenet.json, data/)."""
