"""Faults the local Hub can inject into its answers, to test how clients behave when the Hub misbehaves.

A fault matches requests by origin (``"api"`` or ``"storage"``), method and a regular expression on
the path, and handles them instead of the Hub, for a number of ``times`` or until removed. The server
asks its faults in order before routing each request (``LocalHub.faults``). A fault either answers
itself (an HTTP error, a dropped connection) or lets the Hub answer through
``handler.route_request()`` and interferes with that (a delay, a body cut short or corrupted, or with
:class:`AnswerFault` anything at all: a lying header, status or JSON body, a body sent slowly or without end).
Add new kinds by subclassing :class:`Fault` and overriding :meth:`Fault.respond`.
"""

from __future__ import annotations

import json
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar


class Fault:
    """Base class: decides whether it takes a request; subclasses answer it in ``respond``."""

    def __init__(
        self, method: str | None = None, path: str | None = None, origin: str | None = None, times: int | None = None
    ) -> None:
        self.method = method.upper() if method else None
        self.path = re.compile(path) if path else None
        self.origin = origin
        self.remaining = times
        self.hits = 0
        self._lock = threading.Lock()

    def take(self, origin: str, method: str, path: str) -> bool:
        """True (and counted) when this fault answers the request."""
        if self.origin not in (None, origin) or self.method not in (None, method):
            return False
        if self.path is not None and not self.path.search(path):
            return False
        with self._lock:
            if self.remaining is not None:
                if self.remaining <= 0:
                    return False
                self.remaining -= 1
            self.hits += 1
        return True

    def respond(self, handler: Any) -> None:
        raise NotImplementedError


#: a fault of any kind, returned as the kind it was given (``inject`` hands back what it added)
AnyFault = TypeVar("AnyFault", bound=Fault)


class HttpErrorFault(Fault):
    """Answer with an HTTP error status (500 by default) and a Hub-style JSON error body.

    ``headers`` are added to the answer (``{"Retry-After": "0"}`` for a 429 the client may retry at once).
    """

    def __init__(
        self,
        status: int = 500,
        message: str = "Internal Error - injected by the local Hub",
        headers: dict[str, str] | None = None,
        **match: Any,
    ) -> None:
        super().__init__(**match)
        self.status = status
        self.message = message
        self.headers = dict(headers or {})

    def respond(self, handler: Any) -> None:
        handler._drain()  # read the request body, so that the answer is not lost in a connection reset
        body = json.dumps({"error": self.message}).encode()
        handler.send_response(self.status)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(body)))
        handler.send_header("X-Error-Message", self.message)
        for key, value in self.headers.items():
            handler.send_header(key, value)
        handler.end_headers()
        if handler.command != "HEAD":
            handler.wfile.write(body)


class DelayFault(Fault):
    """Wait ``seconds`` before the Hub answers (a slow or congested Hub); the answer itself is correct.

    ``active`` counts requests being delayed right now and ``most_active`` the most at once (two clients
    that overlapped in time show ``most_active == 2``).
    """

    def __init__(self, seconds: float, **match: Any) -> None:
        super().__init__(**match)
        self.seconds = seconds
        self.active = 0
        self.most_active = 0

    def respond(self, handler: Any) -> None:
        with self._lock:
            self.active += 1
            self.most_active = max(self.most_active, self.active)
        try:
            time.sleep(self.seconds)
        finally:
            with self._lock:
                self.active -= 1
        handler.route_request()


class GateFault(Fault):
    """Hold matching requests until ``parties`` of them wait at once, then let the Hub answer them all.

    Makes clients meet in the middle of their work (two pulls of one repo really at the same time).
    ``met`` tells whether they did; after ``timeout`` seconds a request is let through regardless.
    """

    def __init__(self, parties: int, timeout: float = 60.0, **match: Any) -> None:
        super().__init__(**match)
        self._barrier = threading.Barrier(parties, timeout=timeout)
        self.met = False

    def respond(self, handler: Any) -> None:
        try:
            self._barrier.wait()
            self.met = True
        except threading.BrokenBarrierError:
            pass
        handler.route_request()


class DropConnectionFault(Fault):
    """Close the connection without answering (a load balancer or proxy dropping it)."""

    def respond(self, handler: Any) -> None:
        handler.close_connection = True
        try:
            handler.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


class CutBodyFault(Fault):
    """Let the Hub answer, but drop the connection after ``after_bytes`` bytes of the response body."""

    def __init__(self, after_bytes: int, **match: Any) -> None:
        super().__init__(**match)
        self.after_bytes = after_bytes

    def respond(self, handler: Any) -> None:
        def cut(chunk: bytes, offset: int, length: int) -> bytes:
            if offset + len(chunk) > self.after_bytes:
                raise _BodyCut(chunk[: max(self.after_bytes - offset, 0)])
            return chunk

        _filter_body(handler, cut)


class CorruptBodyFault(Fault):
    """Let the Hub answer, with one byte of the response body changed (``at``, default the middle).

    Size and headers stay right: only a checksum of the content can tell.
    """

    def __init__(self, at: int | None = None, **match: Any) -> None:
        super().__init__(**match)
        self.at = at

    def respond(self, handler: Any) -> None:
        def corrupt(chunk: bytes, offset: int, length: int) -> bytes:
            at = self.at if self.at is not None else length // 2
            if offset <= at < offset + len(chunk):
                edited = bytearray(chunk)
                edited[at - offset] ^= 0xFF
                chunk = bytes(edited)
            return chunk

        _filter_body(handler, corrupt)


