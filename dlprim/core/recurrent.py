"""One recurrent layer in one direction over a whole sequence (LSTM or GRU, PyTorch's
formulas and gate order; ``kernels/recurrent.cl`` has them).

Forward: the input projection of every step as one GEMM, ``xg = x W_ih^T + b_ih``
(L*N x G*H, G = 4 gates for the LSTM, 3 for the GRU); then per step the hidden GEMM
``hg = h_prev W_hh^T + b_hh`` and one gate kernel that writes h (and c) and, for
backward, the gate activations.

Backward through time, the steps in reverse: per step one kernel turns dh (the output's
gradient plus what the next step sends back) into the pre-activation gradients dG, and
one GEMM sends ``dh_prev = dG_hidden W_hh`` back; then over all steps at once
``dW_ih += dG^T x``, ``dW_hh += dG_hidden^T h_prev``, the bias sums and
``dx = dG W_ih``. For the LSTM dG_hidden is dG; for the GRU it differs in the n block
(``d(hg_n) = d(n_pre) r``), so its kernel writes both.

On GPUs the time loop of either pass is one launch instead
(``core/recurrent_persistent.py``): the same formulas and saved values, the GEMMs before
and after it unchanged. On CPUs a step is one launch (``FUSED``): the gate kernel
computes the step's hidden product itself on vectors of units, forward from a transposed
copy of W_hh made once a pass, backward from the gradients of the step visited before; a
CPU runtime's launch costs about as much as such a step's arithmetic.

Sequences are strided views, ``Seq(tensor, offset, step, row)``: step t, batch row n
starts at ``offset + t * step + n * row`` elements into the tensor, so time-major and
batch-first tensors and one direction's half of a bidirectional output are read in place.
"""
from collections import namedtuple
from typing import List, Optional

import numpy as np

from ..kernels import program
from ..utils import round_up
from .copy import TransposeCopy, fill_launches
from .gemm import Gemm
from .pointwise import PointwiseBroadcastReduce, pointwise_launches
from .recurrent_persistent import plan as persistent_plan, shared_parts
from .recurrent_seq import Seq
from .tuning import cpu_vector_width
from ..tensor import Tensor

__all__ = ["GATES", "SAVED_GATES", "Seq", "BackwardScratch", "RecurrentPass"]

GATES = {"lstm": 4, "gru": 3}
SAVED_GATES = 4  # values per unit saved for backward: i, f, g, o or r, z, n, W_hn h + b_hn
# the fused step: a work-item takes a vector of units of every batch row, up to
# FUSED_ROWS rows at a time (each W_hh value read serves them), and a work-group a compute
# unit's share of the units, so each core reads its own part of W_hh step after step
# (2-core EPYC, LSTM 2 x 256 at batch 8: 35.2 us a step with 4 work-items a group over 2
# row blocks, 33.8 so). The forward sums its gates a few at a time, as many as keep
# FUSED_SUMS vectors live (a pass over k reads its gates' weights once for all the rows):
# 8 rows and 2 gates a pass (16 sums of AVX-512's 32 registers) ran an LSTM 2 x 256 step
# at batch 8 in 22.6-23.9 us against 27.4-30.9 for 4 rows and every gate (W_hh read twice
# a step), on a 2-core Intel Xeon (Emerald Rapids); with AVX2 code (16 registers), 8 rows
# a gate at a time 44.8-47.3 against 48.9-49.2 (docs/benchmarks.md, "Recurrent layers")
FUSED_ROWS = 8
FUSED_SUMS = {16: 16, 8: 8}


def fused_rows(batch: int) -> int:
    """Batch rows a work-item of the fused step sums at a time: up to FUSED_ROWS, the power
    of two that holds ``batch`` where fewer (rows past the batch are computed and dropped)."""
    return min(FUSED_ROWS, program.pow2_at_least(batch))


