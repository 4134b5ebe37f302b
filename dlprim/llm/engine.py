"""The decoding engine: a decoder Net of ``batch`` rows over its key/value cache, each row
one sequence, and the device's token sampler over its logits.

Each row holds its own count of cached tokens (the decoder's per-sample ``pos``), so
sequences of any lengths share a batch: a padded cache, one region of ``context``
positions per row. A pass feeds some rows tokens and leaves the others alone:

- a prefill pass feeds new rows their prompts, right-padded to a length bucket (a power
  of two). The pads are written past the prompt, where the causal mask hides them until
  decoding overwrites them;
- a decode pass feeds every busy row its last token.

A row left alone in a pass is given the position ``context``: the cache writes nothing
there, and its outputs, which nobody reads, are NaN (``layers/kv_cache.py``). So a
prefill never disturbs the rows that are decoding.

A one-token pass of a single sequence runs as one launch a decoder block where the
device takes it (``fused_step.py``), over the same weights, caches and logits.

A one-token pass may be asked to look ahead (``step(feeds, ahead=True)``): the pass after
it is enqueued at once, fed on the device with the tokens just sampled, before the host
has read them. The device then runs pass k+1 while the host reads pass k's tokens, checks
its stop conditions and enqueues pass k+2: the host's share of a step (the reads, the
inputs written, the launches) leaves the device's critical path. The next ``step`` takes
the pass already run when it feeds the same rows the tokens it was given; any other feed
drops it. A dropped pass wrote only cache positions the next feed writes again, the
sampler's seen tokens and draw counts of rows whose sequence ends there (a new sequence
``start``s them afresh), and the logits: with a pass ahead, the logits hold that pass's.

Each length (1 and every bucket met) has a Net of its own over the same parameters,
caches included (``Net.twin``), planned once: switching between prefill and decode costs
no setup. Why padded and not paged: every
region is one contiguous run of the cache the fused attention already reads, at the
price of ``batch x context`` positions reserved up front.
"""
import logging
import os

import numpy as np
import pyopencl as cl

from ..core.quantize import quantize_q4, quantize_rows
from ..core.sampling import TokenSampler
from ..errors import Error
from ..net.net import Net

__all__ = ["DecodeEngine", "GenerationError"]

log = logging.getLogger(__name__)

MIN_BUCKET = 8


class GenerationError(Error, RuntimeError):
    """Decoding went wrong on the device: NaN or no finite logit for a sequence."""


class _Read:
    """The non-blocking read of the sampler's tokens after a pass, on ``queue`` once the
    sampler's launch ``after`` (an event of the passes' queue; None: ``queue`` is that
    queue) has run; ``feeds``: for a pass enqueued ahead, the rows it feeds and their
    tokens (set once the host knows them)."""

    def __init__(self, tokens, queue, after=None, feeds=None):
        self.feeds = feeds
        self.chosen = np.empty(tokens.shape, np.int64)
        self.event = cl.enqueue_copy(queue, self.chosen, tokens.buffer,
                                     src_offset=tokens.byte_offset, is_blocking=False,
                                     wait_for=None if after is None else [after])
        if after is not None:
            queue.flush()  # (the read starts as soon as the sampler is done)

    def takes(self, feeds):
        """Whether the pass ahead is the one ``feeds`` asks for."""
        return feeds.keys() == self.feeds.keys() and \
            all(len(ids) == 1 and int(ids[0]) == self.feeds[r] for r, ids in feeds.items())

    def wait(self):
        self.event.wait()
        return self.chosen


