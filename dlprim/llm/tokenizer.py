"""The tokenizer and chat template of a HuggingFace model folder, without PyTorch or
``transformers``: ``tokenizer.json`` through the ``tokenizers`` package, the chat template
(``chat_template.jinja``, else ``tokenizer_config.json``'s) through ``jinja2``, the special
tokens of ``tokenizer_config.json`` / ``special_tokens_map.json`` and the stop ids of
``generation_config.json`` (else ``config.json``). Both packages are optional:
``pip install 'dlprim[llm]'``.

    tok = Tokenizer("path/to/model")
    ids = tok.encode_chat([{"role": "user", "content": "Hi!"}])   # the prompt's ids
    stream = tok.stream(stop=("\\n\\n",))  # a StreamDecoder
    for i in generated_ids:                 # one at a time, as the model makes them
        print(stream.push(i), end="")       # text that is final: never half a character
        if i in tok.eos_ids or stream.stopped:
            break
    print(stream.finish())

``encode``, ``decode`` and ``chat`` give what transformers' ``AutoTokenizer`` gives for
the same folder (``decode`` skips special tokens by default; ``chat`` renders as
``apply_chat_template(..., tokenize=False)``: jinja2's immutable sandbox, trim_blocks and
lstrip_blocks, ``raise_exception``, ``strftime_now``, a ``tojson`` that keeps non-ASCII).
As in transformers 5, tokenizer.json's post-processor decides the BOS/EOS that ``encode``
adds (tokenizer_config.json's ``add_bos_token`` / ``add_eos_token`` do not), special
tokens that the config names but tokenizer.json lacks are added, and
``clean_up_tokenization_spaces`` is not applied (transformers ignores it for BPE
tokenizers, which every model family dlprim builds has).

A missing package is a ``MissingDependencyError`` naming the extra; a missing or damaged
file a ``MissingFileError`` / ``FileFormatError`` naming the folder and the file; a chat
that cannot be rendered (no template, a message that is not ``{"role": str, "content":
str}``, the template's own ``raise_exception``) a ``TokenizerError``.
"""
import json
import os
import re
from datetime import datetime

from ..errors import Error, FileFormatError, MissingDependencyError, MissingFileError
from .checkpoint import read_json

__all__ = ["Tokenizer", "StreamDecoder", "TokenizerError"]

INSTALL_HINT = "pip install 'dlprim[llm]'"
# what transformers passes to every template beside the messages (SPECIAL_TOKENS_ATTRIBUTES)
NAMED_TOKENS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token",
                "mask_token")
JINJA_MIN = (3, 1, 6)  # older jinja2 has known sandbox escapes; templates are untrusted code


class TokenizerError(Error, ValueError):
    """A chat the tokenizer cannot render (no template, a message that is not a dict of
    str role and content, the template's ``raise_exception``) or a bad stop string."""


