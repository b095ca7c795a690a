"""What a pull takes out of the Hugging Face cache: partial downloads a killed process left, damaged files.

The cache is huggingface_hub's, in the layout the Hub documents for every client that shares it
(https://huggingface.co/docs/hub/local-cache): ``<cache>/<repo folder>/snapshots/<commit>/<file>``, and a
lock file ``<cache>/.locks/<repo folder>/<blob hash>.lock`` for each blob being downloaded. huggingface_hub
takes filelock's ``FileLock`` on that file while it downloads; :func:`~timm_vitscratch.install.held` asks
with filelock's ``lock_descriptor``, which filelock documents to contend with that lock. Everything else
goes through huggingface_hub's public cache API (``scan_cache_dir``, ``HFCacheInfo.delete_files``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Collection
from pathlib import Path

from huggingface_hub import scan_cache_dir
from huggingface_hub.errors import CacheNotFound

from ..install import held


def cache_dir_of(snapshot: Path) -> Path:
    """The cache that holds ``snapshot`` (``<cache>/<repo folder>/snapshots/<commit>``)."""
    return snapshot.parents[2]


def remove_abandoned_downloads(repo_id: str, cache_dir: Path) -> None:
    """Delete the partial downloads of ``repo_id`` that a killed process left in the Hugging Face cache.

    huggingface_hub lists them (``HFCacheInfo.incomplete_files``) but never resumes or removes another
    process's partial file; one that no running download writes is removed here.
    """
    try:
        cache = scan_cache_dir(cache_dir)
    except CacheNotFound:
        return
    folders = [r.repo_path for r in cache.repos if r.repo_id == repo_id and r.repo_type == "model"]
    for partial in cache.incomplete_files:
        path = partial.file_path
        if any(folder in path.parents for folder in folders) and not download_in_progress(path):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()


def download_in_progress(partial: Path) -> bool:
    """Whether a running download writes ``partial`` (``<repo folder>/blobs/<blob hash>.<...>.incomplete``).

    A lock file that is not there means the layout changed: the partial file is kept (never break a
    running download). tests/hub/test_pull_interrupted_and_concurrent.py checks both answers against the
    installed huggingface_hub.
    """
    repo_folder = partial.parent.parent
    lock_path = repo_folder.parent / ".locks" / repo_folder.name / f"{partial.name.split('.')[0]}.lock"
    return not lock_path.is_file() or held(lock_path)


def forget(repo_id: str, snapshot: Path, names: Collection[str]) -> None:
    """Delete the files ``names`` of ``snapshot`` from the cache (the blob too, unless another file uses it)."""
    cache = scan_cache_dir(cache_dir_of(snapshot))
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
