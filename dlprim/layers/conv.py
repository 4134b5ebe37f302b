"""Convolution2D and TransposedConvolution2D (NCHW, float32), bias and activation fused.

Convolution2D:  y = act(conv(x, w) + b), w of shape [out, in/groups, kh, kw] (PyTorch's).
TransposedConvolution2D: the adjoint of a convolution, w of shape [in, out/groups, kh, kw];
its forward is a convolution's backward-data and its backward-data a convolution's forward
(``core/conv.py`` does both).

Backward, with g = dy * act'(y) (computed into the workspace unless act is identity):
  dx = conv_transpose(g, w)       (conv_forward(g, w) for the transposed layer)
  dw += correlate(x, g)           (correlate(g, x) for the transposed layer)
  db += sum over n, h, w of g

The algorithm of each pass is picked from the shape and the device unless an option
forces it, with DLPrimitives' names: ``fwd_algo``, ``bwd_data_algo``, ``bwd_filter_algo``
(auto, gemm, winograd, depthwise_separable, or one of ``core.conv.ALGORITHMS``). They
name the convolution's passes in both layers, as in DLPrimitives: the transposed layer's
forward is the convolution's backward-data (``bwd_data_algo``) and its backward-data
the convolution's forward (``fwd_algo``). A pass the forced algorithm cannot serve runs
on GEMM, as DLPrimitives substitutes it. ``layer.algo = name`` forces all three.
"""
import numpy as np

from ..core.activation import FUSABLE, backward_code
from ..core.conv import (ConvBackwardData, ConvBackwardFilter, ConvForward, ConvGeometry,
                         algorithm_name)
from ..core.pointwise import PointwiseBroadcast, PointwiseBroadcastReduce
from ..tensor import Tensor, ws_view
from ..utils import is_int, round_up
from .base import Layer, ParamSpec, Setup, TensorSpec, pair, register

__all__ = ["Convolution2D", "TransposedConvolution2D"]

# the options forcing an algorithm, by the convolution pass each one names
ALGO_OPTIONS = {"fwd_algo": "forward", "bwd_data_algo": "backward_data",
                "bwd_filter_algo": "backward_filter"}


def _pad4(layer, value):
    """pad as (top, left, bottom, right) from an int, [h, w] or [top, left, bottom, right]."""
    if isinstance(value, (list, tuple)) and len(value) == 4:
        if not all(map(is_int, value)) or min(value) < 0:
            layer.fail("option 'pad' must hold non-negative ints, got %r" % (value,))
        return tuple(int(v) for v in value)
    h, w = pair(layer, "pad", value)
    return (h, w, h, w)


