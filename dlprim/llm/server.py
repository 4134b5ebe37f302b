"""An OpenAI-compatible HTTP server over a LanguageModel, standard library only:

    server = Server(dlprim.llm.load("path/to/model", batch=4), port=8000).start()
    ...                                  # any OpenAI client, base_url http://127.0.0.1:8000/v1
    server.close()

Routes: ``GET /v1/models``, ``POST /v1/completions``, ``POST /v1/chat/completions``; with
``"stream": true`` the answer comes as server-sent events (``data: {chunk}``, ending
``data: [DONE]``). Each HTTP thread hands its requests to the model's one scheduler, which
an engine thread runs (``Scheduler.serve``), so requests of many clients decode together
in the engine's rows.

Sampling follows OpenAI, not the folder's generation_config.json: ``temperature`` and
``top_p`` default to 1 (a request that names neither samples), ``temperature`` 0 is
greedy, ``top_k`` (default 0: off) and ``repetition_penalty`` (default 1: none) are
extensions. ``seed`` makes a request reproducible (the k-th prompt of a request draws from
lane k of it, as ``generate`` does for a list); without one each request draws a fresh
seed. ``max_tokens`` defaults to 16 for completions, as OpenAI's, and to what the context
leaves for chat. The model's EOS ids and ``stop`` end the text ("stop"); ``max_tokens`` or
the context end it with "length".

OpenAI fields that dlprim does not do (``n`` above 1, ``echo``, ``logprobs``,
``best_of``, the penalties, ``tools`` ...) are refused with a 400 naming them unless they
carry their neutral value; unknown fields are refused too. A ``model`` other than the
served name is a 404. Errors have OpenAI's body ``{"error": {"message", "type", "param",
"code"}}``: 400 for a request dlprim cannot take, 404/405 for a path or a method, 411/413
for a body without a length or over MAX_BODY, 500 for a generation that failed (logged
with its traceback, which the client never sees). A client that leaves a stream stops the
writing, not the generation: the scheduler has no cancel.
"""
import http.server
import json
import logging
import math
import os
import queue
import secrets
import socket
import sys
import threading
import time
import uuid

from ..errors import Error
from .scheduler import ContextError

__all__ = ["Server", "ApiError", "MAX_BODY"]

log = logging.getLogger(__name__)

MAX_BODY = 16 << 20  # bytes of a request body
COMPLETION_MAX_TOKENS = 16  # OpenAI's default for /v1/completions
_JSON = {"integer": lambda v: isinstance(v, int) and not isinstance(v, bool) and
         abs(v) < 2 ** 63,
         "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and
         math.isfinite(v),
         "boolean": lambda v: isinstance(v, bool),
         "string or a list of strings": lambda v: isinstance(v, str) or (
             isinstance(v, list) and all(isinstance(s, str) for s in v))}
# request field -> (the generation setting it gives, the JSON it takes)
SAMPLING = {"max_tokens": ("max_new_tokens", "integer"),
            "max_completion_tokens": ("max_new_tokens", "integer"),
            "temperature": ("temperature", "number"), "top_p": ("top_p", "number"),
            "top_k": ("top_k", "integer"), "seed": ("seed", "integer"),
            "repetition_penalty": ("repetition_penalty", "number"),
            "stop": ("stop", "string or a list of strings")}
# OpenAI's fields that dlprim does not do: taken only with these (neutral) values, or null
NEUTRAL = {"n": (1,), "echo": (False,), "best_of": (1,), "logprobs": (False, 0),
           "top_logprobs": (0,), "suffix": ("",), "presence_penalty": (0,),
           "frequency_penalty": (0,), "logit_bias": ({},), "tools": ([],),
           "tool_choice": ("none",), "parallel_tool_calls": (True, False),
           "response_format": ({"type": "text"},)}
_COMMON = {"model", "stream", "stream_options", "user", "max_tokens", "temperature", "top_p",
           "top_k", "seed", "repetition_penalty", "stop", "n", "logprobs",
           "presence_penalty", "frequency_penalty", "logit_bias"}
FIELDS = {"completions": _COMMON | {"prompt", "echo", "best_of", "suffix"},
          "chat": _COMMON | {"messages", "max_completion_tokens", "top_logprobs", "tools",
                             "tool_choice", "parallel_tool_calls", "response_format"}}


class ApiError(Exception):
    """An answer in OpenAI's error body: HTTP ``status``, ``message``, ``kind`` (its
    "type"), the request field ``param`` and a ``code``."""

    def __init__(self, status, message, kind="invalid_request_error", param=None, code=None,
                 headers=None):
        super().__init__(message)
        self.status, self.message, self.kind, self.param, self.code = \
            status, message, kind, param, code
        self.headers = headers or {}

    def body(self):
        return {"error": {"message": self.message, "type": self.kind, "param": self.param,
                          "code": self.code}}