class _BodyCut(ConnectionResetError):
    """Raised by a body transform: send ``last`` and then drop the connection."""

    def __init__(self, last: bytes) -> None:
        super().__init__("body cut short by an injected fault")
        self.last = last


class _BodyWriter:
    """Stands in for ``handler.wfile`` while the Hub answers: the first write (the status line and headers)
    passes, body bytes go through ``transform(chunk, offset, content_length)``."""

    def __init__(self, wfile: Any, transform: Callable[[bytes, int, int], bytes]) -> None:
        self._wfile, self._transform = wfile, transform
        self._length: int | None = None
        self._offset = 0

    def write(self, data: bytes) -> int:
        if self._length is None:
            found = re.search(rb"(?im)^content-length:\s*(\d+)", bytes(data))
            self._length = int(found.group(1)) if found else 0
            return self._wfile.write(data)
        try:
            chunk = self._transform(bytes(data), self._offset, self._length)
        except _BodyCut as cut:
            self._wfile.write(cut.last)
            raise  # the server's handler drops the connection on a ConnectionError
        self._offset += len(data)
        return self._wfile.write(chunk)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._wfile, name)


def _filter_body(handler: Any, transform: Callable[[bytes, int, int], bytes]) -> None:
    real = handler.wfile
    writer = _BodyWriter(real, transform)
    handler.wfile = writer
    try:
        handler.route_request()
    finally:
        handler.wfile = real


class Answer:
    """One answer of the Hub, as :class:`AnswerFault` hands it to its ``edit``: change it in place.

    ``headers`` is a list of ``(name, value)`` pairs, sent in that order (``Content-Length`` as it stands,
    a lie included). ``body`` is bytes, or an iterable of byte chunks sent one at a time, each flushed
    (a slow or an endless body); the connection is closed after an iterable body.
    """

    def __init__(self, method: str, path: str, status: int, reason: str, headers: list[tuple[str, str]], body: bytes):
        self.method, self.path = method, path
        self.status, self.reason, self.headers = status, reason, headers
        self.body: Any = body

    def header(self, name: str) -> str | None:
        return next((v for k, v in self.headers if k.lower() == name.lower()), None)

    def set_header(self, name: str, value: str | None) -> None:
        """Replace (or with None remove) every ``name`` header; a new one goes last."""
        kept = [(k, v) for k, v in self.headers if k.lower() != name.lower()]
        self.headers = kept + ([(name, value)] if value is not None else [])


class AnswerFault(Fault):
    """Let the Hub answer, then send what ``edit(answer)`` makes of it: a Hub that lies in its headers, its
    JSON, its sizes, or that sends its body slowly or without end. ``sent`` counts the body bytes sent."""

    def __init__(self, edit: Callable[[Answer], None], **match: Any) -> None:
        super().__init__(**match)
        self.edit = edit
        self.sent = 0

    def respond(self, handler: Any) -> None:
        from tests.support.local_hub.store import HubError

        real, captured = handler.wfile, _Captured()
        handler.wfile = captured
        try:
            try:
                handler.route_request()
            except HubError as error:
                handler._answer_error(error)
        finally:
            handler.wfile = real
        head, _, body = bytes(captured.data).partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        _, status, reason = (lines[0].split(" ", 2) + [""])[:3]
        headers = [tuple(part.strip() for part in line.split(":", 1)) for line in lines[1:] if ":" in line]
        answer = Answer(handler.command, handler.path, int(status), reason, headers, body)  # type: ignore[arg-type]
        self.edit(answer)
        handler._status = answer.status
        out = [f"HTTP/1.1 {answer.status} {answer.reason}\r\n"] + [f"{k}: {v}\r\n" for k, v in answer.headers]
        real.write(("".join(out) + "\r\n").encode("latin-1"))
        chunks = [answer.body] if isinstance(answer.body, bytes) else answer.body
        if not isinstance(answer.body, bytes):
            handler.close_connection = True
        try:
            for chunk in chunks:
                if handler.command == "HEAD":
                    break
                real.write(chunk)
                real.flush()
                with self._lock:
                    self.sent += len(chunk)
        except OSError:  # the client hung up
            handler.close_connection = True


class _Captured:
    """Stands in for ``handler.wfile`` while the Hub answers: keeps everything written."""

    def __init__(self) -> None:
        self.data = bytearray()

    def write(self, data: bytes) -> int:
        self.data += data
        return len(data)

    def flush(self) -> None:
        pass


def trickle(data: bytes, every: float, step: int = 1, stop: threading.Event | None = None) -> Iterator[bytes]:
    """``data`` in pieces of ``step`` bytes, one every ``every`` seconds (until ``stop`` is set)."""
    for at in range(0, len(data), step):
        if stop is not None and stop.is_set():
            return
        yield data[at : at + step]
        time.sleep(every)


def endless(chunk: int = 1 << 16, limit: int = 256 << 20, stop: threading.Event | None = None) -> Iterator[bytes]:
    """Zeros, ``chunk`` bytes at a time, up to ``limit`` bytes (a bound for the test, not for the client)."""
    for _ in range(limit // chunk):
        if stop is not None and stop.is_set():
            return
        yield bytes(chunk)
