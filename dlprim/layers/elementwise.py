"""Elementwise: two inputs combined with numpy broadcasting, then a fused activation; and
Where, the select of one of two inputs by a condition (at the end of this file).

As DLPrimitives: sum ``c1 a + c2 b``, prod ``c1 c2 a b``, max ``max(c1 a, c2 b)``; and
min ``min(c1 a, c2 b)``, sub ``c1 a - c2 b``, div ``(c1 a) / (c2 b)``. The activation must
be one whose derivative follows from y (backward sees only y and dy).

Backward, with g = act'(y) dy:
  sum  da = c1 g            db = c2 g
  sub  da = c1 g            db = -c2 g
  prod da = c1 c2 b g       db = c1 c2 a g
  div  da = g c1/(c2 b)     db = -g c1 a/(c2 b^2)
  max  da = [c1 a >= c2 b] c1 g,  db = [c1 a < c2 b] c2 g     (ties go to a)
  min  da = [c1 a <= c2 b] c1 g,  db = [c1 a > c2 b] c2 g
Max and min propagate a NaN from either side, and where one is NaN both inputs get the
gradient (torch.maximum / torch.minimum): each mask is written as the negation of the
other's comparison, which is false for a NaN.
A broadcast input's gradient is summed over the axes it was stretched along
(``PointwiseBroadcastReduce``); an input of the output's shape gets a plain pointwise pass,
and both inputs share one pass when both have that shape.
"""
import numpy as np

from ..core.activation import Y_ACTIVATIONS, backward_code, forward_code
from ..core.pointwise import PointwiseBroadcast, PointwiseBroadcastReduce, broadcast_shape
from ..dtypes import HALF_TYPES, dtype_name
from .base import Layer, Setup, TensorSpec, register

# y0 from x0 = a, x1 = b, w0 = c1, w1 = c2
FORWARD = {
    "sum": "y0 = x0 * w0 + x1 * w1;",
    "sub": "y0 = x0 * w0 - x1 * w1;",
    "prod": "y0 = x0 * x1 * (w0 * w1);",
    "div": "y0 = (x0 * w0) / (x1 * w1);",
    # compare-and-select, not max/min (undefined for a NaN) or fmax/fmin (which drop it)
    "max": "{ float a = x0 * w0, b = x1 * w1; y0 = (a >= b || a != a) ? a : b; }",
    "min": "{ float a = x0 * w0, b = x1 * w1; y0 = (a <= b || a != a) ? a : b; }",
}
# gradient of a (index 0) and b (index 1) from g, a, b, c1 = w0, c2 = w1
GRAD = {
    "sum": ("g * w0", "g * w1"),
    "sub": ("g * w0", "-g * w1"),
    "prod": ("g * (w0 * w1) * b", "g * (w0 * w1) * a"),
    "div": ("g * w0 / (w1 * b)", "-g * w0 * a / (w1 * b * b)"),
    "max": ("(a * w0 < b * w1 ? 0.0f : g * w0)", "(a * w0 >= b * w1 ? 0.0f : g * w1)"),
    "min": ("(a * w0 > b * w1 ? 0.0f : g * w0)", "(a * w0 <= b * w1 ? 0.0f : g * w1)"),
}
NEEDS_INPUTS = {"prod", "div", "max", "min"}