class Tokenizer:
    """The tokenizer of a model folder: ``encode``, ``decode``, ``chat``, ``encode_chat``,
    ``stream``; ``eos_ids`` (a set), ``bos_id`` and ``pad_id`` (None when the model has
    none); ``special_tokens`` ({"bos_token": "<s>", ...}) and ``chat_template`` (or None)."""

    def __init__(self, folder):
        self.folder = os.fspath(folder)
        if not os.path.isdir(self.folder):
            raise MissingFileError("%s: no such model folder" % self.folder)
        try:
            import tokenizers
        except ImportError:
            raise _missing("tokenizers", "dlprim.llm.Tokenizer") from None
        path = self._path("tokenizer.json")
        if not os.path.isfile(path):
            raise MissingFileError("%s: tokenizer.json is missing (dlprim reads the fast "
                                   "tokenizer that save_pretrained writes)" % self.folder)
        try:
            self._tok = tokenizers.Tokenizer.from_file(path)
        except Exception as e:  # the Rust side raises a bare Exception
            raise FileFormatError("%s: not a tokenizer the tokenizers package reads (%s)"
                                  % (path, e)) from None
        config = self._optional_json("tokenizer_config.json", "the tokenizer's config")
        tokens = {key: (value, "tokenizer_config.json") for key, value in config.items()}
        if "added_tokens_decoder" not in config:  # transformers' legacy rule: the map wins
            legacy = self._optional_json("special_tokens_map.json", "the special tokens' map")
            tokens.update((key, (value, "special_tokens_map.json"))
                          for key, value in legacy.items())
        self.special_tokens = {key: self._content(*tokens[key], key)
                               for key in NAMED_TOKENS if tokens.get(key, (None,))[0] is not None}
        self._add_missing_special_tokens(tokenizers, tokens)
        self.chat_template, self._template_file = self._find_template(config)
        self._template = None  # compiled when chat() is first called
        self._ids(self._optional_json("generation_config.json", "the generation config"),
                  self._optional_json("config.json", "the model's config"))

    def _path(self, name):
        return os.path.join(self.folder, name)

    def _optional_json(self, name, what):
        path = self._path(name)
        if not os.path.exists(path):
            return {}
        data = read_json(path, what)
        if not isinstance(data, dict):
            raise FileFormatError("%s: %s is not a JSON object" % (self.folder, name))
        return data

    def _content(self, value, file, key):
        """A special token's text: a str, or an AddedToken's dict {"content": ...}."""
        if isinstance(value, dict) and isinstance(value.get("content"), str):
            return value["content"]
        if isinstance(value, str):
            return value
        raise FileFormatError("%s: %s: %s is %.60r, not a token (a str or {\"content\": str})"
                              % (self.folder, file, key, value))

    def _add_missing_special_tokens(self, tokenizers, tokens):
        key = next((k for k in ("extra_special_tokens", "additional_special_tokens")
                    if tokens.get(k, (None,))[0]), None)
        extra, file = tokens[key] if key else ([], None)
        if isinstance(extra, dict):  # model-specific names ({"image_token": ...}) reach templates
            self.special_tokens.update((k, self._content(v, file, key)) for k, v in extra.items())
        elif not isinstance(extra, list):
            raise FileFormatError("%s: %s: %s is %.60r, not a list or a dict"
                                  % (self.folder, file, key, extra))
        names = list(self.special_tokens.values()) + [
            self._content(t, file, key) for t in (extra if isinstance(extra, list) else [])]
        known = {t.content for t in self._tok.get_added_tokens_decoder().values() if t.special}
        missing = [tokenizers.AddedToken(t, special=True, normalized=False)
                   for t in dict.fromkeys(names) if t not in known]
        if missing:
            self._tok.add_special_tokens(missing)

    def _find_template(self, config):
        path = self._path("chat_template.jinja")
        if os.path.isfile(path):
            try:
                with open(path, encoding="utf-8") as f:
                    return f.read(), "chat_template.jinja"
            except UnicodeDecodeError as e:
                raise FileFormatError("%s: not UTF-8 text (%s)" % (path, e)) from None
        template = config.get("chat_template")
        where = "tokenizer_config.json"
        if template is None or isinstance(template, str):
            return template, where
        named = {}
        for entry in template if isinstance(template, list) else [template]:
            if not (isinstance(entry, dict) and isinstance(entry.get("name"), str)
                    and isinstance(entry.get("template"), str)):
                raise FileFormatError("%s: %s: chat_template %.60r is not a str or a list of "
                                      "{name, template}" % (self.folder, where, entry))
            named[entry["name"]] = entry["template"]
        if "default" not in named:
            raise TokenizerError("%s: %s: chat templates %s, none named 'default'"
                                 % (self.folder, where, ", ".join(sorted(named))))
        return named["default"], where

    def _ids(self, generation, config):
        def look(key, token):
            for data, name in ((generation, "generation_config.json"), (config, "config.json")):
                if data.get(key) is not None:
                    return _token_ids(data[key], "%s: %s: %s" % (self.folder, name, key))
            tid = self._tok.token_to_id(token) if token else None
            return [] if tid is None else [tid]

        self.eos_ids = set(look("eos_token_id", self.special_tokens.get("eos_token")))
        self.bos_id = (look("bos_token_id", self.special_tokens.get("bos_token")) or [None])[0]
        self.pad_id = (look("pad_token_id", self.special_tokens.get("pad_token")) or [None])[0]

    @property
    def vocab_size(self):
        """Token ids in use, added tokens included."""
        return self._tok.get_vocab_size(with_added_tokens=True)

    def encode(self, text, add_special_tokens=True):
        """The ids of ``text`` (list of int), with the BOS/EOS the tokenizer's
        post-processor adds unless ``add_special_tokens`` is False."""
        return self._tok.encode(text, add_special_tokens=add_special_tokens).ids

    def decode(self, ids, skip_special_tokens=True):
        """The text of ``ids``; an incomplete UTF-8 character at the end decodes to U+FFFD."""
        return self._tok.decode([int(i) for i in ids], skip_special_tokens=skip_special_tokens)

    def chat(self, messages, add_generation_prompt=True, **variables):
        """The prompt text of ``messages`` (a list of {"role", "content"} dicts), rendered
        by the model's chat template; ``variables`` reach the template too (e.g.
        ``enable_thinking=False``), overriding the special tokens as in transformers."""
        messages = _check_messages(messages)
        template = self._compiled()
        values = dict(self.special_tokens, tools=None, documents=None, **variables)
        values.update(messages=messages, add_generation_prompt=bool(add_generation_prompt))
        import jinja2
        try:
            return template.render(**values)
        except jinja2.TemplateError as e:
            raise TokenizerError("%s: the chat template (%s) failed: %s"
                                 % (self.folder, self._template_file, e)) from None

    def encode_chat(self, messages, add_generation_prompt=True, **variables):
        """The ids of ``chat(messages)``, without added special tokens: the template
        writes the BOS itself (transformers' convention)."""
        return self.encode(self.chat(messages, add_generation_prompt, **variables),
                           add_special_tokens=False)

    def stream(self, stop=(), skip_special_tokens=True):
        """A ``StreamDecoder`` of this tokenizer: generated ids to final text pieces."""
        return StreamDecoder(self, stop, skip_special_tokens)

    def _compiled(self):
        if self._template is None:
            if self.chat_template is None:
                raise TokenizerError("%s: the model has no chat template (no chat_template.jinja"
                                     ", no chat_template in tokenizer_config.json)" % self.folder)
            env = _environment(self.folder)
            import jinja2
            try:
                self._template = env.from_string(self.chat_template)
            except jinja2.TemplateSyntaxError as e:
                raise FileFormatError("%s: %s: the chat template, line %s: %s"
                                      % (self.folder, self._template_file, e.lineno,
                                         e.message)) from None
        return self._template


