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

Each length (1 and every bucket met) has a Net of its own over the same parameters,
caches included (``Net.twin``), planned once: switching between prefill and decode costs
no setup. Why padded and not paged: every
region is one contiguous run of the cache the fused attention already reads, at the
price of ``batch x context`` positions reserved up front.
"""
import logging

import numpy as np

from ..core.quantize import quantize_q4, quantize_rows
from ..core.sampling import TokenSampler
from ..errors import Error
from ..net.net import Net

__all__ = ["DecodeEngine", "GenerationError"]

log = logging.getLogger(__name__)

MIN_BUCKET = 8


class GenerationError(Error, RuntimeError):
    """Decoding went wrong on the device: NaN or no finite logit for a sequence."""


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
        # the one-token pass as one launch a block where the decoder and the device take it
        # (``fused``: the one-token Net -> a FusedStep or None; llm/fused_step.py)
        self.fused = fused(net) if fused is not None else None

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

    def step(self, feeds):
        """One pass: ``feeds`` {row: token ids (at least one)} appended to those rows'
        sequences; returns the next token of each fed row {row: id}, chosen on the device
        by the sampler's settings for the row."""
        if not feeds:
            return {}
        width = self.bucket(max(len(ids) for ids in feeds.values()))
        tokens = np.zeros((self.batch, width), np.int64)
        positions = np.zeros((self.batch, width), np.int64)
        pos = np.full(self.batch, self.context, np.int64)  # rows left alone: write nothing
        rows = np.zeros(self.batch, np.int64)
        for r, ids in feeds.items():
            start, n = int(self.lengths[r]), len(ids)
            if start + width > self.context:
                raise GenerationError("row %d: %d cached tokens and a pass of %d exceed the "
                                      "context of %d" % (r, start, width, self.context))
            tokens[r, :n] = ids
            # (pads get the positions after the feed, clamped: valid table rows)
            positions[r] = np.minimum(start + np.arange(width), self.context - 1)
            pos[r] = start
            rows[r] = r * width + n - 1
        net = self._net_for(width)
        for name, a in (("tokens", tokens), ("positions", positions), ("pos", pos),
                        ("rows", rows)):
            net.tensor(name).to_device(a, wait=False)
        if width == 1 and self.fused is not None:
            self.fused.forward()  # (the Net's inputs, caches and logits)
        else:
            net.forward()
        chosen = self.sampler.next(net.tensor("logits")).to_host()
        out = {}
        for r, ids in feeds.items():
            self.lengths[r] += len(ids)
            if chosen[r] < 0:
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
        self.sampler.configure(temperature=temperature, top_k=top_k, top_p=top_p,
                               penalty=penalty, seed=seed, lane=lane, rows=[row])
        self.sampler.start(np.asarray(prompt, np.int64)[None], rows=[row])
