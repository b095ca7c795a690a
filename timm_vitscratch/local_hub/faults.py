"""Faults the local Hub can inject into its answers, to test how clients behave when the Hub misbehaves.

A fault matches requests by origin (``"api"`` or ``"storage"``), method and a regular expression on
the path, and answers them instead of the Hub, for a number of ``times`` or until removed. The server
asks its faults in order before routing each request (``LocalHub.faults``); add new kinds by
subclassing :class:`Fault` and overriding :meth:`Fault.respond`.
"""
from __future__ import annotations

import json
import re
import threading
from typing import Any, Optional


class Fault:
    """Base class: decides whether it takes a request; subclasses answer it in ``respond``."""

    def __init__(self, method: Optional[str] = None, path: Optional[str] = None, origin: Optional[str] = None,
                 times: Optional[int] = None) -> None:
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


class HttpErrorFault(Fault):
    """Answer with an HTTP error status (500 by default) and a Hub-style JSON error body."""

    def __init__(self, status: int = 500, message: str = "Internal Error - injected by the local Hub",
                 **match: Any) -> None:
        super().__init__(**match)
        self.status = status
        self.message = message

    def respond(self, handler: Any) -> None:
        body = json.dumps({"error": self.message}).encode()
        handler.send_response(self.status)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(body)))
        handler.send_header("X-Error-Message", self.message)
        handler.end_headers()
        if handler.command != "HEAD":
            handler.wfile.write(body)
