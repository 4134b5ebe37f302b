"""InnerProduct: a fully connected layer, y = act(x W^T + b), bias and activation fused.

x of any rank is flattened from axis 1 to (N, inputs); W is [outputs, inputs] (PyTorch's
Linear), or with option ``weight_layout`` "inputs_outputs" [inputs, outputs] (y = x W + b: a
weight that x multiplies as it is stored, such as GPT-2's Conv1D, held without a transposed
copy; float32 weights only). Option ``weights`` stores W for inference in float16, bfloat16, int8 (then with
a third parameter, one float32 scale per output: W = q * scale) or "q4" (4-bit values
packed two to a byte, (outputs, ceil(inputs / 2)) uint8, and a scale per group of 32
along each row, (outputs, ceil(inputs / 32)); ``core/quantize.py``): memory and traffic
of 2, 1 or about 0.6 bytes a weight; such a W is not trained (the layer refuses train
mode). A second input, a residual (N, outputs) of the output's type, is added to the product
(y = x W^T + b + r, no activation; inference only): the output written where the residual
was (the planner's in-place write when the output takes the residual's name, else a copy
first), the GEMM accumulating onto it (beta 1): a transformer's residual add without a
launch of its own. Option ``input_rms`` (an eps; inference only) normalizes x's rows
first, as an RMSNorm with a weight of ``inputs`` values (the last parameter) does: x / sqrt(mean(x^2)
+ eps) * weight, multiplied on the way by the few-rows kernel (a decoder's step: no launch
of its own), else by an RMSNorm into the workspace before the product; ``input_ln`` (an
eps) likewise with a LayerNorm, its weight and bias the last two parameters. Option ``gated``
(inference only) takes a second Linear of the same shape and storage (its weight, bias
and scales after the first's): y = act(x W^T + b) * (x W2^T + b2), a gated MLP's gate and
up projections (SwiGLU with activation silu); the few-rows kernel streams both in one
launch, else two products and a multiply. With g = dy * act'(y):
  dx = g W          (N x outputs @ outputs x inputs)
  dW += g^T x       (outputs x N @ N x inputs; x^T g for the inputs_outputs layout)
  db += sum over n of g
"""
import numpy as np

from ..core.activation import EPILOGUES, FUSABLE, backward_code
from ..core.copy import BufferCopy
from ..tensor import same_memory, ws_view
from ..core.gemm import Gemm
from ..core.normalization import GroupNormOps
from ..core.quantize import Q4_GROUP, Dequantize, quantize_q4, quantize_rows
from ..dtypes import as_dtype, bfloat16, dtype_name, to_bfloat16
from ..core.pointwise import PointwiseBroadcast, PointwiseBroadcastReduce
from ..utils import is_int, round_up
from .base import Layer, ParamSpec, Setup, TensorSpec, register

__all__ = ["InnerProduct"]


