"""Reshape, Flatten, Squeeze: the same elements under another shape.

    Reshape   ``dims``: the new shape; 0 keeps the input's size at that index, one -1 is
              deduced from the element count (which must be preserved)
    Flatten   (N, d1, d2, ...) -> (N, d1 * d2 * ...)
    Squeeze   drop size-1 axes: those in ``dims`` (each must have size 1), or every one
              with ``all`` (also when ``dims`` is empty)

They are views (``LayerFlags.view``): the planner gives the output the input's buffer,
and the output's gradient the input's where it can, so usually nothing runs. Where it
cannot (a net input, a value written in place later, another consumer's gradient to add
to), forward copies x into y and backward copies dy into dx (adding when accumulating).
"""
import numpy as np

from ..core.copy import StridedCopy
from ..tensor import same_memory
from ..utils import is_int
from .base import Layer, Setup, TensorSpec, register


def _int_list(value):
    return isinstance(value, (list, tuple)) and all(map(is_int, value))


class ViewLayer(Layer):
    """A layer whose output is its input with another shape."""
    CARRIES_NARROW = True  # moves codes unchanged
    HALF_STORAGE = "follows"
    BACKWARD_READS_INPUTS = False
    INPLACE = True
    VIEW = True

    def new_shape(self, shape):
        """The output shape for an input of ``shape`` (same element count)."""
        raise NotImplementedError

    def build(self, in_specs):
        spec = self.single_input(in_specs, float32=False)
        shape = tuple(int(n) for n in self.new_shape(spec.shape))
        if int(np.prod(shape, dtype=np.int64)) != int(np.prod(spec.shape, dtype=np.int64)):
            self.fail("output shape %s does not hold the %d elements of input %s"
                      % (shape, int(np.prod(spec.shape)), spec.shape))
        self.size = int(np.prod(shape, dtype=np.int64))
        self._copy = StridedCopy(self.ctx, (self.size,), (1,), (1,), spec.dtype)
        return Setup([TensorSpec(shape, spec.dtype)])

    def forward(self, x, y, params, ws, saved):
        if same_memory(x[0], y[0]):
            return []
        return self._copy.launches(x[0], y[0])

    def backward(self, x, dx, y, dy, params, dparams, ws, saved, accumulate):
        if dx[0] is None or (same_memory(dx[0], dy[0]) and not accumulate[0]):
            return []
        return self._copy.launches(dy[0], dx[0], beta=float(accumulate[0]))


@register("Reshape")
class Reshape(ViewLayer):
    """The input with the shape ``dims`` (0 keeps a dimension, -1 infers one); no copy."""
    OPTIONS = {"dims": None}

    def __init__(self, ctx, name=None, **options):
        super().__init__(ctx, name, **options)
        dims = self.options["dims"]
        if dims is None:
            self.fail("option 'dims' is required")
        if not _int_list(dims) or any(d < -1 for d in dims):
            self.fail("option 'dims' must be a list of sizes (0 = keep, -1 = deduce), got %r"
                      % (dims,))
        if list(dims).count(-1) > 1:
            self.fail("option 'dims' may deduce (-1) only one size, got %r" % (list(dims),))

    def new_shape(self, shape):
        dims = [int(d) for d in self.options["dims"]]
        out = []
        for k, d in enumerate(dims):
            if d == 0:
                if k >= len(shape):
                    self.fail("option 'dims': 0 at index %d keeps a size the input %s does not have"
                              % (k, shape))
                d = shape[k]
            out.append(d)
        total = int(np.prod(shape, dtype=np.int64))
        if -1 in out:
            rest = int(np.prod([d for d in out if d != -1], dtype=np.int64))
            if rest == 0 or total % rest:
                self.fail("option 'dims' %r cannot hold the %d elements of input %s"
                          % (dims, total, shape))
            out[out.index(-1)] = total // rest
        if int(np.prod(out, dtype=np.int64)) != total:
            self.fail("option 'dims' %r gives shape %s of %d elements; input %s has %d"
                      % (dims, tuple(out), int(np.prod(out)), shape, total))
        return out


@register("Flatten")
class Flatten(ViewLayer):
    """(N, ...) -> (N, product of the rest); no copy."""
    OPTIONS = {}

    def new_shape(self, shape):
        if not shape:
            self.fail("input must have a batch axis, got shape ()")
        return (shape[0], int(np.prod(shape[1:], dtype=np.int64)))


@register("Squeeze")
class Squeeze(ViewLayer):
    """Removes size-1 dimensions (``dims``, or all of them with ``all``); no copy."""
    OPTIONS = {"all": False, "dims": []}

    def __init__(self, ctx, name=None, **options):
        super().__init__(ctx, name, **options)
        if not isinstance(self.options["all"], bool):
            self.fail("option 'all' must be true or false, got %r" % (self.options["all"],))
        if not _int_list(self.options["dims"]):
            self.fail("option 'dims' must be a list of axes, got %r" % (self.options["dims"],))

    def new_shape(self, shape):
        dims = self.options["dims"]
        if self.options["all"] or not dims:
            return tuple(n for n in shape if n != 1)
        axes = set()
        for d in dims:
            if not -len(shape) <= d < len(shape):
                self.fail("option 'dims': axis %d is out of range for input %s" % (d, shape))
            if shape[d] != 1:
                self.fail("option 'dims': axis %d of input %s has size %d, not 1"
                          % (d, shape, shape[d]))
            axes.add(d % len(shape))
        return tuple(n for k, n in enumerate(shape) if k not in axes)
