"""The one layer interface, the registry by JSON "type", and option checking.

A layer is built from its JSON options, told its input shapes (``setup``), and then
asked for the launches that compute its forward and backward passes over tensors that
the Net has placed. Those launches are kept in the Net's execution plan and re-run every
iteration, so ``forward``/``backward`` *prepare* work: they return a list of callables,
each taking a queue and enqueueing one kernel (usually ``program.Launch`` objects).
Used alone, ``run(layer.forward(...), ctx.queue)`` enqueues it at once.

Setup contract: ``setup`` belongs to this base class. It records the input specs, calls
the layer's ``build(in_specs)`` and checks the ``Setup`` it returns: output specs,
parameter specs, workspace bytes, saved tensors and ``LayerFlags``. Everything the Net
plans from comes back through that one value, never from attributes a layer happens to
set, so a new layer cannot forget part of the contract. The first setup fixes the
parameter shapes (``param_specs``): a later one (a new batch size, another mode) that
would need other shapes fails, naming the layer, instead of leaving launches bound to
parameters of the wrong size.

Memory a layer gets from the Net, placed in its planned arena:
- a workspace (``ws``): scratch bytes, alive only during this layer's own launches;
- saved tensors (``saved``): written by forward and read by backward of the same
  iteration, alive from one to the other (BatchNorm's batch statistics, the max-pooling
  argmax, the Dropout mask). A layer declares them per mode: none where forward keeps
  nothing for backward (predict mode).

Backward contract (as DLPrimitives and Caffe):
- ``dx[i]`` is None when input i needs no gradient; else it is written as
  ``dx[i] = accumulate[i] * dx[i] + grad`` so fan-out sums without extra kernels: the
  launchers take ``beta=float(accumulate[i])`` and never read dx[i] when it is 0.
- ``dparams[j]`` is None when parameter j is frozen or not trainable; else the gradient
  is always *added* (parameter gradients accumulate until the solver zeroes them).
"""
from collections import namedtuple

import numpy as np

from ..dtypes import HALF_TYPES, as_dtype, dtype_name, is_narrow
from ..errors import Error
from ..utils import is_int, shape_problem, unknown_names

__all__ = ["Layer", "LayerError", "HALF_TAKERS", "TensorSpec", "ParamSpec", "LayerFlags",
           "Setup", "register", "create", "REGISTRY", "run", "TRAIN", "PREDICT"]

TRAIN, PREDICT = "train", "predict"
HALF_TAKERS = ("follows", "prefers", "reads")  # HALF_STORAGE values taking 16-bit inputs

REGISTRY = {}


class LayerError(Error, ValueError):
    """A bad option, shape or input; the message starts with the layer's type and name."""


class TensorSpec(namedtuple("TensorSpec", "shape dtype")):
    """Shape and dtype of an activation tensor."""
    __slots__ = ()

    def __new__(cls, shape, dtype="float32"):
        return super().__new__(cls, _checked_shape(shape, "TensorSpec"), as_dtype(dtype))


class ParamSpec(namedtuple("ParamSpec", "shape dtype trainable name")):
    """Shape and dtype of a parameter; ``trainable=False`` for running statistics;
    ``name``: the default name's suffix, ``<op>.<name>`` rather than ``<op>.<i>`` (the
    names PyTorch's state dict gives a module's parameters, e.g. ``weight_ih_l0``)."""
    __slots__ = ()

    def __new__(cls, shape, dtype="float32", trainable=True, name=None):
        return super().__new__(cls, _checked_shape(shape, "ParamSpec"), as_dtype(dtype),
                               bool(trainable), None if name is None else str(name))


def _checked_shape(shape, what):
    # int() would turn 8.9 into 8 and True into 1: a wrong size must fail where it is made
    if not isinstance(shape, (list, tuple, str)) and hasattr(shape, "__iter__"):
        shape = tuple(shape)  # a numpy array or a generator of sizes
    problem = shape_problem(shape, what + " shape")
    if problem:
        raise LayerError(problem)
    return tuple(int(n) for n in shape)


