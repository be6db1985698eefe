"""One HTTP exchange of :class:`~active_rag.remote.http.EndpointClient`, bounded in time and in size.

- **A deadline for the whole exchange** (connecting, sending, the headers and every byte of the body, streamed or
  not): a :class:`Deadline` arms a timer that shuts the connection's socket down when the deadline passes, so a
  read blocked on a server that trickles its reply returns at once, whatever the per-read timeout.
- **A cap on the bytes of a reply** (:class:`Reply`): a ``Content-Length`` over the cap is refused before reading,
  and a body is read in chunks, stopping as soon as the cap is passed; a streamed reply's bytes count too, so no
  line of server-sent events grows past it.
- **No redirect followed by urllib** (:func:`opener`): the client decides which to follow, and never sends the
  API key to another origin (:func:`origin`).

Only the standard library is used; proxies (``http_proxy``, ``https_proxy``) work as with ``urllib.request``.
"""

from __future__ import annotations

import http.client
import socket
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from typing import Any

from ..errors import EndpointError, EndpointTimeoutError

__all__ = ["CHUNK", "DEFAULT_MAX_REPLY_BYTES", "Deadline", "Reply", "deadline_error", "opener", "origin", "short_error",
           "size_text"]

CHUNK = 64 * 1024
"""Bytes asked of the socket per read."""

DEFAULT_MAX_REPLY_BYTES = 64 * 1024 * 1024
"""The default cap on one reply: 64 MiB (a streamed token with 20 alternatives is about 2 KB)."""


def size_text(size: int) -> str:
    """``size`` bytes in words: ``"64 MiB"``, ``"0.5 MiB"``, ``"1000 bytes"``."""
    if size >= 64 * 1024:
        return f"{size / (1024 * 1024):.4g} MiB"
    return f"{size} bytes"


def origin(url: str) -> tuple[str, str, int | None]:
    """``(scheme, host, port)`` of a URL, the port filled in for http (80) and https (443): two URLs of one origin
    reach the same server."""
    parts = urllib.parse.urlsplit(url)
    scheme = parts.scheme.lower()
    try:
        port = parts.port
    except ValueError:
        port = None
    if port is None:
        port = {"http": 80, "https": 443}.get(scheme)
    return scheme, (parts.hostname or "").lower(), port


def deadline_error(url: str, seconds: float) -> EndpointTimeoutError:
    """The one-line error of a request that passed its deadline."""
    return EndpointTimeoutError(
        f"The endpoint {url} did not send its whole reply within the {seconds:g} s deadline of a request: raise the "
        f"deadline (deadline=..., or --endpoint-timeout S, which sets it to 10 x S) or check that the server is not "
        "overloaded or sending its reply a trickle at a time.")


def short_error(url: str, read: int, expected: int | None) -> EndpointError:
    """The one-line error of a reply cut short: fewer bytes than its ``Content-Length``, a broken chunked stream."""
    return EndpointError(
        f"The endpoint {url} cut its reply short ({read} bytes read"
        + (f", {expected} more expected" if expected is not None else "")
        + "): check the server's log, or a proxy between it and you, and try again.")


class Deadline:
    """The end of one request, ``seconds`` from now: when it passes, the socket :meth:`attach` was given is shut
    down (a blocked read then returns) and :attr:`expired` is ``True``. :meth:`cancel` once the request is over."""

    def __init__(self, seconds: float) -> None:
        self.seconds = float(seconds)
        self._end = time.monotonic() + self.seconds
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._expired = False
        self._timer = threading.Timer(self.seconds, self._fire)
        self._timer.daemon = True
        self._timer.start()

    @property
    def expired(self) -> bool:
        return self._expired or time.monotonic() >= self._end

    def remaining(self) -> float:
        """Seconds left (``<= 0``: passed)."""
        return self._end - time.monotonic()

    def attach(self, sock: socket.socket | None) -> None:
        """Watch ``sock`` (the request's connection, a redirect's next one replacing it)."""
        with self._lock:
            self._sock = sock
            if self._expired:
                self._shutdown()

    def cancel(self) -> None:
        """The request is over: stop the timer (the socket is left as it is)."""
        self._timer.cancel()
        with self._lock:
            self._sock = None

    def _fire(self) -> None:
        with self._lock:
            self._expired = True
            self._shutdown()

    def _shutdown(self) -> None:
        if self._sock is not None:
            try:  # the plain socket's shutdown, also for TLS: a reader blocked in recv wakes up
                socket.socket.shutdown(self._sock, socket.SHUT_RDWR)
            except OSError:
                pass


class _WatchedHTTP(http.client.HTTPConnection):
    deadline: Deadline | None = None

    def connect(self) -> None:
        super().connect()
        if self.deadline is not None:
            self.deadline.attach(self.sock)


class _WatchedHTTPS(http.client.HTTPSConnection):
    deadline: Deadline | None = None

    def connect(self) -> None:
        super().connect()
        if self.deadline is not None:
            self.deadline.attach(self.sock)


