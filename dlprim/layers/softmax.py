"""Softmax over the channel axis (axis 1), optionally as log-softmax.

    y_c = exp(x_c) / sum_k exp(x_k)          log: y_c = x_c - log sum_k exp(x_k)

For inputs of more than 2 dimensions every position along the trailing axes is a
separate distribution over the channels (as in segmentation outputs).
"""
from ..core.softmax import SoftmaxOps
from .base import Layer, Setup, TensorSpec, register


@register("Softmax")
class Softmax(Layer):
    """Softmax (or log-softmax with ``log``) over axis 1."""
    OPTIONS = {"log": False}
    BACKWARD_READS_INPUTS = False
    BACKWARD_READS_OUTPUTS = True  # both derivatives are written in terms of y
    INPLACE = True  # each element is read before it is overwritten, by the same work item

    def __init__(self, ctx, name=None, **options):
        super().__init__(ctx, name, **options)
        if not isinstance(self.options["log"], bool):
            self.fail("option 'log' must be true or false, got %r" % (self.options["log"],))

    def build(self, in_specs):
        spec = self.single_input(in_specs, min_ndim=2)
        self.op = SoftmaxOps(self.ctx, spec.shape, log=self.options["log"])
        return Setup([TensorSpec(spec.shape, spec.dtype)])

    def forward(self, x, y, params, ws, saved):
        return self.op.launches(x[0], y[0])

    def backward(self, x, dx, y, dy, params, dparams, ws, saved, accumulate):
        if dx[0] is None:
            return []
        return self.op.backward_launches(y[0], dy[0], dx[0], beta=float(accumulate[0]))
