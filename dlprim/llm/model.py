"""A language model loaded from a HuggingFace folder and generating on an OpenCL device:

    model = dlprim.llm.load("path/to/model", context=1024)
    print(model.generate("Once upon a time", max_new_tokens=40).text)
    for piece in model.generate("Hello", stream=True, temperature=0.8, seed=1):
        print(piece, end="", flush=True)
    answers = model.generate(["a prompt", "another"], max_new_tokens=20)   # one batch
    model.generate([{"role": "user", "content": "Hi"}], chat=True)

The decoder is one planned Net over a key/value cache (``engine.py``), fed by the
scheduler (``scheduler.py``); the next token is chosen on the device
(``core/sampling.py``). Settings come from HF's defaults, then the folder's
``generation_config.json``, then the call (``settings.py``). Text needs the folder's
``tokenizer.json`` (``tokenizer.py``, the ``llm`` extra); without it prompts are lists of
token ids and results carry no text.
"""
import logging
import os

import numpy as np

from ..context import Context
from ..dtypes import bfloat16, bfloat16_values
from . import gpt2, llama
from .checkpoint import ArchitectureError, Checkpoint, read_json
from .engine import DecodeEngine
from .fused_step import fused_step
from .scheduler import ContextError, Request, Scheduler
from .settings import resolve

__all__ = ["LanguageModel", "load", "DEFAULT_CONTEXT"]

log = logging.getLogger(__name__)

DEFAULT_CONTEXT = 2048  # positions per row when the caller names none (cache memory)
_WEIGHTS = {"fp16": "float16", "bf16": "bfloat16"}  # precision -> the weights' storage
_FAMILIES = {"llama": llama, "mistral": llama, "qwen2": llama, "phi3": llama, "gpt2": gpt2}


def load(folder, **kw):
    """``LanguageModel(folder, **kw)``."""
    return LanguageModel(folder, **kw)