class _ConvBase(Layer):
    BACKWARD_READS_INPUTS = True
    HALF_STORAGE = "prefers"  # half activations on the gemm algorithm (core/conv.py)

    def __init__(self, ctx, name=None, **options):
        super().__init__(ctx, name=name, **options)
        o = self.options
        for req in ("channels_out", "kernel"):
            if o[req] is None:
                self.fail("option %r is required" % req)
        if not is_int(o["channels_out"]) or o["channels_out"] < 1:
            self.fail("option 'channels_out' must be a positive int, got %r" % (o["channels_out"],))
        if not is_int(o["channels_in"]) or o["channels_in"] < -1 or o["channels_in"] == 0:
            self.fail("option 'channels_in' must be a positive int (or -1: deduced), got %r"
                      % (o["channels_in"],))
        self.kernel = pair(self, "kernel", o["kernel"])
        self.stride = pair(self, "stride", o["stride"])
        self.dilate = pair(self, "dilate", o["dilate"])
        self.pad = _pad4(self, o["pad"])
        for opt, v in (("kernel", self.kernel), ("stride", self.stride), ("dilate", self.dilate)):
            if min(v) < 1:
                self.fail("option %r must be at least 1, got %r" % (opt, o[opt]))
        if not is_int(o["groups"]) or o["groups"] < 1:
            self.fail("option 'groups' must be a positive int, got %r" % (o["groups"],))
        if o["bias"] not in (True, False, 0, 1):
            self.fail("option 'bias' must be true or false, got %r" % (o["bias"],))
        if o["activation"] not in FUSABLE:
            self.fail("option 'activation': unknown %r; known: %s"
                      % (o["activation"], ", ".join(FUSABLE)))
        self.groups, self.bias = int(o["groups"]), bool(o["bias"])
        self.activation = o["activation"]
        self.algos = {}
        for opt, direction in ALGO_OPTIONS.items():
            try:
                self.algos[direction] = algorithm_name(o[opt])
            except ValueError as err:
                self.fail("option %r: %s" % (opt, err))
        self._bwd = None

    @property
    def algo(self):
        """The algorithm every pass is forced to ("auto": none forced), None where the
        passes differ. Setting it forces all three (for tests and tuning)."""
        names = set(self.algos.values())
        return names.pop() if len(names) == 1 else None

    @algo.setter
    def algo(self, name):
        try:
            name = algorithm_name(name)
        except ValueError as err:
            self.fail("algo: %s" % err)
        for opt, direction in ALGO_OPTIONS.items():
            self.options[opt] = name
            self.algos[direction] = name

    def config(self):
        # an unforced algorithm is left out, so nets' JSON stays as DLPrimitives writes it
        return {k: v for k, v in super().config().items()
                if not (k in ALGO_OPTIONS and v == "auto")}

    def _check_input(self, in_specs):
        spec = self.single_input(in_specs, "(N, C, H, W)", ndims=(4,))
        c = spec.shape[1]
        c_in = self.options["channels_in"]
        if c_in != -1 and c_in != c:
            self.fail("input has %d channels, option 'channels_in' is %d" % (c, c_in))
        if self.param_specs is not None and c != self._weight_channels_in():
            self.fail("input has %d channels, the layer was set up for %d: its weights are %s"
                      % (c, self._weight_channels_in(), self.param_specs[0].shape))
        for what, n in (("input channels", c), ("channels_out", self.options["channels_out"])):
            if n % self.groups:
                self.fail("option 'groups' (%d) does not divide %s (%d)" % (self.groups, what, n))
        return spec

    def _check_span(self, hw):
        span = [d * (k - 1) + 1 for d, k in zip(self.dilate, self.kernel)]
        padded = [hw[0] + self.pad[0] + self.pad[2], hw[1] + self.pad[1] + self.pad[3]]
        if span[0] > padded[0] or span[1] > padded[1]:
            self.fail("option 'kernel' %r (dilated span %dx%d) is larger than the padded input "
                      "%dx%d" % (list(self.kernel), span[0], span[1], padded[0], padded[1]))

    def _flags(self):
        # dy * act'(y) needs y
        return self.default_flags(backward_reads_outputs=self.activation != "identity")

    def _setup_common(self, geom, in_shape, out_shape, dtype=np.float32):
        """Activation backward, bias reduction and the workspace plan; ``dtype``: the
        activations' storage (float16 in a net of precision "fp16")."""
        self.geom, self.out_shape, self.batch = geom, tuple(out_shape), in_shape[0]
        self.dtype = np.dtype(dtype)
        f32 = np.float32
        y_spec = (self.out_shape, self.dtype)
        self.act_bwd = None
        if self.activation != "identity":
            self.act_bwd = PointwiseBroadcast(
                self.ctx, [y_spec, y_spec], [y_spec],
                backward_code(self.activation, "x0", "x1", "y0"), name="conv_act_backward")
        self.bias_bwd = None
        if self.bias:
            n_out = self.out_shape[1]
            self.bias_bwd = PointwiseBroadcastReduce(self.ctx, [y_spec], [((1, n_out, 1, 1), f32)],
                                                     "y0 = x0;", name="conv_bias_backward")
        batch = in_shape[0]
        self.act_bytes = (round_up(self.dtype.itemsize * int(np.prod(self.out_shape)), 16)
                          if self.act_bwd else 0)
        fwd_ws = self._forward_op().workspace_bytes(batch)
        bwd_ws = 0
        if self.mode == "train":
            bwd_ws = self.act_bytes + max(op.workspace_bytes(batch) for op in self._backward_ops())
        return max(fwd_ws, bwd_ws)

    def _op_ws(self, ws, start):
        return None if ws is None else ws.view((ws.size - start,), offset=start)

    def backward(self, x, dx, y, dy, params, dparams, ws, saved, accumulate):
        want_dw = dparams[0] is not None
        want_db = self.bias and dparams[1] is not None
        if dx[0] is None and not want_dw and not want_db:
            return []
        out = []
        g = dy[0]
        if self.act_bwd is not None:
            g = ws_view(ws, 0, int(np.prod(self.out_shape)), self.dtype).reshape(self.out_shape)
            out += self.act_bwd.launches([dy[0], y[0]], [g])
        op_ws = self._op_ws(ws, self.act_bytes)
        data_op, filter_op = self._backward_ops()
        w = params[0]
        if dx[0] is not None:
            # the data op takes (gradient, w, dx) in both layers: conv backward-data, or
            # the transposed layer's adjoint, a convolution forward
            out += data_op.launches(g, w, dx[0], ws=op_ws, beta=float(accumulate[0]))
        if want_dw:
            out += self._filter_launches(filter_op, x[0], g, dparams[0], op_ws)
        if want_db:
            out += self.bias_bwd.launches([g], [dparams[1].reshape(1, -1, 1, 1)],
                                          alpha=1.0, beta=1.0)
        return out

    def init_params(self, params, rng):
        # PyTorch: kaiming_uniform(a=sqrt(5)) -> U(-1/sqrt(fan_in), 1/sqrt(fan_in)), bias alike
        # fan_in = w.shape[1] * kh * kw for both layers, as torch computes it from the weight
        fan_in = int(np.prod(params[0].shape[1:]))
        bound = 1.0 / np.sqrt(fan_in)
        for p in params:
            p.to_device(rng.uniform(-bound, bound, p.shape).astype(np.float32))


