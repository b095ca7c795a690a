"""The Hub's answers to a pull, checked before a path, a size or a hash is taken from them.

huggingface_hub builds cache paths from the commit id and the ETag the Hub answers, and sizes a download
from the size it announces. So every such value passes here first, and only values of one exact form
come out:

- the revision lookup (``GET /api/models/<repo>/revision/<rev>``): its commit id, 40 lowercase hex digits;
- the file list at that commit (``GET /api/models/<repo>/tree/<commit>``): for each file a model
  directory holds, one entry, a regular file whose size is within what such a file may hold and whose
  hashes are well formed (git blob id; sha256 and the same size for an LFS file). Other entries are
  never used;
- the headers of every answer while a file downloads (:func:`body_limit`): ``X-Repo-Commit`` is that
  commit, ``ETag`` / ``X-Linked-Etag`` that file's hash, ``X-Linked-Size`` / ``Content-Length`` /
  ``Content-Range`` its size, ``Location`` a URL, and the body is not encoded; the result is the most bytes
  the body may hold.

JSON answers go through :mod:`.json_data` with its bounds. Errors are the caller's type, with a message
naming what was wrong and what was expected.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from .files import ErrorType
from .json_data import JsonLimits, parse_json

COMMIT_ID = re.compile(r"[0-9a-f]{40}")
GIT_BLOB_ID = re.compile(r"[0-9a-f]{40}")
SHA256 = re.compile(r"[0-9a-f]{64}")
_DIGITS = re.compile(r"[0-9]{1,20}")
_CONTENT_RANGE = re.compile(r"bytes ([0-9]{1,20})-([0-9]{1,20})/([0-9]{1,20})")

#: the largest weights file a model directory may hold: 8e9 parameters (the model-option bound) at 8 bytes
#: each, and a safetensors header of at most 100 MB (tests/hub/test_hub_answers.py ties it to the bound)
MAX_WEIGHTS_BYTES = 8_000_000_000 * 8 + 100_000_000
#: the most bytes of an answer that is not a file's content: a JSON answer, an error, a redirect
MAX_ANSWER_BYTES = JsonLimits().max_bytes
#: an error or redirect body is read for its message only
MAX_MESSAGE_BYTES = 1 << 20


@dataclass(frozen=True)
class HubFile:
    """One file of the repo at a commit, as the Hub lists it."""

    name: str
    size: int
    blob_id: str
    sha256: str | None  # an LFS file's

    @property
    def etag(self) -> str:
        """What the Hub answers as the file's ETag (huggingface_hub names the cached blob after it)."""
        return self.sha256 or self.blob_id


def shown(value: object, limit: int = 80) -> str:
    """A value from the Hub, quoted and cut, for a one-line message."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 5] + "...'"


def commit_id(value: object, what: str, error: ErrorType) -> str:
    """``value`` when it is a commit id (40 lowercase hex digits)."""
    if not isinstance(value, str) or not COMMIT_ID.fullmatch(value):
        raise error(f"{what} is {shown(value)}; a commit id is 40 lowercase hex digits")
    return value


def revision_commit(data: bytes, label: str, error: ErrorType) -> str:
    """The commit id of the revision lookup's answer (its ``sha``)."""
    answer = parse_json(data, f"{label}: the Hub's answer to the revision lookup", error)
    if not isinstance(answer, dict):
        raise error(
            f"{label}: the Hub answered the revision lookup with a JSON {type(answer).__name__}; expected an object"
        )
    return commit_id(answer.get("sha"), f"{label}: the commit id the Hub answered", error)


def repo_files(
    data: bytes, label: str, sizes: Mapping[str, int], required: Collection[str], error: ErrorType
) -> dict[str, HubFile]:
    """The files named in ``sizes`` (name -> most bytes it may hold) that the tree listing ``data`` holds.

    Each must be listed once, as a file of a size within its bound, with a git blob id and (LFS) a sha256
    of the same size; the names in ``required`` must be there. Other entries are not looked at.
    """
    what = f"{label}: the Hub's file list"
    listing = parse_json(data, what, error)
    if not isinstance(listing, list):
        raise error(f"{what} is a JSON {type(listing).__name__}; expected a list of entries")
    found: dict[str, HubFile] = {}
    for entry in listing:
        name = entry.get("path") if isinstance(entry, dict) else None
        if not isinstance(name, str) or name not in sizes:
            continue
        if name in found:
            raise error(f"{what} lists {name} twice; expected one entry per file")
        found[name] = _hub_file(entry, name, sizes[name], f"{what}: {name}", error)
    missing = [name for name in required if name not in found]
    if missing:
        raise error(f"{what} has no {' and no '.join(missing)}; a model directory holds {', '.join(required)}")
    return {name: found[name] for name in sizes if name in found}


