"""dlprim-serve's OpenAI-compatible server against dlprim.llm directly: a small Llama with
a trained tokenizer (test_llm_generate's ``chat_model``) served on loopback in this
process with a batch of 2, spoken to with http.client and urllib only. Greedy answers
equal ``generate``'s, with the usage counts; streamed pieces add up to the whole answer;
three requests at once through two rows answer as alone; a seed reproduces a draw (the
same as ``generate``'s), no seed draws afresh; every kind of bad request gets its status
and OpenAI's error body, a failed generation a 500 without the traceback; the command
serves until interrupted."""
import http.client
import json
import os
import signal
import socket
import threading
import time
import urllib.request

import pytest

pytest.importorskip("transformers")
pytest.importorskip("tokenizers")
pytest.importorskip("jinja2")

from test_llm_generate import chat_model  # noqa: E402,F401  (a fixture)

from dlprim.llm import load  # noqa: E402
from dlprim.llm.server import MAX_BODY, Server  # noqa: E402

CONTEXT = 64
PROMPT = "Before we proceed any further"
CHAT = [{"role": "user", "content": "Who is Caius Marcius?"}]


@pytest.fixture(scope="module")
def served(ctx, chat_model):  # noqa: F811
    server = Server(load(chat_model[2], ctx=ctx, context=CONTEXT, batch=2), port=0,
                    name="tiny").start()
    yield server
    server.close()


@pytest.fixture(scope="module")
def alone(ctx, chat_model):  # noqa: F811
    """The same folder loaded again, generating directly (batch 1, greedy unless told)."""
    return load(chat_model[2], ctx=ctx, context=CONTEXT)


def _call(server, method, path, body=None, raw=None, headers=None):
    """(status, headers, payload bytes) of one request on a connection of its own."""
    conn = http.client.HTTPConnection(*server.address, timeout=120)
    data = raw if raw is not None else None if body is None else json.dumps(body).encode()
    conn.request(method, path, body=data,
                 headers=dict({"Content-Type": "application/json"}, **(headers or {})))
    response = conn.getresponse()
    payload = response.read()
    conn.close()
    return response.status, response.headers, payload


def _post(server, path, body):
    status, _, payload = _call(server, "POST", path, body)
    assert status == 200, payload
    return json.loads(payload)


def _events(headers, payload):
    """The JSON objects of a server-sent event stream that ends with [DONE]."""
    assert headers["Content-Type"] == "text/event-stream"
    events = payload.decode().split("\n\n")
    assert events[-1] == "" and events[-2] == "data: [DONE]", events[-3:]
    assert all(e.startswith("data: ") for e in events[:-1])
    return [json.loads(e[len("data: "):]) for e in events[:-2]]


def test_models_names_the_served_model(served):
    with urllib.request.urlopen(served.url + "/v1/models", timeout=60) as r:
        assert r.status == 200 and r.headers["Content-Type"] == "application/json"
        listing = json.load(r)
    assert listing["object"] == "list"
    (card,) = listing["data"]
    assert card["id"] == "tiny" and card["object"] == "model" and card["owned_by"] == "dlprim"
    assert isinstance(card["created"], int)


def test_greedy_completion_is_generate(served, alone):
    want = alone.generate(PROMPT, max_new_tokens=12, temperature=0)
    assert want.finish_reason == "length" and want.text  # (the model does not stop early)
    prompt_tokens = len(alone.encode(PROMPT))
    got = _post(served, "/v1/completions", {"model": "tiny", "prompt": PROMPT,
                                            "max_tokens": 12, "temperature": 0})
    assert got["object"] == "text_completion" and got["id"].startswith("cmpl-")
    assert got["model"] == "tiny" and isinstance(got["created"], int)
    assert got["choices"] == [{"text": want.text, "index": 0, "logprobs": None,
                               "finish_reason": "length"}]
    assert got["usage"] == {"prompt_tokens": prompt_tokens, "completion_tokens": 12,
                            "total_tokens": prompt_tokens + 12}
    # token ids as the prompt (OpenAI's neutral values taken); OpenAI's default of 16
    # tokens; several prompts at once
    ids = _post(served, "/v1/completions", {"prompt": alone.encode(PROMPT), "max_tokens": 12,
                                            "temperature": 0, "n": 1, "logprobs": None,
                                            "echo": False, "presence_penalty": 0.0})
    assert ids["choices"][0]["text"] == want.text
    sixteen = alone.generate(PROMPT, max_new_tokens=16, temperature=0)
    assert sixteen.finish_reason == "length"
    got = _post(served, "/v1/completions", {"prompt": PROMPT, "temperature": 0})
    assert got["choices"][0]["text"] == sixteen.text and got["usage"]["completion_tokens"] == 16
    other = alone.generate("Speak, speak", max_new_tokens=12, temperature=0)
    got = _post(served, "/v1/completions", {"prompt": [PROMPT, "Speak, speak"],
                                            "max_tokens": 12, "temperature": 0})
    assert [c["text"] for c in got["choices"]] == [want.text, other.text]
    assert [c["index"] for c in got["choices"]] == [0, 1]
    assert got["usage"]["completion_tokens"] == 12 + len(other.tokens)


