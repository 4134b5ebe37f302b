"""dlprim-train: train a net from a JSON config (see docs/train.md).

``python -m dlprim.train config.json`` and the ``dlprim-train`` console script run
``main``; ``Trainer`` is the same loop for use from Python. The config (``config.py``,
with ``config_check.py`` and ``config_data.py``) is checked before any device work and
imports without an OpenCL driver, so the names here load on first use.
"""
__all__ = ["Trainer", "TrainResult", "main"]


def __getattr__(name):
    # "from .x import y" form: "from . import x" would ask this function for x again
    if name == "Trainer":
        from .trainer import Trainer as value
    elif name == "TrainResult":
        from .trainer import TrainResult as value
    elif name == "main":
        from .main import main as value
    else:
        raise AttributeError("module 'dlprim.train' has no attribute %r" % name)
    globals()[name] = value
    return value
