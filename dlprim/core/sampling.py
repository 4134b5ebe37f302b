"""The next token of each row of a decoder's logits, chosen on the device
(``kernels/sampling.cl``): HuggingFace ``generate``'s processors in its order (the
repetition penalty over the tokens seen so far, the temperature, top-k, top-p), then the
largest score (temperature 0: greedy) or a draw from the softmax of what is kept.

    sampler = TokenSampler(ctx, rows=2, vocab=32000)
    sampler.configure(temperature=[0.7, 0], top_k=[50, 0], top_p=[0.9, 1], penalty=[1.1, 1],
                      seed=[7, 0])
    sampler.start(prompt_ids, lengths)          # what each row has seen; its draws restart
    tokens = sampler.next(logits)               # Tensor (rows,) int64 on the device
    sampler.feed(tokens_in, pos, positions, context)  # the next pass's inputs

One work-group per row: the top-k threshold is a radix select (exact), the top-p one a
bisection over the scores' keys, the draw an inverse CDF in token order over the kept
tokens, one Philox uniform per draw from the row's stream (its seed and lane, and its
count of draws since ``start``): a row given the same seed, lane and prompt draws the
same tokens wherever it sits in the batch. Where HF's sort splits equal scores at a
top-k or top-p boundary, every equal score is kept here. A row whose scores hold a NaN or
no finite value gives -1.
"""
import numpy as np

from ..dtypes import as_dtype, cl_type, is_float
from ..kernels import program
from ..tensor import Tensor
from ..utils import round_up

__all__ = ["TokenSampler"]

# A row's work-group: each pass over the scores takes vocab / WG loads of a work-item one
# after another (a load's latency each: TinyLlama's 32,000 scores took 17.7 us at 256 on an
# H200); CPUs run a work-group's items in turn
WG_GPU = 1024
WG_CPU = 256


