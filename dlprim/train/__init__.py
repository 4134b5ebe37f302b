"""dlprim-train: train a net from a JSON config (see docs/train.md).

``python -m dlprim.train config.json`` and the ``dlprim-train`` console script run
``main``; ``Trainer`` is the same loop for use from Python.
"""
from .trainer import Trainer, TrainResult
from .main import main

__all__ = ["Trainer", "TrainResult", "main"]
