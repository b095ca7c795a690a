"""Every request a pull makes, bounded in time and size, its answers checked before huggingface_hub uses them.

huggingface_hub sends its requests through one shared httpx client (``get_session()``). Two event hooks
of ours sit on it, and act only inside a pull, in the pull's own thread (a context variable holds the
pull's :class:`Guard`; elsewhere they do nothing):

- before each request: the pull's total deadline and its no-progress rule are checked, and the request's
  connect, read, write and pool timeouts are capped at the no-progress window and the time left, so that
  no single wait outlasts them; it asks for ``Accept-Encoding: identity``, so that bytes counted are bytes
  written;
- on each answer, before huggingface_hub reads it: the headers huggingface_hub takes a path or a size
  from are checked against the file list (:func:`~timm_vitscratch.gate.hub_answers.body_limit`), the
  ``X-Xet-Hash`` header is dropped (so the bytes come by plain HTTP through this client, not through
  another transport), and the body stream is wrapped: every chunk, as it comes off the socket, counts
  against the size the answer may hold, the deadline and the no-progress rule.

A failure raises :class:`~timm_vitscratch.hub.failures.HubAnswerError`, a ``ValueError`` that
huggingface_hub neither catches nor retries: the download stops there (huggingface_hub removes its
partial file) and the pull reports that one line.

The no-progress rule: within any ``stall_s`` seconds the Hub must answer a request or send
``stall_bytes`` of a body (or the rest of it). It catches a server that sends a byte every few seconds;
a network that moves 64 KiB in 30 s (about 2 KB/s) passes it.
"""

from __future__ import annotations

import contextlib
import math
import os
import threading
import time
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, NoReturn

from huggingface_hub import constants, get_session
from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError, OfflineModeIsEnabled
from huggingface_hub.utils import httpx

from ..gate.hub_answers import HubFile, body_limit
from .failures import HubAnswerError

#: the environment variables that set the limits (a pull's keyword arguments override them)
DEADLINE_ENV = "VITSCRATCH_PULL_DEADLINE_S"
STALL_S_ENV = "VITSCRATCH_PULL_STALL_S"
STALL_BYTES_ENV = "VITSCRATCH_PULL_STALL_BYTES"


@dataclass(frozen=True)
class TransferLimits:
    """How long a pull may take, and the least progress it must make."""

    #: seconds for the whole pull's network work (every request, every file)
    deadline_s: float = 3600.0
    #: the no-progress window, in seconds; also the longest single wait (connect, read)
    stall_s: float = 30.0
    #: bytes of a body (or the rest of it) the window must bring
    stall_bytes: int = 64 << 10

    @classmethod
    def resolve(
        cls, deadline_s: float | None = None, stall_s: float | None = None, stall_bytes: int | None = None
    ) -> TransferLimits:
        """The limits given, else those of the environment, else the defaults; each checked."""
        default = cls()
        return cls(
            deadline_s=_seconds(deadline_s, DEADLINE_ENV, "deadline_s", default.deadline_s),
            stall_s=_seconds(stall_s, STALL_S_ENV, "stall_s", default.stall_s),
            stall_bytes=_count(stall_bytes, STALL_BYTES_ENV, "stall_bytes", default.stall_bytes),
        )


def _given(value: float | None, env: str, name: str) -> tuple[float | str | None, str]:
    """The value passed, else the environment's when it is set; with where it came from, for the message."""
    if value is None and os.environ.get(env, "").strip():
        return os.environ[env], env
    return value, name


def _seconds(given: float | None, env: str, name: str, default: float) -> float:
    value, where = _given(given, env, name)
    if value is None:
        return default
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        seconds = math.nan
    if not 0 < seconds < math.inf:
        raise ValueError(f"{where}={value!r}: expected a positive number of seconds")
    return seconds


def _count(given: int | None, env: str, name: str, default: int) -> int:
    value, where = _given(given, env, name)
    if value is None:
        return default
    try:
        count = int(str(value).strip())
    except ValueError:
        count = 0
    if count < 1 or isinstance(value, (float, bool)):
        raise ValueError(f"{where}={value!r}: expected a whole number of bytes, at least 1")
    return count


