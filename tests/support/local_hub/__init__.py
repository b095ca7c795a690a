"""A local stand-in for the Hugging Face Hub, for tests and the demo — not a Hub and not for production.

It speaks the Hub's HTTP protocol for exactly the calls the real ``huggingface_hub`` client makes
to push and pull a model (create repo, preupload, LFS batch + PUT upload, NDJSON commit, branches,
model info, tree listing, paths info, ``/resolve`` with ``ETag`` / ``X-Repo-Commit`` / ``X-Linked-*`` headers and
a 302 to a storage origin) and stores repositories on disk. It listens on 127.0.0.1, on ports the
OS picks. Clients reach it with ``HF_ENDPOINT`` and must set ``HF_HUB_DISABLE_XET=1`` (it has no
Xet storage); :meth:`LocalHub.client_env` gives the whole environment.
"""

from __future__ import annotations

import os
import tempfile
import threading
from pathlib import Path
from typing import Any

from tests.support.local_hub.faults import (
    Answer,
    AnswerFault,
    AnyFault,
    CorruptBodyFault,
    CutBodyFault,
    DelayFault,
    DropConnectionFault,
    Fault,
    GateFault,
    HttpErrorFault,
)
from tests.support.local_hub.server import HubRequestHandler, _Server
from tests.support.local_hub.store import RepoStore

__all__ = [
    "Answer",
    "AnswerFault",
    "CorruptBodyFault",
    "CutBodyFault",
    "DelayFault",
    "DropConnectionFault",
    "Fault",
    "GateFault",
    "HttpErrorFault",
    "LocalHub",
    "RepoStore",
    "serve",
]


class LocalHub:
    """The local Hub: an API origin and a storage origin on 127.0.0.1, repos under ``root``.

    ``token``: when set, writes need ``Authorization: Bearer <token>`` (what the client sends from
    ``HF_TOKEN``) and private repos are invisible without it. ``faults`` are consulted before each
    request (see :mod:`.faults`); ``requests`` records ``(origin, method, path, status)``, and
    ``user_agents`` the ``User-Agent`` header of each, in the same order.
    """

    def __init__(
        self,
        root: str | os.PathLike[str] | None = None,
        token: str | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        if root is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="local-hub-")
            root = self._tmp.name
        self.root = Path(root)
        self.store = RepoStore(self.root)
        self.token = token
        self.faults: list[Fault] = []
        self.requests: list[tuple[str, str, str, int]] = []
        self.user_agents: list[str] = []
        self._lock = threading.Lock()
        self._api = _Server((host, port), HubRequestHandler, self, "api")
        self._storage = _Server((host, 0), HubRequestHandler, self, "storage")
        self.url = f"http://{host}:{self._api.server_address[1]}"
        self.storage_url = f"http://{host}:{self._storage.server_address[1]}"
        self._threads: list[threading.Thread] = []

    def start(self) -> LocalHub:
        for server in (self._api, self._storage):
            thread = threading.Thread(
                target=server.serve_forever,
                kwargs={"poll_interval": 0.1},
                name=f"local-hub-{server.origin}",
                daemon=True,
            )
            thread.start()
            self._threads.append(thread)
        return self

    def stop(self) -> None:
        """Stop serving and cut open connections: afterwards every request is refused."""
        for server in (self._api, self._storage):
            server.shutdown()
            server.server_close()
            server.close_connections()
        for thread in self._threads:
            thread.join(timeout=5)
        self._threads.clear()
        if self._tmp is not None:
            self._tmp.cleanup()

    def __enter__(self) -> LocalHub:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- faults and the request log ------------------------------------------------------------
    def inject_error(self, status: int = 500, **match: Any) -> HttpErrorFault:
        """Answer matching requests (``method=``, ``path=`` regex, ``origin=``, ``times=``) with ``status``."""
        return self.inject(HttpErrorFault(status, **match))

    def inject(self, fault: AnyFault) -> AnyFault:
        """Add any :class:`Fault` (delay, dropped connection, cut or corrupted body ...); returns it."""
        self.faults.append(fault)
        return fault

    def fault_for(self, origin: str, method: str, path: str) -> Fault | None:
        for fault in list(self.faults):
            if fault.take(origin, method, path):
                return fault
        return None

    def record(self, origin: str, method: str, path: str, status: int, user_agent: str = "") -> None:
        with self._lock:
            self.requests.append((origin, method, path, status))
            self.user_agents.append(user_agent)

    def client_env(self, hf_home: os.PathLike, token: str | None = None) -> dict[str, str]:
        """Environment for a ``huggingface_hub`` client of this server, with its cache under ``hf_home``."""
        return self.client_env_for(self.url, hf_home, token)

    @staticmethod
    def client_env_for(endpoint: str, hf_home: os.PathLike, token: str | None = None) -> dict[str, str]:
        env = {
            "HF_ENDPOINT": endpoint,
            "HF_HOME": str(hf_home),
            "HF_HUB_CACHE": str(Path(hf_home) / "hub"),
            "HF_HUB_DISABLE_XET": "1",
            "HF_HUB_DISABLE_TELEMETRY": "1",
            "HF_HUB_DISABLE_PROGRESS_BARS": "1",
        }
        if token is not None:
            env["HF_TOKEN"] = token
        return env


def serve(root: os.PathLike | None = None, port: int = 0, token: str | None = None) -> None:
    """Run a local Hub in the foreground until Ctrl-C or SIGTERM (``python -m tests.support.local_hub`` from the repository root)."""
    import signal
    import time

    def stop_on_term(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop_on_term)  # stop cleanly (and remove a temporary root) on kill
    hub = LocalHub(root, token=token, port=port).start()
    where = str(hub.root) if root is not None else f"{hub.root} (temporary, deleted on exit)"
    exports = f"export HF_ENDPOINT={hub.url} HF_HUB_DISABLE_XET=1" + (f" HF_TOKEN={token}" if token else "")
    print(
        f"local Hub (a test/demo server, not huggingface.co) storing repos in {where}\n"
        f"  API      {hub.url}\n  storage  {hub.storage_url}\n"
        f"point huggingface_hub / timm / vitscratch at it with:\n  {exports}\nCtrl-C stops it.",
        flush=True,
    )
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        hub.stop()
