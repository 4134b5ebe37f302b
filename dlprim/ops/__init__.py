"""dlprim's operator library: every operator declared once (``declare.py`` says what a
declaration holds), one module per family, found by the family's name.

The ``ocl`` device's dispatch table for the pointwise and reduction kinds, the ONNX
elementwise converters and exporters, ``dlprim.nn.functional``'s elementwise functions and
the table in docs/operators.md are generated from ``OPS``; see docs/architecture.md,
"How to add an operator". Pure Python: importing it needs no driver and no torch.
"""
from .declare import Operator, OPS, declare, get, by_aten, layer_operators, DTYPE_CLASSES
from . import (elementwise, logic, activations, reductions, scans, sorting,  # noqa: F401
               indexing, creation, shape, convolution, pooling, interpolation, losses,
               normalization, random, linalg, tensor, softmax, attention, optim,
               special, misc, detection, recurrent)  # (declarations)

__all__ = ["Operator", "OPS", "declare", "get", "by_aten", "layer_operators", "DTYPE_CLASSES"]
