"""The table of DLPrimitives' test files and their generation, seeded and size-bounded.

``generate(name, sizes)`` returns the content of ``test_case_<name>.json`` (torch seeded
with 123 per file, as DLPrimitives' generator does, without touching the caller's random
state); ``write(name, folder, sizes)`` stores it there. ``sizes`` (case_builder.Sizes)
bounds the cases kept; the default keeps DLPrimitives' every case at its full size.
"""
import json
import os

import torch

from dlprim.utils import atomic_write

from . import generate_conv as conv
from . import generate_layers as layers
from . import generate_ops as ops
from .case_builder import Sizes

__all__ = ["FILES", "generate", "write"]

FILES = {
    "softmax": ops.make_softmax,
    "log_softmax": ops.make_log_softmax,
    "softmax_loss": ops.make_softmax_loss,
    "nll_loss": ops.make_nll_loss,
    "mse_loss": ops.make_mse_loss,
    "elementwise": ops.make_elementwise,
    "pooling2d": layers.make_pooling2d,
    "global_pooling": layers.make_global_pooling,
    "inner_product": layers.make_inner_product,
    "conv2d": conv.make_conv2d,
    "conv2d_gemm": lambda sizes: conv.make_conv2d(sizes, "gemm"),
    "conv2d_win": lambda sizes: conv.make_conv2d(sizes, "winograd"),
    "conv2d_dsc": lambda sizes: conv.make_conv2d(sizes, "depthwise_separable"),
    "tr_conv2d": conv.make_tr_conv2d,
    "tr_conv2d_gemm": lambda sizes: conv.make_tr_conv2d(sizes, "gemm"),
    "tr_conv2d_win": lambda sizes: conv.make_tr_conv2d(sizes, "winograd"),
    "tr_conv2d_dsc": lambda sizes: conv.make_tr_conv2d(sizes, "depthwise_separable"),
    "activation": ops.make_activation,
    "batchnorm": layers.make_batchnorm,
    "concat": ops.make_concat,
    "slice": ops.make_slice,
    "threshold": ops.make_threshold,
    "hardtanh": ops.make_hardtanh,
    "abs": ops.make_abs,
    "reduction": layers.make_reduction,
    "param": ops.make_param,
    "interpolation": layers.make_interpolation,
}


def generate(name, sizes=None):
    """The test file ``name`` (a key of FILES) as a dict."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(123)
        return FILES[name](sizes or Sizes())


def write(name, folder, sizes=None):
    """Write ``test_case_<name>.json`` into ``folder``; returns its path. An existing file
    is an error: generated cases are never silently replaced."""
    path = os.path.join(folder, "test_case_%s.json" % name)
    if os.path.exists(path):
        raise FileExistsError("%s exists; remove it to generate it again" % path)
    text = json.dumps(generate(name, sizes), indent=1).encode()
    atomic_write(path, lambda f: f.write(text))
    return path