def fused_gates(cell: str, rows: int, vec: int) -> int:
    """Gates the fused forward sums a pass over k: FUSED_SUMS[vec] vectors over ``rows``."""
    return max(1, min(GATES[cell], FUSED_SUMS.get(vec, 8) // rows))


def fused_vector(ctx) -> int:
    """Units a work-item of the fused step takes as one vector (tuning.cpu_vector_width)."""
    return cpu_vector_width(ctx.facts)


def fuses_steps(ctx, hidden: int) -> bool:
    """Whether a step-per-launch time loop of ``hidden`` units on ``ctx`` computes each
    step's hidden product inside its gate kernel (one launch a step): on CPUs, where the
    units fill whole vectors. (2-core AMD EPYC, Intel's runtime, LSTM 2 x 256 at batch 8:
    a step took 36 us of GEMM and 14 of gates as two launches.)"""
    return bool(ctx.facts.is_cpu) and hidden % fused_vector(ctx) == 0


# scratch of the backward pass: dxg and dhg (L*N x G*H; dhg is dxg for the LSTM), dh and
# dc (N x H), zeros (N x H, for absent initial states)
BackwardScratch = namedtuple("BackwardScratch", "dxg dhg dh dc zeros")


class RecurrentPass:
    """``cell`` ("lstm" or "gru") over ``steps`` x ``batch`` rows of ``inputs`` features
    with ``hidden`` units, in time order or ``reverse``. ``x_batch_first``: the rows of x
    (and so of xg) are in (n, t) order rather than (t, n); backward wants x time-major.
    ``persistent``: None chooses the time loop's launches (one for the whole loop where
    the device allows, else a launch or two a step); False forces a launch or two a step;
    an int forces one launch of that many work-groups (1 runs on every device).
    ``fused``: whether a step-per-launch loop takes one launch a step (None:
    ``fuses_steps``) or two (the hidden GEMM, then the gates)."""

    def __init__(self, ctx, cell: str, steps: int, batch: int, inputs: int, hidden: int,
                 bias: bool = True, reverse: bool = False, x_batch_first: bool = False,
                 persistent=None, fused=None) -> None:
        if cell not in GATES:
            raise ValueError("RecurrentPass: cell must be 'lstm' or 'gru', got %r" % (cell,))
        for what, v in (("steps", steps), ("batch", batch), ("inputs", inputs),
                        ("hidden", hidden)):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
                raise ValueError("RecurrentPass: %s must be a positive integer, got %r"
                                 % (what, v))
        self.ctx, self.cell, self.bias, self.reverse = ctx, cell, bool(bias), bool(reverse)
        self.L, self.N, self.I, self.H = int(steps), int(batch), int(inputs), int(hidden)
        self.G = GATES[cell] * self.H  # width of the gate pre-activations
        self.x_batch_first = bool(x_batch_first)
        col = "col" if self.bias else None
        self.project = Gemm(ctx, self.L * self.N, self.G, self.I, trans_b=True, bias=col)
        self.persistent = None if persistent is False else persistent_plan(
            ctx, cell, self.N, self.H, None if persistent is None else int(persistent))
        self.fused = self.persistent is None and bool(
            fuses_steps(ctx, self.H) if fused is None else fused)
        self.vec = fused_vector(ctx) if self.fused else 1
        if self.H % self.vec:
            raise ValueError("RecurrentPass: the fused step takes hidden sizes that are "
                             "multiples of %d, got %d" % (self.vec, self.H))
        # the step-per-launch loop's hidden GEMMs (forward, and dh_prev = dG W_hh back),
        # built only where that loop runs; the fused loop's transposed W_hh
        self.recur = self.recur_back = self._wt = None
        if self.persistent is None and not self.fused:
            self.recur = Gemm(ctx, self.N, self.G, self.H, trans_b=True, bias=col)
        if self.fused:
            self._transpose = TransposeCopy(ctx, (self.G, self.H), (1, 0))
        self.wg = min(64, program.pow2_at_least(self.H), ctx.facts.max_work_group)
        self._backward = None
        self._sync = None

    def _parts(self):
        """The one-launch backward's scratch of summed shares, where its plan sums them."""
        back = self.persistent.backward_plan
        if not back.sums:
            return None
        return shared_parts(self.ctx, back.parts_elements())

    def _sync_counter(self):
        """The persistent launches' barrier counter and failure flag (two uints)."""
        if self._sync is None:
            self._sync = Tensor.zeros(self.ctx, (2,), "uint32")
        return self._sync

    @property
    def order(self) -> List[int]:
        """The time steps in the order this direction visits them."""
        return list(range(self.L - 1, -1, -1) if self.reverse else range(self.L))

    def _program(self, save, dy):
        rows = fused_rows(self.N)
        fused = (dict(FUSED=1, RB=rows, GQ=fused_gates(self.cell, rows, self.vec),
                      BIAS=int(self.bias), VEC=self.vec) if self.fused else {})
        return program.get(self.ctx, "recurrent", CELL=self.cell, SAVE=int(save), DY=int(dy),
                           **fused)

    def _launch(self, prg, kernel, args):
        if self.fused:  # a work-item: vec units of every row; a work-group a core
            items = self.H // self.vec
            wg = -(-items // max(1, min(self.ctx.facts.compute_units, items)))
            grid, local = (round_up(items, wg), 1), (wg, 1)
        else:
            grid, local = (round_up(self.H, self.wg), self.N), (self.wg, 1)
        return program.Launch(prg, kernel, grid, local,
                              [np.int32(self.N), np.int32(self.H)] + args)

    def _transposed(self, w_hh):
        """Launches of the fused forward's W_hh^T (H x G), and that tensor."""
        if self._wt is None:
            self._wt = Tensor(self.ctx, (self.H, self.G))
        return self._transpose.launches(w_hh.view((self.G, self.H)), self._wt), self._wt

    # ----- forward
    def forward_launches(self, x: Tensor, w_ih: Tensor, w_hh: Tensor, b_ih: Optional[Tensor],
                         b_hh: Optional[Tensor], y: Seq, xg: Tensor, hg: Tensor,
                         h0: Optional[Tensor] = None, c0: Optional[Tensor] = None,
                         gates: Optional[Tensor] = None, cells: Optional[Tensor] = None,
                         zeros: Optional[Tensor] = None) -> list:
        """Launches of the pass over x (L*N x I rows) into the output sequence ``y`` (a Seq
        of h). ``xg`` (L*N*G) and ``hg`` (N*G) are scratch; ``h0``, ``c0``: N x H initial
        states (None: ``zeros``, an N x H scratch this fills). ``gates`` (L*N*4H) saves the
        activations for backward, or None. LSTM ``cells``: the cell states, L*N*H (by
        time step, kept for backward) or 2*N*H (two alternating slots); the final one is
        at ``final_cell()``."""
        N, H = self.N, self.H
        out = []
        if h0 is None or (self.cell == "lstm" and c0 is None):
            out += fill_launches(self.ctx, zeros, 0.0)
        h0 = zeros if h0 is None else h0
        c0 = zeros if c0 is None else c0
        out += self.project.launches(x, w_ih, xg, bias=b_ih)
        xseq = Seq(xg, 0, self.G, self.L * self.G) if self.x_batch_first \
            else Seq(xg, 0, N * self.G, self.G)
        if self.persistent is not None:
            return out + self.persistent.forward_launches(
                self.L, self.reverse, xseq, w_hh, b_hh, h0, c0, y, self._sync_counter(),
                cells=cells, gates=gates)
        prg = self._program(gates is not None, False)
        order = self.order
        if self.fused:
            transpose, wt = self._transposed(w_hh)
            out += transpose
            hidden = [wt, b_hh if b_hh is not None else wt]  # (the bias unread without one)
        for s, t in enumerate(order):
            prev = Seq(h0, 0, 0, H) if s == 0 else y
            tp = 0 if s == 0 else order[s - 1]
            if not self.fused:
                out += self.recur.launches(prev.start(tp, N, H), w_hh, hg, bias=b_hh,
                                           lda=prev.row)
                hidden = [hg]
            args = xseq.args(t)
            if self.cell == "lstm":
                c_prev = c0 if s == 0 else self._cell(cells, s - 1, tp)
                args += (prev.args(tp) if self.fused else []) + hidden
                args += [c_prev, self._cell(cells, s, t)]
            else:
                args += hidden + prev.args(tp)
            args += y.args(t)
            if gates is not None:
                args.append(gates.view((N * 4 * H,), t * N * 4 * H))
            out.append(self._launch(prg, self.cell + "_forward", args))
        return out

    def _cell(self, cells, s, t):
        """The N x H cell state of the s-th visited step (time t)."""
        slot = t if cells.size >= self.L * self.N * self.H else s % 2
        return cells.view((self.N * self.H,), slot * self.N * self.H)

    def final_cell(self, cells: Tensor) -> Tensor:
        """The last cell state that ``forward_launches`` wrote into ``cells``."""
        return self._cell(cells, self.L - 1, self.order[-1])

    def _copy(self, src, dst, beta=0.0):
        """dst = src + beta * dst over N x H states."""
        flat = (self.N * self.H,)
        return pointwise_launches(self.ctx, [src.view(flat)], [dst.view(flat)], "y0 = x0;",
                                  beta=beta)

    # ----- backward
    def _backward_ops(self):
        if self._backward is None:
            ctx, L, N, H, G, I = self.ctx, self.L, self.N, self.H, self.G, self.I
            rows = ((L * N, G), np.float32)
            sums = PointwiseBroadcastReduce(
                ctx, [rows, rows], [((1, G), np.float32)] * 2, "y0 = x0; y1 = x1;",
                "reduce_y0 = 0; reduce_y1 = 0;", "reduce_y0 += y0; reduce_y1 += y1;",
                name="rnn_bias_backward")
            if self.persistent is None:
                self.recur_back = Gemm(ctx, N, H, G)                    # dh_prev = dG W_hh
            self._backward = dict(
                dw_ih=Gemm(ctx, G, I, L * N, trans_a=True),             # dW_ih += dG^T x
                dw_hh=Gemm(ctx, G, H, (L - 1) * N, trans_a=True) if L > 1 else None,
                dw_hh0=Gemm(ctx, G, H, N, trans_a=True),                # the h0 step
                dx=Gemm(ctx, L * N, I, G),                              # dx = dG W_ih
                sums=sums)
        return self._backward

    def _backward_steps(self, w_hh, hseq, gates, sc, dhg, dy, h0, c0, cells, want_dh0):
        """The time loop of the backward pass, two launches a step: the gate gradients,
        then ``dh_prev = dG W_hh`` (not after the first step unless dh0 is wanted); fused,
        one: each step's kernel first multiplies the gradients of the step visited before
        by W_hh itself."""
        N, H, G, L = self.N, self.H, self.G, self.L
        lstm, order, out = self.cell == "lstm", self.order, []
        prg = self._program(True, dy is not None)
        for s in range(L - 1, -1, -1):
            t, tp = order[s], order[s - 1] if s else 0
            args = []
            if dy is not None:
                args += dy.args(t)
            if self.fused:  # the step visited before: time order[s + 1]
                later = order[s + 1] if s < L - 1 else t
                args += [dhg.view((N * G,), later * N * G), w_hh, np.int32(s < L - 1)]
            step_gates = gates.view((N * 4 * H,), t * N * 4 * H)
            dxg_t = sc.dxg.view((N * G,), t * N * G)
            dhg_t = dhg.view((N * G,), t * N * G)
            if lstm:
                c_prev = c0 if s == 0 else cells.view((N * H,), tp * N * H)
                args += [sc.dh, sc.dc, step_gates, cells.view((N * H,), t * N * H), c_prev, dxg_t]
            else:
                prev = Seq(h0, 0, 0, H) if s == 0 else hseq
                args += [sc.dh, step_gates] + prev.args(tp) + [dxg_t, dhg_t]
            out.append(self._launch(prg, self.cell + "_backward", args))
            if (s or want_dh0) and (not self.fused or s == 0):
                # the GRU kernel left dh z in dh: add to it
                out += self.recur_back.launches(dhg_t, w_hh, sc.dh, beta=0.0 if lstm else 1.0)
        return out

    def backward_launches(self, x: Tensor, w_ih: Tensor, w_hh: Tensor, hseq: Seq, gates: Tensor,
                          scratch: BackwardScratch, dy: Optional[Seq] = None,
                          dh_n: Optional[Tensor] = None, dc_n: Optional[Tensor] = None,
                          h0: Optional[Tensor] = None, c0: Optional[Tensor] = None,
                          cells: Optional[Tensor] = None, dw_ih: Optional[Tensor] = None,
                          dw_hh: Optional[Tensor] = None, db_ih: Optional[Tensor] = None,
                          db_hh: Optional[Tensor] = None, dx: Optional[Tensor] = None,
                          dx_beta: float = 0.0, dh0: Optional[Tensor] = None,
                          dh0_beta: float = 0.0, dc0: Optional[Tensor] = None,
                          dc0_beta: float = 0.0) -> list:
        """Launches of the backward pass. ``x``: the forward's input, time-major (L*N x I);
        ``hseq``: the forward's output h as a time-major Seq; ``gates``/``cells``: what the
        forward saved; ``dy``: a Seq of the output's gradient (None: zero); ``dh_n``,
        ``dc_n``: gradients of the final states (None: zero). Parameter gradients are
        added; ``dx``, ``dh0``, ``dc0`` (None: not wanted) are written as
        ``beta * old + gradient``."""
        ops = self._backward_ops()
        N, H, G, L = self.N, self.H, self.G, self.L
        sc, lstm = scratch, self.cell == "lstm"
        if hseq.step != N * hseq.row:
            raise ValueError("RecurrentPass: hseq must be time-major (step = N * row)")
        out = []
        has_h0 = h0 is not None
        if h0 is None or (lstm and c0 is None):
            out += fill_launches(self.ctx, sc.zeros, 0.0)
        h0 = sc.zeros if h0 is None else h0
        c0 = sc.zeros if c0 is None else c0
        for start, target in ((dh_n, sc.dh), (dc_n, sc.dc if lstm else None)):
            if target is not None:
                out += (fill_launches(self.ctx, target, 0.0) if start is None else
                        self._copy(start, target))
        order = self.order
        dhg = sc.dxg if lstm else sc.dhg
        if self.persistent is not None:
            out += self.persistent.backward_plan.backward_launches(
                L, self.reverse, w_hh, sc.dh, sc.dc, gates, sc.dxg, dhg, self._sync_counter(),
                dy=dy, cells=cells, c0=c0, hseq=hseq, h0=h0, parts=self._parts())
        else:
            out += self._backward_steps(w_hh, hseq, gates, sc, dhg, dy, h0, c0, cells,
                                        dh0 is not None)
        if dh0 is not None:
            out += self._copy(sc.dh, dh0, dh0_beta)
        if lstm and dc0 is not None:
            out += self._copy(sc.dc, dc0, dc0_beta)
        dxg_all, dhg_all = sc.dxg.view((L * N, G)), dhg.view((L * N, G))
        if dw_ih is not None:
            out += ops["dw_ih"].launches(dxg_all, x, dw_ih, beta=1.0)
        if dw_hh is not None:
            if L > 1:  # h_prev of step t is h of the step visited before it
                later, earlier = (1, 0) if not self.reverse else (0, 1)
                out += ops["dw_hh"].launches(dhg.view(((L - 1) * N * G,), later * N * G),
                                             hseq.start(earlier, (L - 1) * N, H), dw_hh,
                                             ldb=hseq.row, beta=1.0)
            if has_h0:
                out += ops["dw_hh0"].launches(dhg.view((N * G,), order[0] * N * G), h0, dw_hh,
                                              beta=1.0)
        if (db_ih is None) != (db_hh is None):
            raise ValueError("RecurrentPass: db_ih and db_hh are wanted together")
        if db_ih is not None:
            out += ops["sums"].launches([dxg_all, dhg_all],
                                        [db_ih.view((1, G)), db_hh.view((1, G))], beta=1.0)
        if dx is not None:
            out += ops["dx"].launches(dxg_all, w_ih, dx, beta=dx_beta)
        return out