COMMON_OPTIONS = dict({"channels_out": None, "channels_in": -1, "kernel": None, "stride": 1,
                       "pad": 0, "dilate": 1, "groups": 1, "bias": True,
                       "activation": "identity"}, **{opt: "auto" for opt in ALGO_OPTIONS})


@register("Convolution2D")
class Convolution2D(_ConvBase):
    """y[n,k,oh,ow] = act(b[k] + sum_(c in group(k), r, s) w[k,c,r,s] *
    x[n, c, oh*sh - pt + r*dh, ow*sw - pl + s*dw])."""
    OPTIONS = dict(COMMON_OPTIONS)

    # ----- predict mode: the BatchNorm after it folded in (net/fusion.py)
    def _fold(self, activation):
        """(forward op with a bias and ``activation``, the two folding launchers, the
        folded weights and bias), built once per activation."""
        folds = self._folds
        if activation not in folds:
            k = self.geom.out_c
            rows = int(np.prod(self.geom.weight_shape[1:]))
            w, c = ((k, rows), np.float32), ((k, 1), np.float32)
            op = ConvForward(self.ctx, self.geom, True, activation, self.algos["forward"],
                             self.batch, precision=self.precision, dtype=self.dtype)
            # inputs: w, running var, gamma; w0 = eps
            scale_w = PointwiseBroadcast(self.ctx, [w, c, c], [w], "y0 = x0 * x2 * rsqrt(x1 + w0);",
                                         ["float"], name="conv_fold_weights")
            # inputs: b, running mean, running var, gamma, beta; w0 = eps
            scale_b = PointwiseBroadcast(self.ctx, [c] * 5, [c],
                                         "y0 = (x0 - x1) * x3 * rsqrt(x2 + w0) + x4;", ["float"],
                                         name="conv_fold_bias")
            # the folded weights and bias, and 1 and 0 for a missing gamma, beta or bias
            ones = Tensor.from_numpy(self.ctx, np.ones((k, 1), np.float32))
            zeros = Tensor.from_numpy(self.ctx, np.zeros((k, 1), np.float32))
            folds[activation] = (op, scale_w, scale_b,
                                              Tensor(self.ctx, self.geom.weight_shape),
                                              Tensor(self.ctx, (k,)), ones, zeros)
        return folds[activation]

    @property
    def weight_elements(self):
        """Elements of the weights (what a fold reads and writes at every forward)."""
        return int(np.prod(self.geom.weight_shape))

    @property
    def output_elements(self):
        """Elements of the output at the set-up batch size."""
        return int(np.prod(self.out_shape))

    def fold_workspace(self, activation):
        """Workspace bytes of this convolution with a BatchNorm folded in."""
        return self._fold(activation)[0].workspace_bytes(self.batch)

    def folded_forward(self, x, y, params, bn, bn_params, activation, ws):
        """Launches of act(BatchNorm(conv(x))) in predict mode as one convolution: fold
        the BatchNorm layer ``bn``'s running statistics and affine (``bn_params``) into
        this layer's weights and bias, then convolve x into y with them."""
        op, scale_w, scale_b, w2, b2, ones, zeros = self._fold(activation)
        k = self.geom.out_c
        mean, var = (t.reshape(k, 1) for t in bn_params[:2])
        gamma, beta = (t.reshape(k, 1) for t in bn_params[2:4]) if bn.affine else (ones, zeros)
        bias = params[1].reshape(k, 1) if self.bias else zeros
        eps = [float(bn.options["eps"])]
        out = scale_w.launches([params[0].reshape(k, -1), var, gamma], [w2.reshape(k, -1)], eps)
        out += scale_b.launches([bias, mean, var, gamma, beta], [b2.reshape(k, 1)], eps)
        return out + op.launches(x[0], w2, y, b2, ws, 0.0)

    def build(self, in_specs):
        spec = self._check_input(in_specs)
        n, c, h, w = spec.shape
        self._check_span((h, w))
        k = self.options["channels_out"]
        geom = ConvGeometry(c, k, (h, w), self.kernel, self.stride, self.pad, self.dilate,
                            self.groups)
        self._fwd = None
        self._bwd = None
        self._folds = {}  # activation -> a BatchNorm fold's kernels and tensors (_fold)
        out_shape = geom.out_shape(n)
        ws = self._setup_common(geom, spec.shape, out_shape, spec.dtype)
        params = [ParamSpec(geom.weight_shape)] + ([ParamSpec((k,))] if self.bias else [])
        return Setup([TensorSpec(out_shape, spec.dtype)], params, ws, flags=self._flags())

    def _weight_channels_in(self):
        return self.param_specs[0].shape[1] * self.groups  # w: [out, in/groups, kh, kw]

    def _forward_op(self):
        if self._fwd is None:
            self._fwd = ConvForward(self.ctx, self.geom, self.bias, self.activation,
                                    self.algos["forward"], self.batch, precision=self.precision,
                                    dtype=self.dtype)
        return self._fwd

    def _backward_ops(self):
        if self._bwd is None:
            self._bwd = (ConvBackwardData(self.ctx, self.geom, algo=self.algos["backward_data"],
                                          batch=self.batch, precision=self.precision,
                                          dtype=self.dtype),
                         ConvBackwardFilter(self.ctx, self.geom,
                                            algo=self.algos["backward_filter"], batch=self.batch,
                                            precision=self.precision, dtype=self.dtype))
        return self._bwd

    def forward(self, x, y, params, ws, saved):
        b = params[1] if self.bias else None
        return self._forward_op().launches(x[0], params[0], y[0], b, self._op_ws(ws, 0))

    def _filter_launches(self, op, x, g, dw, ws):
        return op.launches(x, g, dw, ws=ws, beta=1.0)


