"""LSTM and GRU: multi-layer, optionally bidirectional recurrent layers with PyTorch's
options, formulas, gate order (LSTM i, f, g, o; GRU r, z, n), parameter names and
initialisation, on ``core/recurrent.py`` (docs/operators.md).

Inputs: x (L, N, input_size) (``batch_first``: (N, L, input_size)), then optionally h_0
(and for the LSTM c_0), each (num_layers * D, N, hidden_size) with D = 2 when
bidirectional. Outputs, as many as the graph lists: the last layer's h for every step
(L, N, D * hidden_size) (or batch-first), then h_n and for the LSTM c_n, the final states
(num_layers * D, N, hidden_size). Layer l > 0 reads layer l - 1's output, which in train
mode goes through dropout with probability ``dropout`` (Philox masks as the Dropout layer).

Train mode saves per layer and direction the gate activations (and the LSTM's cell
states), and each inner layer's output (and dropout mask); backward recomputes nothing but
the dropped inputs. Everything internal is time-major; a batch-first input is projected in
place and transposed only for backward's weight gradient, a batch-first output is
written in place.
"""
import zlib

import numpy as np

from ..core.copy import StridedCopy, TransposeCopy
from ..core.pointwise import PointwiseBroadcast, pointwise_launches
from ..core.random import RandomFill, counters
from ..core.recurrent import GATES, SAVED_GATES, BackwardScratch, RecurrentPass, Seq
from ..tensor import ws_view
from ..utils import is_int, round_up
from .base import TRAIN, Layer, ParamSpec, Setup, TensorSpec, register

__all__ = ["LSTM", "GRU"]


