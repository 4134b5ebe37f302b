"""What a generation does, and where each choice comes from: HuggingFace's defaults, then
the model folder's ``generation_config.json``, then the caller's arguments (pure Python).

Sampling follows HF: with ``do_sample`` the next token is drawn (repetition penalty,
temperature, top-k, top-p, in that order); without it, the largest score is taken (after
the repetition penalty). A caller's ``temperature``, ``top_k`` or ``top_p`` turns sampling
on unless ``do_sample`` is given too; ``temperature=0`` is greedy.
"""
import dataclasses
import numbers

from ..errors import Error

__all__ = ["GenerationSettings", "SettingsError", "resolve"]

# HF's GenerationConfig defaults for what dlprim reads
DEFAULTS = {"max_new_tokens": 256, "temperature": 1.0, "top_k": 50, "top_p": 1.0,
            "repetition_penalty": 1.0, "do_sample": False}


class SettingsError(Error, ValueError):
    """A generation setting out of its range, or one dlprim does not know."""


@dataclasses.dataclass(frozen=True)
class GenerationSettings:
    max_new_tokens: int = 256
    temperature: float = 1.0
    top_k: int = 50
    top_p: float = 1.0
    repetition_penalty: float = 1.0
    do_sample: bool = False
    seed: int = 0
    stop: tuple = ()  # strings that end the text (not included)
    eos_ids: frozenset = frozenset()  # tokens that end it (not included)

    @property
    def greedy(self):
        return not self.do_sample or self.temperature == 0

    def sampler(self):
        """The TokenSampler settings of a row: (temperature, top_k, top_p, penalty, seed)."""
        if self.greedy:
            return dict(temperature=0.0, top_k=0, top_p=1.0, penalty=self.repetition_penalty,
                        seed=self.seed)
        return dict(temperature=self.temperature, top_k=self.top_k, top_p=self.top_p,
                    penalty=self.repetition_penalty, seed=self.seed)


def resolve(generation_config=None, model_eos_ids=(), **overrides):
    """GenerationSettings from HF's defaults, a ``generation_config.json`` dict, the model's
    EOS ids and the caller's ``overrides`` (None values are not given)."""
    given = {k: v for k, v in overrides.items() if v is not None}
    unknown = set(given) - {f.name for f in dataclasses.fields(GenerationSettings)}
    if unknown:
        raise SettingsError("unknown generation settings: %s (known: %s)" % (
            ", ".join(sorted(unknown)),
            ", ".join(f.name for f in dataclasses.fields(GenerationSettings))))
    values = dict(DEFAULTS)
    for key in DEFAULTS:
        if (generation_config or {}).get(key) is not None:
            values[key] = generation_config[key]
    if "do_sample" not in given and any(k in given for k in ("temperature", "top_k", "top_p")):
        given["do_sample"] = True
    values.update(given)
    stop = values.get("stop", ())
    values["stop"] = (stop,) if isinstance(stop, str) else tuple(stop)
    if "eos_ids" not in given:
        values["eos_ids"] = model_eos_ids
    ids = values["eos_ids"]
    values["eos_ids"] = frozenset([ids] if isinstance(ids, numbers.Integral) else ids)
    settings = GenerationSettings(**values)
    _check(settings)
    return settings


def _check(s):
    def bad(what, value, rule):
        raise SettingsError("%s %r must be %s" % (what, value, rule))

    def count(value):
        return isinstance(value, numbers.Integral) and not isinstance(value, bool)

    if not count(s.max_new_tokens) or s.max_new_tokens < 1:
        bad("max_new_tokens", s.max_new_tokens, "an integer >= 1")
    if not isinstance(s.temperature, numbers.Real) or not s.temperature >= 0:
        bad("temperature", s.temperature, "a number >= 0")
    if not count(s.top_k) or s.top_k < 0:
        bad("top_k", s.top_k, "an integer >= 0 (0: no top-k)")
    if not isinstance(s.top_p, numbers.Real) or not 0 < s.top_p <= 1:
        bad("top_p", s.top_p, "in (0, 1]")
    if not isinstance(s.repetition_penalty, numbers.Real) or not s.repetition_penalty > 0:
        bad("repetition_penalty", s.repetition_penalty, "a number > 0 (1: none)")
    if not count(s.seed) or not 0 <= s.seed < 2 ** 64:
        bad("seed", s.seed, "an integer in [0, 2^64)")
    if not all(isinstance(x, str) and x for x in s.stop):
        bad("stop", s.stop, "non-empty strings")
    if not all(count(x) and x >= 0 for x in s.eos_ids):
        bad("eos_ids", sorted(s.eos_ids), "token ids")
