"""What a pull reads from, adds to and takes out of the Hugging Face cache.

The cache is huggingface_hub's, in the layout the Hub documents for every client that shares it
(https://huggingface.co/docs/hub/local-cache): ``<cache>/models--<org>--<name>/snapshots/<commit>/<file>``,
and ``refs/<branch>`` holding a branch's commit id. huggingface_hub locks it, downloads into it and keeps its
partial downloads (a killed download's ``.incomplete`` file is never read as the file; ``hf cache prune``
removes it). A pull downloads at a commit id, so it records the branch it asked for in ``refs/`` itself
(:func:`record_revision`: what an offline pull or ``hf-hub:`` load reads). A commit id read back from the cache
passes the gate like one from the Hub. Everything else goes through huggingface_hub's public cache API
(``try_to_load_from_cache``, ``scan_cache_dir``, ``HFCacheInfo.delete_files``).
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
from collections.abc import Collection, Sequence
from pathlib import Path

from huggingface_hub import constants, scan_cache_dir, try_to_load_from_cache

from ..gate.files import ErrorType
from ..gate.hub_answers import commit_id

#: a branch or tag name that is safe to use as a path under ``refs/`` (no ``..``, nothing absolute)
_REF_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]*(/[A-Za-z0-9_][A-Za-z0-9._-]*)*")


def repo_folder(repo_id: str) -> Path:
    """``<cache>/models--<org>--<name>``, in the cache huggingface_hub uses now (``HF_HUB_CACHE``, resolved as it does)."""
    return Path(constants.HF_HUB_CACHE).expanduser().resolve() / ("models--" + repo_id.replace("/", "--"))


def snapshot_dir(repo_id: str, commit: str) -> Path:
    """Where huggingface_hub puts the files of ``repo_id`` at ``commit`` (a commit id checked by the gate)."""
    return repo_folder(repo_id) / "snapshots" / commit


def cached_snapshot(repo_id: str, revision: str, names: Sequence[str], error: ErrorType) -> Path | None:
    """The cached snapshot of ``repo_id`` at ``revision`` that holds all ``names``; None if there is none.

    A branch name is resolved through the cache's ``refs/``, whose commit id must be one (``error`` if not).
    """
    found = try_to_load_from_cache(repo_id, names[0], revision=revision)
    if not isinstance(found, str):
        return None
    snapshot = Path(found).parent
    commit = commit_id(snapshot.name, f"{repo_id}@{revision}: the cache's commit for {revision!r}", error)
    if snapshot != snapshot_dir(repo_id, commit) or not all((snapshot / name).is_file() for name in names):
        return None
    return snapshot


def record_revision(repo_id: str, revision: str, commit: str) -> None:
    """Point the cache's ``refs/<revision>`` at ``commit``, as huggingface_hub does when it downloads a branch.

    Nothing to do for a commit id, or for a name that would not stay under ``refs/``.
    """
    if revision == commit or ".." in revision or not _REF_NAME.fullmatch(revision):
        return
    ref = repo_folder(repo_id) / "refs" / revision
    ref.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(OSError):
        if ref.read_bytes() == commit.encode():
            return
    staged = ref.with_name(f".{ref.name}.{os.getpid()}-{secrets.token_hex(4)}.tmp")
    try:
        staged.write_bytes(commit.encode())
        os.replace(staged, ref)  # readers see the old commit id or the new one, whole
    finally:
        with contextlib.suppress(FileNotFoundError):
            staged.unlink()


def forget_tree_listing(repo_id: str, commit: str) -> None:
    """Remove the file list huggingface_hub's ``snapshot_download`` cached for ``commit`` (``trees/<commit>.json``).

    With ``hf_xet`` installed, ``hf_hub_download`` takes a file's hash and size from that list instead of
    asking the Hub, and its sha256 names the blob: values an earlier ``snapshot_download`` took from the
    Hub unchecked. Without it, every file's metadata comes from an answer the pull checks. (The list only
    saves a request; huggingface_hub writes it again when it needs it.)
    """
    with contextlib.suppress(FileNotFoundError):
        (repo_folder(repo_id) / "trees" / f"{commit}.json").unlink()


def forget(repo_id: str, snapshot: Path, names: Collection[str]) -> None:
    """Delete the files ``names`` of ``snapshot`` from the cache (the blob too, unless another file uses it)."""
    cache = scan_cache_dir(snapshot.parents[2])  # <cache>/<repo folder>/snapshots/<commit>
    files = [
        file
        for repo in cache.repos
        if repo.repo_id == repo_id and repo.repo_type == "model"
        for revision in repo.revisions
        if revision.commit_hash == snapshot.name
        for file in revision.files
        if file.file_name in names
    ]
    cache.delete_files(*files).execute()
