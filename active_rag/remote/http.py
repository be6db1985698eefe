"""The HTTP side of :class:`~active_rag.remote.lm.RemoteLM`: requests to an OpenAI-compatible server, with a timeout,
retries with exponential backoff, server-sent-event streaming, and one-line errors.

It follows the OpenAI API reference (``POST {base}/completions``, ``POST {base}/chat/completions``, ``GET
{base}/models``; a streamed reply is a ``text/event-stream`` of ``data: {json}`` lines ending with ``data: [DONE]``)
and the environment variables of the OpenAI clients (``OPENAI_BASE_URL``, ``OPENAI_API_KEY``). Only the standard
library is used (``urllib``), so the engine needs no HTTP package.

Retried: a refused or reset connection, a timeout, HTTP 429 and 5xx (``retries`` more tries, waiting ``backoff``,
``2 * backoff``, ... seconds). Not retried: other 4xx (a wrong model name or key does not get better), a server that
does not speak HTTP, a reply cut short, a stream that has already delivered tokens, a try past its deadline, a reply
over the byte cap (:mod:`~active_rag.remote.transport`) and a redirect that is not followed. Redirects are followed
within the base URL's origin only (a ``POST`` on a 307 or 308 only): the API key is never sent to another scheme,
host or port. Every failure is an :class:`~active_rag.errors.EndpointError` with a one-line message.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from typing import Any

from ..errors import EndpointError, EndpointHTTPError, EndpointTimeoutError, EndpointUnreachableError, InvalidOptionError
from .transport import DEFAULT_MAX_REPLY_BYTES, Deadline, Reply, deadline_error, opener, origin, short_error

__all__ = ["ENV_API_KEY", "ENV_BASE_URL", "EndpointClient", "resolve_base_url"]

ENV_BASE_URL = "OPENAI_BASE_URL"
ENV_API_KEY = "OPENAI_API_KEY"

_MAX_REDIRECTS = 5
_REDIRECTS = (301, 302, 303, 307, 308)
_ERROR_BODY_BYTES = 64 * 1024  # of an HTTP error's body: enough for its message

_FIX_URL = "pass the server's base URL, e.g. --endpoint http://127.0.0.1:8080/v1 (or set OPENAI_BASE_URL)"


def resolve_base_url(base_url: str | None) -> str:
    """``base_url``, else ``$OPENAI_BASE_URL``, checked: an ``http(s)://host[:port][/path]`` URL without a trailing
    slash; a bare ``http://host:port`` gets ``/v1`` (where llama.cpp, vLLM and Ollama serve the OpenAI API)."""
    url = base_url if base_url is not None else os.environ.get(ENV_BASE_URL)
    if url is None or not str(url).strip():
        raise InvalidOptionError(f"No endpoint given: {_FIX_URL}.")
    url = str(url).strip()
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError as exc:  # e.g. "http://[::1": Invalid IPv6 URL
        raise InvalidOptionError(f"The endpoint {url!r} is not a valid URL ({exc}): {_FIX_URL}.") from None
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise InvalidOptionError(f"The endpoint {url!r} is not an http(s) URL: {_FIX_URL}.")
    try:
        parts.port  # noqa: B018 - raises on a port that is not a number
    except ValueError:
        raise InvalidOptionError(f"The endpoint {url!r} has an invalid port: {_FIX_URL}.") from None
    if not parts.hostname:
        raise InvalidOptionError(f"The endpoint {url!r} names no host: {_FIX_URL}.")
    url = url.rstrip("/")
    if parts.path in ("", "/"):
        url += "/v1"
    return url


def _detail(body: bytes) -> str:
    """The server's error message from a JSON error body (OpenAI's ``{"error": {"message": ...}}``), one line."""
    text = body.decode("utf-8", errors="replace")
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if isinstance(data, dict):
        err = data.get("error", data.get("detail", data))
        if isinstance(err, dict):
            err = err.get("message", err)
        text = err if isinstance(err, str) else json.dumps(err)
    text = " ".join(text.split())
    return text if len(text) <= 200 else text[:197] + "..."


