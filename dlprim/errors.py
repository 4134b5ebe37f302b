"""The family of errors dlprim raises for what a user can fix.

Every one derives from ``dlprim.Error``, and also from the built-in exception that fits
(ValueError, TypeError, FileNotFoundError, FileExistsError, MemoryError ...), so code
catching either keeps working. Each message names the thing to fix: the operator and its
option, the net input, the parameter, the file and the entry in it, or the config field
path. The specific classes of a part live beside it (``LayerError`` in layers/base.py,
``GraphError`` in net/graph.py, ``ConfigError`` in train/config.py, ``DataError`` in
data/errors.py, ``OnnxImportError`` in onnx/errors.py, ``DeviceError`` in context.py,
``KernelBuildError`` in kernels/program.py); the ones shared across parts are here.
docs/errors.md lists them all and what raises them.

Pure Python, no dependencies.
"""

__all__ = ["Error", "FileFormatError", "CheckpointError", "RunExistsError", "InputError",
           "LabelError", "DeviceMemoryError", "NonFiniteError", "ParameterError",
           "MissingCheckpointError", "MissingFileError"]


class Error(Exception):
    """Base of every error dlprim raises for something the user can fix."""


class FileFormatError(Error, ValueError):
    """A damaged or foreign file (weights, checkpoint, metrics): names the file and the
    entry in it that is wrong."""


class CheckpointError(FileFormatError):
    """A checkpoint folder or its files (latest.json, state.json, solver.npz) cannot be
    used to resume."""


class RunExistsError(Error, FileExistsError):
    """An output folder already holds a run; names the folder and the ways out."""


class InputError(Error, ValueError):
    """Data given to a net (an input array, its shape or dtype, a missing input) that the
    net cannot take; names the net input and the operator that refuses it."""


class LabelError(InputError):
    """A label a loss cannot use: not an integer, or outside [0, classes) and not the
    loss's ignore_index; names the layer, the bad value and its position."""


class DeviceMemoryError(Error, MemoryError):
    """Device memory ran out, or a buffer exceeds the device's largest allocation; names
    the tensor or arena, the bytes asked for and the device's limits."""


class NonFiniteError(Error, FloatingPointError):
    """A value that must be finite is not (a training loss that became NaN or infinite)."""


class ParameterError(Error, ValueError):
    """Parameters given to a net (``set_parameters``, ``load_parameters``) that do not fit
    it: names every parameter with a wrong shape or a non-numeric dtype, then the missing
    and the unexpected names."""


class MissingCheckpointError(CheckpointError, FileNotFoundError):
    """No checkpoint to resume from, or a file missing from a checkpoint folder; names the
    folder or file."""


class MissingFileError(Error, FileNotFoundError):
    """A file the user named (a net, weights, an ONNX model) that is not there; names it."""


class MissingDependencyError(Error, ImportError):
    """An optional package a feature needs is not installed: names it and the pip extra."""
