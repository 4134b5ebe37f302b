"""The one layer interface, the registry by JSON "type", and option checking.

A layer is built from its JSON options, told its input shapes once (``setup``), and then
asked for the launches that compute its forward and backward passes over tensors that
the Net has placed. Those launches are kept in the Net's execution plan and re-run every
iteration, so ``forward``/``backward`` *prepare* work: they return a list of callables,
each taking a queue and enqueueing one kernel (usually ``program.Launch`` objects).
Used alone, ``run(layer.forward(...), ctx.queue)`` enqueues it at once.

Backward contract (as DLPrimitives and Caffe):
- ``dx[i]`` is None when input i needs no gradient; else it is written as
  ``dx[i] = accumulate[i] * dx[i] + grad`` so fan-out sums without extra kernels: the
  launchers take ``beta=float(accumulate[i])`` and never read dx[i] when it is 0.
- ``dparams[j]`` is None when parameter j is frozen or not trainable; else the gradient
  is always *added* (parameter gradients accumulate until the solver zeroes them).
"""
from collections import namedtuple

import numpy as np

from ..dtypes import as_dtype

__all__ = ["Layer", "LayerError", "TensorSpec", "ParamSpec", "register", "create", "REGISTRY",
           "run", "TRAIN", "PREDICT"]

TRAIN, PREDICT = "train", "predict"

REGISTRY = {}


class LayerError(ValueError):
    """A bad option, shape or input; the message starts with the layer's type and name."""


class TensorSpec(namedtuple("TensorSpec", "shape dtype")):
    """Shape and dtype of an activation tensor."""
    __slots__ = ()

    def __new__(cls, shape, dtype="float32"):
        return super().__new__(cls, tuple(int(s) for s in shape), as_dtype(dtype))


class ParamSpec(namedtuple("ParamSpec", "shape dtype trainable")):
    """Shape and dtype of a parameter; ``trainable=False`` for running statistics."""
    __slots__ = ()

    def __new__(cls, shape, dtype="float32", trainable=True):
        return super().__new__(cls, tuple(int(s) for s in shape), as_dtype(dtype), bool(trainable))


def register(type_name):
    """Class decorator: make a Layer constructible from JSON ``"type": type_name``."""
    def wrap(cls):
        if type_name in REGISTRY:
            raise ValueError("layer type %r registered twice" % type_name)
        cls.type_name = type_name
        REGISTRY[type_name] = cls
        return cls
    return wrap


def create(ctx, type_name, name=None, options=None):
    """The layer of JSON type ``type_name`` with ``options``; unknown types are an error."""
    cls = REGISTRY.get(type_name)
    if cls is None:
        raise LayerError("operator %r: unknown type %r; known types: %s"
                         % (name, type_name, ", ".join(sorted(REGISTRY))))
    return cls(ctx, name=name, **(options or {}))


def run(launches, queue):
    """Enqueue a list of prepared launches now."""
    for launch in launches:
        launch(queue)


class Layer:
    """Base of every graph operator.

    Subclasses set ``OPTIONS = {name: default}`` and call ``self.parse(options)`` in
    ``__init__``; unknown options are errors. Class attributes tell the Net what backward
    reads, so the memory planner keeps exactly those tensors alive:
    ``BACKWARD_READS_INPUTS``, ``BACKWARD_READS_OUTPUTS``; ``INPLACE`` says whether the
    output may share the input's buffer (then backward must not read the input);
    ``NO_GRAD_INPUTS`` lists inputs that never receive a gradient (a loss's labels), so
    the Net never asks for their ``dx``.
    """
    type_name = "Layer"
    OPTIONS = {}
    BACKWARD_READS_INPUTS = True
    BACKWARD_READS_OUTPUTS = False
    INPLACE = False
    HAS_BACKWARD = True
    NO_GRAD_INPUTS = ()

    def __init__(self, ctx, name=None, **options):
        self.ctx = ctx
        self.name = name if name is not None else self.type_name
        self.mode = TRAIN
        self.parse(options)

    # ----- options
    def parse(self, options):
        """Set ``self.options`` from the JSON options and OPTIONS' defaults; unknown ones fail."""
        unknown = sorted(set(options) - set(self.OPTIONS))
        if unknown:
            self.fail("unknown option%s %s; known options: %s"
                      % ("s" if len(unknown) > 1 else "", ", ".join(map(repr, unknown)),
                         ", ".join(sorted(self.OPTIONS)) or "none"))
        self.options = {k: options.get(k, v) for k, v in self.OPTIONS.items()}

    def fail(self, message):
        """Raise a LayerError starting with the layer's type and name."""
        raise LayerError("%s '%s': %s" % (self.type_name, self.name, message))

    def single_input(self, in_specs, layout=None, ndims=None, min_ndim=0, float32=True):
        """The spec of the layer's one input, checked: exactly one input, a rank among
        ``ndims`` (or at least ``min_ndim``; ``layout`` names it in the error, e.g.
        "(N, C, H, W)"), and float32 unless ``float32=False``."""
        if len(in_specs) != 1:
            self.fail("expects 1 input, got %d" % len(in_specs))
        spec = in_specs[0]
        rank = len(spec.shape)
        if (ndims is not None and rank not in ndims) or rank < min_ndim:
            if layout:
                want = "be " + layout
            else:
                want = "have %s dimensions" % (" or ".join(map(str, ndims)) if ndims is not None
                                               else "at least %d" % min_ndim)
            self.fail("input must %s, got shape %s" % (want, spec.shape))
        if float32 and spec.dtype != np.float32:
            self.fail("input dtype %s is not supported (float32 only)" % spec.dtype.name)
        return spec

    def config(self):
        """The JSON options that rebuild this layer (round-trips unchanged)."""
        return _jsonable(dict(self.options))

    # ----- the interface
    def setup(self, in_specs):
        """-> (out_specs, param_specs, workspace_bytes). Build kernels here."""
        raise NotImplementedError

    def reshape(self, in_shapes):
        """New batch size, same kernels: -> (out_shapes, workspace_bytes)."""
        out_specs, _, ws = self.setup([TensorSpec(s, sp.dtype) for s, sp in
                                       zip(in_shapes, self.in_specs)])
        return [s.shape for s in out_specs], ws

    def init_params(self, params, rng):
        """Fill parameter tensors with PyTorch's default initialisation."""

    def forward(self, x, y, params, ws):
        """-> list of launches computing ``y`` from ``x``."""
        raise NotImplementedError

    def backward(self, x, dx, y, dy, params, dparams, ws, accumulate):
        """-> list of launches computing the requested ``dx`` and ``dparams``."""
        raise NotImplementedError

    def __repr__(self):
        return "%s(%r, %s)" % (type(self).__name__, self.name, self.config())


def _jsonable(value):
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return value


def pair(layer, option, value, allow_negative=False):
    """An int-or-[h, w] option as an (h, w) tuple, checked."""
    if isinstance(value, (int, np.integer)):
        value = (int(value), int(value))
    if not (isinstance(value, (list, tuple)) and len(value) == 2
            and all(isinstance(v, (int, np.integer)) for v in value)):
        layer.fail("option %r must be an int or [h, w], got %r" % (option, value))
    if not allow_negative and any(v < 0 for v in value):
        layer.fail("option %r must not be negative, got %r" % (option, list(value)))
    return (int(value[0]), int(value[1]))