@register("InnerProduct")
class InnerProduct(Layer):
    """y[n, o] = act(b[o] + sum_i W[o, i] x[n, i])."""
    OPTIONS = {"outputs": None, "inputs": -1, "bias": True, "activation": "identity",
               "weights": "float32", "weight_layout": "outputs_inputs", "input_rms": None,
               "input_ln": None, "gated": False}
    LAYOUTS = ("outputs_inputs", "inputs_outputs")
    WEIGHTS = {"float32": np.float32, "float16": np.float16, "bfloat16": bfloat16,
               "int8": np.int8, "q4": np.uint8}
    BACKWARD_READS_INPUTS = True
    HALF_STORAGE = "prefers"  # x, y and their gradients half; W, b and their gradients float32

    def __init__(self, ctx, name=None, **options):
        super().__init__(ctx, name=name, **options)
        o = self.options
        if o["outputs"] is None:
            self.fail("option 'outputs' is required")
        if not is_int(o["outputs"]) or o["outputs"] < 1:
            self.fail("option 'outputs' must be a positive int, got %r" % (o["outputs"],))
        if not is_int(o["inputs"]) or o["inputs"] < -1 or o["inputs"] == 0:
            self.fail("option 'inputs' must be a positive int (or -1: deduced), got %r"
                      % (o["inputs"],))
        if o["bias"] not in (True, False, 0, 1):
            self.fail("option 'bias' must be true or false, got %r" % (o["bias"],))
        if o["activation"] not in EPILOGUES:
            self.fail("option 'activation': unknown %r; known: %s (and for inference %s)"
                      % (o["activation"], ", ".join(FUSABLE),
                         ", ".join(a for a in EPILOGUES if a not in FUSABLE)))
        self.bias, self.activation = bool(o["bias"]), o["activation"]
        if o["weights"] not in self.WEIGHTS:
            self.fail("option 'weights': unknown %r; known: %s"
                      % (o["weights"], ", ".join(self.WEIGHTS)))
        self.weight_dtype = as_dtype(self.WEIGHTS[o["weights"]])
        self.int8 = self.weight_dtype == np.int8
        self.q4 = o["weights"] == "q4"
        if o["weight_layout"] not in self.LAYOUTS:
            self.fail("option 'weight_layout' must be one of %s, got %r"
                      % (", ".join(self.LAYOUTS), o["weight_layout"]))
        # W stored [inputs, outputs]: op(B) of the forward GEMM is W itself
        self.inputs_first = o["weight_layout"] == "inputs_outputs"
        if self.inputs_first and o["weights"] != "float32":
            self.fail("option 'weight_layout' inputs_outputs takes float32 weights, got "
                      "weights %r" % o["weights"])
        # the norm of x before the product: (kind, eps), kind "rms" or "layer"; None
        self.input_norm = None
        for option, kind in (("input_rms", "rms"), ("input_ln", "layer")):
            eps = o[option]
            if eps is None:
                continue
            if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not eps > 0:
                self.fail("option %r (the norm's eps before the product) must be a positive "
                          "number or null, got %r" % (option, eps))
            if self.input_norm is not None:
                self.fail("options 'input_rms' and 'input_ln' name two norms of x: give one")
            self.input_norm = (kind, float(eps))
        if o["gated"] not in (True, False, 0, 1):
            self.fail("option 'gated' must be true or false, got %r" % (o["gated"],))
        self.gated = bool(o["gated"])

    def build(self, in_specs):
        spec = self.single_input(in_specs[:1] if len(in_specs) == 2 else in_specs,
                                 "(N, features, ...)", min_ndim=2)
        n, inputs = spec.shape[0], int(np.prod(spec.shape[1:]))
        if self.options["inputs"] != -1 and self.options["inputs"] != inputs:
            self.fail("input has %d features (shape %s flattened from axis 1), option 'inputs' "
                      "is %d" % (inputs, spec.shape, self.options["inputs"]))
        outputs = self.options["outputs"]
        stored = (outputs, -(-inputs // 2)) if self.q4 else \
            (inputs, outputs) if self.inputs_first else (outputs, inputs)  # W as kept
        if self.param_specs is not None and stored != self.param_specs[0].shape:
            self.fail("input has %d features (shape %s flattened from axis 1), the layer was "
                      "set up for %d" % (inputs, spec.shape, self.inputs))
        self.n, self.inputs, self.outputs = n, inputs, outputs
        self.dtype = dt = spec.dtype
        if self.activation not in FUSABLE and self.mode == "train":
            self.fail("activation %r is applied by the product for inference (predict mode) "
                      "only: its gradient needs the input, which the layer does not keep; "
                      "train with a separate Activation" % self.activation)
        self.residual = self._residual(in_specs)
        if self.input_norm is not None and self.mode == "train":
            self.fail("options 'input_rms' and 'input_ln' are for inference (predict mode): "
                      "their gradient is not built; train with a norm before the product")
        if self.gated and (self.mode == "train" or self.residual or self.inputs_first):
            self.fail("option 'gated' is for inference (predict mode), without a residual "
                      "input, over weights stored [outputs, inputs]")
        typed = self.weight_dtype != np.float32
        if typed and self.mode == "train":
            self.fail("weights stored as %s are for inference (predict mode): they are not "
                      "trained" % self.options["weights"])
        # int8 and 4-bit weights: read as they are by a GEMM of a few rows, else widened
        # into a float32 workspace first
        self.widen = (self.int8 or self.q4) and not Gemm.reads_quantized(self.ctx, n)
        self.typed_read = (self.int8 or self.q4) and not self.widen  # the product reads them
        self._fwd = self._fwd_up = self._mul = None
        w_dt = np.float32 if self.widen else self.weight_dtype
        # a gated pair in the few-rows kernel's one launch, and on GPUs the norm too; else
        # apart
        few_rows = not self.inputs_first and Gemm.streams_b(self.ctx, n, w_dt)
        fused = self.input_norm is not None and few_rows and Gemm.normalizes_a(self.ctx, n, w_dt)
        self.one_gated = self.gated and few_rows
        self._norm = None
        if self.input_norm is not None and not fused:
            kind, eps = self.input_norm
            self._norm = GroupNormOps(self.ctx, (n, 1, inputs, 1), eps, True,
                                      bias=kind == "layer", rms=kind == "rms", dtype=dt)
        common = dict(trans_b=not self.inputs_first, bias="col" if self.bias else None,
                      precision=self.precision, dtypes=(dt, w_dt, dt),
                      b_scale=self.typed_read,
                      a_norm=self.input_norm[1] if fused else None,
                      a_norm_kind=self.input_norm[0] if fused else "rms")
        self._fwd = Gemm(self.ctx, n, outputs, inputs, activation=self.activation,
                         glu=self.one_gated, **common)
        if self.gated and not self.one_gated:
            self._fwd_up = Gemm(self.ctx, n, outputs, inputs, **common)
        if self.gated and not self.one_gated:  # y = act(gate) * up, the gate in the workspace
            y_spec = ((n, outputs), dt)
            self._mul = PointwiseBroadcast(self.ctx, [y_spec, y_spec], [y_spec],
                                           "y0 = x0 * x1;", name="ip_gated")
        self._widen = None
        if self.widen:
            self._widen = Dequantize(self.ctx, outputs, inputs, self.options["weights"])
        self._bwd = None
        y_spec = ((n, outputs), dt)
        self.act_bwd = None
        if self.activation != "identity":
            self.act_bwd = PointwiseBroadcast(self.ctx, [y_spec, y_spec], [y_spec],
                                              backward_code(self.activation, "x0", "x1", "y0"),
                                              name="ip_act_backward")
        self.bias_bwd = None
        if self.bias:  # g's column sums (on CPUs blocks of columns a work-item: pointwise.py)
            self.bias_bwd = PointwiseBroadcastReduce(self.ctx, [y_spec],
                                                     [((1, outputs), np.float32)], "y0 = x0;",
                                                     name="ip_bias_backward")
        # the workspace: g = dy * act'(y) (training), then any GEMM's split-K partial sums
        self.act_bytes = round_up(dt.itemsize * n * outputs, 16) \
            if self.act_bwd is not None and self.mode == "train" else 0  # 16: float4 GEMM reads
        gemms = [op for op in [self._fwd, self._fwd_up] if op is not None] + \
            (list(self._backward_ops()) if self.mode == "train" else [])
        # (a widened int8 or 4-bit W sits after the GEMMs' own workspace)
        self.widen_at = self.act_bytes + 4 * max([op.workspace_elements for op in gemms] + [0])
        ws = self.widen_at + (4 * outputs * inputs if self.widen else 0)
        # (a norm run before the product: the normalized rows and their statistics;
        # a gate computed apart from its pair)
        self.norm_at = round_up(ws, 16)
        if self._norm is not None:
            ws = self.norm_at + round_up(dt.itemsize * n * inputs, 16) + 2 * 4 * n
        self.gate_at = round_up(ws, 16)
        if self._mul is not None:
            ws = self.gate_at + dt.itemsize * n * outputs
        scales = [ParamSpec((outputs,), trainable=False)] if self.int8 else \
            [ParamSpec((outputs, -(-inputs // Q4_GROUP)), trainable=False)] if self.q4 else []
        norm = [ParamSpec((inputs,))] * self._norm_params()
        linear = [ParamSpec(stored, self.weight_dtype, trainable=not typed)] + \
            ([ParamSpec((outputs,))] if self.bias else []) + scales
        params = linear * (1 + self.gated) + norm
        # dy * act'(y) needs y; the output may take a residual's memory (named after it)
        flags = self.default_flags(backward_reads_outputs=self.activation != "identity",
                                   inplace=self.residual)
        return Setup([TensorSpec((n, outputs), dt)], params, ws, flags=flags)

    def config(self):
        """The options; ``weight_layout``, ``input_rms``, ``input_ln`` and ``gated`` only
        where they are not the default, so a net written before them, or for DLPrimitives,
        reads the same."""
        cfg = super().config()
        if cfg.get("weight_layout") == "outputs_inputs":
            del cfg["weight_layout"]
        for option in ("input_rms", "input_ln"):
            if cfg.get(option, 0) is None:
                del cfg[option]
        if cfg.get("gated") is False:
            del cfg["gated"]
        return cfg

    def _residual(self, in_specs):
        """Whether a second input, the residual added to the product, is given, checked:
        inference only, no activation, the output's shape and type."""
        if len(in_specs) != 2:
            return False
        r, n, o, dt = in_specs[1], self.n, self.outputs, self.dtype
        if self.mode == "train":
            self.fail("a residual input is for inference (predict mode): its gradient is not "
                      "built")
        if self.activation != "identity":
            self.fail("a residual input is added after the product: option 'activation' must "
                      "be identity, got %r" % self.activation)
        if tuple(r.shape) != (n, o) or r.dtype != dt:
            self.fail("input residual must be the output's (N, outputs) = %s %s, got %s %s"
                      % ((n, o), dtype_name(dt), r.shape, dtype_name(r.dtype)))
        return True

    def init_params(self, params, rng):
        # PyTorch Linear: kaiming_uniform(a=sqrt(5)) -> U(+-1/sqrt(inputs)); bias alike;
        # int8 and 4-bit weights are those values quantized
        bound = 1.0 / np.sqrt(self.inputs)
        w = rng.uniform(-bound, bound, (self.outputs, self.inputs)).astype(np.float32)
        values = list(quantize_rows(w) if self.int8 else quantize_q4(w) if self.q4 else
                      [np.ascontiguousarray(w.T)] if self.inputs_first else [w])
        if self.bias:
            values.insert(1, rng.uniform(-bound, bound, self.outputs).astype(np.float32))
        values = values * (1 + self.gated)  # (a gated pair starts as two equal Linears)
        # (the norm's weight starts at one and its bias at zero, as the norm layers')
        values += [np.ones(self.inputs, np.float32), np.zeros(self.inputs, np.float32)][
            :self._norm_params()]
        for p, v in zip(params, values):
            p.to_device(to_bfloat16(v) if p.dtype == bfloat16 else v.astype(p.dtype))

    def _linear(self, params, second=False):
        """(weight, bias, scales) of the Linear (``second``: a gated pair's other), None
        where it has none."""
        scaled = self.int8 or self.q4
        size = 1 + self.bias + scaled
        w = params[size * second:size * (second + 1)]
        return w[0], (w[1] if self.bias else None), (w[-1] if scaled else None)

    def _norm_tensors(self, params):
        """(weight, bias) of the norm before the product, the last parameters; None where
        there is none (no norm; an RMSNorm has no bias)."""
        count = self._norm_params()
        return tuple(params[len(params) - count:]) + (None,) * (2 - count)

    def forward(self, x, y, params, ws, saved):
        out, beta = [], 0.0
        if self.residual:  # y = product + residual: y holds it, then beta 1
            beta = 1.0
            if not same_memory(x[1], y[0]):
                out = [BufferCopy(x[1], y[0])]
        norm_weight, norm_bias = self._norm_tensors(params)
        inp = x[0]
        if self._norm is not None:  # the norm before the product, into the workspace
            n, k = self.n, self.inputs
            at = self.norm_at + round_up(self.dtype.itemsize * n * k, 16)
            inp = ws_view(ws, self.norm_at, n * k, self.dtype).reshape(n, k)
            out += self._norm.forward_launches(x[0].reshape(n, k), inp, ws_view(ws, at, n),
                                               ws_view(ws, at + 4 * n, n), norm_weight,
                                               norm_bias)
            norm_weight = norm_bias = None
        inp = inp.reshape(self.n, self.inputs)
        if not self.gated:
            return out + self._product(inp, self._linear(params), y[0], beta, ws,
                                       self._fwd, (norm_weight, norm_bias))
        weight, bias, scale = self._linear(params)
        w2, bias2, scale2 = self._linear(params, second=True)
        if self.one_gated:
            return out + self._fwd.launches(inp, weight, y[0], bias=bias, b_scale=scale,
                                            a_norm_weight=norm_weight, a_norm_bias=norm_bias,
                                            b2=w2, bias2=bias2, b2_scale=scale2)
        gate = ws_view(ws, self.gate_at, self.n * self.outputs, self.dtype).reshape(
            self.n, self.outputs)
        out += self._product(inp, (weight, bias, scale), gate, 0.0, ws, self._fwd,
                             (norm_weight, norm_bias))
        out += self._product(inp, (w2, bias2, scale2), y[0], 0.0, ws, self._fwd_up,
                             (norm_weight, norm_bias))
        return out + self._mul.launches([gate, y[0]], [y[0]])

    def _norm_params(self):
        """Parameters of the norm before the product: 0, 1 (RMSNorm's weight) or 2
        (LayerNorm's weight and bias)."""
        return 0 if self.input_norm is None else 1 if self.input_norm[0] == "rms" else 2

    def _product(self, inp, linear, y, beta, ws, gemm, norm):
        """The launches of y = act(inp W^T + b) (+ beta y) for one Linear (weight, bias,
        scales) on ``gemm``; int8 and 4-bit weights widened into the workspace first where
        the product does not read them."""
        weight, bias, scale = linear
        out = []
        if self.widen:
            widened = ws_view(ws, self.widen_at, self.outputs * self.inputs, np.float32).reshape(
                self.outputs, self.inputs)
            out += self._widen.launches(weight, scale, widened)
            weight = widened
        return out + gemm.launches(inp, weight, y, bias=bias, beta=beta,
                                   workspace=gemm.workspace_in(ws, self.act_bytes),
                                   b_scale=scale if self.typed_read else None,
                                   a_norm_weight=norm[0], a_norm_bias=norm[1])

    def _backward_ops(self):
        if self._bwd is None:
            n, i, o = self.n, self.inputs, self.outputs
            p, dt, f = self.precision, self.dtype, np.float32
            # dx = g @ W and dW += g^T @ x; W [inputs, outputs]: dx = g @ W^T, dW += x^T @ g
            dw_shape = (i, o) if self.inputs_first else (o, i)
            self._bwd = (Gemm(self.ctx, n, i, o, trans_b=self.inputs_first, precision=p,
                              dtypes=(dt, f, dt)),
                         Gemm(self.ctx, *dw_shape, n, trans_a=True, precision=p,
                              dtypes=(dt, dt, f)))
        return self._bwd

    def backward(self, x, dx, y, dy, params, dparams, ws, saved, accumulate):
        want_dw = dparams[0] is not None
        want_db = self.bias and dparams[1] is not None
        if dx[0] is None and not want_dw and not want_db:
            return []
        out = []
        g = dy[0]
        if self.act_bwd is not None:
            g = ws_view(ws, 0, self.n * self.outputs, self.dtype).reshape(self.n, self.outputs)
            out += self.act_bwd.launches([dy[0], y[0]], [g])
        data_op, filter_op = self._backward_ops()
        if dx[0] is not None:
            out += data_op.launches(g, params[0], dx[0].reshape(self.n, self.inputs),
                                    beta=float(accumulate[0]), workspace=data_op.workspace_in(ws, self.act_bytes))
        if want_dw:
            rows = x[0].reshape(self.n, self.inputs)
            a, b = (rows, g) if self.inputs_first else (g, rows)
            out += filter_op.launches(a, b, dparams[0], beta=1.0,
                                      workspace=filter_op.workspace_in(ws, self.act_bytes))
        if want_db:
            out += self.bias_bwd.launches([g], [dparams[1].reshape(1, self.outputs)],
                                          alpha=1.0, beta=1.0)
        return out
