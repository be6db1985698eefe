"""The endpoint client against replies a real server should not send: shapes the OpenAI API does not describe (each a
one-line ``EndpointError`` naming the field), a reply trickled in past the request's deadline, replies over the byte
cap, and redirects (the API key never goes to another origin)."""

from __future__ import annotations

import copy
import json
import socket
import threading
import time
from typing import Any

import pytest

from active_rag.cli.commands import main
from active_rag.errors import EndpointError, EndpointTimeoutError, NoLogprobsError
from active_rag.remote.http import EndpointClient
from active_rag.remote.lm import RemoteLM
from endpoint_fakes import RawRequest, http_head, raw_endpoint

KEY = "sk-test-secret"


def _one_line(exc: BaseException) -> str:
    text = str(exc)
    assert text and "\n" not in text, text
    return text


def _answer(body: bytes, content_type: str = "application/json"):  # noqa: ANN202 - a respond callback
    def respond(conn: socket.socket, request: RawRequest) -> None:
        conn.sendall(http_head(content_type=content_type, length=len(body)) + body)

    return respond


def _sse(*events: Any, raw: bytes = b"") -> bytes:
    return b"".join(f"data: {json.dumps(e)}\n\n".encode() for e in events) + raw + b"data: [DONE]\n\n"


# -- reply shapes -----------------------------------------------------------------------------------------------
LEGACY = {"text": "Hi there", "finish_reason": "stop", "logprobs": {
    "tokens": ["Hi", " there"], "token_logprobs": [-0.5, -1.0], "top_logprobs": [{"Hi": -0.5}, {" there": -1.0}]}}
CHAT = {"delta": {"content": "Hi"}, "finish_reason": "stop", "logprobs": {
    "content": [{"token": "Hi", "logprob": -0.5, "bytes": [72, 105], "top_logprobs": [{"token": "Hi", "logprob": -0.5}]}]}}