class StreamDecoder:
    """Text of generated ids as they come: ``push(id)`` returns the new text that is final,
    and the pieces (with ``finish()``'s) join to ``tokenizer.decode(ids)``, stopped short
    of the first ``stop`` string. Text ending in an incomplete UTF-8 character (a U+FFFD
    at the end) and text that could begin a stop string wait until known. When a stop
    string appears, ``push`` returns the text before it, ``stopped`` becomes True and
    later pushes return "". ``text`` is all that was returned, ``ids`` what was pushed.

    Each push decodes a window of a few ids, not the whole list: the ids from ``prefix``
    on, minus the text of ``prefix:read`` (already counted), so decoders that treat the
    first token specially (a leading space stripped) do the same to both; the window moves
    on when its text is clean (vLLM's incremental detokenizer; HF's TextStreamer decodes
    from the last line).
    """

    def __init__(self, tokenizer, stop=(), skip_special_tokens=True):
        stop = (stop,) if isinstance(stop, str) else tuple(stop)
        for s in stop:
            if not isinstance(s, str) or not s:
                raise TokenizerError("StreamDecoder: stop strings must be non-empty str, got %r"
                                     % (s,))
        self.tokenizer, self.stop, self.skip = tokenizer, stop, skip_special_tokens
        self.ids, self.text, self.stopped = [], "", False
        self._prefix = self._read = 0
        self._base = ""      # decode(ids[prefix:read])
        self._pending = ""   # final text of ids[:read] not yet returned (a stop's beginning)

    def _decode(self, ids):
        return self.tokenizer.decode(ids, skip_special_tokens=self.skip)

    def push(self, token_id):
        """The new final text after one more id ("" while it is not known yet)."""
        if self.stopped:
            return ""
        self.ids.append(int(token_id))
        window = self._decode(self.ids[self._prefix:])
        if window.endswith("\ufffd"):  # the bytes of a character are still coming
            return ""
        self._take(window)
        return self._emit(final=False)

    def finish(self):
        """What is held back (an incomplete character decodes to U+FFFD, as decode gives),
        up to a stop string if one completes."""
        if self.stopped:
            return ""
        if self._read < len(self.ids):
            self._take(self._decode(self.ids[self._prefix:]))
        return self._emit(final=True)

    def _take(self, window):
        self._pending += window[len(self._base):]
        new = self._decode(self.ids[self._read:])
        if new:  # the window starts over at text of its own
            self._prefix, self._base = self._read, new
        else:    # only ids without text (skipped special tokens): keep the window's start
            self._base = window
        self._read = len(self.ids)

    def _emit(self, final):
        pending = self._pending
        hits = [(i, s) for s in self.stop for i in [pending.find(s)] if i >= 0]
        if hits:
            out, self._pending, self.stopped = pending[:min(hits)[0]], "", True
        else:
            keep = 0 if final else max([_overlap(pending, s) for s in self.stop] or [0])
            out, self._pending = pending[:len(pending) - keep], pending[len(pending) - keep:]
        self.text += out
        return out


