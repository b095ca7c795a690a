"""What the Hub lists at a revision: its commit id and the files of a model directory, through the gate.

The first two requests of a pull, and of timm's ``hf-hub:`` weights load (:mod:`.timm_weights`): the
revision lookup (``GET /api/models/<repo>/revision/<rev>``) and the file list at the commit it answered
(``GET /api/models/<repo>/tree/<commit>``), each inside the :class:`~.transfer.Guard`'s API phase and each
answer read by :mod:`timm_vitscratch.gate.hub_answers` before a path, a size or a hash is taken from it;
and, once downloaded, which files hold other bytes than the list's hashes say.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from urllib.parse import quote

from huggingface_hub import constants, get_session
from huggingface_hub.utils import build_hf_headers, hf_raise_for_status

from ..files import sha256_file
from ..gate.files import MAX_TEXT_BYTES
from ..gate.hub_answers import COMMIT_ID, MAX_ANSWER_BYTES, MAX_WEIGHTS_BYTES, HubFile, repo_files, revision_commit
from ..model_dir import CONFIG_NAME, WEIGHTS_NAME
from ..version import __version__
from .failures import HubAnswerError
from .transfer import Guard

#: who makes the requests, in each one's user-agent (``timm_vitscratch/<version>; hf_hub/...``)
LIBRARY_NAME = "timm_vitscratch"
README_NAME = "README.md"
#: the files of a model directory a pull takes from the Hub (name -> most bytes it may hold), and those it needs
PULL_FILES = {CONFIG_NAME: MAX_ANSWER_BYTES, WEIGHTS_NAME: MAX_WEIGHTS_BYTES, README_NAME: MAX_TEXT_BYTES}
PULL_REQUIRED = (CONFIG_NAME, WEIGHTS_NAME)


def listing(repo_id: str, revision: str, token: str | None, label: str, guard: Guard) -> tuple[str, dict[str, HubFile]]:
    """The revision's commit id and the files of a model directory the Hub lists at it, through the gate.

    A revision that is itself a commit id must be answered with that commit. Errors: huggingface_hub's
    (no such repo or revision, an HTTP error), the transport's, or :class:`HubAnswerError` naming ``label``.
    """
    headers = build_hf_headers(token=token, library_name=LIBRARY_NAME, library_version=__version__)
    api = f"{constants.ENDPOINT}/api/models/{repo_id}"
    with guard.api():
        answer = get_session().get(f"{api}/revision/{quote(revision, safe='')}", headers=headers)
        hf_raise_for_status(answer)
    commit = revision_commit(answer.content, label, HubAnswerError)
    if COMMIT_ID.fullmatch(revision) and commit != revision:
        raise HubAnswerError(f"{label}: the Hub answered commit {commit} for commit {revision}; expected the same")
    with guard.api():
        answer = get_session().get(f"{api}/tree/{commit}", headers=headers)
        hf_raise_for_status(answer)
    return commit, repo_files(answer.content, label, PULL_FILES, PULL_REQUIRED, HubAnswerError)


def damaged_files(snapshot: Path, files: dict[str, HubFile]) -> dict[str, tuple[str, str, str]]:
    """The files of ``snapshot`` whose bytes are not what the Hub lists: name -> (algorithm, Hub's hash, ours)."""
    damaged = {}
    for name, listed in files.items():
        path = snapshot / name
        if listed.sha256 is not None:
            algorithm, expected, actual = "sha256", listed.sha256, sha256_file(path)
        else:
            algorithm, expected, actual = "git-sha1", listed.blob_id, git_blob_id(path)
        if actual != expected:
            damaged[name] = (algorithm, expected, actual)
    return damaged


def git_blob_id(path: Path) -> str:
    """The git blob id of a file (sha1 of ``blob <size>\\0`` and its bytes), the Hub's hash of a non-LFS file."""
    digest = hashlib.sha1(b"blob %d\0" % path.stat().st_size)
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()