class EndpointClient:
    """JSON requests to one OpenAI-compatible base URL (thread-safe: every request opens its own connection).

    Args:
        base_url: e.g. ``http://127.0.0.1:8080/v1`` (see :func:`resolve_base_url`).
        api_key: sent as ``Authorization: Bearer ...``; ``None``: ``$OPENAI_API_KEY`` if set, else no header. It is
            sent to the base URL's origin only: a redirect to another scheme, host or port is refused.
        timeout: seconds to wait for the connection and for each read (a streamed reply's next token).
        retries: further tries after a failed one (connection, timeout, 429, 5xx).
        backoff: seconds before the first retry, doubled for each next one.
        deadline: seconds one try may take in all (connecting, sending, reading the whole reply, streamed or not);
            ``None``: 10 times ``timeout``. A try past it is not retried.
        max_reply_bytes: the cap on one reply's bytes (default 64 MiB); reading stops as soon as it is passed.
    """

    def __init__(
        self, base_url: str | None = None, api_key: str | None = None, *, timeout: float = 60.0, retries: int = 2,
        backoff: float = 0.5, deadline: float | None = None, max_reply_bytes: int = DEFAULT_MAX_REPLY_BYTES,
    ) -> None:
        from ..validation import check_int, check_number

        self.base_url = resolve_base_url(base_url)
        self.api_key = api_key if api_key is not None else os.environ.get(ENV_API_KEY)
        self.timeout = check_number("timeout", timeout, minimum=0, hint="It is the endpoint's timeout in seconds, e.g. 60")
        if self.timeout <= 0:
            raise InvalidOptionError("timeout must be greater than 0: it is the endpoint's timeout in seconds, e.g. 60.")
        self.retries = check_int("retries", retries, minimum=0, hint="It is the number of retries of a failed request, e.g. 2")
        self.backoff = check_number("backoff", backoff, minimum=0, hint="It is the wait before the first retry in seconds, e.g. 0.5")
        if deadline is None:
            self.deadline = 10 * self.timeout
        else:
            self.deadline = check_number("deadline", deadline, minimum=0,
                                         hint="It is the seconds one request may take in all, e.g. 600")
            if self.deadline <= 0:
                raise InvalidOptionError(
                    "deadline must be greater than 0: it is the seconds one request may take in all, e.g. 600.")
        self.max_reply_bytes = check_int("max_reply_bytes", max_reply_bytes, minimum=1,
                                         hint=f"It is the cap on one reply's bytes, e.g. {DEFAULT_MAX_REPLY_BYTES}")

    def __repr__(self) -> str:
        return (f"EndpointClient({self.base_url!r}, timeout={self.timeout:g}, retries={self.retries}, "
                f"deadline={self.deadline:g}, max_reply_bytes={self.max_reply_bytes})")

    # -- requests ------------------------------------------------------------------------------------
    def _url(self, path: str) -> str:
        return path if path.startswith(("http://", "https://")) else f"{self.base_url}/{path.lstrip('/')}"

    def _headers(self, url: str, post: bool) -> dict[str, str]:
        headers = {"Accept": "application/json, text/event-stream"}
        if post:
            headers["Content-Type"] = "application/json"
        if self.api_key and origin(url) == origin(self.base_url):
            headers["Authorization"] = f"Bearer {self.api_key}"
        return headers

    def _open(self, path: str, body: dict[str, Any] | None) -> Reply:
        """The open reply of ``GET`` (``body is None``) or ``POST`` ``path``, after the retries and the redirects
        within the base URL's origin; its ``Content-Length`` checked against the cap."""
        url = self._url(path)
        data = None if body is None else json.dumps(body).encode("utf-8")
        tries = self.retries + 1
        last: EndpointError | None = None
        for attempt in range(tries):
            if attempt:
                time.sleep(self.backoff * 2 ** (attempt - 1))
            deadline = Deadline(self.deadline)
            opened = False
            try:
                reply = Reply(self._send(url, data, deadline), deadline, self.max_reply_bytes, url)
                opened = True
                try:
                    reply.check_length()
                except EndpointError:
                    reply.close()
                    raise
                return reply
            except urllib.error.HTTPError as exc:
                try:
                    detail = _detail(exc.read(_ERROR_BODY_BYTES) or b"")
                except (OSError, http.client.HTTPException):
                    detail = ""
                exc.close()
                if deadline.expired:
                    raise deadline_error(url, self.deadline) from None
                if exc.code == 429 or exc.code >= 500:
                    last = EndpointHTTPError(
                        f"The endpoint {url} answered HTTP {exc.code} ({detail or exc.reason}) on {tries} tries: check the "
                        "server's log (out of memory, a prompt longer than its context, overloaded) and try again.", exc.code)
                    continue
                hint = ("check that the base URL ends where the server serves the OpenAI API (usually /v1)" if exc.code == 404
                        else "check the API key (OPENAI_API_KEY)" if exc.code in (401, 403)
                        else "check the model name (--endpoint-model) and that the prompt fits the server's context")
                raise EndpointHTTPError(f"The endpoint {url} answered HTTP {exc.code}: {detail or exc.reason}; {hint}.", exc.code) from None
            except EndpointError:
                raise
            except (TimeoutError, socket.timeout):
                if deadline.expired:
                    raise deadline_error(url, self.deadline) from None
                last = self._timeout_error(url, tries)
            except (urllib.error.URLError, ConnectionError, OSError) as exc:
                if deadline.expired:
                    raise deadline_error(url, self.deadline) from None
                reason = getattr(exc, "reason", exc)
                if isinstance(reason, (TimeoutError, socket.timeout)):
                    last = self._timeout_error(url, tries)
                    continue
                last = EndpointUnreachableError(
                    f"Cannot reach the endpoint {url} ({reason}) on {tries} tries: start the server (e.g. `python -m "
                    "llama_cpp.server --model FILE.gguf`) or fix the URL (--endpoint, OPENAI_BASE_URL).")
            except http.client.HTTPException as exc:  # not HTTP (BadStatusLine, LineTooLong): not retried
                if deadline.expired:
                    raise deadline_error(url, self.deadline) from None
                raise self._read_error(url, exc) from None
            finally:
                if not opened:
                    deadline.cancel()
        assert last is not None
        raise last

    def _timeout_error(self, url: str, tries: int) -> EndpointTimeoutError:
        return EndpointTimeoutError(
            f"The endpoint {url} did not answer within {self.timeout:g} s on {tries} tries: raise the timeout "
            "(timeout=..., --endpoint-timeout) or check that the server is running and not overloaded.")

    def _send(self, url: str, data: bytes | None, deadline: Deadline) -> Any:
        """One try: the open HTTP response of ``url``, following the redirects within its origin (a ``POST`` only
        a 307 or 308, which re-send it). A redirect elsewhere is refused: the API key never leaves the origin."""
        target = url
        for _ in range(_MAX_REDIRECTS + 1):
            remaining = deadline.remaining()
            if remaining <= 0:
                raise deadline_error(url, self.deadline)
            request = urllib.request.Request(target, data=data, headers=self._headers(target, data is not None),
                                             method="GET" if data is None else "POST")
            try:
                return opener(deadline).open(request, timeout=min(self.timeout, remaining))
            except urllib.error.HTTPError as exc:
                if exc.code not in _REDIRECTS:
                    raise
                target = self._redirect(target, exc, post=data is not None)
        raise EndpointError(
            f"The endpoint {url} redirected more than {_MAX_REDIRECTS} times: use the URL it ends at as the endpoint "
            "(--endpoint, OPENAI_BASE_URL).")

    def _redirect(self, url: str, exc: urllib.error.HTTPError, *, post: bool) -> str:
        """Where a redirect of ``url`` leads, when it is followed (same origin; a ``POST``: 307 or 308 only)."""
        location = " ".join(str(exc.headers.get("Location") or "").split())
        exc.close()
        if not location:
            raise EndpointError(
                f"The endpoint {url} answered HTTP {exc.code} (a redirect) without a Location: check the URL "
                "(--endpoint, OPENAI_BASE_URL).")
        target = urllib.parse.urljoin(url, location)
        shown = target if len(target) <= 200 else target[:197] + "..."
        if origin(target) != origin(url):
            raise EndpointError(
                f"The endpoint {url} redirects (HTTP {exc.code}) to {shown}, another scheme, host or port: a redirect "
                "there is not followed, so that the API key is not sent to another address; if you trust it, use that "
                "address as the endpoint (--endpoint, OPENAI_BASE_URL).")
        if post and exc.code not in (307, 308):
            raise EndpointError(
                f"The endpoint {url} redirects (HTTP {exc.code}) to {shown}, which would turn the POST request into a "
                "GET: use the URL it redirects to as the endpoint (--endpoint, OPENAI_BASE_URL).")
        return target

    def _read_error(self, path: str, exc: BaseException) -> EndpointError:
        """The one-line error of a reply that failed: a timeout, a broken connection, a reply that is not HTTP
        (:class:`http.client.BadStatusLine`), or one cut short (:class:`http.client.IncompleteRead`: fewer bytes than
        its Content-Length, a broken chunked stream)."""
        url = self._url(path)
        if isinstance(exc, (TimeoutError, socket.timeout)):
            return EndpointTimeoutError(
                f"The endpoint {url} stopped answering for {self.timeout:g} s in the middle of a reply: raise the "
                "timeout (timeout=..., --endpoint-timeout) or check the server.")
        if isinstance(exc, http.client.IncompleteRead):
            return short_error(url, len(exc.partial), exc.expected)
        if isinstance(exc, http.client.HTTPException) and not isinstance(exc, ConnectionError):
            detail = " ".join(str(exc).split())[:120] or type(exc).__name__
            return EndpointError(
                f"The endpoint {url} did not answer HTTP ({type(exc).__name__}: {detail}): check that the URL's host "
                "and port are those of the OpenAI-compatible server (--endpoint, OPENAI_BASE_URL).")
        return EndpointUnreachableError(f"The connection to the endpoint {url} broke in the middle of a reply ({exc}): check the server.")

    def get_json(self, path: str) -> Any:
        """``GET path`` (under the base URL, or an absolute URL), the decoded JSON reply."""
        return self._json(path, None)

    def post_json(self, path: str, body: dict[str, Any]) -> Any:
        """``POST path`` with a JSON ``body``, the decoded JSON reply."""
        return self._json(path, body)

    def _body(self, path: str, reply: Reply) -> bytes:
        try:
            return reply.body()
        except (OSError, TimeoutError, http.client.HTTPException) as exc:
            raise self._read_error(path, exc) from None

    def _decode(self, path: str, raw: bytes) -> Any:
        try:
            return json.loads(raw)
        except ValueError:
            raise EndpointError(
                f"The endpoint {self._url(path)} did not answer JSON ({_detail(raw)!r}): check that the URL is an "
                "OpenAI-compatible server.") from None

    def _json(self, path: str, body: dict[str, Any] | None) -> Any:
        with self._open(path, body) as reply:
            raw = self._body(path, reply)
        return self._decode(path, raw)

    def post_stream(self, path: str, body: dict[str, Any]) -> Iterator[dict[str, Any]]:
        """``POST path`` with ``"stream": true``: the JSON objects of the server-sent events, as they arrive.

        A server that answers with plain JSON instead yields that one object. Closing the iterator early closes the
        connection, which stops the generation on llama.cpp's and vLLM's servers. The deadline and the byte cap hold
        for the whole stream."""
        with self._open(path, {**body, "stream": True}) as reply:
            if "event-stream" not in str(reply.headers.get("Content-Type", "")):
                yield self._decode(path, self._body(path, reply))
                return
            try:
                for line in reply.lines():
                    line = line.strip()
                    if not line.startswith(b"data:"):
                        continue
                    payload = line[5:].strip()
                    if payload == b"[DONE]":
                        return
                    try:
                        event = json.loads(payload)
                    except ValueError:
                        raise EndpointError(
                            f"The endpoint {self._url(path)} sent a reply that does not follow the OpenAI API: a "
                            f"streamed event should be JSON, got {_detail(payload)!r}; check that the server is "
                            "OpenAI-compatible and that nothing between it and you rewrites its replies.") from None
                    if isinstance(event, dict) and "error" in event and not event.get("choices"):
                        raise EndpointHTTPError(
                            f"The endpoint {self._url(path)} reported an error in its reply: "
                            f"{_detail(payload)}; check the server's log.", 500)
                    yield event
            except (OSError, TimeoutError, http.client.HTTPException) as exc:
                raise self._read_error(path, exc) from None
