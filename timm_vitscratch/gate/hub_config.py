"""A Hub repo's ``config.json``, at the one commit it was fetched from, parsed with the JSON bounds.

``register_tag_from_hub`` and ``vitscratch summary`` / ``attention`` of ``hf-hub:ORG/NAME`` read a repo's
config before timm does, to check it (an architecture of ours, data fields only) and to pin what timm then
loads to the same commit. huggingface_hub's ``hf_hub_download`` fetches the file into its cache as
``.../snapshots/<commit>/config.json`` (it refuses to build that path outside the cache); the commit must be
40 hex characters, and the file is read by :mod:`.json_data`, bounded like every other side file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from huggingface_hub import hf_hub_download

from ..version import __version__
from .files import ErrorType
from .hub_answers import COMMIT_ID
from .json_data import read_json_object

CONFIG_NAME = "config.json"


def read_hub_config(
    repo_id: str, revision: str | None, error: ErrorType, token: str | None = None
) -> tuple[str, dict[str, Any]]:
    """``(commit, config)``: the commit ``revision`` (a branch, tag or commit; None: ``main``) resolves to, and
    the repo's ``config.json`` there as a JSON object. Offline (``HF_HUB_OFFLINE=1``) the cached copy is read.

    huggingface_hub's own errors (no such repo or revision, no network) pass through; a commit id that is not
    40 hex characters or a config that is not a bounded JSON object raise ``error``.
    """
    path = Path(
        hf_hub_download(
            repo_id,
            CONFIG_NAME,
            revision=revision,
            token=token,
            library_name="timm_vitscratch",
            library_version=__version__,
        )
    )
    commit = path.parent.name
    if not COMMIT_ID.fullmatch(commit) or path.parent.parent.name != "snapshots":
        raise error(
            f"{repo_id}@{revision or 'main'}: the Hub's answer put {CONFIG_NAME} at {str(path)[-160:]!r}, not in "
            "the cache's snapshot of a commit (a commit id is 40 hex characters)"
        )
    return commit, read_json_object(path, error)
