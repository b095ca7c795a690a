"""A failed push, pull or ``hf-hub:`` load told to a person: one sentence on what went wrong and what to check.

The failures are ``huggingface_hub``'s own exceptions (``RepositoryNotFoundError``, ``RevisionNotFoundError``,
``LocalEntryNotFoundError``, ``HfHubHTTPError``), its HTTP library's transport errors, our
:class:`HubAnswerError` for a Hub answer that a pull refuses, and our ``ValueError`` / ``OSError`` for bad input.
"""

from __future__ import annotations

import re

from huggingface_hub import constants, is_offline_mode
from huggingface_hub.constants import DEFAULT_REVISION
from huggingface_hub.errors import (
    HfHubHTTPError,
    LocalEntryNotFoundError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from huggingface_hub.utils import httpx  # the HTTP library huggingface_hub uses, as it exports it (httpx2 in 2.x)


class HubAnswerError(ValueError):
    """A Hub answer a pull refuses (malformed, hostile, larger than announced) or a download that stalled or
    ran past its deadline. The message names the repo and what was wrong; nothing was installed."""


#: transport errors of a connection that was open and then lost (rather than never made)
_CONNECTION_LOST = (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError)


def describe_hub_error(error: BaseException, repo_id: str, revision: str | None = None) -> str:
    """One clear sentence for a failed push/pull: what went wrong, and what to check."""
    where = constants.ENDPOINT  # the Hub every HfApi here talks to (hub_api gives none another endpoint)
    at = f"{repo_id}@{revision or DEFAULT_REVISION}"
    if _asked_for_xet(error):
        return (
            f"the Hub at {where} has no Xet storage ({str(error).splitlines()[0]}): set HF_HUB_DISABLE_XET=1 "
            "so that huggingface_hub uploads through classic LFS"
        )
    if isinstance(error, RevisionNotFoundError):
        return f"revision {revision!r} not found in {repo_id} at {where} (a branch name or a full commit id)"
    if isinstance(error, RepositoryNotFoundError):
        return (
            f"repository {repo_id!r} not found at {where} (check the id, HF_ENDPOINT, "
            "and HF_TOKEN for a private repository)"
        )
    if isinstance(error, LocalEntryNotFoundError):
        cause = error.__cause__ or error.__context__
        not_cached = f"{at} is not in the local cache (HF_HUB_CACHE)"
        if isinstance(cause, HfHubHTTPError):
            return f"{describe_hub_error(cause, repo_id, revision)}; {not_cached}"
        detail = f": {type(cause).__name__}: {str(cause).splitlines()[0]}" if cause else f": {error}"
        hint = "" if is_offline_mode() else "; with HF_HUB_OFFLINE=1 a pull uses only the cache and fails at once"
        return f"cannot get {at} from {where}{detail}; {not_cached}{hint}"
    if isinstance(error, HfHubHTTPError):
        status = error.response.status_code if error.response is not None else "?"
        message = error.server_message or str(error).splitlines()[0]
        return f"the Hub at {where} answered HTTP {status} for {repo_id}: {message.strip()}"
    if isinstance(error, _CONNECTION_LOST):
        return (
            f"the Hub at {where} dropped the connection ({type(error).__name__}: {error}) and "
            "huggingface_hub's retries, where it makes any, did not get through; try again later"
        )
    if isinstance(error, httpx.TransportError):
        return f"cannot reach the Hub at {where}: {type(error).__name__}: {error}"
    return str(error)


def _asked_for_xet(error: BaseException) -> bool:
    """A refused request for a Xet token: huggingface_hub tried to move the files through Xet storage.

    hf_xet raises a plain ``ConnectionError`` for it, so only the token URL in its message tells.
    """
    return re.search(r"/xet-(write|read)-token/", str(error)) is not None


def is_hub_failure(error: BaseException) -> bool:
    """Errors push/pull report to a person (bad input, Hub answers, network) rather than as a crash."""
    return isinstance(error, (ValueError, OSError, httpx.TransportError))
