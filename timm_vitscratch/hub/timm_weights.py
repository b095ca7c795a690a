"""The weights timm loads from the Hub for a model of ours, fetched first as a pull fetches them.

``timm.create_model("hf-hub:ORG/NAME[@rev]", pretrained=True)`` and a tag whose ``hf_hub_id`` names a Hub
repo (``register_tag_from_hub``'s, the zoo's) would have timm's loader call ``hf_hub_download`` itself, with
nothing checking the answers. Our entry function (:mod:`timm_vitscratch.models.variants`) calls
:func:`fetch_weights` first (through the hook of :mod:`timm_vitscratch.models.pretrained`, which the package
sets up): the revision's commit and the file list through the gate (:mod:`.listing`, as a pull takes them),
then ``model.safetensors`` at that commit inside the pull's :class:`~.transfer.Guard`, with the same limits
(``VITSCRATCH_PULL_*``). timm is then handed the repo at that commit, and finds the file in the cache without
asking the Hub again: the file list, the answers' headers and the bytes all agree.

A refused answer, a stalled or overlong download raises :class:`~.failures.HubAnswerError` (a
``ValueError``) naming the repo. Where the Hub cannot be asked (no connection, an HTTP error), the cached
snapshot of the revision is used, as huggingface_hub would use it; without one the error passes on.
"""

from __future__ import annotations

import os
from pathlib import Path

from huggingface_hub import constants, hf_hub_download
from huggingface_hub.errors import HfHubHTTPError, OfflineModeIsEnabled, RevisionNotFoundError
from huggingface_hub.utils import httpx, validate_repo_id

from ..model_dir import WEIGHTS_NAME
from ..version import __version__
from .cache import cached_snapshot, forget, forget_tree_listing, record_revision
from .failures import HubAnswerError
from .listing import LIBRARY_NAME, damaged_files, listing
from .transfer import TransferLimits, guarded

#: the errors after which the cache is asked instead of the Hub (as a pull does)
_UNREACHABLE = (httpx.ConnectError, httpx.TimeoutException, OfflineModeIsEnabled, HfHubHTTPError)


def fetch_weights(repo_id: str, revision: str | None, cache_dir: str | os.PathLike[str] | None = None) -> str:
    """Put ``repo_id``'s ``model.safetensors`` at ``revision`` (None: ``main``) into the Hugging Face cache
    (``cache_dir``, else huggingface_hub's), through the gate and the guard; returns the commit id it is at."""
    validate_repo_id(repo_id)
    revision = revision or constants.DEFAULT_REVISION
    label = f"{repo_id}@{revision}"
    cache = Path(cache_dir if cache_dir is not None else constants.HF_HUB_CACHE).expanduser().resolve()
    default_cache = cache_dir is None
    with guarded(label, TransferLimits.resolve()) as guard:
        try:
            commit, files = listing(repo_id, revision, None, label, guard)
        except _UNREACHABLE as error:
            if isinstance(error, (httpx.ProxyError, RevisionNotFoundError)) or not default_cache:
                raise
            snapshot = cached_snapshot(repo_id, revision, (WEIGHTS_NAME,), HubAnswerError)
            if snapshot is None:
                raise
            return snapshot.name
        listed = files[WEIGHTS_NAME]
        expected = cache / ("models--" + repo_id.replace("/", "--")) / "snapshots" / commit / WEIGHTS_NAME
        cached = expected.is_file()
        if default_cache:
            forget_tree_listing(repo_id, commit)
        with guard.download(listed, commit):
            path = hf_hub_download(
                repo_id,
                WEIGHTS_NAME,
                revision=commit,
                cache_dir=None if cache_dir is None else Path(cache_dir),
                etag_timeout=guard.timeout(),
                library_name=LIBRARY_NAME,
                library_version=__version__,
            )
    if Path(path) != expected:  # what the checked answers allow, and nothing else
        raise HubAnswerError(f"{label}: huggingface_hub put {WEIGHTS_NAME} at {path}, not in {expected.parent}")
    damaged = {} if cached else damaged_files(expected.parent, {WEIGHTS_NAME: listed})
    if damaged:
        forget(repo_id, expected.parent, damaged)  # never leave other bytes in the cache under the Hub's hash
        algorithm, hub_hash, ours = damaged[WEIGHTS_NAME]
        raise HubAnswerError(
            f"{label}: {WEIGHTS_NAME} arrived damaged: the Hub lists its {algorithm} as {hub_hash}, the bytes "
            f"received have {ours}; they were removed from the cache"
        )
    if default_cache:
        record_revision(repo_id, revision, commit)
    return commit