def _watched(http_class: Any, deadline: Deadline) -> Any:
    """A connection factory for ``do_open``: ``http_class``'s watched subclass, its socket given to ``deadline``."""
    cls = _WatchedHTTPS if issubclass(http_class, http.client.HTTPSConnection) else _WatchedHTTP

    def make(host: str, **kwargs: Any) -> http.client.HTTPConnection:
        connection = cls(host, **kwargs)
        connection.deadline = deadline
        return connection

    return make


class _HTTPHandler(urllib.request.HTTPHandler):
    def __init__(self, deadline: Deadline) -> None:
        super().__init__()
        self.deadline = deadline

    def do_open(self, http_class: Any, req: Any, **kwargs: Any) -> Any:
        return super().do_open(_watched(http_class, self.deadline), req, **kwargs)


class _HTTPSHandler(urllib.request.HTTPSHandler):
    def __init__(self, deadline: Deadline) -> None:
        super().__init__()
        self.deadline = deadline

    def do_open(self, http_class: Any, req: Any, **kwargs: Any) -> Any:
        return super().do_open(_watched(http_class, self.deadline), req, **kwargs)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """Follows nothing: a 3xx reaches the caller as an :class:`urllib.error.HTTPError` with its ``Location``."""

    def redirect_request(self, req: Any, fp: Any, code: int, msg: str, headers: Any, newurl: str) -> None:
        return None


def opener(deadline: Deadline) -> urllib.request.OpenerDirector:
    """A urllib opener whose connections are watched by ``deadline`` and that follows no redirect."""
    return urllib.request.build_opener(_HTTPHandler(deadline), _HTTPSHandler(deadline), _NoRedirect())


class Reply:
    """An open HTTP response read within a byte cap and a :class:`Deadline` (closing it cancels the deadline).

    :meth:`body` and :meth:`lines` raise an :class:`~active_rag.errors.EndpointError` past the cap and an
    :class:`~active_rag.errors.EndpointTimeoutError` past the deadline; other read errors (a timeout between two
    reads, a reply cut short, a broken chunked stream) are raised as they come, for the caller to word."""

    def __init__(self, response: Any, deadline: Deadline, cap: int, url: str) -> None:
        self.response = response
        self.deadline = deadline
        self.cap = cap
        self.url = url
        self.read_bytes = 0

    @property
    def headers(self) -> Any:
        return self.response.headers

    def _chunked(self) -> bool:
        return "chunked" in str(self.headers.get("Transfer-Encoding", "")).lower()

    def _length(self) -> int | None:
        value = str(self.headers.get("Content-Length", "")).strip()
        return int(value) if value.isdigit() and not self._chunked() else None

    def check_length(self) -> None:
        """Refuse a reply whose ``Content-Length`` is over the cap, before reading any of it."""
        length = self._length()
        if length is not None and length > self.cap:
            raise self._too_large(f"announced a reply of {size_text(length)} (Content-Length)")

    def _too_large(self, what: str) -> EndpointError:
        return EndpointError(
            f"The endpoint {self.url} {what}, over the {size_text(self.cap)} cap on a reply: raise the cap "
            "(max_reply_bytes=..., --endpoint-max-reply-mb) if such a reply is expected, or check the server.")

    def _chunks(self) -> Iterator[bytes]:
        """The body's bytes as they come, within the cap and the deadline."""
        try:
            while True:
                if self.deadline.expired:
                    raise deadline_error(self.url, self.deadline.seconds)
                chunk = self.response.read1(CHUNK)
                if not chunk:
                    break
                self.read_bytes += len(chunk)
                if self.read_bytes > self.cap:
                    raise self._too_large(f"sent more than {size_text(self.cap)}")
                yield chunk
        except (OSError, http.client.HTTPException, ValueError):
            if self.deadline.expired:
                raise deadline_error(self.url, self.deadline.seconds) from None
            raise
        if self.deadline.expired:  # the socket shut down by the deadline reads as the end of the reply
            raise deadline_error(self.url, self.deadline.seconds)
        length = self._length()
        if length is not None and self.read_bytes < length:
            raise short_error(self.url, self.read_bytes, length - self.read_bytes)

    def body(self) -> bytes:
        """The whole body."""
        return b"".join(self._chunks())

    def lines(self) -> Iterator[bytes]:
        """The body's lines (without their ``\\n``) as they come: a server-sent event stream."""
        buffer = bytearray()
        for chunk in self._chunks():
            searched = len(buffer)
            buffer += chunk
            start = 0
            end = buffer.find(b"\n", searched)
            while end >= 0:
                yield bytes(buffer[start:end])
                start = end + 1
                end = buffer.find(b"\n", start)
            if start:
                del buffer[:start]
        if buffer:
            yield bytes(buffer)

    def close(self) -> None:
        try:
            self.response.close()
        finally:
            self.deadline.cancel()

    def __enter__(self) -> Reply:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
