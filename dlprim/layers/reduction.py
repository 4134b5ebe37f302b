"""Reduction: sum, sum of squares, sum of absolute values, mean, product, largest or
smallest value over some axes.

    y = output_scale * R(x)   R = sum x | sum x^2 | sum |x| | mean x | prod x | max x | min x
    dx = output_scale * dy * (1 | 2x | sign(x) | 1/count)   (dy broadcast back)

Any dtype the Net holds (``mean``: floats only); the output keeps the input's dtype, as
ONNX's reductions do (an int32 sum wraps in int32). A NaN wins ``max`` and ``min``, as in
PyTorch and numpy. A reduction over an empty axis gives the method's identity (0, 1, the
lowest or highest value, NaN for a mean) without a kernel. Backward: float32 ``sum``,
``sumsq``, ``abssum`` and ``mean``; the others take no gradient.

The axes are ``dims`` (a list, negative counts from the end) or every axis from
``start_axis`` on (default 0: everything); not both. ``keep_dim`` (default true) keeps
reduced axes as size 1; reducing everything without it gives shape (1,).
"""
import numpy as np

from ..core.copy import Fill
from ..core.pointwise import PointwiseBroadcast, PointwiseBroadcastReduce
from ..core.reduction import Reduce
from ..dtypes import cl_limits, cl_type, compute_type, dtype_name, is_float
from ..utils import is_int as _is_int
from .base import Layer, Setup, TensorSpec, register

METHODS = ("sum", "sumsq", "abssum", "mean", "prod", "max", "min")
_DIFFERENTIABLE = ("sum", "sumsq", "abssum", "mean")
_EXTREME = "if (y0 %s reduce_y0%s) reduce_y0 = y0;"
_NAN_WINS = " || y0 != y0"  # true for a NaN only
# derivative factor of each method as code over x1 = x
_DERIVATIVE = {"sum": "", "mean": "", "sumsq": " * 2.0f * x1",
               "abssum": " * (x1 > 0.0f ? 1.0f : (x1 < 0.0f ? -1.0f : 0.0f))"}


@register("Reduction")
class Reduction(Layer):
    """Sum, sum of squares, sum of absolute values, mean, product, max or min over the
    chosen axes."""
    HALF_STORAGE = "follows"
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
        spec = self.single_input(in_specs, min_ndim=1, float32=False)
        method, dtype = self.options["method"], spec.dtype
        if method == "mean" and not is_float(dtype):
            self.fail("method 'mean' of %s (floats only)" % dtype_name(dtype))
        if dtype == np.bool_ and method not in ("max", "min"):
            self.fail("method %r of bool (max and min only)" % method)
        self.shape = spec.shape
        axes = self.axes(len(spec.shape))
        keep_shape = tuple(1 if k in axes else n for k, n in enumerate(spec.shape))
        out_shape = keep_shape if self.options["keep_dim"] else tuple(
            n for k, n in enumerate(spec.shape) if k not in axes)
        self.out_shape = out_shape or (1,)
        count = int(np.prod([spec.shape[a] for a in axes], dtype=np.int64))
        self.op = self.fill = None
        if count == 0:
            self.fill = Fill(self.ctx, self.out_shape, dtype)
        elif method in ("prod", "max", "min") or dtype != np.float32:
            self.op = _reduce_any(self.ctx, spec.shape, keep_shape, method, dtype)
        else:
            self.op = Reduce(self.ctx, spec.shape, axes, method, keepdims=self.options["keep_dim"])
        self.coeff = float(self.options["output_scale"])
        self.count = count
        if method == "mean":
            self.coeff /= max(count, 1)
        self._bwd = None
        # sum and mean have constant derivatives: backward needs only dy
        reads_x = method in ("sumsq", "abssum")
        grad = method in _DIFFERENTIABLE and dtype == np.float32
        flags = self.default_flags(backward_reads_inputs=reads_x) if grad else \
            self.default_flags(has_backward=False, backward_reads_inputs=False)
        return Setup([TensorSpec(self.out_shape, dtype)], flags=flags)

    def forward(self, x, y, params, ws, saved):
        scale = float(self.options["output_scale"])
        if self.fill is not None:
            value = _identity(self.options["method"], x[0].dtype)
            return self.fill.launches(y[0], value if scale == 1.0 else scale * value)
        if isinstance(self.op, Reduce):
            return self.op.launches(x[0], y[0].view(self.op.out_shape), alpha=scale)
        alpha = scale / self.count if self.options["method"] == "mean" else scale
        return self.op.launches([x[0]], [y[0].view(self.op.out_shape)], alpha=alpha)

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


def _reduce_any(ctx, in_shape, keep_shape, method, dtype):
    """The reduction kernel of ``method`` over any dtype, accumulating in the dtype's
    compute type (16-bit floats in float), the result stored as the dtype."""
    ctype = compute_type(dtype)
    lowest, highest = cl_limits(ctype)
    nan = _NAN_WINS if is_float(dtype) else ""
    code = {"sum": "y0 = x0;", "mean": "y0 = x0;", "sumsq": "y0 = x0 * x0;",
            "abssum": "y0 = x0 < 0 ? -x0 : x0;"}.get(method, "y0 = x0;")
    init, step = {"prod": ("reduce_y0 = 1;", "reduce_y0 *= y0;"),
                  "max": ("reduce_y0 = %s;" % lowest, _EXTREME % (">", nan)),
                  "min": ("reduce_y0 = %s;" % highest, _EXTREME % ("<", nan))}.get(
        method, ("reduce_y0 = 0;", "reduce_y0 += y0;"))
    return PointwiseBroadcastReduce(ctx, [(in_shape, dtype)], [(keep_shape, dtype)], code,
                                    init, step, name="reduction_" + method)


def _identity(method, dtype):
    """What ``method`` gives over no elements (ONNX's empty-set results)."""
    if method in ("sum", "sumsq", "abssum"):
        return 0
    if method == "prod":
        return 1
    if method == "mean":
        return float("nan")
    if dtype == np.bool_:
        return method == "min"
    if is_float(dtype):
        return float("-inf") if method == "max" else float("inf")
    info = np.iinfo(dtype)
    return info.min if method == "max" else info.max
