"""A Net's parameters: one float32 arena for values, one with the same layout for gradients.

Trainable parameters (of operators that are not frozen) come first, so a solver updates
them all with one launch over ``[0, trainable_size)``; frozen and non-trainable ones
(BatchNorm running statistics) follow. Each parameter starts at a multiple of
``ALIGN`` elements; the padding stays zero in both arenas.

Parameters that are not trained may be stored in other types (``STORED``: a Linear's
float16, bfloat16, int8 or packed 4-bit (uint8) weights for inference): each takes the
float32 slots its bytes fill, and its tensor is a view of that type; reading and writing
them converts (float16 and bfloat16 round to nearest even, int8 and uint8 take integers
in range only).

Names are ``<op>.<i>`` (``<op>.<name>`` where the layer's ParamSpec names it) unless the
operator lists ``params`` (``OpDef.param_names``: ``"auto"``, ``""`` and missing entries
keep the default); operators naming the same parameter share one tensor (shapes must agree).
"""
from collections import OrderedDict

import numpy as np

from .graph import GraphError
from ..dtypes import as_dtype, bfloat16, dtype_name, to_bfloat16
from ..errors import ParameterError
from ..tensor import Tensor
from ..utils import round_up

__all__ = ["ParamStore", "ALIGN"]

ALIGN = 64  # elements: 256 bytes, enough for any device's base-address alignment
F32 = np.dtype(np.float32)
STORED = (F32, np.dtype(np.float16), bfloat16, np.dtype(np.int8),  # what parameters hold
          np.dtype(np.uint8))


