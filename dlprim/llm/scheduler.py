"""Sequences through the decoding engine's rows: requests wait in a queue, take a free
row when one is there (a prefill pass for the rows taken together), and decode together
one token a pass until each meets its end: an EOS token, a stop string, its
``max_new_tokens``, or the context. A row that ends is free for the next request at the
next pass, so a batch is refilled as it drains (continuous batching).

A decode pass asks the engine to enqueue the next one before its tokens are read (its
``ahead``) unless a row surely ends at it: the device decodes while the host takes the
tokens, and only a sequence's EOS or stop string leaves a pass unused.

One thread runs the passes (``run`` or ``serve``); ``submit`` may be called from any
thread. Each request reports its text as it comes through ``on_text`` and its end
through ``done`` (a threading.Event) and its ``result``.
"""
import collections
import dataclasses
import threading
import time

from ..errors import Error
from .engine import GenerationError

__all__ = ["Request", "Result", "Scheduler", "ContextError"]


class ContextError(Error, ValueError):
    """A prompt, with the tokens asked for, longer than the model's context as loaded."""


@dataclasses.dataclass
class Result:
    """What a request produced: ``tokens`` (ids, without the prompt and the EOS), ``text``
    (None without a tokenizer), ``finish_reason`` ("stop": an EOS or stop string;
    "length": max_new_tokens or the context), and the times."""
    tokens: list
    text: str
    finish_reason: str
    prompt_tokens: int
    prefill_seconds: float
    decode_seconds: float

    @property
    def decode_tokens_per_second(self):
        """Tokens after the first per second of decoding (the first comes from the prefill)."""
        n = len(self.tokens) - 1
        return n / self.decode_seconds if n > 0 and self.decode_seconds > 0 else 0.0

    @property
    def prefill_tokens_per_second(self):
        return self.prompt_tokens / self.prefill_seconds if self.prefill_seconds > 0 else 0.0


class Request:
    """One sequence to generate: ``prompt`` (token ids), ``settings``
    (GenerationSettings), ``detokenizer`` (a StreamDecoder, or None: no text and no stop
    strings), ``lane`` (the sampler stream of this sequence among a call's), ``on_text``
    (called with each piece of final text) and ``on_token`` (with each token id)."""

    def __init__(self, prompt, settings, detokenizer=None, lane=0, on_text=None,
                 on_token=None):
        self.prompt, self.settings, self.detokenizer = list(prompt), settings, detokenizer
        self.lane, self.on_text, self.on_token = lane, on_text, on_token
        self.tokens = []
        self.done = threading.Event()
        self.result = None
        self.error = None
        self._started = self._first = None

    def _accept(self, token, context):
        """Take the next token; True when the sequence has ended."""
        now = time.perf_counter()
        if self._first is None:
            self._first = now
        s = self.settings
        if token in s.eos_ids:
            return self._finish("stop", now)
        self.tokens.append(token)
        if self.on_token is not None:
            self.on_token(token)
        if self.detokenizer is not None:
            piece = self.detokenizer.push(token)
            if piece and self.on_text is not None:
                self.on_text(piece)
            if self.detokenizer.stopped:
                return self._finish("stop", now)
        if len(self.tokens) >= s.max_new_tokens or \
                len(self.prompt) + len(self.tokens) >= context:
            return self._finish("length", now)
        return False

    def _last(self, context):
        """Whether the next token accepted ends the sequence whatever it is."""
        return len(self.tokens) + 1 >= self.settings.max_new_tokens or \
            len(self.prompt) + len(self.tokens) + 1 >= context

    def _finish(self, reason, now):
        text = None
        if self.detokenizer is not None:
            if not self.detokenizer.stopped:
                rest = self.detokenizer.finish()
                if rest and self.on_text is not None:
                    self.on_text(rest)
            text = self.detokenizer.text
        self.result = Result(self.tokens, text, reason, len(self.prompt),
                             self._first - self._started, now - self._first)
        self.done.set()
        return True

    def _fail(self, error):
        self.error = error
        self.done.set()


class Scheduler:
    """Requests through a DecodeEngine's rows (module docstring)."""

    def __init__(self, engine):
        self.engine = engine
        self._waiting = collections.deque()
        self._active = {}  # row -> Request
        self._wake = threading.Condition()
        self._closed = False

    def check(self, request):
        """Raise ContextError where the request cannot fit the context."""
        if not request.prompt:
            raise ContextError("an empty prompt: give at least one token")
        if len(request.prompt) > self.engine.context - 1:
            raise ContextError("a prompt of %d tokens does not fit the context of %d "
                               "positions the model was loaded with (load(..., context=N))"
                               % (len(request.prompt), self.engine.context))

    def submit(self, request):
        """Queue ``request`` (checked first: ContextError); any thread."""
        self.check(request)
        with self._wake:
            self._waiting.append(request)
            self._wake.notify()
        return request

    def step(self):
        """One pass: a prefill of the waiting requests that free rows can take, else one
        decode pass of the busy rows. False when there was nothing to do."""
        engine = self.engine
        new = {}
        with self._wake:
            free = [r for r in range(engine.batch) if r not in self._active]
            while self._waiting and free:
                row, req = free.pop(0), self._waiting.popleft()
                self._active[row] = req
                new[row] = req
        ahead = False
        if new:
            feeds = {row: req.prompt for row, req in new.items()}
        else:
            # (a busy row has a token: its prefill drew one, and an EOS would end it)
            feeds = {row: [req.tokens[-1]] for row, req in self._active.items()}
            # the next pass enqueued before this one's tokens are read, unless a row
            # surely ends at this token (engine.py: a pass ahead that is not taken is lost)
            ahead = all(not req._last(engine.context) for req in self._active.values())
        if not feeds:
            return False
        try:
            for row, req in new.items():
                req._started = time.perf_counter()
                engine.start(row, req.prompt, lane=req.lane, **req.settings.sampler())
            chosen = engine.step(feeds, ahead=ahead)
        except Exception as e:  # every request of the pass learns why, then the caller
            for row in feeds:
                self._active.pop(row)._fail(e)
            raise
        for row, token in chosen.items():
            req = self._active[row]
            if req._accept(token, engine.context):
                del self._active[row]
        return True

    def run(self, requests=()):
        """Submit ``requests``, then pass until nothing waits or runs."""
        for r in requests:
            self.submit(r)
        while self.step():
            pass

    def serve(self):
        """Pass whenever there is work, until ``close``: a server's engine thread."""
        while True:
            with self._wake:
                while not (self._waiting or self._active or self._closed):
                    self._wake.wait()
                if self._closed:
                    for req in list(self._waiting) + list(self._active.values()):
                        req._fail(GenerationError("the server is shutting down"))
                    return
            try:
                self.step()
            except Exception:  # the failed requests were told; the next ones go on
                continue

    def close(self):
        with self._wake:
            self._closed = True
            self._wake.notify_all()