class Server:
    """``model`` (a LanguageModel with a tokenizer) served on ``host``:``port`` (0: a free
    one, then read ``address``) as ``name`` (default: the folder's name). The socket is
    bound here; ``start`` runs the engine and HTTP threads; ``close`` stops both, the
    model's scheduler for good. While it serves, the model is the server's alone."""

    def __init__(self, model, host="127.0.0.1", port=8000, name=None):
        if model.tokenizer is None:
            raise Error("%s has no tokenizer.json: the server needs one to read and write "
                        "text" % model.checkpoint.folder)
        self.model = model
        self.name = name or os.path.basename(os.path.normpath(model.checkpoint.folder))
        self.created = int(time.time())
        self.httpd = _HTTPServer((host, port), _Handler)
        self.httpd.app = self
        self.routes = {"/v1/models": {"GET": self._models},
                       "/v1/completions": {"POST": self._completions},
                       "/v1/chat/completions": {"POST": self._chat}}
        self._threads, self._closed = [], False

    @property
    def address(self):
        """(host, port) the server listens on."""
        return self.httpd.server_address[:2]

    @property
    def url(self):
        """``http://host:port``."""
        host, port = self.address
        return "http://%s:%d" % ("[%s]" % host if ":" in host else host, port)

    def start(self):
        """Run the engine thread and the HTTP thread (daemons); returns self."""
        for target, name in ((self.model.scheduler.serve, "dlprim-engine"),
                             (self.httpd.serve_forever, "dlprim-http")):
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def close(self):
        """Stop taking connections, fail what still runs (500s), end the engine thread."""
        self._closed = True
        if self._threads:
            self.httpd.shutdown()
        self.httpd.server_close()
        self.model.scheduler.close()
        for thread in self._threads:
            thread.join()

    def _models(self, handler, body):
        handler.send_json(200, {"object": "list", "data": [
            {"id": self.name, "object": "model", "created": self.created,
             "owned_by": "dlprim"}]})

    def _completions(self, handler, body):
        _check_fields(body, FIELDS["completions"])
        self._check_model(body)
        settings = self._settings(body, COMPLETION_MAX_TOKENS)
        self._answer(handler, body, _prompts(body.get("prompt")), False, settings)

    def _chat(self, handler, body):
        _check_fields(body, FIELDS["chat"])
        self._check_model(body)
        if body.get("max_tokens") is not None and \
                body.get("max_completion_tokens") is not None:
            raise ApiError(400, "give max_tokens or max_completion_tokens, not both",
                           param="max_completion_tokens")
        settings = self._settings(body, self.model.context)  # until EOS or the context
        self._answer(handler, body, [_messages(body.get("messages"))], True, settings)

    def _settings(self, body, max_tokens):
        """The generation settings of a request: OpenAI's defaults, then its fields, each
        checked alone so that an error names it."""
        settings = dict(max_new_tokens=max_tokens, temperature=1.0, top_p=1.0, top_k=0,
                        repetition_penalty=1.0, seed=secrets.randbelow(2 ** 63))
        for field, (setting, kind) in SAMPLING.items():
            value = body.get(field)
            if value is None:
                continue
            if not _JSON[kind](value):
                raise ApiError(400, "%s must be a %s, not %.60r" % (field, kind, value),
                               param=field)
            try:
                self.model.settings(**{setting: value})
            except ValueError as e:
                raise ApiError(400, str(e) if field == setting else "%s: %s" % (field, e),
                               param=field) from None
            settings[setting] = value
        return settings

    def _answer(self, handler, body, prompts, chat, settings):
        stream = False if body.get("stream") is None else body["stream"]
        options = body.get("stream_options")
        if not _JSON["boolean"](stream):
            raise ApiError(400, "stream must be a boolean, not %.60r" % (stream,), param="stream")
        if options is not None and (not stream or not isinstance(options, dict) or
                                    set(options) - {"include_usage"}):
            raise ApiError(400, "stream_options is {\"include_usage\": bool}, with stream",
                           param="stream_options")
        events = queue.Queue() if stream else None
        requests = []
        try:
            for lane, prompt in enumerate(prompts):
                r = self.model.request(prompt, chat=chat, lane=lane, **settings)
                self.model.scheduler.check(r)
                if stream:
                    r.done = _Feed(events, lane)
                    r.on_text = r.done.put
                requests.append(r)
        except ContextError as e:
            raise ApiError(400, str(e), param="messages" if chat else "prompt",
                           code="context_length_exceeded") from None
        except ValueError as e:  # SettingsError, TokenizerError, token ids, ...
            raise ApiError(400, str(e), param="messages" if chat else "prompt") from None
        if self._closed:
            raise ApiError(503, "the server is shutting down", "server_error")
        for r in requests:
            self.model.scheduler.submit(r)
        reply = _Reply(chat, self.name, requests)
        if stream:
            reply.stream(handler, events, bool((options or {}).get("include_usage")))
            return
        for r in requests:
            r.done.wait()
            _raise_failure(r)
        handler.send_json(200, reply.whole())

    def _check_model(self, body):
        model = body.get("model")
        if model is not None and model != self.name:
            raise ApiError(404, "the model %.60r does not exist: this server serves %r"
                           % (model, self.name), param="model", code="model_not_found")