def _hub_file(entry: dict[str, Any], name: str, limit: int, what: str, error: ErrorType) -> HubFile:
    if entry.get("type") != "file":
        raise error(f"{what} is of type {shown(entry.get('type'))}; expected 'file'")
    size = _size(entry.get("size"), limit, f"{what} has size", error)
    blob_id = entry.get("oid")
    if not isinstance(blob_id, str) or not GIT_BLOB_ID.fullmatch(blob_id):
        raise error(f"{what} has oid {shown(blob_id)}; expected a git blob id (40 lowercase hex digits)")
    lfs = entry.get("lfs")
    if lfs is None:
        return HubFile(name, size, blob_id, None)
    if not isinstance(lfs, dict):
        raise error(f"{what} has lfs {shown(lfs)}; expected an object with oid and size")
    sha256 = lfs.get("oid")
    if not isinstance(sha256, str) or not SHA256.fullmatch(sha256):
        raise error(f"{what} has LFS oid {shown(sha256)}; expected a sha256 (64 lowercase hex digits)")
    if _size(lfs.get("size"), limit, f"{what} has LFS size", error) != size:
        raise error(f"{what} has LFS size {shown(lfs.get('size'))} and size {size}; expected the same")
    return HubFile(name, size, blob_id, sha256)


def _size(value: object, limit: int, what: str, error: ErrorType) -> int:
    if type(value) is not int or not 0 <= value <= limit:
        raise error(f"{what} {shown(value)}; expected a whole number of bytes from 0 to {limit:,}")
    return value


# --- the headers of a download's answers ----------------------------------------------------------
def body_limit(
    method: str,
    status: int,
    headers: Mapping[str, str],
    file: HubFile | None,
    commit: str | None,
    label: str,
    error: ErrorType,
) -> int:
    """The most body bytes an answer may carry, after its headers are checked.

    ``file`` and ``commit``: what is being downloaded (None: an API request, whose answer is JSON). The
    headers huggingface_hub takes a path or a size from must hold exactly the listed values; an answer
    without them is left to huggingface_hub, which refuses it.
    """
    where = f"{label}: {file.name}" if file is not None else label
    encoding = headers.get("Content-Encoding", "identity").strip().lower()
    if encoding not in ("", "identity"):
        raise error(f"{where}: the Hub answered Content-Encoding {shown(encoding)}; the pull asks for 'identity'")
    if file is None:
        return MAX_ANSWER_BYTES if 200 <= status < 300 else MAX_MESSAGE_BYTES
    answered = headers.get("X-Repo-Commit")
    if answered is not None and answered != commit:
        raise error(
            f"{where}: the Hub answered X-Repo-Commit {shown(answered)}; expected the commit {commit} it listed"
        )
    length = _header_size(headers, "Content-Length", where, error)
    if method == "HEAD":  # where huggingface_hub takes the blob's name and the file's size from
        etag = headers.get("X-Linked-Etag") or headers.get("ETag")
        if etag is not None and etag.strip() not in (file.etag, f'"{file.etag}"', f'W/"{file.etag}"'):
            raise error(f"{where}: the Hub answered ETag {shown(etag)}; expected {file.etag}, as it listed")
        location = headers.get("Location")
        if location is not None and not location.startswith(("https://", "http://", "/")):
            raise error(f"{where}: the Hub answered Location {shown(location)}; expected an http(s) URL or a path")
        linked = _header_size(headers, "X-Linked-Size", where, error)
        size = linked if linked is not None else (None if 300 <= status < 400 else length)
        if size is not None and 200 <= status < 400 and size != file.size:
            raise error(f"{where}: the Hub announced {size:,} bytes; its file list says {file.size:,}")
        return 0  # an answer to HEAD has no body
    if not 200 <= status < 300:
        return MAX_MESSAGE_BYTES
    expected = file.size
    if status == 206 or "Content-Range" in headers:  # huggingface_hub takes the file's size from it
        span = _CONTENT_RANGE.fullmatch(headers.get("Content-Range", "").strip())
        if span is None or int(span[3]) != file.size or not int(span[1]) <= int(span[2]) < file.size:
            raise error(
                f"{where}: the Hub answered Content-Range {shown(headers.get('Content-Range'))}; "
                f"expected a range of the {file.size:,} bytes listed"
            )
        if status == 206:
            expected = int(span[2]) - int(span[1]) + 1
    if length is not None and length != expected:
        raise error(f"{where}: the Hub announced a body of {length:,} bytes; expected {expected:,}, the size it listed")
    return expected


def _header_size(headers: Mapping[str, str], name: str, where: str, error: ErrorType) -> int | None:
    value = headers.get(name)
    if value is None:
        return None
    if not _DIGITS.fullmatch(value.strip()):
        raise error(f"{where}: the Hub answered {name} {shown(value)}; expected a number of bytes")
    return int(value.strip())
