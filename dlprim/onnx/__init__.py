"""ONNX in and out: import a model as a NetConfig and weights (or a ready Net), export a Net.

    cfg, weights = dlprim.onnx.to_netconfig("resnet.onnx", batch=8)   # no device needed
    net = dlprim.onnx.load("resnet.onnx", ctx)                        # a ready Net
    dlprim.onnx.save(net, "out.onnx")                                 # or net.to_onnx(...)

Needs the ``onnx`` package (the ``onnx`` extra); importing dlprim does not. A model with
operators dlprim cannot run is rejected before anything is built, with every such
operator listed (``UnsupportedModelError``). See docs/onnx.md for the operator matrix.
"""
from typing import Any, Dict, Optional, Tuple

from ..net.weights import NET_EXPORTERS
from .errors import OnnxImportError, UnsupportedModelError
from .model import ONNXModel

__all__ = ["to_netconfig", "load", "save", "ONNXModel", "OnnxImportError",
           "UnsupportedModelError"]


def to_netconfig(path_or_model: Any, batch: Optional[int] = None,
                 live: Any = (), mode: str = "predict",
                 shapes: Optional[Dict[str, Any]] = None) -> Tuple[Any, Dict[str, Any]]:
    """(NetConfig, {parameter name: numpy array}) for an ONNX file path, bytes or ModelProto.

    ``batch`` sets the first dimension of every input (default: the model's own, or 1
    where the model leaves it symbolic). ``shapes`` ({input name: sizes}) gives inputs
    their whole shape, for models that leave other dimensions symbolic (a sequence
    length: ``shapes={"input_ids": (1, 128)}``); the model's fixed sizes must agree. A
    Net is planned for fixed shapes: another length is another conversion (the kernels
    built for the first are reused). ``live``: initializer names that are parameters
    still being trained: nothing computed from them is folded into a constant at import
    (beyond reshapes and transposes), so the net computes it and trains them.
    ``mode``: the Net's mode the config is for. For "train", a training export's
    BatchNormalization (``training_mode=1``, its running statistics not read) becomes the
    BatchNorm layer, which normalizes by the batch's statistics in train mode, updates its
    running ones and trains its scale and bias; for "predict" it is composed exactly as
    ONNX defines it (the batch's statistics, whatever the mode).
    """
    from .importer import import_model
    if mode not in ("predict", "train"):
        raise ValueError("mode must be 'predict' or 'train', got %r" % (mode,))
    return import_model(path_or_model, batch, live, mode, shapes)


def load(path_or_model: Any, ctx: Any, batch: Optional[int] = None, mode: str = "predict",
         precision: str = "fp32", shapes: Optional[Dict[str, Any]] = None) -> Any:
    """A Net on ``ctx`` with the model's weights, set up in ``mode`` ("predict" or "train")
    and ``precision`` ("fp32", "tf32", "fp16" or "bf16": docs/precision.md); ``batch`` and
    ``shapes`` as ``to_netconfig``'s.

    In train mode the imported weights are trainable parameters and BatchNorm uses batch
    statistics; add a loss to the NetConfig from ``to_netconfig`` to fine-tune.
    """
    from ..net import Net
    cfg, weights = to_netconfig(path_or_model, batch, mode=mode, shapes=shapes)
    net = Net(ctx, mode=mode, precision=precision)  # (no random initialisation: every
    net.load(cfg)                                    # parameter is the file's)
    net.setup()
    net.set_parameters(weights)
    return net


def save(net: Any, path: Any, opset: Optional[int] = None) -> Any:
    """Write ``net`` (a set-up Net, with its current weights) as an ONNX model file."""
    from .export import export_net
    return export_net(net, path, opset)


NET_EXPORTERS["onnx"] = save  # net.to_onnx(path) calls this