class TokenSampler:
    """Next tokens for ``rows`` rows of ``vocab`` logits (float32, float16 or bfloat16)."""

    def __init__(self, ctx, rows, vocab, dtype=np.float32):
        dtype = as_dtype(dtype)
        if not is_float(dtype) or dtype == np.float64:
            raise TypeError("TokenSampler: logits must be float32, float16 or bfloat16, got %s"
                            % dtype.name)
        if vocab >= 2 ** 31:
            raise ValueError("TokenSampler: a vocabulary of %d tokens is beyond int32" % vocab)
        self.ctx, self.rows, self.vocab, self.dtype = ctx, int(rows), int(vocab), dtype
        # the largest power of two up to WG_GPU or WG_CPU the device takes (the reductions
        # halve it)
        wg = WG_GPU if ctx.facts.is_gpu else WG_CPU
        self._wg = program.pow2_at_most(min(wg, ctx.facts.max_work_group))
        self.program = program.get(ctx, "sampling", T=cl_type(dtype), WG=self._wg)
        self.seen = Tensor(ctx, (self.rows, self.vocab), np.uint8)
        self.settings = Tensor(ctx, (self.rows, 4), np.float32)
        self.streams = Tensor(ctx, (self.rows, 2), np.uint64)
        self.steps = Tensor(ctx, (self.rows,), np.uint64)
        self.tokens = Tensor(ctx, (self.rows,), np.int64)
        self._settings = np.zeros((self.rows, 4), np.float32)
        self._streams = np.zeros((self.rows, 2), np.uint64)
        self.seen.zero_()
        self.steps.zero_()
        self.configure()

    def configure(self, temperature=0.0, top_k=0, top_p=1.0, penalty=1.0, seed=0, lane=None,
                  rows=None):
        """Settings of ``rows`` (default all; each value a number for all of them, or one
        per row): ``temperature`` 0 is greedy; ``top_k`` 0 and ``top_p`` 1 keep every
        token; ``penalty`` 1 is none; ``seed`` and ``lane`` (default: the row's index) key
        the row's random stream."""
        rows = np.arange(self.rows) if rows is None else np.asarray(rows, np.int64).reshape(-1)
        count = len(rows)
        cols = [np.broadcast_to(np.asarray(v, np.float64), (count,))
                for v in (temperature, top_p, penalty, top_k)]
        t, p, pen, k = cols
        checks = (("temperature", t, ~(t >= 0) | ~np.isfinite(t), ">= 0"),
                  ("top_p", p, ~((p > 0) & (p <= 1)), "in (0, 1]"),
                  ("repetition penalty", pen, ~(pen > 0) | ~np.isfinite(pen), "> 0"),
                  ("top_k", k, ~(k >= 0) | (k != np.floor(k)), "a count >= 0"))
        for what, values, bad, rule in checks:
            if bad.any():
                raise ValueError("TokenSampler: %s %r must be %s" % (what, values[bad][0], rule))
        seeds = np.broadcast_to(np.asarray(seed), (count,))
        if np.any(np.asarray(seeds) < 0) or np.any(seeds != np.floor(seeds)):
            raise ValueError("TokenSampler: seed %r must be an integer >= 0" % (seed,))
        self._settings[rows] = np.stack([t, p, pen, np.minimum(k, self.vocab)], axis=1)
        self._streams[rows, 0] = np.asarray(seeds).astype(np.uint64) & np.uint64(2 ** 64 - 1)
        self._streams[rows, 1] = rows if lane is None else np.broadcast_to(lane, (count,))
        self.settings.to_device(self._settings)
        self.streams.to_device(self._streams)

    def start(self, tokens, lengths=None, rows=None, queue=None):
        """Restart ``rows`` (default all): forget what they have seen and count their draws
        from 0, then mark each one's first ``lengths`` (default all) of ``tokens`` (len(rows),
        T) int64: its prompt, which the penalty applies to."""
        rows = np.arange(self.rows) if rows is None else np.asarray(rows, np.int64).reshape(-1)
        tokens = np.asarray(tokens, np.int64).reshape(len(rows), -1)
        width = max(tokens.shape[1], 1)
        all_tokens = np.zeros((self.rows, width), np.int64)
        all_tokens[rows, :tokens.shape[1]] = tokens
        all_lengths = np.zeros(self.rows, np.int64)
        all_lengths[rows] = tokens.shape[1] if lengths is None else lengths
        reset = np.zeros(self.rows, np.uint8)
        reset[rows] = 1
        staged = []
        for a in (all_tokens, all_lengths, reset):
            t = Tensor(self.ctx, a.shape, a.dtype)
            t.to_device(a)
            staged.append(t)
        queue = queue or self.ctx.queue
        wg = min(256, self.ctx.facts.max_work_group)
        u64 = np.uint64
        args = [u64(self.rows), u64(width), u64(self.vocab)] + [t.buffer for t in staged] + [
            self.seen.buffer, u64(self.seen.offset), self.steps.buffer]
        for kernel, total in (("start_rows", self.rows * self.vocab),
                              ("mark_seen", self.rows * width)):
            program.enqueue_now(queue, self.program, kernel, (round_up(total, wg),), (wg,), args)
        queue.finish()  # (the staged arrays go when this returns)

    def next(self, logits, row_stride=None, queue=None, wait_for=None):
        """Enqueue the choice of each row's next token from ``logits`` (a Tensor whose rows
        are ``row_stride`` elements apart, default ``vocab``); returns ``tokens`` (rows,)
        int64, written on the device (-1: the row's logits were NaN or all -inf), and
        keeps the launch's event in ``event``. ``wait_for``: events of other queues the
        launch waits for (reads of the last tokens: it overwrites them)."""
        if as_dtype(logits.dtype) != self.dtype:
            raise TypeError("TokenSampler: built for %s logits, given %s"
                            % (self.dtype.name, as_dtype(logits.dtype).name))
        stride = self.vocab if row_stride is None else int(row_stride)
        if logits.size < (self.rows - 1) * stride + self.vocab:
            raise ValueError("TokenSampler: logits of shape %s hold no %d rows of %d"
                             % (logits.shape, self.rows, self.vocab))
        u64 = np.uint64
        self.event = program.enqueue_now(
            queue or self.ctx.queue, self.program, "sample_next", (self.rows * self._wg,),
            (self._wg,),
            [u64(self.vocab), logits.buffer, u64(logits.offset), u64(stride), self.seen.buffer,
             u64(self.seen.offset), self.settings.buffer, self.streams.buffer,
             self.steps.buffer, self.tokens.buffer, u64(self.tokens.offset)], wait_for)
        return self.tokens

    def feed(self, tokens, pos, positions, context, queue=None):
        """Enqueue a one-token decoder pass's inputs for the next pass from the tokens just
        chosen: ``tokens`` (rows, 1) int64 takes each row's chosen token, ``pos`` (rows,)
        advances by one and ``positions`` (rows, 1) follows it, clamped to ``context`` - 1
        (the rotary table's last row). All on the device: nothing is read back first."""
        for t in (tokens, pos, positions):
            if t.size != self.rows or as_dtype(t.dtype) != np.int64:
                raise ValueError("TokenSampler.feed: %s %s is not %d int64 values, one a row"
                                 % (t.shape, as_dtype(t.dtype).name, self.rows))
        u64 = np.uint64
        wg = min(64, self.ctx.facts.max_work_group)
        self.event = program.enqueue_now(queue or self.ctx.queue, self.program, "feed_next",
                            (round_up(self.rows, wg),), (wg,),
                            [u64(self.rows), u64(context), self.tokens.buffer,
                             u64(self.tokens.offset), tokens.buffer, u64(tokens.offset),
                             pos.buffer, u64(pos.offset), positions.buffer,
                             u64(positions.offset)])