def _slots(shape, dtype):
    """float32 slots of the arena a parameter takes (whole ALIGN blocks)."""
    return round_up(-(-int(np.prod(shape, dtype=np.int64)) * dtype.itemsize // 4), ALIGN)


class ParamStore:
    def __init__(self, ctx, ops, param_specs):
        entries = OrderedDict()  # name -> [shape, trainable, first op, dtype]
        self.op_param_names = []
        for op, specs in zip(ops, param_specs):
            names = op.param_names(len(specs), [getattr(s, "name", None) for s in specs])
            for name, spec in zip(names, specs):
                dtype = as_dtype(spec.dtype)
                trainable = bool(spec.trainable) and not op.frozen
                if dtype not in STORED or (trainable and dtype != F32):
                    raise GraphError("operator '%s': parameter '%s' has dtype %s; parameters "
                                     "must be float32 (untrained ones may be %s)"
                                     % (op.name, name, dtype_name(dtype),
                                        ", ".join(dtype_name(d) for d in STORED[1:])))
                if name in entries:
                    shape, was, first, kind = entries[name]
                    if shape != tuple(spec.shape) or kind != dtype:
                        raise GraphError("parameter '%s' is shared by operators '%s' and '%s' "
                                         "with different shapes or dtypes %s %s and %s %s"
                                         % (name, first, op.name, shape, dtype_name(kind),
                                            tuple(spec.shape), dtype_name(dtype)))
                    entries[name][1] = was or trainable
                else:
                    entries[name] = [tuple(spec.shape), trainable, op.name, dtype]
            self.op_param_names.append(names)
        order = [n for n, e in entries.items() if e[1]] + [n for n, e in entries.items() if not e[1]]
        self.layout = OrderedDict()
        self.dtypes = {}  # name -> its stored dtype
        offset = 0
        self.trainable_size = 0
        for name in order:
            shape, trainable, _, dtype = entries[name]
            self.layout[name] = (offset, shape, trainable)
            self.dtypes[name] = dtype
            offset += _slots(shape, dtype)
            if trainable:
                self.trainable_size = offset
        self.total_size = offset
        self.ctx, self._ops, self._specs = ctx, ops, param_specs
        self.param_arena = Tensor.zeros(ctx, (max(offset, 1),), np.float32,
                                        name="the parameter arena (%d parameters)" % len(order))
        self.params = OrderedDict((n, self._view(self.param_arena, n)) for n in self.layout)
        self.op_params = [[self.params[n] for n in names] for names in self.op_param_names]
        self.op_trains = [any(spec.trainable for spec in specs) and not op.frozen
                          for op, specs in zip(ops, param_specs)]
        self._grad_arena = None

    @property
    def grad_arena(self):
        return self.ensure_grads()

    def ensure_grads(self):
        """The gradient arena, made on first use: a net that only predicts holds none."""
        if self._grad_arena is None:
            self._grad_arena = Tensor.zeros(self.ctx, (max(self.total_size, 1),), np.float32,
                                            name="the parameter-gradient arena")
            self.grads = OrderedDict((n, self._view(self._grad_arena, n)) for n in self.layout)
            # an operator gets a gradient tensor for a parameter only if it trains it
            self.op_dparams = [[self.grads[n] if (spec.trainable and not op.frozen) else None
                                for n, spec in zip(names, specs)]
                               for op, specs, names in zip(self._ops, self._specs, self.op_param_names)]
        return self._grad_arena

    def _view(self, arena, name):
        """Parameter ``name``'s tensor in ``arena`` (its gradient's, in the gradient arena:
        only float32 parameters have one that is used)."""
        offset, shape, _ = self.layout[name]
        dtype = self.dtypes[name]
        return arena._view(tuple(shape), offset * 4 // dtype.itemsize, dtype)

    def get(self, name, table, what):
        t = table.get(name)
        if t is None:
            raise KeyError("no %s named '%s'; the net has: %s" % (what, name, _some(table)))
        return t

    @property
    def nbytes(self):
        return self.total_size * 4

    def to_numpy(self):
        """OrderedDict name -> array (float32, or the type the parameter is stored in), read
        with one copy of the arena."""
        host = self.param_arena.to_host().view(np.uint8)
        out = OrderedDict()
        for n, (o, s, _) in self.layout.items():
            dtype = self.dtypes[n]
            size = int(np.prod(s, dtype=np.int64))
            out[n] = host[4 * o:4 * o + size * dtype.itemsize].view(dtype).reshape(s).copy()
        return out

    def from_numpy(self, arrays, strict=True, source="the given arrays"):
        """Write parameters from {name: array}, all or nothing.

        Checked in this order, each a ParameterError listing every name at fault: arrays
        of the net's names that have the wrong shape or are not numbers; then, if
        ``strict``, the net's parameters ``arrays`` lacks and the names the net lacks
        (PyTorch's BatchNorm ``num_batches_tracked`` counters are not counted: dlprim
        keeps none); without ``strict``, ``arrays`` must share at least one name with the
        net. Values are not judged: NaN or infinite weights load as they are.
        """
        if not hasattr(arrays, "keys"):
            raise TypeError("expected {parameter name: array}, got %s" % type(arrays).__name__)
        values, wrong = {}, []
        for name, (_, shape, _) in self.layout.items():
            if name in arrays:
                values[name], problem = _as_stored(arrays[name], shape, self.dtypes[name])
                if problem:
                    wrong.append("'%s' %s" % (name, problem))
        if wrong:
            raise ParameterError("%s: %d parameter%s %s not fit the net: %s" % (
                source, len(wrong), _s(wrong), "does" if len(wrong) == 1 else "do",
                "; ".join(wrong)))
        unexpected = [n for n in arrays if n not in self.layout and not self._counter(n)]
        missing = [n for n in self.layout if n not in values]
        if strict and (missing or unexpected):
            parts = []
            if missing:
                parts.append("the net's parameter%s %s %s missing"
                             % (_s(missing), _names(missing), _is(missing)))
            if unexpected:
                parts.append("%s %s not %s of the net" % (
                    _names(unexpected), _is(unexpected),
                    "a parameter" if len(unexpected) == 1 else "parameters"))
            raise ParameterError("%s: %s (strict=False loads the parameters both have)"
                                 % (source, "; ".join(parts)))
        if not values and self.layout and len(arrays):
            raise ParameterError("%s: none of its %d names is a parameter of the net (it has: "
                                 "%s)" % (source, len(arrays), _some(self.layout)))
        for name, a in values.items():  # each into its own place: no read of the arena
            self.params[name].to_device(a.reshape(self.params[name].shape))

    def _counter(self, name):
        """PyTorch's BatchNorm step counter beside running statistics the net has."""
        prefix, _, last = name.rpartition(".")
        return last == "num_batches_tracked" and prefix + ".running_mean" in self.layout


FLOAT32_EXACT_INTS = 2 ** 24   # every integer up to this size is a float32


def _as_stored(value, shape, dtype):
    """(array of ``dtype``, None) or (None, what is wrong): ``_as_numbers``, then float16
    and bfloat16 rounded to nearest even (a finite value beyond float16 refused), int8 and
    uint8 from integers in their range only."""
    if dtype.kind in "iu":
        lo, hi = np.iinfo(dtype).min, np.iinfo(dtype).max
        try:
            a = np.asarray(value)
        except (ValueError, TypeError) as err:
            return None, "is not an array (%s)" % err
        if tuple(a.shape) != shape:
            return None, "has shape %s, the net needs %s" % (tuple(a.shape), shape)
        if a.dtype.kind not in "iu" and not (a.dtype.kind == "f" and np.all(a == np.round(a))):
            return None, "has dtype %s values that are not integers, for %s weights" % (
                a.dtype, dtype.name)
        if a.size and (a.min() < lo or a.max() > hi):
            return None, "has values outside %s's [%d, %d]" % (dtype.name, lo, hi)
        return a.astype(dtype), None
    f, problem = _as_numbers(value, shape)
    if problem or dtype == F32:
        return f, problem
    if dtype == bfloat16:
        return to_bfloat16(f), None
    with np.errstate(over="ignore"):
        h = f.astype(np.float16)
    bad = np.isfinite(f) & ~np.isfinite(h)
    if bad.any():
        return None, "has a value too large for float16 (%r)" % float(f[bad][0])
    return h, None


def _as_numbers(value, shape):
    """(float32 array, None) or (None, what is wrong with it). Floats round to float32
    (float64 and float16 weights, what a .dlp file may hold), but a finite value too large
    for float32 and an integer float32 cannot hold exactly are refused, not changed."""
    try:
        a = np.asarray(value)
    except (ValueError, TypeError) as err:
        return None, "is not an array (%s)" % err
    if a.dtype.kind not in "fiu":
        return None, "has dtype %s, not numbers" % a.dtype
    if tuple(a.shape) != shape:
        return None, "has shape %s, the net needs %s" % (tuple(a.shape), shape)
    with np.errstate(over="ignore"):
        f = a.astype(np.float32, copy=False)
    if a.dtype.kind == "f" and a.dtype.itemsize > 4:
        bad = np.isfinite(a) & ~np.isfinite(f)
        if bad.any():
            i = np.unravel_index(np.argmax(bad), a.shape)
            return None, ("has %s value %r at %s, too large for float32"
                          % (a.dtype, a[i].item(), tuple(int(k) for k in i)))
    if a.dtype.kind in "iu" and a.size and not (np.abs(a.astype(np.float64))
                                                <= FLOAT32_EXACT_INTS).all():
        # exact comparison in Python integers: float64 cannot hold every int64 either
        for i, (x, y) in enumerate(zip(a.ravel().tolist(), f.ravel().tolist())):
            if x != int(y):
                return None, ("has %s value %d at %s, which float32 cannot hold exactly"
                              % (a.dtype, x, tuple(int(k) for k in np.unravel_index(i, a.shape))))
    return f, None


def _s(items):
    return "" if len(items) == 1 else "s"


def _is(items):
    return "is" if len(items) == 1 else "are"


def _names(names, limit=10):
    shown = ", ".join("'%s'" % n for n in names[:limit])
    return shown + (" and %d more" % (len(names) - limit) if len(names) > limit else "")


def _some(table, limit=8):
    names = list(table)
    return ", ".join(names[:limit]) + (" ..." if len(names) > limit else "") if names else "none"
