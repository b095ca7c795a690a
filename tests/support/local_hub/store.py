"""On-disk repositories of the local Hub: commits, branches, git blobs and LFS objects.

Layout under ``root``::

    lfs/<sha256>                       LFS objects (content addressed, shared by all repos)
    blobs/<git-sha1>                   contents of regular (non-LFS) files
    repos/<namespace>/<name>/repo.json visibility, creation date and branches {name: commit id}
    repos/<namespace>/<name>/commits/<commit-id>.json   one commit: parent, message, date, full file tree

Commits are immutable once written; ``repo.json`` is replaced atomically, so a failed commit
leaves the repository as it was.
"""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import fnmatch
import hashlib
import json
import os
import re
import tempfile
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from timm_vitscratch.files import atomic_write

DEFAULT_BRANCH = "main"
#: Files above this size go through LFS whatever their name (the Hub's limit for regular files).
REGULAR_FILE_LIMIT = 10 * 1024 * 1024
#: Patterns a new repository's ``.gitattributes`` tracks with LFS (weights and archives).
LFS_PATTERNS = (
    "*.safetensors",
    "*.bin",
    "*.pt",
    "*.pth",
    "*.ckpt",
    "*.npz",
    "*.npy",
    "*.h5",
    "*.onnx",
    "*.msgpack",
    "*.tar.gz",
    "*.zip",
)
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}$")
_COMMIT_ID = re.compile(r"^[0-9a-f]{40}$")
_BRANCH = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,199}$")