class DecodeEngine:
    """``batch`` rows of a decoder (``build(batch, tokens, context)`` -> (NetConfig,
    constant tables)) whose weights come from ``weights`` ((name, array) pairs)."""

    def __init__(self, ctx, build, weights, vocab, batch=1, context=2048, precision="fp32",
                 fused=None):
        self.ctx, self.batch, self.context, self.vocab = ctx, int(batch), int(context), vocab
        self._build = build
        cfg, tables = build(self.batch, 1, self.context)
        net = Net(ctx, mode="predict", precision=precision)
        net.load(cfg)
        net.setup()  # (no random initialisation: every weight is given below)
        self.net = net  # the one-token step; the last pass's Net is ``last``
        self.last = net
        self._nets = {1: net}
        wanted = set(net.store.params)
        given = set()
        stored = net.store.dtypes
        for name, array in list(tables.items()) + list(weights):
            if name not in wanted:
                raise GenerationError("the checkpoint's tensor %s has no place in the decoder "
                                      "(unexpected for this architecture)" % name)
            if stored[name] in (np.int8, np.uint8):  # weight-only int8 or 4-bit
                q, scale = (quantize_rows if stored[name] == np.int8 else quantize_q4)(array)
                net.set_parameters({name: q, name + "_scale": scale}, strict=False)
                given.add(name + "_scale")
            else:  # (float16 and bfloat16 storage round as they are written)
                net.set_parameters({name: array}, strict=False)
            given.add(name)
        # (the caches start at zero, as the arena does: masked positions are read as
        # 0 x value, never NaN garbage)
        caches = {n for n in wanted if ".cache." in n}
        missing = sorted(wanted - given - caches)
        if missing:
            raise GenerationError("the checkpoint lacks %d of the decoder's tensors: %s"
                                  % (len(missing), ", ".join(missing[:5])))
        self.lengths = np.zeros(self.batch, np.int64)  # the tokens each row's cache holds
        self.sampler = TokenSampler(ctx, self.batch, vocab, net.tensor("logits").dtype)
        # the one-token pass as one launch of its blocks where the decoder and the device
        # take it
        # (``fused``: the one-token Net -> a FusedStep or None; llm/fused_step.py)
        self.fused = fused(net) if fused is not None else None
        # whether ``step(..., ahead=True)`` enqueues the next pass (DLPRIM_DECODE_AHEAD=0: no)
        self.lookahead = os.environ.get("DLPRIM_DECODE_AHEAD", "1") != "0"
        self._ahead = None  # the pass enqueued ahead (a _Read)
        # GPUs read the tokens on a queue of their own: in the passes' queue a pass
        # enqueued ahead would wait for each read before it (the copy, then its completion
        # seen by the host). The sampler's next launch waits for the last read instead
        # (it overwrites the tokens), long done by then.
        self._reader = cl.CommandQueue(ctx.cl_context, ctx.device) if ctx.facts.is_gpu \
            else None
        self._last_read = None  # (the reader's last read's event)

    def memory(self):
        """Device bytes: {"weights": the parameters but the caches, "cache": the key/value
        caches, "total": the parameter arena (alignment padding included)}."""
        store = self.net.store
        sizes = {n: int(np.prod(shape, dtype=np.int64)) * store.dtypes[n].itemsize
                 for n, (_, shape, _) in store.layout.items()}
        cache = sum(v for n, v in sizes.items() if ".cache." in n)
        return {"weights": sum(sizes.values()) - cache, "cache": cache,
                "total": store.nbytes}

    def bucket(self, longest):
        """The planned length of a pass whose longest feed is ``longest`` tokens."""
        if longest <= 1:
            return 1
        return min(max(MIN_BUCKET, 1 << (int(longest) - 1).bit_length()), self.context)

    def step(self, feeds, ahead=False):
        """One pass: ``feeds`` {row: token ids (at least one)} appended to those rows'
        sequences; returns the next token of each fed row {row: id}, chosen on the device
        by the sampler's settings for the row. ``ahead`` (a one-token pass, with
        ``lookahead`` on): also enqueue the next pass, fed these tokens (module docstring)."""
        if not feeds:
            return {}
        pending, self._ahead = self._ahead, None
        if pending is not None and pending.takes(feeds):
            width, read = 1, pending
        else:
            if pending is not None:
                pending.wait()  # (dropped: its read lands before the arrays are reused)
            width = self.bucket(max(len(ids) for ids in feeds.values()))
            starts = {r: int(self.lengths[r]) for r in feeds}
            self._enqueue(width, feeds, starts)
            read = self._read()
        for r, ids in feeds.items():
            self.lengths[r] += len(ids)
        if ahead and self.lookahead and width == 1 and len(feeds) == self.batch and \
                all(self.lengths[r] < self.context for r in feeds):
            # fed on the device with the tokens the sampler just wrote, one position on
            # (every row is fed: none reads another row's token, which may be -1)
            net = self._net_for(1)
            self.sampler.feed(net.tensor("tokens"), net.tensor("pos"), net.tensor("positions"),
                              self.context)
            self._forward(net)
            self._ahead = self._read()
        chosen = read.wait()
        if self._ahead is not None:
            self._ahead.feeds = {r: int(chosen[r]) for r in feeds}
        out = {}
        for r in feeds:
            if chosen[r] < 0:
                if self._ahead is not None:  # (its feed was no token)
                    self._ahead.wait()
                    self._ahead = None
                why = ""
                if width == 1 and self.fused is not None and self.fused.failed():
                    # (work-groups not resident together: later passes take the Net's)
                    self.fused = None
                    why = (": the one-launch blocks waited too long at a grid barrier (the "
                           "device did not run their work-groups together); later passes "
                           "run the Net's launches")
                raise GenerationError("row %d: the logits are NaN or none is finite at %d "
                                      "tokens%s" % (r, self.lengths[r], why))
            out[r] = int(chosen[r])
        return out

    def _read(self):
        """The read of the tokens the sampler's last launch writes."""
        if self._reader is None:
            return _Read(self.sampler.tokens, self.ctx.queue)
        read = _Read(self.sampler.tokens, self._reader, self.sampler.event)
        self._last_read = read.event
        return read

    def _enqueue(self, width, feeds, starts):
        """Enqueue a pass of ``width`` tokens a row, ``feeds`` {row: ids} from ``starts``
        {row: cached tokens}, and the sampler after it."""
        ids = np.zeros((self.batch, width), np.int64)
        positions = np.zeros((self.batch, width), np.int64)
        pos = np.full(self.batch, self.context, np.int64)  # rows left alone: write nothing
        rows = np.zeros(self.batch, np.int64)
        for r, fed in feeds.items():
            start, n = starts[r], len(fed)
            if start + width > self.context:
                raise GenerationError("row %d: %d cached tokens and a pass of %d exceed the "
                                      "context of %d" % (r, start, width, self.context))
            ids[r, :n] = fed
            # (pads get the positions after the feed, clamped: valid table rows)
            positions[r] = np.minimum(start + np.arange(width), self.context - 1)
            pos[r] = start
            rows[r] = r * width + n - 1
        net = self._net_for(width)
        for name, a in (("tokens", ids), ("positions", positions), ("pos", pos),
                        ("rows", rows)):
            net.tensor(name).to_device(a, wait=False)
        self._forward(net)

    def _forward(self, net):
        """Enqueue ``net``'s pass over its inputs as they are, and the sampler after it."""
        if net is self.net and self.fused is not None:
            self.fused.forward()  # (the Net's inputs, caches and logits)
        else:
            net.forward()
        self.sampler.next(net.tensor("logits"), wait_for=None if self._last_read is None
                          else [self._last_read])

    def _net_for(self, width):
        net = self._nets.get(width)
        if net is None:
            log.debug("planning a pass of %d tokens", width)
            net = self._nets[width] = self.net.twin(self._build(self.batch, width,
                                                                self.context)[0])
        self.last = net
        return net

    def start(self, row, prompt, temperature=0.0, top_k=0, top_p=1.0, penalty=1.0, seed=0,
              lane=0):
        """Give ``row`` a new sequence: its cache emptied (by position), its sampler
        settings, and the prompt marked as seen for the repetition penalty. The prompt
        itself is fed by the next ``step``."""
        self.lengths[row] = 0
        if self._ahead is not None and row in self._ahead.feeds:
            self._ahead.wait()  # (the pass ahead of this row's last sequence: dropped)
            self._ahead = None
        self.sampler.configure(temperature=temperature, top_k=top_k, top_p=top_p,
                               penalty=penalty, seed=seed, lane=lane, rows=[row])
        self.sampler.start(np.asarray(prompt, np.int64)[None], rows=[row])