def _overlap(text, stop):
    """Length of the longest end of ``text`` that begins ``stop`` (shorter than stop)."""
    for k in range(min(len(stop) - 1, len(text)), 0, -1):
        if text.endswith(stop[:k]):
            return k
    return 0


def _missing(package, what):
    return MissingDependencyError("%s needs the %s package, which is not installed: %s"
                                  % (what, package, INSTALL_HINT))


def _token_ids(value, where):
    values = value if isinstance(value, list) else [value]
    if not values or any(isinstance(v, bool) or not isinstance(v, int) or v < 0 for v in values):
        raise FileFormatError("%s is %.60r, not a token id or a list of them" % (where, value))
    return values


def _check_messages(messages):
    if not isinstance(messages, (list, tuple)):
        raise TokenizerError("messages: a list of {\"role\": str, \"content\": str} dicts, got %s"
                             % type(messages).__name__)
    if not messages:
        raise TokenizerError("messages: the chat is empty")
    checked = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise TokenizerError("messages[%d] is %.60r, not a dict with \"role\" and \"content\""
                                 % (i, m))
        for key in ("role", "content"):
            if not isinstance(m.get(key), str):
                raise TokenizerError("messages[%d][%r] is %.60r, not a str" % (i, key, m.get(key)))
        # as transformers: a key set to None is a key absent (templates test "is defined")
        checked.append({k: v for k, v in m.items() if v is not None})
    return checked


def _environment(folder):
    """transformers' chat-template environment, rebuilt: the immutable sandbox,
    trim_blocks and lstrip_blocks, loop controls, {% generation %} blocks rendered as
    their body, raise_exception, strftime_now, a tojson that keeps non-ASCII, and dict and
    namespace that hand a template nothing beyond plain data."""
    try:
        import jinja2
        import jinja2.ext
        import jinja2.nodes
        import jinja2.sandbox
        import jinja2.utils
    except ImportError:
        raise _missing("jinja2", "Tokenizer.chat") from None
    version = tuple(int(v) for v in re.findall(r"\d+", jinja2.__version__)[:3])
    if version < JINJA_MIN:
        raise MissingDependencyError(
            "Tokenizer.chat needs jinja2 >= %s (older ones have sandbox escapes), found %s: %s"
            % (".".join(map(str, JINJA_MIN)), jinja2.__version__, INSTALL_HINT))

    class Generation(jinja2.ext.Extension):  # marks assistant text for training masks
        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body
                                          ).set_lineno(lineno)

        def _body(self, caller):
            return caller()

    class Namespace(jinja2.utils.Namespace):
        def __init__(*args, **kwargs):  # jinja's own signature: self among the args
            attrs = dict(*args[1:], **kwargs)
            for key in attrs:
                _plain_name(key)
            jinja2.utils.Namespace.__init__(args[0], attrs)

        def __setitem__(self, key, value):
            _plain_name(key)
            jinja2.utils.Namespace.__setitem__(self, key, value)

    class Dict:
        def __call__(self, *args, **kwargs):
            return dict(*args, **kwargs)

        def fromkeys(self, *args):
            return dict.fromkeys(*args)

    def raise_exception(message):
        raise TokenizerError("%s: the chat template refuses these messages: %s" % (folder, message))

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    env = jinja2.sandbox.ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[Generation, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals.update(raise_exception=raise_exception, namespace=Namespace, dict=Dict(),
                       strftime_now=lambda fmt: datetime.now().strftime(fmt))
    return env


def _plain_name(key):
    if isinstance(key, str) and key.startswith("_"):
        import jinja2
        raise jinja2.exceptions.SecurityError("a chat template cannot set %r on a namespace" % key)