def _edit(base: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    choice = copy.deepcopy(base)
    *parents, last = path.split(".")
    node: Any = choice
    for key in parents:
        node = node[int(key)] if isinstance(node, list) else node[key]
    node[int(last) if isinstance(node, list) else last] = value
    return choice


CHOICES = {  # a choice, and what the error names
    "text not a string": (_edit(LEGACY, "text", 5), "choices[0].text should be a string"),
    "text_offset not integers": (
        _edit(_edit(LEGACY, "text", "Hi  there"), "logprobs.text_offset", ["a", "b"]),
        "choices[0].logprobs.text_offset[0] should be an integer"),
    "logprobs not an object": (_edit(LEGACY, "logprobs", ["x"]), "choices[0].logprobs should be an object"),
    "top_logprobs entries not objects": (_edit(LEGACY, "logprobs.top_logprobs", ["Hi", " there"]),
                                         "choices[0].logprobs.top_logprobs[0] should be an object"),
    "token_logprobs not numbers": (_edit(LEGACY, "logprobs.token_logprobs", ["a", "b"]),
                                   "choices[0].logprobs.token_logprobs[0] should be a number"),
    "token_logprobs too short": (_edit(LEGACY, "logprobs.token_logprobs", [-0.5]),
                                 "choices[0].logprobs.token_logprobs should be one number per token (2)"),
    "finish_reason not a string": (_edit(LEGACY, "finish_reason", 3), "choices[0].finish_reason should be a string"),
    "delta not an object": (_edit(CHAT, "delta", "Hi"), "choices[0].delta should be an object"),
    "chat content not a list": (_edit(CHAT, "logprobs.content", "Hi"), "choices[0].logprobs.content should be a list"),
    "chat content items not objects": (_edit(CHAT, "logprobs.content", ["Hi"]),
                                       "choices[0].logprobs.content[0] should be an object"),
    "chat bytes not integers": (_edit(CHAT, "logprobs.content.0.bytes", ["H", "i"]),
                                "choices[0].logprobs.content[0].bytes[0] should be an integer"),
    "chat top_logprobs items not objects": (_edit(CHAT, "logprobs.content.0.top_logprobs", ["Hi"]),
                                            "choices[0].logprobs.content[0].top_logprobs[0] should be an object"),
}


def _shape_error(reply: bytes, stream: bool, api: str = "completions") -> str:
    content_type = "text/event-stream" if stream else "application/json"
    with raw_endpoint(_answer(reply, content_type)) as (url, _):
        lm = RemoteLM(url, model="m", api=api, retries=0, timeout=5, stream=stream)
        with pytest.raises(EndpointError) as info:
            lm.complete("q", max_new_tokens=4)
    assert not isinstance(info.value, NoLogprobsError), info.value
    message = _one_line(info.value)
    assert url in message and "does not follow the OpenAI API" in message and ", got " in message, message
    return message


@pytest.mark.parametrize("case", list(CHOICES))
@pytest.mark.parametrize("stream", [False, True])
def test_a_choice_of_another_shape_is_one_line_naming_the_field(case: str, stream: bool) -> None:
    choice, needle = CHOICES[case]
    api = "chat" if "delta" in choice else "completions"
    if not stream and "delta" in choice:
        choice = {("message" if k == "delta" else k): v for k, v in choice.items()}
        needle = needle.replace("delta", "message")
    reply = _sse({"choices": [choice]}) if stream else json.dumps({"choices": [choice]}).encode()
    assert needle in _shape_error(reply, stream, api)


REPLIES = {  # a whole reply (no streaming), and what the error names
    "choices holds a string": ({"choices": ["x"]}, 'choices[0] should be an object (a choice), got a string ("x")'),
    "choices is an object": ({"choices": {}}, "choices should be a list of choices, got an object ({})"),
    "choices is empty": ({"choices": []}, "choices should be a list of at least one choice, got an empty list"),
    "no choices": ({"id": "x", "object": "text_completion"}, "should be an object with a choices list, got an object "
                   "without one (keys: id, object)"),
    "a JSON list": ([{"choices": []}], "the reply should be a JSON object, got a list"),
}


@pytest.mark.parametrize("case", list(REPLIES))
def test_a_reply_of_another_shape_is_one_line_naming_the_field(case: str) -> None:
    reply, needle = REPLIES[case]
    assert needle in _shape_error(json.dumps(reply).encode(), stream=False)


EVENTS = {  # a streamed reply, and what the error names
    "an event holding a string": (_sse("x"), 'a streamed event should be a JSON object, got a string ("x")'),
    "choices is an object": (_sse({"choices": {}}), "choices should be a list of choices, got an object"),
    "choices holds a number": (_sse({"choices": [1]}), "choices[0] should be an object (a choice), got a number (1)"),
    "an event not JSON": (_sse(raw=b"data: <html>oops</html>\n\n"), "a streamed event should be JSON, got '<html>oops</html>'"),
}


@pytest.mark.parametrize("case", list(EVENTS))
def test_a_streamed_event_of_another_shape_is_one_line_naming_the_field(case: str) -> None:
    reply, needle = EVENTS[case]
    assert needle in _shape_error(reply, stream=True)


def test_events_without_choices_are_skipped_and_a_later_bad_one_still_named() -> None:
    usage = {"id": "x", "choices": [], "usage": {"completion_tokens": 2}}
    last = {"text": "!", "finish_reason": None, "logprobs": {"tokens": ["!"], "token_logprobs": [None], "top_logprobs": [None]}}
    reply = _sse({"choices": [_edit(LEGACY, "finish_reason", None)]}, usage, {"usage": {}}, {"choices": [last]},
                 {"choices": {"text": "?"}})
    steps = []
    with raw_endpoint(_answer(reply, "text/event-stream")) as (url, _):
        with pytest.raises(EndpointError) as info:
            for step in RemoteLM(url, model="m", retries=0, timeout=5).stream("q", max_new_tokens=8):
                steps.append(step)
    assert [s.text for s in steps] == ["Hi", " there", "!"] and steps[-1].logprob == float("-inf")
    assert "choices should be a list of choices, got an object" in _one_line(info.value)


# -- a deadline for the whole request ---------------------------------------------------------------------------
def _trickle(where: str, interval: float = 0.2, count: int = 40):  # noqa: ANN202 - a respond callback
    """A server sending one byte every ``interval`` s: of its headers, of its JSON body, or of a streamed event."""
    body = json.dumps({"choices": [LEGACY]}).encode().ljust(count, b" ")
    event = _sse(LEGACY)

    def respond(conn: socket.socket, request: RawRequest) -> None:
        if where == "headers":
            head, rest = b"HTTP/1.1 200 OK\r\n", b"X-Pad: " + b"a" * count + b"\r\n"
        elif where == "body":
            head, rest = http_head(length=len(body)), body
        else:
            head, rest = http_head(content_type="text/event-stream"), event
        conn.sendall(head)
        for k in range(min(len(rest), count)):
            conn.sendall(rest[k : k + 1])
            time.sleep(interval)

    return respond


@pytest.mark.slow
@pytest.mark.parametrize("where", ["headers", "body", "stream"])
def test_a_trickled_reply_ends_at_the_deadline(where: str) -> None:
    with raw_endpoint(_trickle(where)) as (url, requests):
        lm = RemoteLM(url, model="m", retries=2, backoff=0, timeout=5, deadline=1, stream=where == "stream")
        start = time.monotonic()
        with pytest.raises(EndpointTimeoutError) as info:
            lm.complete("q", max_new_tokens=4)
        took = time.monotonic() - start
        assert len(requests) == 1  # a try past its deadline is not retried
    message = _one_line(info.value)
    assert "within the 1 s deadline" in message and "deadline=" in message and "--endpoint-timeout" in message
    assert took < 2.5, took


def test_the_deadline_defaults_to_ten_timeouts_and_is_checked() -> None:
    assert EndpointClient("http://127.0.0.1:9/v1", timeout=3).deadline == 30
    assert EndpointClient("http://127.0.0.1:9/v1", deadline=2.5).deadline == 2.5
    with pytest.raises(ValueError, match="deadline must be greater than 0"):
        EndpointClient("http://127.0.0.1:9/v1", deadline=0)


# -- a cap on the bytes of a reply -------------------------------------------------------------------------------
class _Flood:
    """A server sending ``size`` bytes (a JSON reply's opening, then spaces; or one endless streamed line), counting
    the bytes the client took before it hung up."""

    def __init__(self, size: int, *, stream: bool = False, announce: int | None = None) -> None:
        self.size, self.stream, self.announce = size, stream, announce
        self.sent = 0
        self.done = threading.Event()

    def __call__(self, conn: socket.socket, request: RawRequest) -> None:
        kind = "text/event-stream" if self.stream else "application/json"
        conn.sendall(http_head(content_type=kind, length=self.announce))
        block = (b"data: " if self.stream else b'{"choices": [') + b" " * (64 * 1024 - 13)
        try:
            while self.sent < self.size:
                conn.sendall(block)
                self.sent += len(block)
                if self.announce is not None:  # then the rest of the body never comes
                    time.sleep(3)
                    break
        finally:
            self.done.set()


@pytest.mark.parametrize("stream", [False, True])
def test_reading_stops_as_soon_as_the_cap_is_passed(stream: bool) -> None:
    flood = _Flood(48 * 1024 * 1024, stream=stream)
    with raw_endpoint(flood) as (url, _):
        lm = RemoteLM(url, model="m", retries=0, timeout=5, stream=stream, max_reply_bytes=1024 * 1024)
        with pytest.raises(EndpointError) as info:
            lm.complete("q", max_new_tokens=4)
        assert flood.done.wait(10)
    message = _one_line(info.value)
    assert "sent more than 1 MiB, over the 1 MiB cap on a reply" in message
    assert "max_reply_bytes=" in message and "--endpoint-max-reply-mb" in message
    assert flood.sent < 24 * 1024 * 1024, flood.sent  # the client hung up long before the end


def test_a_content_length_over_the_cap_is_refused_before_reading() -> None:
    flood = _Flood(1, announce=5 * 1024 * 1024 * 1024)
    with raw_endpoint(flood) as (url, _):
        start = time.monotonic()
        with pytest.raises(EndpointError) as info:
            EndpointClient(url, retries=0, timeout=5).post_json("completions", {"prompt": "q"})
        took = time.monotonic() - start
    message = _one_line(info.value)
    assert "announced a reply of 5120 MiB (Content-Length), over the 64 MiB cap" in message, message
    assert took < 2, took  # refused at the headers: no wait for the body


def test_cli_endpoint_max_reply_mb(capsys: pytest.CaptureFixture[str]) -> None:
    flood = _Flood(8 * 1024 * 1024)
    with raw_endpoint(flood) as (url, _):
        code = main(["ask", "Where is Paris?", "--method", "wo-rag", "--endpoint", url, "--endpoint-model", "m",
                     "--endpoint-max-reply-mb", "0.5"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "over the 0.5 MiB cap on a reply" in err, err
    for argv, needle in ((["--endpoint-max-reply-mb", "1"], "--endpoint-max-reply-mb only applies with --endpoint"),
                         (["--endpoint", url, "--endpoint-max-reply-mb", "0"], "--endpoint-max-reply-mb must be")):
        assert main(["ask", "Where is Paris?", "--method", "wo-rag", *argv]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and needle in err, err


# -- redirects ---------------------------------------------------------------------------------------------------
def _redirect(status: str, location: str):  # noqa: ANN202 - a respond callback
    def respond(conn: socket.socket, request: RawRequest) -> None:
        conn.sendall(http_head(status=status, length=0, extra=[f"Location: {location}"]))

    return respond


def _models_and_completion(conn: socket.socket, request: RawRequest) -> None:
    if request.path.endswith("/models"):
        body = json.dumps({"data": [{"id": "elsewhere"}]}).encode()
    else:
        body = json.dumps({"choices": [LEGACY]}).encode()
    conn.sendall(http_head(length=len(body)) + body)


@pytest.mark.parametrize("status", ["302 Found", "307 Temporary Redirect"])
@pytest.mark.parametrize("model", [None, "m"])  # None: GET /models first; "m": the POST of a completion
def test_the_api_key_never_follows_a_redirect_to_another_port(status: str, model: str | None) -> None:
    with raw_endpoint(_models_and_completion) as (other, received):
        target = f"{other}/{'completions' if model else 'models'}"
        with raw_endpoint(_redirect(status, target)) as (url, _):
            with pytest.raises(EndpointError) as info:
                RemoteLM(url, model=model, api_key=KEY, retries=0, timeout=5, stream=False).complete("q")
    assert not [r for r in received if "authorization" in r.headers], [r.headers for r in received]
    assert not received  # nothing was sent there at all
    message = _one_line(info.value)
    assert f"redirects (HTTP {status[:3]}) to {target}, another scheme, host or port" in message, message
    assert KEY not in message


def test_a_same_origin_307_is_followed_with_the_key_and_the_body() -> None:
    def respond(conn: socket.socket, request: RawRequest) -> None:
        if request.path == "/v1/completions":
            conn.sendall(http_head(status="307 Temporary Redirect", length=0, extra=["Location: /v2/completions"]))
        else:
            _models_and_completion(conn, request)

    with raw_endpoint(respond) as (url, received):
        text = RemoteLM(url, model="m", api_key=KEY, retries=0, timeout=5, stream=False).complete("q")
    assert text == "Hi there"
    assert [r.path for r in received] == ["/v1/completions", "/v2/completions"]
    assert received[1].method == "POST" and received[1].headers.get("authorization") == f"Bearer {KEY}"
    assert json.loads(received[1].body)["prompt"] == json.loads(received[0].body)["prompt"]


def test_a_post_redirected_by_302_is_not_turned_into_a_get() -> None:
    with raw_endpoint(_redirect("302 Found", "/v2/completions")) as (url, received):
        with pytest.raises(EndpointError) as info:
            RemoteLM(url, model="m", api_key=KEY, retries=0, timeout=5, stream=False).complete("q")
    assert [r.method for r in received] == ["POST"]
    assert "would turn the POST request into a GET" in _one_line(info.value)