class HubError(Exception):
    """An error answered to the client as the Hub does: status, ``X-Error-Code`` and a JSON message."""

    def __init__(
        self, status: int, message: str, code: str | None = None, headers: dict[str, str] | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code
        self.headers = headers or {}


def repo_not_found() -> HubError:
    return HubError(404, "Repository not found", "RepoNotFound")


def revision_not_found(revision: str) -> HubError:
    return HubError(404, f"Invalid rev id: {revision}", "RevisionNotFound")


def entry_not_found(commit_id: str) -> HubError:
    return HubError(404, "Entry not found", "EntryNotFound", {"X-Repo-Commit": commit_id})


def git_blob_id(data: bytes) -> str:
    """git's object id of a blob: sha1 over ``blob <size>\\0`` and the content."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def lfs_pointer(sha256: str, size: int) -> bytes:
    """The small text file git stores in place of an LFS object."""
    return f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\nsize {size}\n".encode()


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def check_repo_id(repo_id: str) -> tuple[str, str]:
    parts = repo_id.split("/")
    if len(parts) != 2 or not all(_NAME.match(p) for p in parts) or any(".." in p for p in parts):
        raise HubError(400, f"Invalid repo id {repo_id!r}: expected 'namespace/name' (letters, digits, '-', '_', '.')")
    return parts[0], parts[1]


def check_path(path: str) -> str:
    segments = path.split("/")
    if not path or path.startswith("/") or "\\" in path or any(s in ("", ".", "..") for s in segments):
        raise HubError(400, f"Invalid path in repo: {path!r}")
    return path


class RepoStore:
    """Model repositories stored under ``root``; safe to use from several server threads."""

    def __init__(self, root: os.PathLike) -> None:
        self.root = Path(root)
        for sub in ("lfs", "blobs", "repos"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        self._lock = threading.RLock()

    # --- repositories and revisions ------------------------------------------------------------
    def _repo_dir(self, repo_id: str) -> Path:
        namespace, name = check_repo_id(repo_id)
        return self.root / "repos" / namespace / name

    def repo(self, repo_id: str) -> dict[str, Any]:
        """The repository record (``private``, ``created_at``, ``refs``), or RepoNotFound."""
        path = self._repo_dir(repo_id) / "repo.json"
        try:
            return json.loads(path.read_text())
        except FileNotFoundError:
            raise repo_not_found() from None

    def _save_repo(self, repo_id: str, record: dict[str, Any]) -> None:
        with atomic_write(self._repo_dir(repo_id) / "repo.json", "w") as handle:
            json.dump(record, handle, indent=1)

    def create_repo(self, repo_id: str, private: bool) -> None:
        """Create a repository whose first commit holds a ``.gitattributes`` (as the Hub's do)."""
        with self._lock:
            directory = self._repo_dir(repo_id)
            if (directory / "repo.json").exists():
                raise HubError(409, "You already created this model repo")
            (directory / "commits").mkdir(parents=True, exist_ok=True)
            attributes = "".join(f"{p} filter=lfs diff=lfs merge=lfs -text\n" for p in LFS_PATTERNS).encode()
            files = {".gitattributes": self._store_regular(attributes)}
            commit_id = self._write_commit(repo_id, None, "initial commit", "", files)
            self._save_repo(repo_id, {"private": private, "created_at": _now(), "refs": {DEFAULT_BRANCH: commit_id}})

    def resolve(self, repo_id: str, revision: str | None) -> dict[str, Any]:
        """The commit a branch name or a commit id points at, or RevisionNotFound."""
        record = self.repo(repo_id)
        revision = revision or DEFAULT_BRANCH
        commit_id = record["refs"].get(revision)
        if commit_id is None and _COMMIT_ID.match(revision):
            commit_id = revision
        path = self._repo_dir(repo_id) / "commits" / f"{commit_id}.json"
        if commit_id is None or not path.is_file():
            raise revision_not_found(revision)
        return json.loads(path.read_text())

    def create_branch(self, repo_id: str, branch: str, starting_point: str | None) -> None:
        if not _BRANCH.match(branch) or ".." in branch or _COMMIT_ID.match(branch):
            raise HubError(400, f"Invalid branch name {branch!r}")
        with self._lock:
            record = self.repo(repo_id)
            if branch in record["refs"]:
                raise HubError(409, f"Reference already exists: refs/heads/{branch}")
            record["refs"][branch] = self.resolve(repo_id, starting_point)["id"]
            self._save_repo(repo_id, record)

    # --- file contents -------------------------------------------------------------------------
    def _store_regular(self, data: bytes) -> dict[str, Any]:
        blob_id = git_blob_id(data)
        path = self.root / "blobs" / blob_id
        if not path.exists():
            with atomic_write(path) as handle:
                handle.write(data)
        return {"oid": blob_id, "size": len(data), "lfs": None}

    def lfs_object(self, sha256: str) -> Path:
        if not re.fullmatch(r"[0-9a-f]{64}", sha256):
            raise HubError(400, f"Invalid LFS object id {sha256!r}")
        return self.root / "lfs" / sha256

    def has_lfs_object(self, sha256: str, size: int | None = None) -> bool:
        path = self.lfs_object(sha256)
        return path.is_file() and (size is None or path.stat().st_size == size)

    def put_lfs_object(self, sha256: str, chunks: Iterable[bytes]) -> int:
        """Store an uploaded LFS object; refuses content whose sha256 is not the announced one."""
        target = self.lfs_object(sha256)
        digest, size = hashlib.sha256(), 0
        fd, tmp = tempfile.mkstemp(prefix=".upload.", dir=target.parent)
        try:
            with os.fdopen(fd, "wb") as handle:
                for chunk in chunks:
                    digest.update(chunk)
                    size += len(chunk)
                    handle.write(chunk)
            if digest.hexdigest() != sha256:
                raise HubError(400, f"Uploaded content has sha256 {digest.hexdigest()}, expected {sha256}")
            os.replace(tmp, target)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
        return size

    def file_path(self, entry: dict[str, Any]) -> Path:
        """Where the bytes of a tree entry live on disk."""
        if entry["lfs"]:
            return self.root / "lfs" / entry["lfs"]["sha256"]
        return self.root / "blobs" / entry["oid"]

    def read_entry(self, commit: dict[str, Any], path: str) -> dict[str, Any]:
        entry = commit["files"].get(path)
        if entry is None:
            raise entry_not_found(commit["id"])
        return entry

    def upload_mode(self, commit: dict[str, Any], path: str, size: int, sample: bytes) -> str:
        """'lfs' for paths ``.gitattributes`` tracks, large files and binary samples; else 'regular'."""
        if size > REGULAR_FILE_LIMIT or b"\0" in sample:
            return "lfs"
        attributes = commit["files"].get(".gitattributes")
        patterns: tuple[str, ...] = LFS_PATTERNS
        if attributes is not None:
            text = self.file_path(attributes).read_text()
            patterns = tuple(line.split()[0] for line in text.splitlines() if "filter=lfs" in line)
        name = path.rsplit("/", 1)[-1]
        return "lfs" if any(fnmatch.fnmatch(name, p) or fnmatch.fnmatch(path, p) for p in patterns) else "regular"

    # --- commits -------------------------------------------------------------------------------
    def _write_commit(
        self, repo_id: str, parent: str | None, summary: str, description: str, files: dict[str, Any]
    ) -> str:
        body = {
            "parent": parent,
            "summary": summary,
            "description": description,
            "date": _now(),
            "files": dict(sorted(files.items())),
        }
        commit_id = hashlib.sha1(json.dumps(body, sort_keys=True).encode()).hexdigest()
        with atomic_write(self._repo_dir(repo_id) / "commits" / f"{commit_id}.json", "w") as handle:
            json.dump({"id": commit_id, **body}, handle, indent=1)
        return commit_id

    def commit(self, repo_id: str, branch: str, lines: list[dict[str, Any]]) -> str:
        """Apply the NDJSON operations of ``/commit`` on ``branch``; all or nothing."""
        if not lines or lines[0].get("key") != "header":
            raise HubError(400, "A commit starts with a 'header' line")
        header = lines[0]["value"]
        with self._lock:
            record = self.repo(repo_id)
            if branch not in record["refs"]:
                raise revision_not_found(branch)
            head = self.resolve(repo_id, branch)
            parent = header.get("parentCommit")
            if parent is not None and parent != head["id"]:
                raise HubError(412, f"A commit has happened since {parent}: the head of {branch} is {head['id']}")
            files = dict(head["files"])
            for line in lines[1:]:
                self._apply(files, line.get("key"), line.get("value") or {})
            commit_id = self._write_commit(
                repo_id, head["id"], header.get("summary", ""), header.get("description", ""), files
            )
            record["refs"][branch] = commit_id
            self._save_repo(repo_id, record)
            return commit_id

    def _apply(self, files: dict[str, Any], key: str | None, value: dict[str, Any]) -> None:
        path = check_path(value.get("path", ""))
        if key == "file":
            if value.get("encoding") != "base64":
                raise HubError(400, f"Unsupported encoding {value.get('encoding')!r} for {path}")
            files[path] = self._store_regular(base64.b64decode(value["content"]))
        elif key == "lfsFile":
            sha256, size = value.get("oid", ""), value.get("size")
            if value.get("algo", "sha256") != "sha256" or not self.has_lfs_object(sha256, size):
                raise HubError(400, f"LFS object {sha256} for {path} was never uploaded (or its size differs)")
            size = self.lfs_object(sha256).stat().st_size
            pointer = lfs_pointer(sha256, size)
            files[path] = {
                "oid": git_blob_id(pointer),
                "size": size,
                "lfs": {"sha256": sha256, "size": size, "pointer_size": len(pointer)},
            }
        elif key == "deletedFile":
            if files.pop(path, None) is None:
                raise HubError(404, f"A file with this name doesn't exist: {path}", "EntryNotFound")
        elif key == "deletedFolder":
            prefix = path.rstrip("/") + "/"
            for name in [n for n in files if n.startswith(prefix)]:
                del files[name]
        else:
            raise HubError(400, f"Unknown commit operation {key!r}")


def tree_entries(commit: dict[str, Any], path: str = "", recursive: bool = False) -> list[dict[str, Any]]:
    """The Hub's ``/tree`` listing of a commit: files (with LFS info) and folders under ``path``."""
    prefix = path.strip("/") + "/" if path.strip("/") else ""
    if prefix and not any(name.startswith(prefix) for name in commit["files"]):
        raise entry_not_found(commit["id"])
    entries: dict[str, dict[str, Any]] = {}
    for name, entry in commit["files"].items():
        if not name.startswith(prefix):
            continue
        parts = name[len(prefix) :].split("/")
        depth = len(parts) if recursive else 1
        for i in range(1, min(depth, len(parts) - 1) + 1):  # the folders on the way
            folder = prefix + "/".join(parts[:i])
            entries.setdefault(
                folder,
                {"type": "directory", "path": folder, "oid": hashlib.sha1(folder.encode()).hexdigest(), "size": 0},
            )
        if recursive or len(parts) == 1:
            item = {"type": "file", "path": name, "oid": entry["oid"], "size": entry["size"]}
            if entry["lfs"]:
                item["lfs"] = {
                    "oid": entry["lfs"]["sha256"],
                    "size": entry["lfs"]["size"],
                    "pointerSize": entry["lfs"]["pointer_size"],
                }
            entries[name] = item
    return [entries[k] for k in sorted(entries)]