class LanguageModel:
    """A HF model folder on a device: ``ctx`` (default: dlprim's choice), ``context``
    (positions per sequence; default the model's, at most DEFAULT_CONTEXT and what the
    decoder follows exactly: a rotary scaling's trained context), ``batch``
    (sequences decoded together), ``precision`` ("fp32", "fp16" or "bf16": the storage of
    the activations and of the Linears' weights; norms, softmax and sums stay float32),
    ``quantize`` ("int8": the Linears' weights as int8 with a float32 scale per output
    channel; "q4": 4-bit values with a scale per group of 32, as llama.cpp's Q4_0;
    weight-only)."""

    def __init__(self, folder, ctx=None, context=None, batch=1, precision="fp32",
                 quantize=None):
        self.checkpoint = ckpt = Checkpoint(folder)
        self.config, self.architecture = ckpt.config, ckpt.architecture
        family = _FAMILIES.get(self.architecture)
        if family is None:
            raise ArchitectureError("%s: dlprim reads %s checkpoints but does not build their "
                                    "decoder yet" % (ckpt.folder, self.architecture))
        # by default the model's positions, within what the decoder follows exactly (a
        # rotary scaling's trained context) and DEFAULT_CONTEXT
        limits = (_positions(self.config), DEFAULT_CONTEXT, family.longest_context(self.config))
        self.context = int(context or min(n for n in limits if n))
        self.ctx = ctx if ctx is not None else Context()
        self.tokenizer = _tokenizer(ckpt.folder)
        self.generation_config = _optional_json(os.path.join(ckpt.folder,
                                                             "generation_config.json"))
        if quantize not in (None, "int8", "q4"):
            raise ValueError("quantize=%r: dlprim quantizes weights to 'int8' or 'q4'"
                             % (quantize,))
        weights = quantize or _WEIGHTS.get(precision, "float32")

        def build(batch, tokens, context):
            return family.decoder(self.config, batch=batch, tokens=tokens, context=context,
                                  per_sample=True, last_only=True, weights=weights)

        spec = family.fused_spec(self.config, self.context) \
            if hasattr(family, "fused_spec") else None
        self.engine = DecodeEngine(self.ctx, build, family.weights(ckpt, self.context),
                                   self.config["vocab_size"], batch, self.context, precision,
                                   fused=lambda net: fused_step(net, spec) if spec else None)
        self.scheduler = Scheduler(self.engine)

    @property
    def eos_ids(self):
        """The tokens that end a generation: the tokenizer's (generation_config, config),
        else config.json's ``eos_token_id``."""
        if self.tokenizer is not None:
            return frozenset(self.tokenizer.eos_ids)
        for source in (self.generation_config or {}, self.config):
            ids = source.get("eos_token_id")
            if ids is not None:
                return frozenset([ids] if isinstance(ids, int) else ids)
        return frozenset()

    def settings(self, **overrides):
        """The GenerationSettings a call with these arguments uses (``settings.resolve``)."""
        return resolve(self.generation_config, self.eos_ids, **overrides)

    def encode(self, prompt, chat=False):
        """Token ids of a prompt: text (the tokenizer's, special tokens added), chat
        messages (with ``chat``: the chat template), or token ids as they are."""
        if chat:
            self._need_tokenizer("chat messages")
            return self.tokenizer.encode_chat(prompt)
        if isinstance(prompt, str):
            self._need_tokenizer("a text prompt")
            return self.tokenizer.encode(prompt)
        ids = [int(t) for t in prompt]
        vocab = self.config["vocab_size"]
        bad = [t for t in ids if not 0 <= t < vocab]
        if bad:
            raise ValueError("prompt token %d is outside the vocabulary of %d" % (bad[0], vocab))
        return ids

    def _need_tokenizer(self, what):
        if self.tokenizer is None:
            raise ValueError("%s needs the model folder's tokenizer.json (%s has none): give "
                             "token ids instead" % (what, self.checkpoint.folder))

    def request(self, prompt, chat=False, lane=0, on_text=None, on_token=None, **settings):
        """A scheduler Request for one prompt (see ``generate``)."""
        s = self.settings(**settings)
        ids = self.encode(prompt, chat)
        detok = self.tokenizer.stream(stop=s.stop) if self.tokenizer is not None else None
        if s.stop and detok is None:
            raise ValueError("stop strings need the model folder's tokenizer.json")
        return Request(ids, s, detok, lane, on_text, on_token)

    def generate(self, prompt, stream=False, chat=False, **settings):
        """Generate from ``prompt``: text, token ids, or with ``chat`` a list of
        {"role", "content"} messages; a list of prompts is one batch (a list of Results,
        each prompt its own stream ``lane`` of the seed). Settings: max_new_tokens,
        temperature, top_k, top_p, repetition_penalty, do_sample, seed, stop, eos_ids
        (``settings.py``). Returns a ``scheduler.Result``; with ``stream``, an iterator of
        text pieces (token ids without a tokenizer) whose ``result`` is set at its end."""
        if _is_batch(prompt, chat):
            if stream:
                raise ValueError("stream=True takes one prompt, not a list of them")
            requests = [self.request(p, chat, lane=i, **settings) for i, p in enumerate(prompt)]
            self._run(requests)
            return [r.result for r in requests]
        if stream:
            return _Stream(self, self.request(prompt, chat, **settings))
        request = self.request(prompt, chat, **settings)
        self._run([request])
        return request.result

    def perplexity(self, text):
        """exp of the mean negative log-likelihood of each token of ``text`` (text, or
        token ids) given those before it, teacher-forced one token a pass through row 0
        of the engine; the first token is only given. Float64 on the logits read back."""
        ids = self.encode(text)
        if len(ids) < 2:
            raise ValueError("perplexity needs at least 2 tokens, got %d" % len(ids))
        if len(ids) > self.context:
            raise ContextError("%d tokens do not fit the context of %d positions"
                               % (len(ids), self.context))
        engine, total = self.engine, 0.0
        engine.start(0, ids[:1])
        for i in range(len(ids) - 1):
            engine.step({0: [ids[i]]})
            logits = engine.last.tensor("logits").to_host()[0]
            if logits.dtype == bfloat16:
                logits = bfloat16_values(logits)
            logits = logits.astype(np.float64)
            top = logits.max()
            total += top + np.log(np.exp(logits - top).sum()) - logits[ids[i + 1]]
        return float(np.exp(total / (len(ids) - 1)))

    def _run(self, requests):
        self.scheduler.run(requests)
        for r in requests:
            if r.error is not None:
                raise r.error


class _Stream:
    """An iterator over one request's text pieces (or token ids without a tokenizer), the
    scheduler passing as it is read; ``result`` once it has ended."""

    def __init__(self, model, request):
        self._model, self._request, self._pieces = model, request, []
        if model.tokenizer is not None:
            request.on_text = self._pieces.append
        else:
            request.on_token = self._pieces.append
        model.scheduler.submit(request)

    @property
    def result(self):
        return self._request.result

    def __iter__(self):
        return self

    def __next__(self):
        while not self._pieces:
            if self._request.done.is_set() or not self._model.scheduler.step():
                if self._request.error is not None:
                    raise self._request.error
                raise StopIteration
        return self._pieces.pop(0)


def _is_batch(prompt, chat):
    if isinstance(prompt, str) or not isinstance(prompt, (list, tuple)) or not prompt:
        return False
    first = prompt[0]
    if chat:
        return isinstance(first, (list, tuple))  # a list of conversations
    return isinstance(first, (str, list, tuple))


def _positions(config):
    return int(config.get("max_position_embeddings") or config.get("n_positions") or
               DEFAULT_CONTEXT)


def _optional_json(path):
    return read_json(path, "the generation config") if os.path.isfile(path) else None


def _tokenizer(folder):
    if not os.path.isfile(os.path.join(folder, "tokenizer.json")):
        return None
    from .tokenizer import Tokenizer
    return Tokenizer(folder)