class _Recurrent(Layer):
    """What LSTM and GRU share; ``CELL`` picks the gate kernels."""
    CELL = None
    OPTIONS = {"hidden_size": None, "input_size": None, "num_layers": 1, "bias": True,
               "batch_first": False, "dropout": 0.0, "bidirectional": False, "seed": 0}
    BACKWARD_READS_INPUTS = True
    BACKWARD_READS_OUTPUTS = True

    def __init__(self, ctx, name=None, **options):
        super().__init__(ctx, name=name, **options)
        o = self.options
        for key, required in (("hidden_size", True), ("input_size", False), ("num_layers", True)):
            v = o[key]
            if (v is not None or required) and not (is_int(v) and v >= 1):
                self.fail("option %r must be a positive int%s, got %r"
                          % (key, "" if required else " (or null: deduced)", v))
        for key in ("bias", "batch_first", "bidirectional"):
            if o[key] not in (True, False, 0, 1):
                self.fail("option %r must be true or false, got %r" % (key, o[key]))
        p = o["dropout"]
        if isinstance(p, bool) or not isinstance(p, (int, float, np.integer, np.floating)) \
                or not 0 <= p < 1:
            self.fail("option 'dropout' must be a probability in [0, 1), got %r" % (p,))
        seed = o["seed"]
        if not is_int(seed) or not 0 <= seed < 2 ** 32:
            self.fail("option 'seed' must be an int in [0, 2**32), got %r" % (seed,))
        self.H, self.K = int(o["hidden_size"]), int(o["num_layers"])
        self.D = 2 if o["bidirectional"] else 1
        self.bias, self.batch_first = bool(o["bias"]), bool(o["batch_first"])
        self.dropout = float(p)
        self.G = GATES[self.CELL] * self.H
        self.states = 2 if self.CELL == "lstm" else 1   # h (and c)
        self.key = (zlib.crc32(self.name.encode()) << 32) | int(seed)
        self.step_offset = 0  # Philox counter of the next training step's masks
        self.mask_offset = 0  # that of the current step's first mask

    # ----- shapes
    def build(self, in_specs):
        if len(in_specs) not in (1, 1 + self.states):
            self.fail("expects the input x, or x and the initial state%s %s; got %d inputs"
                      % ("s" if self.states > 1 else "",
                         "h_0 and c_0" if self.states > 1 else "h_0", len(in_specs)))
        if any(s.dtype != np.float32 for s in in_specs):
            self.fail("inputs must be float32, got %s" % ", ".join(s.dtype.name for s in in_specs))
        x = in_specs[0].shape
        layout = "(N, L, input_size)" if self.batch_first else "(L, N, input_size)"
        if len(x) != 3:
            self.fail("input must be %s%s, got shape %s"
                      % (layout, " (batch_first)" if self.batch_first else "", x))
        L, N, inputs = (x[1], x[0], x[2]) if self.batch_first else x
        if min(L, N, inputs) < 1:
            self.fail("input of shape %s has an empty dimension" % (x,))
        given = self.options["input_size"]
        if given is not None and given != inputs:
            self.fail("input has %d features (shape %s, %s), option 'input_size' is %d"
                      % (inputs, x, layout, given))
        if self.param_specs is not None and inputs != self.param_specs[0].shape[1]:
            self.fail("input has %d features (shape %s), the layer was set up for %d"
                      % (inputs, x, self.param_specs[0].shape[1]))
        state = (self.K * self.D, N, self.H)
        for spec, what in zip(in_specs[1:], ("h_0", "c_0")):
            if spec.shape != state:
                self.fail("%s must be (num_layers * num_directions, N, hidden_size) = %s, got %s"
                          % (what, state, spec.shape))
        want = 1 if self.num_outputs is None else self.num_outputs
        if not 1 <= want <= 1 + self.states:
            self.fail("gives the output sequence%s: 1 to %d outputs, the graph lists %d"
                      % (" and h_n, c_n" if self.states > 1 else " and h_n", 1 + self.states, want))
        self.L, self.N, self.I, self.outputs = L, N, inputs, want
        self.training = self.mode == TRAIN
        self.dropping = self.training and self.dropout > 0 and self.K > 1
        self._launchers()
        saved = self._saved_layout() if self.training else []
        ws = 4 * max(self._forward_slots().size,
                     self._backward_slots().size if self.training else 0)
        y = (N, L, self.D * self.H) if self.batch_first else (L, N, self.D * self.H)
        outputs = [TensorSpec(y)] + [TensorSpec(state)] * (want - 1)
        return Setup(outputs, self._param_specs(), ws, saved)

    def _param_specs(self):
        specs = []
        for l in range(self.K):
            width = self.I if l == 0 else self.D * self.H
            for d in range(self.D):
                tail = "_l%d%s" % (l, "_reverse" if d else "")
                specs += [ParamSpec((self.G, width), name="weight_ih" + tail),
                          ParamSpec((self.G, self.H), name="weight_hh" + tail)]
                if self.bias:
                    specs += [ParamSpec((self.G,), name="bias_ih" + tail),
                              ParamSpec((self.G,), name="bias_hh" + tail)]
        return specs

    def init_params(self, params, rng):
        # PyTorch's RNNs: every weight and bias U(-1/sqrt(hidden_size), 1/sqrt(hidden_size))
        bound = 1.0 / np.sqrt(self.H)
        for p in params:
            p.to_device(rng.uniform(-bound, bound, p.shape).astype(np.float32))

    def _launchers(self):
        ctx, L, N, H, D = self.ctx, self.L, self.N, self.H, self.D
        self.passes = [[RecurrentPass(ctx, self.CELL, L, N, self.I if l == 0 else D * H, H,
                                      self.bias, reverse=d == 1,
                                      x_batch_first=l == 0 and self.batch_first)
                        for d in range(D)] for l in range(self.K)]
        row = L * D * H if self.batch_first else D * H  # of the last layer's output
        self.copy_final = {r: StridedCopy(ctx, (N, H), (r, 1), (H, 1)) for r in {row, D * H}}
        seq = ((L, N, D * H), np.float32)
        self.mask_fill = self.apply_mask = None
        if self.dropping:
            self.mask_fill = RandomFill(ctx, seq[0], "uniform")
            self.apply_mask = PointwiseBroadcast(ctx, [seq, seq], [seq],
                                                 "y0 = x1 >= w0 ? x0 * w1 : 0.0f;",
                                                 ["float", "float"], name="rnn_dropout")
        self.to_time_major = self.from_time_major = None
        if self.batch_first:
            self.to_time_major = {w: TransposeCopy(ctx, (N, L, w), (1, 0, 2))
                                  for w in {self.I, D * H}}
            self.from_time_major = TransposeCopy(ctx, (L, N, self.I), (1, 0, 2))

    # ----- memory
    def _saved_layout(self):
        """Saved TensorSpecs; ``self.saved_index`` maps (kind, l, d) to their positions."""
        L, N, H, D = self.L, self.N, self.H, self.D
        specs, self.saved_index = [], {}

        def add(key, shape):
            self.saved_index[key] = len(specs)
            specs.append(TensorSpec(shape))
        for l in range(self.K):
            for d in range(D):
                add(("gates", l, d), (L, N, SAVED_GATES * H))
                if self.CELL == "lstm":
                    add(("cells", l, d), (L, N, H))
            if l < self.K - 1:
                add(("hidden", l), (L, N, D * H))
            if l > 0 and self.dropping:
                add(("mask", l), (L, N, D * H))
        return specs

    def _forward_slots(self):
        L, N, H, DH = self.L, self.N, self.H, self.D * self.H
        s = _Slots()
        s.add("xg", L * N * self.G)
        s.add("hg", N * self.G)
        s.add("zeros", N * H)
        if not self.training:
            s.add("cells", 2 * N * H if self.CELL == "lstm" else 0)
            s.add("hidden", min(self.K - 1, 2) * L * N * DH)
        s.add("xdrop", L * N * DH if self.dropping else 0)
        return s

    def _backward_slots(self):
        L, N, H, DH = self.L, self.N, self.H, self.D * self.H
        s = _Slots()
        s.add("dxg", L * N * self.G)
        s.add("dhg", L * N * self.G if self.CELL == "gru" else 0)
        for name in ("dh", "dc", "zeros"):
            s.add(name, N * H)
        s.add("dseq", min(self.K - 1, 2) * L * N * DH)
        s.add("xdrop", L * N * DH if self.dropping else 0)
        if self.batch_first:
            s.add("x_tm", L * N * self.I)
            s.add("dx_tm", L * N * self.I)
            s.add("y_tm", L * N * DH)
        return s

    def _params(self, params, l, d):
        """(w_ih, w_hh, b_ih, b_hh) of layer l, direction d (None entries without bias)."""
        per = 4 if self.bias else 2
        got = list(params[(l * self.D + d) * per:(l * self.D + d + 1) * per])
        return got + [None] * (4 - len(got))

    def _state(self, t, l, d):
        """The (N, H) slice of a (num_layers * D, N, H) state tensor, or None."""
        if t is None:
            return None
        size = self.N * self.H
        return t.view((self.N, self.H), (l * self.D + d) * size)

    # ----- forward
    def forward(self, x, y, params, ws, saved):
        L, N, H, D, K = self.L, self.N, self.H, self.D, self.K
        DH = D * H
        slots = self._forward_slots()
        h0 = x[1] if len(x) > 1 else None
        c0 = x[2] if len(x) > 2 else None
        hidden = [self._saved(saved, "hidden", l) if self.training else
                  slots.view(ws, "hidden", offset=(l % 2) * L * N * DH, count=L * N * DH)
                  for l in range(K - 1)]
        out = []
        for l in range(K):
            if l == 0:
                inp = x[0].view((L * N, self.I))
            else:
                inp = hidden[l - 1].view((L * N, DH))
                if self.dropping:
                    mask = self._saved(saved, "mask", l)
                    out += [_NextMasks(self, self.mask_fill.launches(mask)[0], l)]
                    drop = slots.view(ws, "xdrop", (L, N, DH))
                    out += self.apply_mask.launches([hidden[l - 1].view((L, N, DH)), mask], [drop],
                                                    self._mask_scalars())
                    inp = drop.view((L * N, DH))
            last = l == K - 1
            target = y[0] if last else hidden[l]
            for d in range(D):
                seq = self._output_seq(target, d, last)
                w_ih, w_hh, b_ih, b_hh = self._params(params, l, d)
                p = self.passes[l][d]
                if self.CELL == "lstm":
                    cells = self._saved(saved, "cells", l, d) if self.training else \
                        slots.view(ws, "cells")
                else:
                    cells = None
                gates = self._saved(saved, "gates", l, d) if self.training else None
                out += p.forward_launches(inp, w_ih, w_hh, b_ih, b_hh, seq,
                                          slots.view(ws, "xg"), slots.view(ws, "hg"),
                                          h0=self._state(h0, l, d), c0=self._state(c0, l, d),
                                          gates=gates, cells=cells, zeros=slots.view(ws, "zeros"))
                if self.outputs > 1:  # h_n: h of the step this direction visits last
                    final = p.order[-1]
                    out += self.copy_final[seq.row].launches(
                        seq.start(final, N, H), self._state(y[1], l, d))
                if self.outputs > 2:
                    out += pointwise_launches(self.ctx, [p.final_cell(cells).view((N, H))],
                                              [self._state(y[2], l, d)], "y0 = x0;")
        return out

    def _output_seq(self, t, d, last):
        """Direction d's half of layer output ``t`` as a Seq (batch-first for the net's
        output when ``batch_first``)."""
        DH = self.D * self.H
        if last and self.batch_first:
            return Seq(t, d * self.H, DH, self.L * DH)
        return Seq(t, d * self.H, self.N * DH, DH)

    def _saved(self, saved, *key):
        if not saved:
            self.fail("the backward pass and train-mode forward need what a setup in train "
                      "mode saves")
        return saved[self.saved_index[key]]

    def _mask_scalars(self):
        return [self.dropout, 1.0 / (1.0 - self.dropout)]

    # ----- backward
    def backward(self, x, dx, y, dy, params, dparams, ws, saved, accumulate):
        if all(g is None for g in list(dx) + list(dparams)):
            return []
        L, N, H, D, K = self.L, self.N, self.H, self.D, self.K
        DH, I = D * H, self.I
        slots = self._backward_slots()
        h0 = x[1] if len(x) > 1 else None
        c0 = x[2] if len(x) > 2 else None
        dh0 = dx[1] if len(dx) > 1 else None
        dc0 = dx[2] if len(dx) > 2 else None
        dh_n = dy[1] if len(dy) > 1 else None
        dc_n = dy[2] if len(dy) > 2 else None
        scratch = BackwardScratch(*(slots.view(ws, k) if k in slots.offsets else None
                                    for k in ("dxg", "dhg", "dh", "dc", "zeros")))
        out = []
        x_tm = x[0].view((L * N, I))
        y_tm = y[0]
        if self.batch_first:
            y_tm = slots.view(ws, "y_tm", (L, N, DH))
            out += self.to_time_major[DH].launches(y[0], y_tm)
            if any(self._params(dparams, 0, d)[0] is not None for d in range(D)):
                x_tm = slots.view(ws, "x_tm", (L, N, I))
                out += self.to_time_major[I].launches(x[0], x_tm)
                x_tm = x_tm.view((L * N, I))
        dseq = None if dy[0] is None else dy[0]  # the gradient of layer l's output
        for l in range(K - 1, -1, -1):
            last = l == K - 1
            if l == 0:
                inp, target, beta0 = x_tm, None, 0.0
                if dx[0] is not None and self.batch_first:  # transposed into dx[0] below
                    target = slots.view(ws, "dx_tm", (L * N, I))
                elif dx[0] is not None:
                    target, beta0 = dx[0].view((L * N, I)), float(accumulate[0])
            else:
                inp = self._saved(saved, "hidden", l - 1).view((L * N, DH))
                if self.dropping:
                    drop = slots.view(ws, "xdrop", (L, N, DH))
                    out += self.apply_mask.launches(
                        [inp.view((L, N, DH)), self._saved(saved, "mask", l)], [drop],
                        self._mask_scalars())
                    inp = drop.view((L * N, DH))
                target = slots.view(ws, "dseq", offset=((K - 1 - l) % 2) * L * N * DH,
                                    count=L * N * DH).view((L * N, DH))
                beta0 = 0.0
            hseq = Seq(y_tm if last else self._saved(saved, "hidden", l), 0, N * DH, DH)
            for d in range(D):
                p = self.passes[l][d]
                w_ih, w_hh, _, _ = self._params(params, l, d)
                dw_ih, dw_hh, db_ih, db_hh = self._params(dparams, l, d)
                dy_seq = None
                if dseq is not None:
                    dy_seq = self._output_seq(dseq, d, last)
                out += p.backward_launches(
                    inp, w_ih, w_hh, Seq(hseq.tensor, d * H, N * DH, DH),
                    self._saved(saved, "gates", l, d), scratch, dy=dy_seq,
                    dh_n=self._state(dh_n, l, d), dc_n=self._state(dc_n, l, d),
                    h0=self._state(h0, l, d), c0=self._state(c0, l, d),
                    cells=self._saved(saved, "cells", l, d) if self.CELL == "lstm" else None,
                    dw_ih=dw_ih, dw_hh=dw_hh, db_ih=db_ih, db_hh=db_hh,
                    dx=target, dx_beta=beta0 if d == 0 else 1.0,
                    dh0=self._state(dh0, l, d),
                    dh0_beta=float(accumulate[1]) if dh0 is not None else 0.0,
                    dc0=self._state(dc0, l, d),
                    dc0_beta=float(accumulate[2]) if dc0 is not None else 0.0)
            if l > 0:
                if self.dropping:  # the dropped input's gradient -> the output's
                    grad = target.view((L, N, DH))
                    out += self.apply_mask.launches([grad, self._saved(saved, "mask", l)],
                                                    [grad], self._mask_scalars())
                dseq = target.view((L, N, DH))
            elif target is not None and self.batch_first:
                out += self.from_time_major.launches(target.view((L, N, I)), dx[0],
                                                     beta=float(accumulate[0]))
        return out


