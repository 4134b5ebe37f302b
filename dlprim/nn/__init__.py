"""dlprim.nn: models written as in PyTorch, built as dlprim nets.

    import dlprim.nn as nn
    import dlprim.nn.functional as F

    class Block(nn.Module):
        def __init__(self, channels):
            super().__init__()
            self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
            self.bn1 = nn.BatchNorm2d(channels)
            self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
            self.bn2 = nn.BatchNorm2d(channels)

        def forward(self, x):
            out = F.relu(self.bn1(self.conv1(x)))
            return F.relu(self.bn2(self.conv2(out)) + x)

    cfg = Block(8).netconfig([4, 8, 16, 16])                 # a NetConfig
    net = dlprim.Net(ctx, Block(8), input_shape=[4, 8, 16, 16])

``forward`` runs once, over Values (symbolic tensors with a shape), when the net is
built; what it computes becomes the net's operators, named by the modules' attribute paths,
with parameters named as PyTorch's state dict names them ("bn1.running_mean"), so
``net.set_parameters({k: v.numpy() for k, v in torch_model.state_dict().items()})`` loads
PyTorch's weights. Activations after a convolution, linear layer or sum fold into it.

Package layout: module.py (Module), value.py (Value), trace.py (the record of a forward
pass), lowering.py (record -> NetConfig), losses.py (loss heads), ops.py (what Values and
functional compute), one file per layer family, containers.py, functional.py.
"""
from .activations import (ELU, GELU, Hardsigmoid, Hardswish, Hardtanh, LeakyReLU, Mish, ReLU,
                          ReLU6, SiLU, Sigmoid, Softplus, Tanh)
from .containers import ModuleList, Sequential
from .conv import Conv2d
from .dropout import Dropout
from .embedding import Embedding
from .linear import Identity, Linear
from .losses import LOSSES
from .module import Module
from .normalization import BatchNorm1d, BatchNorm2d, GroupNorm, LayerNorm
from .pooling import AdaptiveAvgPool2d, AdaptiveMaxPool2d, AvgPool2d, MaxPool2d
from .shape import Flatten
from .softmax import LogSoftmax, Softmax
from .value import Value
from . import functional

__all__ = ["Module", "Value", "Sequential", "ModuleList", "Identity", "Conv2d", "Linear",
           "BatchNorm1d", "BatchNorm2d", "LayerNorm", "GroupNorm", "ReLU", "ReLU6", "Sigmoid",
           "Tanh", "GELU", "SiLU", "LeakyReLU", "ELU", "Hardswish", "Hardsigmoid", "Mish",
           "Softplus", "Hardtanh", "MaxPool2d", "AvgPool2d", "AdaptiveAvgPool2d",
           "AdaptiveMaxPool2d", "Flatten", "Dropout", "Embedding", "Softmax", "LogSoftmax",
           "LOSSES", "functional"]