@register("Elementwise")
class Elementwise(Layer):
    """Two inputs combined elementwise (numpy broadcasting): ``operation`` sum
    (``coef1 * a + coef2 * b``), prod, max, min, ... with a fused activation.
    """
    HALF_STORAGE = "follows"
    OPTIONS = {"operation": "sum", "coef1": 1.0, "coef2": 1.0, "activation": "identity"}

    def __init__(self, ctx, name=None, **options):
        super().__init__(ctx, name=name, **options)
        op = self.options["operation"]
        if op not in FORWARD:
            self.fail("option 'operation': unknown operation %r; expected one of %s"
                      % (op, ", ".join(FORWARD)))
        if self.options["activation"] not in Y_ACTIVATIONS:
            self.fail("option 'activation': %r cannot be fused (its gradient needs the input);"
                      " expected one of %s" % (self.options["activation"], ", ".join(Y_ACTIVATIONS)))
        for c in ("coef1", "coef2"):
            v = self.options[c]
            if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
                self.fail("option %r must be a number, got %r" % (c, v))
        self.coefs = [float(self.options["coef1"]), float(self.options["coef2"])]
        self.op = op

    def build(self, in_specs):
        if len(in_specs) != 2:
            self.fail("expects 2 inputs, got %d" % len(in_specs))
        a, b = in_specs
        if a.dtype != b.dtype or a.dtype not in (np.float32,) + HALF_TYPES:
            self.fail("inputs must be both float32 (or both float16, or bfloat16), got %s and %s"
                      % (dtype_name(a.dtype), dtype_name(b.dtype)))
        try:
            out = broadcast_shape([a.shape, b.shape], "inputs")
        except ValueError as err:
            self.fail(str(err))
        self.out_shape = out
        dt = a.dtype
        code = FORWARD[self.op] + " " + forward_code(self.options["activation"], "y0", "y0")
        self._fwd = PointwiseBroadcast(self.ctx, [(a.shape, dt), (b.shape, dt)], [(out, dt)], code,
                                       ["float", "float"], name="elementwise_forward")
        self._bwd = {}
        flags = self.default_flags(backward_reads_inputs=self.op in NEEDS_INPUTS,
                                   backward_reads_outputs=self.options["activation"] != "identity")
        return Setup([TensorSpec(out, dt)], flags=flags)

    def forward(self, x, y, params, ws, saved):
        return self._fwd.launches(x, y, self.coefs)

    def _inputs(self):
        """Names and specs of what the gradient code reads: dy, then y when the activation
        needs it, then a and b when the operation needs them."""
        dt = self.in_specs[0].dtype
        names = ["dy"] + (["y"] if self.flags.backward_reads_outputs else [])
        specs = [(self.out_shape, dt)] * len(names)
        if self.flags.backward_reads_inputs:
            names += ["a", "b"]
            specs += [(s.shape, dt) for s in self.in_specs]
        return names, specs

    def _grad_code(self, which, dst):
        """Statement setting ``dst`` to the gradient of input ``which``."""
        names, _ = self._inputs()
        var = {n: "x%d" % k for k, n in enumerate(names)}
        g = backward_code(self.options["activation"], var["dy"], var.get("y", "0.0f"), "g")
        ab = "float a = %s, b = %s; " % (var["a"], var["b"]) if "a" in var else ""
        return "{ float g; %s %s%s = %s; }" % (g, ab, dst, GRAD[self.op][which])

    def _op(self, which):
        """Pointwise op for the gradients of inputs ``which`` (a tuple of indices)."""
        op = self._bwd.get(which)
        if op is not None:
            return op
        dt = self.in_specs[0].dtype
        full = (self.out_shape, dt)
        xs = self._inputs()[1]
        if len(which) == 2 or self.in_specs[which[0]].shape == self.out_shape:
            # gradients with the output's shape: one pointwise pass
            code = " ".join(self._grad_code(i, "y%d" % k) for k, i in enumerate(which))
            op = PointwiseBroadcast(self.ctx, xs, [full] * len(which), code, ["float", "float"],
                                    name="elementwise_backward")
        else:
            i = which[0]
            op = PointwiseBroadcastReduce(self.ctx, xs, [(self.in_specs[i].shape, dt)],
                                          self._grad_code(i, "y0"), params=["float", "float"],
                                          name="elementwise_backward_reduce")
        self._bwd[which] = op
        return op

    def backward(self, x, dx, y, dy, params, dparams, ws, saved, accumulate):
        wanted = [i for i in (0, 1) if dx[i] is not None]
        if not wanted:
            return []
        given = {"dy": dy[0], "y": y[0], "a": x[0], "b": x[1]}
        ins = [given[n] for n in self._inputs()[0]]
        same = [i for i in wanted if self.in_specs[i].shape == self.out_shape]
        groups = [tuple(same)] if same else []
        groups += [(i,) for i in wanted if i not in same]
        out = []
        for which in groups:
            # one beta per output: a shared pass may assign one gradient and add to the other
            beta = [float(accumulate[i]) for i in which]
            op = self._op(which)
            if isinstance(op, PointwiseBroadcastReduce):
                out += op.launches(ins, [dx[which[0]]], self.coefs, beta=beta[0])
            else:
                out += op.launches(ins, [dx[i] for i in which], self.coefs, beta=beta)
        return out


@register("Where")
class Where(Layer):
    """``y = a`` where ``condition`` is nonzero, else ``b`` (ONNX Where, ``torch.where``,
    ``masked_fill``): inputs condition (any integer or float dtype; no gradient), a and b
    (float32), numpy broadcasting of the three. Only the chosen side is read, so a NaN on
    the other side does not reach ``y``; its gradient goes to the chosen side, 0 to the
    other, summed over the axes an input was stretched along.
    """
    OPTIONS = {}
    NO_GRAD_INPUTS = (0,)
    # x0 = the condition, x1 = a, x2 = b; for the gradients x0 = dy, x1 = the condition
    FORWARD = "y0 = x0 != 0 ? x1 : x2;"
    GRADIENT = ("y0 = x1 != 0 ? x0 : 0.0f;", "y0 = x1 != 0 ? 0.0f : x0;")

    def build(self, in_specs):
        if len(in_specs) != 3:
            self.fail("expects 3 inputs (condition, a, b), got %d" % len(in_specs))
        cond, a, b = in_specs
        if a.dtype != np.float32 or b.dtype != np.float32:
            self.fail("a and b must be float32, got %s and %s" % (dtype_name(a.dtype), dtype_name(b.dtype)))
        try:
            out = broadcast_shape([cond.shape, a.shape, b.shape], "inputs")
        except ValueError as err:
            self.fail(str(err))
        self.out_shape = out
        f32 = np.dtype(np.float32)
        self._fwd = PointwiseBroadcast(self.ctx, [(s.shape, s.dtype) for s in in_specs],
                                       [(out, f32)], self.FORWARD, name="where_forward")
        self._bwd = {}
        flags = self.default_flags(backward_reads_inputs=True, backward_reads_outputs=False)
        return Setup([TensorSpec(out, f32)], flags=flags)

    def forward(self, x, y, params, ws, saved):
        return self._fwd.launches(x, y)

    def _grad_op(self, i):
        op = self._bwd.get(i)
        if op is None:
            f32 = np.dtype(np.float32)
            cond = self.in_specs[0]
            xs = [(self.out_shape, f32), (cond.shape, cond.dtype)]
            shape = self.in_specs[i].shape
            if shape == self.out_shape:
                op = PointwiseBroadcast(self.ctx, xs, [(shape, f32)], self.GRADIENT[i - 1],
                                        name="where_backward")
            else:
                op = PointwiseBroadcastReduce(self.ctx, xs, [(shape, f32)], self.GRADIENT[i - 1],
                                              name="where_backward_reduce")
            self._bwd[i] = op
        return op

    def backward(self, x, dx, y, dy, params, dparams, ws, saved, accumulate):
        out = []
        for i in (1, 2):
            if dx[i] is not None:
                out += self._grad_op(i).launches([dy[0], x[0]], [dx[i]],
                                                 beta=float(accumulate[i]))
        return out