class LayerFlags(namedtuple("LayerFlags", "backward_reads_inputs backward_reads_outputs "
                                           "inplace has_backward no_grad_inputs view")):
    """What a layer's backward reads, so the memory planner keeps exactly those tensors
    alive for it; ``inplace``: the output may share its input's memory (the planner still
    refuses when a backward pass reads the old value); ``has_backward=False`` stops
    gradients at the layer; ``no_grad_inputs``: positions of inputs that never get a
    gradient (a loss's labels); ``view``: the one output is the one input's bytes under
    another shape, so the planner may give both one buffer (and their gradients one
    too) whatever they are named, and the layer copies only where they differ."""
    __slots__ = ()

    def __new__(cls, backward_reads_inputs=True, backward_reads_outputs=False, inplace=False,
                has_backward=True, no_grad_inputs=(), view=False):
        return super().__new__(cls, bool(backward_reads_inputs), bool(backward_reads_outputs),
                               bool(inplace), bool(has_backward),
                               tuple(int(i) for i in no_grad_inputs), bool(view))


class Setup(namedtuple("Setup", "outputs params workspace saved flags param_outputs")):
    """What ``Layer.build`` returns and ``Layer.setup`` hands to the Net.

    ``outputs``: a TensorSpec per output; ``params``: a ParamSpec per parameter;
    ``workspace``: scratch bytes for this layer's own launches; ``saved``: a TensorSpec
    per tensor that forward writes and backward reads (given to both as ``saved``);
    ``flags``: LayerFlags, None for the class attributes' (``Layer.default_flags``);
    ``param_outputs``: (output index, parameter index) pairs of outputs that are the
    parameter itself (a key/value cache handed on): the Net gives them the parameter's
    memory, not the arena's, so nothing is copied, and no in-place write may reuse it.
    Such a parameter must have the output's shape and dtype.
    """
    __slots__ = ()

    def __new__(cls, outputs, params=(), workspace=0, saved=(), flags=None, param_outputs=()):
        return super().__new__(cls, outputs, params, workspace, saved, flags,
                               tuple(param_outputs))


# the class attributes behind LayerFlags, in its field order
FLAG_ATTRIBUTES = ("BACKWARD_READS_INPUTS", "BACKWARD_READS_OUTPUTS", "INPLACE", "HAS_BACKWARD",
                   "NO_GRAD_INPUTS", "VIEW")


def register(type_name):
    """Class decorator: make a Layer constructible from JSON ``"type": type_name``."""
    def wrap(cls):
        if type_name in REGISTRY:
            raise ValueError("layer type %r registered twice" % type_name)
        cls.type_name = type_name
        REGISTRY[type_name] = cls
        return cls
    return wrap


def create(ctx, type_name, name=None, options=None, num_outputs=None):
    """The layer of JSON type ``type_name`` with ``options``; unknown types are an error.
    ``num_outputs``: how many outputs the graph lists for it (``Layer.num_outputs``)."""
    cls = REGISTRY.get(type_name)
    if cls is None:
        raise LayerError("operator %r: unknown type %r; known types: %s"
                         % (name, type_name, ", ".join(sorted(REGISTRY))))
    layer = cls(ctx, name=name, **(options or {}))
    layer.num_outputs = None if num_outputs is None else int(num_outputs)
    return layer


def run(launches, queue):
    """Enqueue a list of prepared launches now."""
    for launch in launches:
        launch(queue)


