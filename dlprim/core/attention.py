"""Fused scaled dot-product attention (``kernels/attention.cl``), forward and backward:
``O = softmax(scale Q K^T + mask) V`` without storing the L x S score matrix, so memory
grows linearly with the sequence length.

Tensors are contiguous float32: q (B, L, D), k (B, S, D), v (B, S, DV), o (B, L, DV) and the
row log-sum-exp lse (B, L), with B = batch * heads. The mask is additive float32 (a boolean
mask becomes 0 / -inf first), read through element strides over (batch, head, L, S), 0
where it broadcasts; ``causal`` drops key j > query i. A query row whose keys are all
masked gives zeros and no gradient (PyTorch's safe softmax). The backward recomputes the
probabilities from lse: ``dq`` walks the keys per query row and ``dk``/``dv`` the queries per
key row, so no atomics are needed.

With ``dropout`` p > 0 each attention weight is dropped with probability p and the rest
scaled by 1 / (1 - p); the mask is a function of (seed, offset) and the weight's place
(Philox, as ``core/random.py``), so the backward pass recomputes it rather than storing
an L x S mask. A step uses ``counters()`` values of the stream from its offset.
"""
import math

import numpy as np

from ..kernels import program
from ..tensor import Tensor
from ..utils import round_up
from .copy import fill_launches
from .pointwise import pointwise_reduce_launches

__all__ = ["AttentionOps"]


class AttentionOps:
    """Attention over ``batch`` = batch * heads rows of q (L, D), k (S, D), v (S, DV)."""

    def __init__(self, ctx, batch, lq, lk, d, dv, heads=1, causal=False, mask=False, dropout=0.0):
        self.ctx = ctx
        if isinstance(dropout, bool) or not isinstance(dropout, (int, float)) or not 0 <= dropout < 1:
            raise ValueError("attention: dropout must be a probability in [0, 1), got %r"
                             % (dropout,))
        self.dropout = float(dropout)
        self.batch, self.lq, self.lk, self.d, self.dv = (int(v) for v in (batch, lq, lk, d, dv))
        self.heads, self.causal, self.mask = int(heads), bool(causal), bool(mask)
        if min(self.d, self.dv) < 1:
            raise ValueError("attention: head widths must be positive, got D=%d DV=%d"
                             % (self.d, self.dv))
        if self.batch % max(self.heads, 1):
            raise ValueError("attention: %d rows are not a whole number of %d heads"
                             % (self.batch, self.heads))
        facts = ctx.facts
        # a tile of T rows of k and v (or of q and dO) in local memory, T the work-group
        t = 64 if not facts.is_cpu else 16
        while t > 8 and 4 * t * (self.d + self.dv + 2) > facts.local_mem // 2:
            t //= 2
        self.tile = min(t, facts.max_work_group)
        self.program = program.get(ctx, "attention", D=self.d, DV=self.dv, T=self.tile,
                                   MASK=self.mask, CAUSAL=self.causal,
                                   DROPOUT=self.dropout > 0)

    def counters(self):
        """Philox counters one step's dropout mask uses (one per attention weight)."""
        return self.batch * self.lq * self.lk

    def _drop_args(self, seed, offset):
        if not self.dropout:
            return []
        threshold = min(int(round(self.dropout * 2.0 ** 32)), 2 ** 32 - 1)
        return [np.uint32(threshold), np.float32(1.0 / (1.0 - self.dropout)),
                np.uint64(seed), np.uint64(offset)]

    @staticmethod
    def set_dropout_counter(launch, seed, offset):
        """Point a launch of these kernels built with dropout at another (seed, offset)."""
        n = len(launch.args)
        launch.set_arg(n - 2, np.uint64(seed))
        launch.set_arg(n - 1, np.uint64(offset))

    def _check(self, what, t, shape):
        if not isinstance(t, Tensor) or t.shape != shape or t.dtype != np.float32:
            raise ValueError("attention: %s is %r, expected float32 %s" % (what, t, shape))

    def _mask_args(self, mask, strides):
        if not self.mask:
            return []
        if mask is None or strides is None or len(strides) != 4:
            raise ValueError("attention: built with a mask; give it and its 4 strides "
                             "(batch, head, query, key)")
        return [mask] + [np.uint64(s) for s in strides] + [np.uint32(self.heads)]

    def _grid(self, rows):
        return (round_up(max(rows, 1), self.tile), self.batch), (self.tile, 1)

    def scale_of(self, scale):
        """The score scale used: ``scale``, or 1 / sqrt(D) when it is None."""
        return 1.0 / math.sqrt(self.d) if scale is None else float(scale)

    def launches(self, q, k, v, o, lse, scale=None, mask=None, mask_strides=None, seed=0,
                 offset=0):
        """o = attention(q, k, v); lse (B, L) is kept for the backward pass. ``seed`` and
        ``offset`` choose the dropout mask (when built with dropout)."""
        b, lq, lk = self.batch, self.lq, self.lk
        for what, t, shape in (("q", q, (b, lq, self.d)), ("k", k, (b, lk, self.d)),
                               ("v", v, (b, lk, self.dv)), ("o", o, (b, lq, self.dv)),
                               ("lse", lse, (b, lq))):
            self._check(what, t, shape)
        if b * lq == 0:
            return []
        head = [np.uint32(lq), np.uint32(lk), np.float32(self.scale_of(scale))]
        return [program.Launch(self.program, "attention_forward", *self._grid(lq),
                               head + [q, k, v, o, lse] + self._mask_args(mask, mask_strides)
                               + self._drop_args(seed, offset))]

    def backward_launches(self, q, k, v, o, lse, dout, dq, dk, dv, delta, scale=None,
                          mask=None, mask_strides=None, seed=0, offset=0):
        """dq, dk, dv of the attention that gave o and lse, for the output gradient dout;
        ``delta`` is a (B, L) scratch tensor (the rows' dO . O); ``seed`` and ``offset``
        those of the forward pass."""
        b, lq, lk = self.batch, self.lq, self.lk
        for what, t, shape in (("dout", dout, (b, lq, self.dv)), ("dq", dq, (b, lq, self.d)),
                               ("dk", dk, (b, lk, self.d)), ("dv", dv, (b, lk, self.dv)),
                               ("delta", delta, (b, lq))):
            self._check(what, t, shape)
        if b * lk and lq == 0:  # no query reads the keys: zero gradients
            return fill_launches(self.ctx, dk, 0.0) + fill_launches(self.ctx, dv, 0.0)
        if b * lq == 0:
            return []
        head = [np.uint32(lq), np.uint32(lk), np.float32(self.scale_of(scale))]
        drops = self._drop_args(seed, offset)
        masks = self._mask_args(mask, mask_strides)
        common = head + [q, k, v, dout, lse, delta]
        rows = (b * lq, self.dv)
        out = pointwise_reduce_launches(self.ctx, [dout.view(rows), o.view(rows)],
                                         [delta.view((b * lq, 1))], "y0 = x0 * x1;")
        out.append(program.Launch(self.program, "attention_backward_dq", *self._grid(lq),
                                  common + [dq] + masks + drops))
        if lk:
            out.append(program.Launch(self.program, "attention_backward_dkdv", *self._grid(lk),
                                      common + [dk, dv] + masks + drops))
        return out