class _HTTPServer(http.server.ThreadingHTTPServer):
    def __init__(self, address, handler):
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        super().__init__(address, handler)

    def handle_error(self, request, address):  # socketserver would print to stderr
        if isinstance(sys.exc_info()[1], ConnectionError):
            log.info("%s left: %s", address[0], sys.exc_info()[1])
        else:
            log.exception("the connection of %s failed", address[0])


class _Feed(threading.Event):
    """A streamed request's ``done`` that carries its text to the stream's queue as
    (lane, piece): ``put`` is its ``on_text``; ``set`` puts (lane, None) after the last
    piece (the scheduler calls ``on_text`` before ``done.set``)."""

    def __init__(self, events, lane):
        super().__init__()
        self._events, self._lane = events, lane

    def put(self, piece):
        self._events.put_nowait((self._lane, piece))

    def set(self):
        super().set()
        self.put(None)


class _Reply:
    """The OpenAI objects of one answer: whole, or as chunks of a stream."""

    def __init__(self, chat, model, requests):
        self.chat, self.requests = chat, requests
        self.head = {"id": ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex,
                     "object": "chat.completion" if chat else "text_completion",
                     "created": int(time.time()), "model": model}

    def usage(self):
        prompt = sum(r.result.prompt_tokens for r in self.requests)
        made = sum(len(r.result.tokens) for r in self.requests)
        return {"prompt_tokens": prompt, "completion_tokens": made,
                "total_tokens": prompt + made}

    def whole(self):
        choices = []
        for i, r in enumerate(self.requests):
            if self.chat:
                choices.append({"index": i, "message": {"role": "assistant",
                                                        "content": r.result.text},
                                "logprobs": None, "finish_reason": r.result.finish_reason})
            else:
                choices.append({"text": r.result.text, "index": i, "logprobs": None,
                                "finish_reason": r.result.finish_reason})
        return dict(self.head, choices=choices, usage=self.usage())

    def chunk(self, lane, text=None, role=False, finish=None):
        if self.chat:
            delta = {"role": "assistant"} if role else {} if text is None else {"content": text}
            choice = {"index": lane, "delta": delta}
        else:
            choice = {"text": text or "", "index": lane}
        choice.update(logprobs=None, finish_reason=finish)
        return dict(self.head, object=self.head["object"] + (".chunk" if self.chat else ""),
                    choices=[choice])

    def stream(self, handler, events, include_usage):
        handler.start_events()
        if self.chat:
            for lane in range(len(self.requests)):
                handler.send_event(self.chunk(lane, role=True))
        left = len(self.requests)
        while left:
            lane, piece = events.get()
            if piece is not None:
                handler.send_event(self.chunk(lane, piece))
                continue
            left -= 1
            _raise_failure(self.requests[lane])  # the handler ends the stream with it
            handler.send_event(self.chunk(lane, finish=self.requests[lane].result.finish_reason))
        if include_usage:
            handler.send_event(dict(self.chunk(0), choices=[], usage=self.usage()))
        handler.end_events()


def _raise_failure(request):
    if request.error is not None:
        log.error("a generation failed", exc_info=request.error)
        raise ApiError(500, "the generation failed: %s" % request.error, "server_error")


def _check_fields(body, known):
    for field, value in body.items():
        if field not in known:
            raise ApiError(400, "unknown field %.60r (this route takes: %s)"
                           % (field, ", ".join(sorted(known))), param=field)
        neutral = NEUTRAL.get(field)
        if neutral and value is not None and not any(
                value == v and isinstance(value, bool) == isinstance(v, bool) for v in neutral):
            raise ApiError(400, "%s=%.60r is not supported by dlprim-serve (only %s)"
                           % (field, value, " or ".join(json.dumps(v) for v in neutral)),
                           param=field)


def _token_ids(value):
    return isinstance(value, list) and value and all(
        isinstance(t, int) and not isinstance(t, bool) for t in value)