def test_chat_completion_is_generate_chat(served, alone):
    want = alone.generate(CHAT, chat=True, max_new_tokens=10, temperature=0)
    got = _post(served, "/v1/chat/completions", {"model": "tiny", "messages": CHAT,
                                                 "max_tokens": 10, "temperature": 0})
    assert got["object"] == "chat.completion" and got["id"].startswith("chatcmpl-")
    assert got["choices"] == [{"index": 0, "message": {"role": "assistant",
                                                       "content": want.text},
                               "logprobs": None, "finish_reason": want.finish_reason}]
    prompt_tokens = len(alone.encode(CHAT, chat=True))
    assert got["usage"] == {"prompt_tokens": prompt_tokens,
                            "completion_tokens": len(want.tokens),
                            "total_tokens": prompt_tokens + len(want.tokens)}
    # text parts and the developer role, as OpenAI's clients send them
    parts = [{"role": "developer", "content": "Be Roman."},
             {"role": "user", "content": [{"type": "text", "text": "Who"},
                                          {"type": "text", "text": "is he?"}]}]
    flat = [{"role": "system", "content": "Be Roman."},
            {"role": "user", "content": "Who\nis he?"}]
    got = _post(served, "/v1/chat/completions", {"messages": parts,
                                                 "max_completion_tokens": 6,
                                                 "temperature": 0})
    assert got["choices"][0]["message"]["content"] == \
        alone.generate(flat, chat=True, max_new_tokens=6, temperature=0).text
    # without max_tokens a chat runs to its end or the context
    whole = alone.generate(CHAT, chat=True, max_new_tokens=CONTEXT, temperature=0)
    got = _post(served, "/v1/chat/completions", {"messages": CHAT, "temperature": 0})
    assert got["choices"][0]["message"]["content"] == whole.text
    assert got["choices"][0]["finish_reason"] == whole.finish_reason
    assert got["usage"]["completion_tokens"] == len(whole.tokens) > 10


def test_streams_add_up_to_the_answer(served, alone):
    want = alone.generate(CHAT, chat=True, max_new_tokens=12, temperature=0)
    status, headers, payload = _call(served, "POST", "/v1/chat/completions", {
        "messages": CHAT, "max_tokens": 12, "temperature": 0, "stream": True,
        "stream_options": {"include_usage": True}})
    assert status == 200
    chunks = _events(headers, payload)
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"}
    assert len({c["id"] for c in chunks}) == 1 and chunks[0]["id"].startswith("chatcmpl-")
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant"}
    pieces = [c["choices"][0]["delta"]["content"] for c in chunks[1:-2]]
    assert len(pieces) > 1 and "".join(pieces) == want.text
    assert chunks[-2]["choices"] == [{"index": 0, "delta": {}, "logprobs": None,
                                      "finish_reason": want.finish_reason}]
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == \
        len(want.tokens)
    # completions stream text pieces
    want = alone.generate(PROMPT, max_new_tokens=12, temperature=0)
    status, headers, payload = _call(served, "POST", "/v1/completions", {
        "prompt": PROMPT, "max_tokens": 12, "temperature": 0, "stream": True})
    chunks = _events(headers, payload)
    assert {c["object"] for c in chunks} == {"text_completion"}
    assert "".join(c["choices"][0]["text"] for c in chunks) == want.text
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    assert all(c["choices"][0]["finish_reason"] is None for c in chunks[:-1])