class Layer:
    """Base of every graph operator.

    Subclasses set ``OPTIONS = {name: default}`` and call ``self.parse(options)`` in
    ``__init__``; unknown options are errors. They implement ``build`` (never ``setup``
    or ``reshape``, which this class owns), ``forward``, ``backward`` and, with
    parameters, ``init_params``.

    Class attributes are the default ``LayerFlags`` for layers whose facts never vary:
    ``BACKWARD_READS_INPUTS``, ``BACKWARD_READS_OUTPUTS``, ``INPLACE`` (the output may
    share the input's buffer; then backward must not read the input), ``HAS_BACKWARD``
    ``NO_GRAD_INPUTS`` (positions of inputs that never receive a gradient, a loss's
    labels: the Net never asks for their ``dx``) and ``VIEW`` (the output is the input's
    bytes: the planner may alias them). A layer whose facts depend on its
    options returns them from ``build`` (``flags=self.default_flags(inplace=...)``);
    after ``setup`` they are ``layer.flags``, which is all the Net reads.
    """
    type_name = "Layer"
    OPTIONS = {}
    # how many outputs the graph lists for the operator (None: used alone); a layer whose
    # later outputs are optional (the final states of LSTM) gives that many
    num_outputs = None
    BACKWARD_READS_INPUTS = True
    BACKWARD_READS_OUTPUTS = False
    INPLACE = False
    HAS_BACKWARD = True
    NO_GRAD_INPUTS = ()
    VIEW = False
    # float16 activations (a net of precision "fp16", net/mixed_precision.py): "none" takes
    # float32 only (the Net casts half inputs back); "follows" takes either and stores its
    # float outputs as its inputs are (memory-bound layers); "prefers" wants half (the
    # convolutions, whose traffic and products gain); "reads" takes either as it comes and
    # keeps float32 outputs (a loss widening 16-bit logits as it loads them); "exact":
    # Cast, as its options say
    HALF_STORAGE = "none"
    # takes the narrow storage types (float8, float4, int4/uint4, int2/uint2: one code per
    # byte, dtypes.NARROW_TYPES) as inputs: only conversions and layout copies, which move
    # codes unchanged; any other layer would compute on the codes as if they were numbers
    CARRIES_NARROW = False

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        for method in ("setup", "reshape"):
            if method in vars(cls):
                raise TypeError("%s overrides Layer.%s, which the base class owns (it records "
                                "the input specs and checks what build returns); implement "
                                "build(in_specs) instead" % (cls.__name__, method))

    def __init__(self, ctx, name=None, **options):
        self.ctx = ctx
        self.name = name if name is not None else self.type_name
        self.mode = TRAIN
        self.precision = "fp32"  # of the GEMM products (core/precision.py); the Net sets it
        self.in_specs = None
        self.flags = None
        self.param_specs = None  # fixed by the first setup: the Net allocates them once
        self.parse(options)

    # ----- options
    def parse(self, options):
        """Set ``self.options`` from the JSON options and OPTIONS' defaults; unknown ones fail."""
        unknown = sorted(set(options) - set(self.OPTIONS))
        if unknown:
            # DLPrimitives ignores an option it does not know, so a misspelled one would
            # silently leave the default: refuse it, with the nearest known spelling
            self.fail("unknown option%s %s; known options: %s"
                      % ("s" if len(unknown) > 1 else "", unknown_names(unknown, self.OPTIONS),
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
        if float32 and spec.dtype != np.float32 and not (
                spec.dtype in HALF_TYPES and self.HALF_STORAGE in HALF_TAKERS):
            self.fail("input dtype %s is not supported (float32%s)" % (
                dtype_name(spec.dtype),
                " or float16 or bfloat16" if self.HALF_STORAGE in HALF_TAKERS else " only"))
        return spec

    def config(self):
        """The JSON options that rebuild this layer (round-trips unchanged)."""
        return _jsonable(dict(self.options))

    @classmethod
    def default_flags(cls, **changes):
        """The class attributes as LayerFlags, with ``changes`` (LayerFlags' field names)."""
        values = dict(zip(LayerFlags._fields, (getattr(cls, a) for a in FLAG_ATTRIBUTES)))
        values.update(changes)
        return LayerFlags(**values)

    # ----- the interface
    def setup(self, in_specs):
        """-> Setup. Records ``in_specs`` (``self.in_specs``), calls ``build`` and checks
        what it returns; the flags become ``self.flags``. Build kernels in ``build``."""
        stray = [a for a in FLAG_ATTRIBUTES if a in vars(self)]
        if stray:
            raise TypeError("%s '%s' sets %s on the instance; return the flags from build()"
                            % (self.type_name, self.name, ", ".join(stray)))
        self.in_specs = self._specs(TensorSpec, in_specs, "input")
        if not self.CARRIES_NARROW:
            narrow = [dtype_name(s.dtype) for s in self.in_specs if is_narrow(s.dtype)]
            if narrow:
                self.fail("takes no %s input: the narrow types are only converted (Cast, "
                          "LibraryOp 'copy') and moved (Reshape, Flatten, Squeeze, "
                          "Transpose); convert to a wider type first" % narrow[0])
        result = self.build(list(self.in_specs))
        if not isinstance(result, Setup):
            raise TypeError("%s '%s': build() must return a Setup, got %s"
                            % (self.type_name, self.name, type(result).__name__))
        result = self._checked(result)
        if self.param_specs is not None and \
                [p.shape for p in result.params] != [p.shape for p in self.param_specs]:
            self.fail("inputs of shapes %s would need parameters of shapes %s; the layer was "
                      "set up with %s" % (", ".join(str(s.shape) for s in self.in_specs),
                                          [p.shape for p in result.params],
                                          [p.shape for p in self.param_specs]))
        self.param_specs = result.params
        self.flags = result.flags
        return result

    def _checked(self, result):
        outputs, params, ws, saved, flags, pinned = result
        if not outputs:
            self.fail("build() gives no output")
        ws = int(ws or 0)
        if ws < 0:
            self.fail("build() asks for a negative workspace (%d bytes)" % ws)
        flags = self.default_flags() if flags is None else flags
        if not isinstance(flags, LayerFlags):
            raise TypeError("%s '%s': build() gives flags of type %s, not LayerFlags"
                            % (self.type_name, self.name, type(flags).__name__))
        outputs = self._specs(TensorSpec, outputs, "build() output")
        params = self._specs(ParamSpec, params, "build() parameter")
        for o, p in pinned:
            if not (0 <= o < len(outputs) and 0 <= p < len(params)) or \
                    tuple(outputs[o].shape) != tuple(params[p].shape) or \
                    outputs[o].dtype != params[p].dtype:
                raise TypeError("%s '%s': build() gives output %d as parameter %d, which must "
                                "exist with the output's shape and dtype" % (self.type_name,
                                                                             self.name, o, p))
        return Setup(outputs, params, ws, self._specs(TensorSpec, saved, "build() saved tensor"),
                     flags, pinned)

    def _specs(self, kind, items, what):
        """``kind(*item)`` for each item; a bad shape names this layer and the item."""
        out = []
        for i, item in enumerate(items):
            try:
                out.append(kind(*item))
            except LayerError as err:
                self.fail("%s %d: %s" % (what, i, err))
        return out

    def build(self, in_specs):
        """Check the inputs, build the launchers (kernels are built here, never per
        iteration) and -> ``Setup(outputs, params, workspace, saved, flags)``. Called again
        for a new batch size or mode; launchers whose shapes are kernel arguments then
        rebuild nothing."""
        raise NotImplementedError

    def reshape(self, in_shapes):
        """New batch size, same kernels and dtypes: -> (out_shapes, workspace_bytes)."""
        if self.in_specs is None or len(in_shapes) != len(self.in_specs):
            self.fail("reshape needs a setup first, with as many inputs (%d given)"
                      % len(in_shapes))
        result = self.setup([TensorSpec(s, sp.dtype) for s, sp in zip(in_shapes, self.in_specs)])
        return [s.shape for s in result.outputs], result.workspace

    def init_params(self, params, rng):
        """Fill parameter tensors with PyTorch's default initialisation."""

    def check_input_data(self, index, array, where):
        """Check host data before ``net(...)`` copies it: ``array`` (numpy) was given for
        net input ``where``, which this layer reads as its input ``index``. Raise an
        InputError (a LabelError for labels) naming this layer; the default accepts all.
        Only checks that cost no device sync belong here."""

    def forward(self, x, y, params, ws, saved):
        """-> list of launches computing ``y`` from ``x``; writes the ``saved`` tensors
        that backward reads."""
        raise NotImplementedError

    def backward(self, x, dx, y, dy, params, dparams, ws, saved, accumulate):
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
    if is_int(value):
        value = (int(value), int(value))
    if not (isinstance(value, (list, tuple)) and len(value) == 2 and all(map(is_int, value))):
        layer.fail("option %r must be an int or [h, w], got %r" % (option, value))
    if not allow_negative and any(v < 0 for v in value):
        layer.fail("option %r must not be negative, got %r" % (option, list(value)))
    return (int(value[0]), int(value[1]))