@register("TransposedConvolution2D")
class TransposedConvolution2D(_ConvBase):
    """The adjoint of Convolution2D: out = (in-1)*stride - pad_t - pad_b + dilate*(k-1) +
    output_pad + 1; y = act(b + conv_transpose(x, w))."""
    OPTIONS = dict(COMMON_OPTIONS, output_pad=0)

    def __init__(self, ctx, name=None, **options):
        super().__init__(ctx, name=name, **options)
        self.output_pad = pair(self, "output_pad", self.options["output_pad"])
        if any(op >= s for op, s in zip(self.output_pad, self.stride)):
            self.fail("option 'output_pad' %r must be smaller than stride %r"
                      % (list(self.output_pad), list(self.stride)))

    def build(self, in_specs):
        spec = self._check_input(in_specs)
        n, c, h, w = spec.shape
        k = self.options["channels_out"]
        out_hw = [(i - 1) * s - p0 - p1 + d * (kk - 1) + op + 1 for i, s, p0, p1, d, kk, op in
                  zip((h, w), self.stride, self.pad[:2], self.pad[2:], self.dilate, self.kernel,
                      self.output_pad)]
        if min(out_hw) < 1:
            self.fail("options 'kernel'/'pad' give an empty output %s for input %dx%d"
                      % (out_hw, h, w))
        # the convolution whose backward-data this layer's forward is
        geom = ConvGeometry(k, c, out_hw, self.kernel, self.stride, self.pad, self.dilate,
                            self.groups)
        self._fwd = None
        self._bwd = None
        out_shape = geom.in_shape(n)
        ws = self._setup_common(geom, spec.shape, out_shape, spec.dtype)
        params = [ParamSpec(geom.weight_shape)] + ([ParamSpec((k,))] if self.bias else [])
        return Setup([TensorSpec(out_shape, spec.dtype)], params, ws, flags=self._flags())

    def _weight_channels_in(self):
        return self.param_specs[0].shape[0]  # w: [in, out/groups, kh, kw]

    def _forward_op(self):
        if self._fwd is None:
            self._fwd = ConvBackwardData(self.ctx, self.geom, self.bias, self.activation,
                                         self.algos["backward_data"], self.batch,
                                         precision=self.precision, dtype=self.dtype)
        return self._fwd

    def _backward_ops(self):
        if self._bwd is None:
            self._bwd = (ConvForward(self.ctx, self.geom, algo=self.algos["forward"],
                                     batch=self.batch, precision=self.precision,
                                     dtype=self.dtype),
                         ConvBackwardFilter(self.ctx, self.geom,
                                            algo=self.algos["backward_filter"], batch=self.batch,
                                            precision=self.precision, dtype=self.dtype))
        return self._bwd

    def forward(self, x, y, params, ws, saved):
        b = params[1] if self.bias else None
        return self._forward_op().launches(x[0], params[0], y[0], b, self._op_ws(ws, 0))

    def _filter_launches(self, op, x, g, dw, ws):
        # dw[cin, cout] = sum x[cin] * g[cout]: the convolution's filter gradient with
        # its input g (transposed output) and its output gradient x
        return op.launches(g, x, dw, ws=ws, beta=1.0)
