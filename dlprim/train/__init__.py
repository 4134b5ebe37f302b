"""dlprim-train: train a net from a JSON config (see docs/train.md).

``python -m dlprim.train config.json`` and the ``dlprim-train`` console script run
``main``; ``Trainer`` is the same loop for use from Python, and ``fit``/``evaluate``
(also ``dlprim.fit``, ``dlprim.evaluate``) run it on a Net and numpy arrays or a loader
(``fitting.py``; the loop itself is ``loop.py``, one batch ``steps.py``, early stopping
``callbacks.py``). The config (``config.py``, with ``config_check.py`` and
``config_data.py``) is checked before any device work and imports without an OpenCL
driver, so the names here load on first use.
"""
__all__ = ["Trainer", "TrainResult", "main", "fit", "evaluate", "EarlyStopping", "Callback"]


def __getattr__(name):
    # "from .x import y" form: "from . import x" would ask this function for x again
    if name == "Trainer":
        from .trainer import Trainer as value
    elif name == "TrainResult":
        from .trainer import TrainResult as value
    elif name == "main":
        from .main import main as value
    elif name == "fit":
        from .fitting import fit as value
    elif name == "evaluate":
        from .fitting import evaluate as value
    elif name == "EarlyStopping":
        from .callbacks import EarlyStopping as value
    elif name == "Callback":
        from .callbacks import Callback as value
    else:
        raise AttributeError("module 'dlprim.train' has no attribute %r" % name)
    globals()[name] = value
    return value
