"""Reduction: sum, sum of squares, sum of absolute values or mean over some axes.

    y = output_scale * R(x)   R = sum x | sum x^2 | sum |x| | mean x over the axes
    dx = output_scale * dy * (1 | 2x | sign(x) | 1/count)   (dy broadcast back)

The axes are ``dims`` (a list, negative counts from the end) or every axis from
``start_axis`` on (default 0: everything); not both. ``keep_dim`` (default true) keeps
reduced axes as size 1; reducing everything without it gives shape (1,).
"""
from ..core.pointwise import PointwiseBroadcast
from ..core.reduction import Reduce
from ..utils import is_int as _is_int
from .base import Layer, Setup, TensorSpec, register

METHODS = ("sum", "sumsq", "abssum", "mean")
# derivative factor of each method as code over x1 = x
_DERIVATIVE = {"sum": "", "mean": "", "sumsq": " * 2.0f * x1",
               "abssum": " * (x1 > 0.0f ? 1.0f : (x1 < 0.0f ? -1.0f : 0.0f))"}


@register("Reduction")
class Reduction(Layer):
    """Sum, sum of squares, sum of absolute values or mean over the chosen axes."""
    OPTIONS = {"method": "sum", "dims": None, "start_axis": None, "keep_dim": True,
               "output_scale": 1.0}

    def __init__(self, ctx, name=None, **options):
        super().__init__(ctx, name, **options)
        o = self.options
        if o["method"] not in METHODS:
            self.fail("option 'method' must be one of %s, got %r" % (", ".join(METHODS), o["method"]))
        if o["dims"] is not None and o["start_axis"] is not None:
            self.fail("options 'dims' and 'start_axis' exclude each other; give one")
        if o["dims"] is not None and not (isinstance(o["dims"], (list, tuple)) and o["dims"]
                                          and all(_is_int(d) for d in o["dims"])):
            self.fail("option 'dims' must be a non-empty list of axes, got %r" % (o["dims"],))
        if o["start_axis"] is not None and not _is_int(o["start_axis"]):
            self.fail("option 'start_axis' must be an integer, got %r" % (o["start_axis"],))
        if not isinstance(o["keep_dim"], bool):
            self.fail("option 'keep_dim' must be true or false, got %r" % (o["keep_dim"],))
        if isinstance(o["output_scale"], bool) or not isinstance(o["output_scale"], (int, float)):
            self.fail("option 'output_scale' must be a number, got %r" % (o["output_scale"],))

    def config(self):
        return {k: v for k, v in super().config().items() if v is not None}

    def axes(self, ndim):
        """The reduced axes, checked and sorted, for an input of ``ndim`` dimensions."""
        o = self.options
        if o["dims"] is not None:
            axes = []
            for d in o["dims"]:
                if not -ndim <= d < ndim:
                    self.fail("option 'dims': axis %d is out of range for %d dimensions" % (d, ndim))
                axes.append(d % ndim)
            if len(set(axes)) != len(axes):
                self.fail("option 'dims' repeats an axis: %r" % (o["dims"],))
            return tuple(sorted(axes))
        start = 0 if o["start_axis"] is None else o["start_axis"]
        if not -ndim <= start < ndim:
            self.fail("option 'start_axis' %d is out of range for %d dimensions" % (start, ndim))
        return tuple(range(start % ndim, ndim))

    def build(self, in_specs):
        spec = self.single_input(in_specs, min_ndim=1)
        self.shape = spec.shape
        axes = self.axes(len(spec.shape))
        self.op = Reduce(self.ctx, spec.shape, axes, self.options["method"],
                         keepdims=self.options["keep_dim"])
        self.out_shape = self.op.out_shape or (1,)
        self.coeff = float(self.options["output_scale"])
        if self.options["method"] == "mean":
            self.coeff /= max(self.op.count, 1)
        self._bwd = None
        # sum and mean have constant derivatives: backward needs only dy
        reads_x = self.options["method"] in ("sumsq", "abssum")
        return Setup([TensorSpec(self.out_shape, spec.dtype)],
                     flags=self.default_flags(backward_reads_inputs=reads_x))

    def forward(self, x, y, params, ws, saved):
        return self.op.launches(x[0], y[0].view(self.op.out_shape),
                                alpha=float(self.options["output_scale"]))

    def _grad_op(self):
        # built on first use: a net that only predicts compiles no backward kernel
        if self._bwd is None:
            full = (self.shape, "float32")
            code = "y0 = w0 * x0" + _DERIVATIVE[self.options["method"]] + ";"
            self._bwd = PointwiseBroadcast(self.ctx, [(self.op.keep_shape, "float32"), full],
                                           [full], code, params=["float"], name="reduction_backward")
        return self._bwd

    def backward(self, x, dx, y, dy, params, dparams, ws, saved, accumulate):
        if dx[0] is None:
            return []
        return self._grad_op().launches([dy[0].view(self.op.keep_shape), x[0]], [dx[0]],
                                        [self.coeff], beta=float(accumulate[0]))
