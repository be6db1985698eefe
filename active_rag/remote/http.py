"""The HTTP side of :class:`~active_rag.remote.lm.RemoteLM`: requests to an OpenAI-compatible server, with a timeout,
retries with exponential backoff, server-sent-event streaming, and one-line errors.

It follows the OpenAI API reference (``POST {base}/completions``, ``POST {base}/chat/completions``, ``GET
{base}/models``; a streamed reply is a ``text/event-stream`` of ``data: {json}`` lines ending with ``data: [DONE]``)
and the environment variables of the OpenAI clients (``OPENAI_BASE_URL``, ``OPENAI_API_KEY``). Only the standard
library is used (``urllib``), so the engine needs no HTTP package.

Retried: a refused or reset connection, a timeout, HTTP 429 and 5xx (``retries`` more tries, waiting ``backoff``,
``2 * backoff``, ... seconds). Not retried: other 4xx (a wrong model name or key does not get better), a server that
does not speak HTTP, a reply cut short, and a stream that has already delivered tokens. Every failure is an
:class:`~active_rag.errors.EndpointError` with a one-line message.
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

__all__ = ["ENV_API_KEY", "ENV_BASE_URL", "EndpointClient", "resolve_base_url"]

ENV_BASE_URL = "OPENAI_BASE_URL"
ENV_API_KEY = "OPENAI_API_KEY"

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
        api_key: sent as ``Authorization: Bearer ...``; ``None``: ``$OPENAI_API_KEY`` if set, else no header.
        timeout: seconds to wait for the connection and for each read (a streamed reply's next token).
        retries: further tries after a failed one (connection, timeout, 429, 5xx).
        backoff: seconds before the first retry, doubled for each next one.
    """

    def __init__(
        self, base_url: str | None = None, api_key: str | None = None, *, timeout: float = 60.0, retries: int = 2,
        backoff: float = 0.5,
    ) -> None:
        from ..validation import check_int, check_number

        self.base_url = resolve_base_url(base_url)
        self.api_key = api_key if api_key is not None else os.environ.get(ENV_API_KEY)
        self.timeout = check_number("timeout", timeout, minimum=0, hint="It is the endpoint's timeout in seconds, e.g. 60")
        if self.timeout <= 0:
            raise InvalidOptionError("timeout must be greater than 0: it is the endpoint's timeout in seconds, e.g. 60.")
        self.retries = check_int("retries", retries, minimum=0, hint="It is the number of retries of a failed request, e.g. 2")
        self.backoff = check_number("backoff", backoff, minimum=0, hint="It is the wait before the first retry in seconds, e.g. 0.5")

    def __repr__(self) -> str:
        return f"EndpointClient({self.base_url!r}, timeout={self.timeout:g}, retries={self.retries})"

    # -- requests ------------------------------------------------------------------------------------
    def _open(self, path: str, body: dict[str, Any] | None) -> Any:
        """The open HTTP response of ``GET`` (``body is None``) or ``POST`` ``path``, after the retries."""
        url = path if path.startswith(("http://", "https://")) else f"{self.base_url}/{path.lstrip('/')}"
        headers = {"Accept": "application/json, text/event-stream"}
        data = None
        if body is not None:
            data = json.dumps(body).encode("utf-8")
            headers["Content-Type"] = "application/json"
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        tries = self.retries + 1
        last: EndpointError | None = None
        for attempt in range(tries):
            if attempt:
                time.sleep(self.backoff * 2 ** (attempt - 1))
            request = urllib.request.Request(url, data=data, headers=headers, method="GET" if body is None else "POST")
            try:
                return urllib.request.urlopen(request, timeout=self.timeout)  # noqa: S310 - http(s) only, checked
            except urllib.error.HTTPError as exc:
                detail = _detail(exc.read() or b"")
                exc.close()
                if exc.code == 429 or exc.code >= 500:
                    last = EndpointHTTPError(
                        f"The endpoint {url} answered HTTP {exc.code} ({detail or exc.reason}) on {tries} tries: check the "
                        "server's log (out of memory, a prompt longer than its context, overloaded) and try again.", exc.code)
                    continue
                hint = ("check that the base URL ends where the server serves the OpenAI API (usually /v1)" if exc.code == 404
                        else "check the API key (OPENAI_API_KEY)" if exc.code in (401, 403)
                        else "check the model name (--endpoint-model) and that the prompt fits the server's context")
                raise EndpointHTTPError(f"The endpoint {url} answered HTTP {exc.code}: {detail or exc.reason}; {hint}.", exc.code) from None
            except (TimeoutError, socket.timeout):
                last = EndpointTimeoutError(
                    f"The endpoint {url} did not answer within {self.timeout:g} s on {tries} tries: raise the timeout "
                    "(timeout=..., --endpoint-timeout) or check that the server is running and not overloaded.")
            except (urllib.error.URLError, ConnectionError, OSError) as exc:
                reason = getattr(exc, "reason", exc)
                if isinstance(reason, (TimeoutError, socket.timeout)):
                    last = EndpointTimeoutError(
                        f"The endpoint {url} did not answer within {self.timeout:g} s on {tries} tries: raise the timeout "
                        "(timeout=..., --endpoint-timeout) or check that the server is running and not overloaded.")
                    continue
                last = EndpointUnreachableError(
                    f"Cannot reach the endpoint {url} ({reason}) on {tries} tries: start the server (e.g. `python -m "
                    "llama_cpp.server --model FILE.gguf`) or fix the URL (--endpoint, OPENAI_BASE_URL).")
            except http.client.HTTPException as exc:  # not HTTP (BadStatusLine, LineTooLong): not retried
                raise self._read_error(url, exc) from None
        assert last is not None
        raise last

    def _read_error(self, path: str, exc: BaseException) -> EndpointError:
        """The one-line error of a reply that failed: a timeout, a broken connection, a reply that is not HTTP
        (:class:`http.client.BadStatusLine`), or one cut short (:class:`http.client.IncompleteRead`: fewer bytes than
        its Content-Length, a broken chunked stream)."""
        url = path if path.startswith(("http://", "https://")) else f"{self.base_url}/{path.lstrip('/')}"
        if isinstance(exc, (TimeoutError, socket.timeout)):
            return EndpointTimeoutError(
                f"The endpoint {url} stopped answering for {self.timeout:g} s in the middle of a reply: raise the "
                "timeout (timeout=..., --endpoint-timeout) or check the server.")
        if isinstance(exc, http.client.IncompleteRead):
            return EndpointError(
                f"The endpoint {url} cut its reply short ({len(exc.partial)} bytes read"
                + (f", {exc.expected} more expected" if exc.expected is not None else "")
                + "): check the server's log, or a proxy between it and you, and try again.")
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

    def _json(self, path: str, body: dict[str, Any] | None) -> Any:
        response = self._open(path, body)
        try:
            with response:
                raw = response.read()
        except (OSError, TimeoutError, http.client.HTTPException) as exc:
            raise self._read_error(path, exc) from None
        try:
            return json.loads(raw)
        except ValueError:
            raise EndpointError(
                f"The endpoint {self.base_url}/{path.lstrip('/')} did not answer JSON ({_detail(raw)!r}): check that the "
                "URL is an OpenAI-compatible server.") from None

    def post_stream(self, path: str, body: dict[str, Any]) -> Iterator[dict[str, Any]]:
        """``POST path`` with ``"stream": true``: the JSON objects of the server-sent events, as they arrive.

        A server that answers with plain JSON instead yields that one object. Closing the iterator early closes the
        connection, which stops the generation on llama.cpp's and vLLM's servers."""
        response = self._open(path, {**body, "stream": True})
        with response:
            content_type = str(response.headers.get("Content-Type", ""))
            try:
                if "event-stream" not in content_type:
                    raw = response.read()
                    try:
                        yield json.loads(raw)
                    except ValueError:
                        raise EndpointError(
                            f"The endpoint {self.base_url}/{path.lstrip('/')} did not answer JSON ({_detail(raw)!r}): "
                            "check that the URL is an OpenAI-compatible server.") from None
                    return
                for line in response:
                    line = line.strip()
                    if not line.startswith(b"data:"):
                        continue
                    payload = line[5:].strip()
                    if payload == b"[DONE]":
                        return
                    try:
                        event = json.loads(payload)
                    except ValueError:
                        continue
                    if isinstance(event, dict) and "error" in event and not event.get("choices"):
                        raise EndpointHTTPError(
                            f"The endpoint {self.base_url}/{path.lstrip('/')} reported an error in its reply: "
                            f"{_detail(payload)}; check the server's log.", 500)
                    yield event
            except (OSError, TimeoutError, http.client.HTTPException) as exc:
                raise self._read_error(path, exc) from None