class Guard:
    """One pull's network work: its deadline, its progress, and what the answers must say."""

    def __init__(self, label: str, limits: TransferLimits) -> None:
        self.label, self.limits = label, limits
        self.deadline = time.monotonic() + limits.deadline_s
        self.file: HubFile | None = None
        self.commit: str | None = None
        self.failure: HubAnswerError | None = None
        self.last: tuple[str, int] | None = None  # the last answer: (method, status)
        self._mark = time.monotonic()  # the start of the current no-progress window
        self._bytes = 0  # body bytes received in it

    # --- phases ----------------------------------------------------------------------------------
    @contextlib.contextmanager
    def api(self) -> Iterator[None]:
        """A request to the Hub's API: a JSON answer."""
        with self._phase(None, None):
            yield

    @contextlib.contextmanager
    def download(self, file: HubFile, commit: str) -> Iterator[None]:
        """huggingface_hub downloading ``file`` at ``commit``: its answers must say so."""
        with self._phase(file, commit):
            yield

    @contextlib.contextmanager
    def _phase(self, file: HubFile | None, commit: str | None) -> Iterator[None]:
        _install_hooks()
        self.file, self.commit, self.last = file, commit, None
        self._progress(reset=True)
        token = _ACTIVE.set(self)
        try:
            yield
        except _TOLD:
            raise
        except OSError as error:
            if error.errno is None:  # not the machine's own (a full disk ...): huggingface_hub's, about an answer
                raise self._unusable(error) from error
            raise
        except Exception as error:
            raise self._unusable(error) from error
        finally:
            _ACTIVE.reset(token)
            self.file = self.commit = None

    def _unusable(self, error: Exception) -> HubAnswerError:
        """What to say when huggingface_hub fails on an answer the checks let through (or the guard's own failure)."""
        if self.failure is not None:
            return self.failure
        answer = f" (HTTP {self.last[1]} to {self.last[0]})" if self.last is not None else ""
        cause = error.__cause__ or error.__context__
        because = f"; {type(cause).__name__}: {_first_line(cause)}" if cause is not None else ""
        return HubAnswerError(
            f"{self.where()}: huggingface_hub could not use the Hub's answer{answer}: "
            f"{type(error).__name__}: {_first_line(error)}{because}"
        )

    # --- the rules -------------------------------------------------------------------------------
    def fail(self, message: str) -> NoReturn:
        self.failure = HubAnswerError(message)
        raise self.failure

    def error(self, message: str) -> HubAnswerError:
        """For the gate's checks: a failure, recorded."""
        self.failure = HubAnswerError(message)
        return self.failure

    def where(self) -> str:
        return f"{self.label}: {self.file.name}" if self.file is not None else self.label

    def check(self, wanted: int) -> None:
        """Fail when the deadline has passed, or no progress was made for longer than the window.

        ``wanted``: the body bytes still expected (a request wants more).
        """
        now = time.monotonic()
        if now > self.deadline:
            self.fail(
                f"{self.where()}: the pull ran past its deadline of {self.limits.deadline_s:g} s ({DEADLINE_ENV})"
            )
        if self._bytes >= min(self.limits.stall_bytes, wanted):
            self._progress(reset=True)
        elif now - self._mark > self.limits.stall_s:
            self.fail(
                f"{self.where()}: the Hub sent {self._bytes:,} bytes in {now - self._mark:.0f} s; a pull needs "
                f"{self.limits.stall_bytes:,} bytes (or the rest of the answer) every {self.limits.stall_s:g} s "
                f"({STALL_BYTES_ENV}, {STALL_S_ENV})"
            )

    def _progress(self, reset: bool = False, received: int = 0) -> None:
        if reset:
            self._mark, self._bytes = time.monotonic(), 0
        self._bytes += received

    def timeout(self) -> float:
        """The longest a single wait of the next request may take."""
        return max(min(self.limits.stall_s, self.deadline - time.monotonic()), 0.001)

    # --- the hooks' work ---------------------------------------------------------------------------
    def on_request(self, request: httpx.Request) -> None:
        self.check(wanted=self.limits.stall_bytes)
        cap = self.timeout()
        timeouts = dict(request.extensions.get("timeout") or {})
        for kind in ("connect", "read", "write", "pool"):
            timeouts[kind] = cap if timeouts.get(kind) is None else min(timeouts[kind], cap)
        request.extensions = {**request.extensions, "timeout": timeouts}
        request.headers["Accept-Encoding"] = "identity"

    def on_response(self, response: httpx.Response) -> None:
        self.check(wanted=0)
        self._progress(reset=True)  # an answer is progress
        self.last = (response.request.method, response.status_code)
        limit = body_limit(
            response.request.method,
            response.status_code,
            response.headers,
            self.file,
            self.commit,
            self.label,
            self.error,
        )
        if self.file is not None:
            response.headers.pop(constants.HUGGINGFACE_HEADER_X_XET_HASH, None)
        response.stream = _CountedStream(response.stream, self, limit)

    def on_chunk(self, received: int, left: int) -> None:
        self._progress(received=received)
        self.check(wanted=self._bytes + left)


