"""Parameter: a tensor learned by itself, with no inputs; the output is its value.

Options ``shape`` (required), ``dtype`` (default float) and ``is_trainable`` (default
true). Initialised to zeros. Forward copies the parameter to the output; backward adds
the output gradient into the parameter gradient.
"""
import numpy as np

from ..core.copy import StridedCopy
from ..dtypes import as_dtype, dlp_name
from ..utils import shape_problem
from .base import Layer, ParamSpec, Setup, TensorSpec, register


@register("Parameter")
class Parameter(Layer):
    """A net-level tensor with no input: its one output is a parameter of ``shape``
    (trainable or not), e.g. a learned bias map or a constant imported from ONNX.
    """
    OPTIONS = {"shape": None, "dtype": "float", "is_trainable": True}
    BACKWARD_READS_INPUTS = False

    def __init__(self, ctx, name=None, **options):
        super().__init__(ctx, name, **options)
        shape = self.options["shape"]
        if shape is None:
            self.fail("option 'shape' is required")
        if shape_problem(shape, "shape"):
            self.fail("option 'shape' must be a list of non-negative integers, got %r" % (shape,))
        try:
            self.dtype = as_dtype(self.options["dtype"])
        except TypeError as err:
            self.fail("option 'dtype': %s" % err)
        if not isinstance(self.options["is_trainable"], bool):
            self.fail("option 'is_trainable' must be true or false, got %r"
                      % (self.options["is_trainable"],))
        if self.options["is_trainable"] and self.dtype.kind != "f":
            self.fail("option 'dtype' %s cannot be trainable; set 'is_trainable' to false"
                      % dlp_name(self.dtype))
        self.shape = tuple(int(n) for n in shape)

    def build(self, in_specs):
        if in_specs:
            self.fail("takes no inputs, got %d" % len(in_specs))
        size = int(np.prod(self.shape, dtype=np.int64))
        self._copy = StridedCopy(self.ctx, (size,), (1,), (1,), self.dtype)
        return Setup([TensorSpec(self.shape, self.dtype)],
                     [ParamSpec(self.shape, self.dtype, self.options["is_trainable"])])

    def init_params(self, params, rng):
        params[0].zero_()

    def forward(self, x, y, params, ws, saved):
        return self._copy.launches(params[0], y[0])

    def backward(self, x, dx, y, dy, params, dparams, ws, saved, accumulate):
        if dparams[0] is None or not self.options["is_trainable"]:
            return []
        return self._copy.launches(dy[0], dparams[0], beta=1.0)  # parameter gradients add