def test_three_requests_through_two_rows_answer_as_alone(served, alone, monkeypatch):
    prompts = [PROMPT, "Speak, speak", "You are all resolved rather to die"]
    want = [alone.generate(p, max_new_tokens=24, temperature=0).text for p in prompts]
    engine, rows = served.model.engine, []
    step = engine.step
    monkeypatch.setattr(engine, "step",
                        lambda feeds, **kw: rows.append(len(feeds)) or step(feeds, **kw))
    got, start = [None] * 3, threading.Barrier(3)

    def ask(i):
        start.wait()
        got[i] = _post(served, "/v1/completions", {"prompt": prompts[i], "max_tokens": 24,
                                                   "temperature": 0})["choices"][0]["text"]
    threads = [threading.Thread(target=ask, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got == want
    assert max(rows) == 2  # the rows were shared, never more than the batch


def test_a_seed_reproduces_a_draw(served, alone):
    body = {"prompt": PROMPT, "max_tokens": 16, "temperature": 0.8, "seed": 5}
    a = _post(served, "/v1/completions", body)["choices"][0]["text"]
    b = _post(served, "/v1/completions", body)["choices"][0]["text"]
    assert a == b == alone.generate(PROMPT, max_new_tokens=16, temperature=0.8, top_p=1.0,
                                    top_k=0, seed=5).text
    # OpenAI's defaults: no temperature samples at 1, no seed draws afresh
    body = {"prompt": PROMPT, "max_tokens": 16}
    draws = {_post(served, "/v1/completions", body)["choices"][0]["text"] for _ in range(3)}
    assert len(draws) == 3


LONG = " ".join(["Before we proceed any further, hear me speak."] * 20)


@pytest.mark.parametrize("method, path, body, status, kind, param", [
    ("POST", "/v1/completions", b"{not json", 400, "invalid_request_error", None),
    ("POST", "/v1/completions", [1, 2], 400, "invalid_request_error", None),
    ("POST", "/v1/completions", {"prompt": "a", "n": 2}, 400, "invalid_request_error", "n"),
    ("POST", "/v1/completions", {"prompt": "a", "echo": True}, 400, "invalid_request_error",
     "echo"),
    ("POST", "/v1/completions", {"prompt": "a", "max_tokens": 0}, 400,
     "invalid_request_error", "max_tokens"),
    ("POST", "/v1/completions", {"prompt": "a", "temperature": -1}, 400,
     "invalid_request_error", "temperature"),
    ("POST", "/v1/completions", {"prompt": "a", "temperature": "hot"}, 400,
     "invalid_request_error", "temperature"),
    ("POST", "/v1/completions", {"prompt": "a", "stop": 3}, 400, "invalid_request_error",
     "stop"),
    ("POST", "/v1/completions", {"prompt": "a", "stream": "yes"}, 400,
     "invalid_request_error", "stream"),
    ("POST", "/v1/completions", {"prompt": "a", "colour": "red"}, 400,
     "invalid_request_error", "colour"),
    ("POST", "/v1/completions", {"prompt": 7}, 400, "invalid_request_error", "prompt"),
    ("POST", "/v1/completions", {"prompt": [299, 300]}, 400, "invalid_request_error",
     "prompt"),
    ("POST", "/v1/completions", {"prompt": LONG}, 400, "invalid_request_error", "prompt"),
    ("POST", "/v1/completions", {"prompt": "a", "model": "gpt-4"}, 404,
     "invalid_request_error", "model"),
    ("POST", "/v1/chat/completions", {"messages": []}, 400, "invalid_request_error",
     "messages"),
    ("POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": 3}]}, 400,
     "invalid_request_error", "messages"),
    ("POST", "/v1/chat/completions", {"messages": CHAT, "max_tokens": 3,
                                      "max_completion_tokens": 3}, 400,
     "invalid_request_error", "max_completion_tokens"),
    ("GET", "/v1/nothing", None, 404, "not_found_error", None),
    ("GET", "/v1/completions", None, 405, "invalid_request_error", None),
    ("POST", "/v1/models", {}, 405, "invalid_request_error", None),
])
def test_bad_requests_get_openai_errors(served, method, path, body, status, kind, param):
    raw = body if isinstance(body, bytes) else None
    got, headers, payload = _call(served, method, path, None if raw else body, raw)
    assert got == status, payload
    assert headers["Content-Type"] == "application/json"
    error = json.loads(payload)["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["type"] == kind and error["param"] == param and error["message"]
    assert "Traceback" not in error["message"]
    if status == 405:
        assert headers["Allow"] == ("POST" if method == "GET" else "GET")
    if isinstance(body, dict) and body.get("prompt") == LONG:
        assert error["code"] == "context_length_exceeded"
        assert "context of %d" % CONTEXT in error["message"]


def test_a_body_over_the_limit_is_413(served):
    conn = http.client.HTTPConnection(*served.address, timeout=60)
    conn.putrequest("POST", "/v1/completions")
    conn.putheader("Content-Length", str(MAX_BODY + 1))
    conn.endheaders()
    response = conn.getresponse()
    assert response.status == 413
    assert json.loads(response.read())["error"]["type"] == "invalid_request_error"
    conn.close()


def test_a_failed_generation_is_a_500_without_the_traceback(served, monkeypatch, caplog):
    def broken(feeds, ahead=False):
        raise RuntimeError("the device fell over")
    monkeypatch.setattr(served.model.engine, "step", broken)
    status, _, payload = _call(served, "POST", "/v1/completions",
                               {"prompt": PROMPT, "max_tokens": 4})
    assert status == 500
    error = json.loads(payload)["error"]
    assert error["type"] == "server_error" and "the device fell over" in error["message"]
    assert "Traceback" not in error["message"]
    assert "Traceback" in caplog.text and "the device fell over" in caplog.text
    status, headers, payload = _call(served, "POST", "/v1/chat/completions",
                                     {"messages": CHAT, "max_tokens": 4, "stream": True})
    assert status == 200
    chunks = _events(headers, payload)
    assert chunks[-1]["error"]["type"] == "server_error"
    monkeypatch.undo()
    assert _post(served, "/v1/completions", {"prompt": PROMPT, "max_tokens": 2})


def test_dlprim_serve_command(chat_model, capsys):  # noqa: F811
    from dlprim.cli import serve as cli
    folder = chat_model[2]
    device = ["--device", os.environ["DLPRIM_TEST_DEVICE"]] \
        if os.environ.get("DLPRIM_TEST_DEVICE") else []
    assert cli.main([folder + "-missing", "--port", "0"] + device) == 2
    assert "no such model folder" in capsys.readouterr().err
    with pytest.raises(SystemExit) as bad:
        cli.main([folder, "--port", "0", "--batch", "0"])
    assert bad.value.code == 2
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    listing, finished = {}, threading.Event()

    def client():  # asks once the server is up, then presses Ctrl-C
        # whatever the request meets (a refused connection, an answer cut short), Ctrl-C
        # is pressed, or the server serves forever
        try:
            deadline = time.time() + 120
            while not finished.is_set() and time.time() < deadline:
                try:
                    with urllib.request.urlopen("http://127.0.0.1:%d/v1/models" % port,
                                                timeout=10) as r:
                        listing.update(json.load(r))
                        break
                except (OSError, http.client.HTTPException, ValueError):
                    time.sleep(0.05)
        finally:
            if not finished.is_set():
                os.kill(os.getpid(), signal.SIGINT)
    thread = threading.Thread(target=client, daemon=True)
    # Ctrl-C as a terminal delivers it, even where this process was started with SIGINT
    # ignored (a background job of a script: Python then installs no handler of its own)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    thread.start()
    try:
        code = cli.main([folder, "--port", str(port), "--model-name", "tiny", "--context",
                         "32", "--batch", "3"] + device)
    finally:
        finished.set()
        signal.signal(signal.SIGINT, previous)
    thread.join()
    assert code == 0 and listing["data"][0]["id"] == "tiny"
    assert "dlprim-serve: serving tiny on http://127.0.0.1:%d (batch 3, context 32)" % port \
        in capsys.readouterr().err