class _CountedStream(httpx.SyncByteStream):
    """An answer's body as it comes off the socket, counted against its limit and the guard's rules."""

    def __init__(self, stream: Any, guard: Guard, limit: int) -> None:
        self._stream, self._guard, self._limit = stream, guard, limit
        self._received = 0

    def __iter__(self) -> Iterator[bytes]:
        for chunk in self._stream:
            self._received += len(chunk)
            if self._received > self._limit:
                what = "it listed" if self._guard.file is not None else "an answer of the Hub's API may hold"
                self._guard.fail(
                    f"{self._guard.where()}: the Hub sent more than the {self._limit:,} bytes {what}; "
                    "the download was stopped there"
                )
            self._guard.on_chunk(len(chunk), self._limit - self._received)
            yield chunk

    def close(self) -> None:
        self._stream.close()


def _first_line(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return lines[0] if lines else "(no message)"


#: errors of a download that tell a person what happened as they are (see hub.failures)
_TOLD = (HubAnswerError, HfHubHTTPError, LocalEntryNotFoundError, OfflineModeIsEnabled, httpx.TransportError)

# --- the hooks -------------------------------------------------------------------------------------
_ACTIVE: ContextVar[Guard | None] = ContextVar("timm_vitscratch_pull_guard", default=None)
_HOOKS_LOCK = threading.Lock()


def _on_request(request: httpx.Request) -> None:
    guard = _ACTIVE.get()
    if guard is not None:
        guard.on_request(request)


def _on_response(response: httpx.Response) -> None:
    guard = _ACTIVE.get()
    if guard is not None:
        guard.on_response(response)


def _install_hooks() -> None:
    """Put the hooks on huggingface_hub's current client (a new one after ``close_session`` or a fork)."""
    client = get_session()
    with _HOOKS_LOCK:
        hooks = client.event_hooks
        if _on_request in hooks.get("request", ()) and _on_response in hooks.get("response", ()):
            return
        client.event_hooks = {
            "request": [h for h in hooks.get("request", ()) if h is not _on_request] + [_on_request],
            "response": [h for h in hooks.get("response", ()) if h is not _on_response] + [_on_response],
        }
        hooks = client.event_hooks
    if _on_request not in hooks["request"] or _on_response not in hooks["response"]:
        raise RuntimeError("cannot bound the pull's downloads: huggingface_hub's HTTP client refused the event hooks")


@contextlib.contextmanager
def guarded(label: str, limits: TransferLimits) -> Iterator[Guard]:
    """A :class:`Guard` for one pull; an error raised inside becomes its recorded failure, when it has one.

    huggingface_hub may turn a wait that the guard cut short into its own error (a timeout, "cannot find
    the file in the cache"): the guard's own account of what happened replaces it.
    """
    guard = Guard(label, limits)
    try:
        yield guard
    except Exception as error:
        if guard.failure is not None and error is not guard.failure:
            raise guard.failure from None
        if guard.failure is None and isinstance(error, (httpx.TimeoutException, OSError)):
            try:
                guard.check(wanted=guard.limits.stall_bytes)
            except HubAnswerError as why:
                raise why from None
        raise