def _prompts(value):
    """The prompts of a completion: a string, token ids, or a list of either."""
    if isinstance(value, str) or _token_ids(value):
        return [value]
    if isinstance(value, list) and value and all(isinstance(p, str) or _token_ids(p)
                                                 for p in value):
        return value
    raise ApiError(400, "prompt must be a string, a list of token ids, or a list of those, "
                   "not %.60r" % (value,), param="prompt")


def _messages(value):
    """Chat messages as the chat template takes them: a list of text parts becomes one
    string; the "developer" role is "system"."""
    if not isinstance(value, list) or not value:
        raise ApiError(400, "messages must be a non-empty list of {\"role\", \"content\"}, "
                       "not %.60r" % (value,), param="messages")
    out = []
    for i, m in enumerate(value):
        if not isinstance(m, dict):
            raise ApiError(400, "messages[%d] is %.60r, not an object" % (i, m),
                           param="messages")
        m = dict(m, role="system") if m.get("role") == "developer" else dict(m)
        if isinstance(m.get("content"), list):
            texts = []
            for j, part in enumerate(m["content"]):
                if not isinstance(part, dict) or part.get("type") != "text" or \
                        not isinstance(part.get("text"), str):
                    raise ApiError(400, "messages[%d].content[%d] is %.60r: only "
                                   "{\"type\": \"text\", \"text\": str} parts are supported"
                                   % (i, j, part), param="messages")
                texts.append(part["text"])
            m["content"] = "\n".join(texts)
        out.append(m)
    return out


class _Handler(http.server.BaseHTTPRequestHandler):
    """One connection: its requests routed to the Server (``server.app``)."""
    protocol_version = "HTTP/1.1"
    server_version = "dlprim-serve"
    timeout = 600  # seconds a silent connection keeps its thread

    def do_GET(self):
        self._route("GET")

    def do_POST(self):
        self._route("POST")

    def _route(self, method):
        app, self._streaming = self.server.app, False
        path = self.path.split("?")[0]
        try:
            routes = app.routes.get(path)
            if routes is None:
                raise ApiError(404, "no route %s: this server has %s" % (
                    path, ", ".join(sorted(app.routes))), "not_found_error", code="not_found")
            if method not in routes:
                raise ApiError(405, "%s takes %s, not %s" % (path, " or ".join(routes), method),
                               code="method_not_allowed", headers={"Allow": ", ".join(routes)})
            routes[method](self, self._body() if method == "POST" else None)
        except ApiError as e:
            self._fail(e)
        except ConnectionError:
            log.info("%s left during %s %s", self.address_string(), method, path)
            self.close_connection = True
        except Exception as e:  # a bug: logged here, a plain 500 there
            log.exception("%s %s failed", method, path)
            self._fail(ApiError(500, "the server failed: %s" % type(e).__name__,
                                "server_error"))

    def _fail(self, error):
        if self._streaming:  # headers are gone: the error is the stream's last event
            self.send_event(error.body())
            self.end_events()
        else:
            self.send_json(error.status, error.body(), error.headers)

    def _body(self):
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            raise ApiError(411, "send the body with a Content-Length, not chunked")
        length = self.headers.get("Content-Length")
        if length is None or not length.strip().isdigit():
            raise ApiError(411, "a POST needs a Content-Length header")
        if int(length) > MAX_BODY:
            raise ApiError(413, "the body of %s bytes is over the server's limit of %d"
                           % (length, MAX_BODY))
        raw = self.rfile.read(int(length))
        try:
            body = json.loads(raw, parse_constant=_no_constant)
        except ValueError as e:
            raise ApiError(400, "the body is not JSON: %s" % e) from None
        if not isinstance(body, dict):
            raise ApiError(400, "the body must be a JSON object, not %s"
                           % type(body).__name__)
        return body

    def send_error(self, code, message=None, explain=None):
        """http.server's own errors (a malformed request, a method no route has) in
        OpenAI's body."""
        self.log_error("code %d, message %s", code, message)
        self.send_json(code, ApiError(code, message or self.responses[code][0]).body())

    def send_json(self, status, obj, headers=None):
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        if status >= 400:  # the body may be unread: start the next request afresh
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        self.wfile.write(data)

    def start_events(self):
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self._streaming = True

    def send_event(self, obj):
        self._chunk(b"data: %s\n\n" % (obj if isinstance(obj, bytes) else
                                       json.dumps(obj).encode()))

    def end_events(self):
        self.send_event(b"[DONE]")
        self._chunk(b"")
        self._streaming = False

    def _chunk(self, data):  # HTTP/1.1 chunked transfer coding (RFC 9112 7.1)
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))

    def log_message(self, format, *args):
        log.info("%s %s", self.address_string(), format % args)


def _no_constant(name):
    raise ValueError("%s is not a JSON number" % name)