@register("LSTM")
class LSTM(_Recurrent):
    """Long short-term memory (Hochreiter & Schmidhuber 1997), as ``torch.nn.LSTM``:
    i, f, o = sigmoid, g = tanh of ``W_i* x + b_i* + W_h* h + b_h*``;
    ``c' = f c + i g``, ``h' = o tanh(c')``."""
    CELL = "lstm"


@register("GRU")
class GRU(_Recurrent):
    """Gated recurrent unit (Cho et al. 2014), as ``torch.nn.GRU``: r, z = sigmoid of
    ``W_i* x + b_i* + W_h* h + b_h*``, ``n = tanh(W_in x + b_in + r (W_hn h + b_hn))``,
    ``h' = (1 - z) n + z h``."""
    CELL = "gru"


class _Slots:
    """Named float32 slots one after another in a layer's workspace (64-byte aligned)."""

    def __init__(self):
        self.offsets, self.size = {}, 0

    def add(self, name, count):
        if count:
            self.offsets[name] = (self.size, count)
            self.size += round_up(count, 16)

    def view(self, ws, name, shape=None, offset=0, count=None):
        start, size = self.offsets[name]
        t = ws_view(ws, 4 * (start + offset), size if count is None else count)
        return t if shape is None else t.view(shape)


class _NextMasks:
    """Fill layer l's dropout mask from the layer's counter: the first fill of a training
    step takes the next counter and moves it on past every mask of the step, so a
    re-run iteration gets new masks and a seed reproduces them all."""

    def __init__(self, layer, launch, l):
        self.layer, self.launch, self.l, self.name = layer, launch, l, "rnn_dropout_mask"

    def __call__(self, queue):
        layer = self.layer
        per = counters(layer.L * layer.N * layer.D * layer.H)
        if self.l == 1:
            layer.mask_offset = layer.step_offset
            layer.step_offset += per * (layer.K - 1)
        RandomFill.set_counter(self.launch, layer.key, layer.mask_offset + per * (self.l - 1))
        return self.launch(queue)
