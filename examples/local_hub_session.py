"""Point this process's Hugging Face client at a local Hub server for a while, then put everything back.

``huggingface_hub`` reads its settings (``HF_ENDPOINT``, ``HF_HOME``, ``HF_HUB_DISABLE_XET`` ...) from
the environment once, at import, into ``huggingface_hub.constants``; timm's ``hf-hub:`` loading and
``vitscratch push`` / ``pull`` go through that client. Inside :func:`local_hub_session` both the
environment and those settings say: this server, a temporary ``HF_HOME`` (the user's cache is never
touched), the classic LFS upload path (the local server has no Xet storage), no token sent and no
offline mode. On exit the environment and the settings are restored exactly.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path

from huggingface_hub import constants
from huggingface_hub.utils import are_progress_bars_disabled, disable_progress_bars, enable_progress_bars

from tests.support.local_hub import LocalHub

#: user settings that would redirect or stop this client: removed for the session
_CLEARED = (
    "HF_TOKEN",
    "HUGGING_FACE_HUB_TOKEN",
    "HF_TOKEN_PATH",
    "HF_HUB_OFFLINE",
    "TRANSFORMERS_OFFLINE",
    "HF_ASSETS_CACHE",
    "HF_XET_CACHE",
    "HUGGINGFACE_HUB_CACHE",
    "HUGGINGFACE_ASSETS_CACHE",
    "HF_OIDC_RESOURCE",
)


@contextlib.contextmanager
def local_hub_session(root: os.PathLike | None = None) -> Iterator[LocalHub]:
    """Start a :class:`LocalHub` on 127.0.0.1 (repos under ``root``, default a temporary directory) and
    point this process's ``huggingface_hub`` at it, with its cache in a temporary ``HF_HOME``."""
    with tempfile.TemporaryDirectory(prefix="vitscratch-hf-home-") as hf_home, LocalHub(root) as hub:
        env: dict[str, str] = hub.client_env(Path(hf_home))
        env["HF_HUB_DISABLE_IMPLICIT_TOKEN"] = "1"  # a user's Hub token is never sent to the local server
        saved_env = {key: os.environ.get(key) for key in (*env, *_CLEARED)}
        saved_settings = {key: value for key, value in vars(constants).items() if key.isupper()}
        bars_were_disabled = are_progress_bars_disabled()
        try:
            for key in _CLEARED:
                os.environ.pop(key, None)
            os.environ.update(env)
            importlib.reload(constants)  # huggingface_hub derives every setting from the new environment
            with warnings.catch_warnings():  # it warns when HF_HUB_DISABLE_PROGRESS_BARS overrides this
                warnings.simplefilter("ignore")
                disable_progress_bars()  # the example draws its own
            yield hub
        finally:
            for key, value in saved_env.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
            for key, value in saved_settings.items():
                setattr(constants, key, value)
            for key in [k for k in vars(constants) if k.isupper() and k not in saved_settings]:
                delattr(constants, key)
            if not bars_were_disabled:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    enable_progress_bars()


def request_summary(hub: LocalHub) -> dict[str, int]:
    """How many requests of each kind the client made (``"POST /api/models/*/preupload": 1`` ...)."""
    counts: dict[str, int] = {}
    for _, method, path, _ in hub.requests:
        key = f"{method} {_route(path)}"
        counts[key] = counts.get(key, 0) + 1
    return counts


def _route(path: str) -> str:
    """The Hub endpoint a request path belongs to (``/api/models/*/preupload``, ``/*/resolve`` ...)."""
    parts = path.split("?")[0].strip("/").split("/")
    if parts[:2] == ["api", "models"]:
        return f"/api/models/*/{parts[4]}" if len(parts) > 4 else "/api/models/*"
    if parts[0] == "api":
        return "/" + "/".join(parts[:2])
    if len(parts) > 2 and parts[2] == "resolve":
        return "/*/resolve"
    if path.endswith("/lfs/objects/batch"):
        return "/*.git/info/lfs/objects/batch"
    return f"/{parts[0]}/* (storage)" if parts[0] in ("lfs", "upload") else path
