"""A tiny OpenAI-compatible HTTP server in a thread (``http.server``) for the endpoint tests: scripted tokens with
log-probabilities, and the failures a real server can show (no logprobs, HTTP 500, too slow); and a raw socket
server (:func:`raw_endpoint`) whose replies a test writes byte by byte (trickled, oversized, redirects)."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Script:
    """What the fake server does. ``tokens``: the text of the tokens it generates (then it stops, finish "stop"),
    each with ``logprob``, unless ``logprobs_for`` maps a token to another; ``mode``: ``ok``, ``nologprobs``,
    ``500``, ``slow`` (sleeps ``delay`` seconds before answering), ``chatfmt`` (chat-format logprobs on
    completions, as llama.cpp's own server)."""

    tokens: Sequence[str] = ("Paris", ".", " It", " is", " big", ".")
    logprob: float = -0.1
    logprobs_for: dict[str, float] = field(default_factory=dict)
    mode: str = "ok"
    delay: float = 0.0
    requests: list[dict[str, Any]] = field(default_factory=list)
    in_flight: int = 0
    max_in_flight: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def reply_for(self, body: dict[str, Any]) -> tuple[list[str], str]:
        tokens = list(self.tokens)
        n = int(body.get("max_tokens") or len(tokens))
        if n < len(tokens):
            return tokens[:n], "length"
        return tokens, "stop"


def _legacy(tokens: list[str], script: Script) -> dict[str, Any]:
    lps = [script.logprobs_for.get(t, script.logprob) for t in tokens]
    return {"tokens": tokens, "token_logprobs": lps,
            "top_logprobs": [{t: lp, "other": lp - 3.0} for t, lp in zip(tokens, lps, strict=True)],
            "text_offset": [0] * len(tokens)}


def _chat(tokens: list[str], script: Script) -> dict[str, Any]:
    content = []
    for t in tokens:
        lp = script.logprobs_for.get(t, script.logprob)
        content.append({"token": t, "logprob": lp, "bytes": list(t.encode()),
                        "top_logprobs": [{"token": t, "logprob": lp}, {"token": "other", "logprob": lp - 3.0}]})
    return {"content": content}


def _choice(tokens: list[str], finish: str | None, chat: bool, stream: bool, script: Script) -> dict[str, Any]:
    text = "".join(tokens)
    logprobs = None if script.mode == "nologprobs" else (_chat(tokens, script) if chat or script.mode == "chatfmt" else _legacy(tokens, script))
    choice: dict[str, Any] = {"index": 0, "finish_reason": finish, "logprobs": logprobs}
    if chat:
        choice["delta" if stream else "message"] = {"role": "assistant", "content": text}
    else:
        choice["text"] = text
    return choice


class _Handler(BaseHTTPRequestHandler):
    script: Script

    def log_message(self, *args: Any) -> None:  # quiet
        pass

    def _send_json(self, code: int, data: Any) -> None:
        raw = json.dumps(data).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def do_GET(self) -> None:  # noqa: N802
        if self.path.endswith("/models"):
            self._send_json(200, {"object": "list", "data": [{"id": "fake-model", "object": "model"}]})
        else:
            self._send_json(404, {"error": {"message": "not found"}})

    def do_POST(self) -> None:  # noqa: N802
        script = self.script
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length) or b"{}")
        with script.lock:
            script.requests.append({"path": self.path, **body})
            script.in_flight += 1
            script.max_in_flight = max(script.max_in_flight, script.in_flight)
        try:
            self._answer(body)
        finally:
            with script.lock:
                script.in_flight -= 1

    def _answer(self, body: dict[str, Any]) -> None:
        script = self.script
        if self.path.endswith("/extras/tokenize"):
            self._send_json(200, {"tokens": [91] if body.get("input") == "[" else [510]})
            return
        if script.mode == "500":
            self._send_json(500, {"error": {"message": "model crashed"}})
            return
        if script.delay:
            time.sleep(script.delay)
        chat = self.path.endswith("/chat/completions")
        tokens, finish = script.reply_for(body)
        if not body.get("stream"):
            self._send_json(200, {"id": "x", "object": "text_completion", "model": body.get("model"),
                                  "choices": [_choice(tokens, finish, chat, False, script)]})
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        try:
            for k, token in enumerate(tokens):
                event = {"id": "x", "choices": [_choice([token], finish if k == len(tokens) - 1 else None, chat, True, script)]}
                self.wfile.write(f"data: {json.dumps(event)}\n\n".encode())
                self.wfile.flush()
                if script.delay == 0 and script.mode == "ok":
                    time.sleep(0.002)
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass


@contextmanager
def fake_endpoint(script: Script | None = None) -> Iterator[tuple[str, Script]]:
    """``(base URL ending in /v1, script)`` of a fake server running for the ``with`` block."""
    script = script or Script()
    handler = type("Handler", (_Handler,), {"script": script})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1", script
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def free_port() -> int:
    """A port with nothing listening on it (bound, then released)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class RawRequest:
    """One request :func:`raw_endpoint` read: method, path, headers (names in lower case) and body."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes


def _read_request(conn: socket.socket) -> RawRequest | None:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return None
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    method, path = (lines[0].split(" ") + ["", ""])[:2]
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    length = int(headers.get("content-length") or 0)
    while len(body) < length:
        chunk = conn.recv(65536)
        if not chunk:
            break
        body += chunk
    return RawRequest(method, path, headers, body)


@contextmanager
def raw_endpoint(respond: Callable[[socket.socket, RawRequest], None]) -> Iterator[tuple[str, list[RawRequest]]]:
    """``(base URL ending in /v1, the requests it read)`` of a server on a local port that reads each request and
    lets ``respond(connection, request)`` write the reply's bytes (each connection in its own thread; the
    connection is closed after it; a client that hangs up is not an error)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    listener.settimeout(0.05)
    stop = threading.Event()
    requests: list[RawRequest] = []

    def handle(conn: socket.socket) -> None:
        with conn:
            try:
                conn.settimeout(10)
                request = _read_request(conn)
                if request is None:
                    return
                requests.append(request)
                respond(conn, request)
            except OSError:  # the client hung up (or the test ended)
                pass

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except (TimeoutError, OSError):
                continue
            threading.Thread(target=handle, args=(conn,), daemon=True).start()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}/v1", requests
    finally:
        stop.set()
        thread.join(timeout=5)
        listener.close()


def http_head(status: str = "200 OK", content_type: str = "application/json", length: int | None = None,
              extra: Sequence[str] = ()) -> bytes:
    """The status line and headers of a reply (``length``: a ``Content-Length``; ``None``: the body runs to the
    connection's close)."""
    lines = [f"HTTP/1.1 {status}", f"Content-Type: {content_type}", "Connection: close", *extra]
    if length is not None:
        lines.append(f"Content-Length: {length}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()
