"""Which container a checkpoint file is, from its first bytes (never its name): the one place that reads
container magic. The checkpoint reader (layouts/reader.py) and the model-directory check (model_dir.py) ask here.

safetensors starts with its header's length (8 bytes, little-endian) and then ``{``; ``torch.save`` writes a
zip archive (``PK\\x03\\x04``) holding ``data.pkl``, or in its legacy format a bare pickle (protocol marker
``\\x80``); a numpy ``.npz`` is a zip archive of ``.npy`` members.
"""

from __future__ import annotations

from typing import BinaryIO

from .checkpoints import open_checkpoint_file
from .files import ErrorType, PathLike
from .zip_archive import open_archive

#: how many leading bytes tell the container
HEAD_BYTES = 9
ZIP_MAGIC = b"PK\x03\x04"
#: a pickle's protocol marker: torch.save's legacy (non-zip) format starts with it
PICKLE_MARK = b"\x80"

#: what :func:`container_of` answers: the containers a checkpoint may be, ``"zip"`` for an archive that is
#: neither torch.save's nor numpy's, ``"empty"`` for a file with no bytes, ``""`` for none of these
CONTAINERS = ("safetensors", "torch-zip", "torch-legacy", "npz")


def head_container(head: bytes) -> str:
    """What a file's first :data:`HEAD_BYTES` bytes say it is: ``"zip"`` (an archive, torch.save's or numpy's),
    ``"safetensors"``, ``"torch-legacy"`` (a pickle), ``"empty"``, or ``""`` for none of these."""
    if not head:
        return "empty"
    if head.startswith(ZIP_MAGIC):
        return "zip"
    if len(head) == HEAD_BYTES and head[8:9] == b"{":
        return "safetensors"
    if head.startswith(PICKLE_MARK):
        return "torch-legacy"
    return ""


def read_head(handle: BinaryIO) -> bytes:
    """The first :data:`HEAD_BYTES` bytes of an open file (fewer if it is shorter)."""
    return handle.read(HEAD_BYTES)


def file_head_container(path: PathLike, error: ErrorType) -> str:
    """:func:`head_container` of the file at ``path`` (a regular file, opened once; its archive is not read)."""
    with open_checkpoint_file(path, error) as handle:
        return head_container(read_head(handle))


def container_of(path: PathLike, error: ErrorType) -> str:
    """Which container the file at ``path`` is, from its first bytes: one of :data:`CONTAINERS`, or ``"zip"``
    (an archive that is neither), ``"empty"`` or ``""`` (see :func:`head_container`). A zip archive's directory
    is read bounded (:mod:`.zip_archive`) to tell torch.save's (``data.pkl``) from numpy's (``.npy`` only)."""
    with open_checkpoint_file(path, error) as handle:
        kind = head_container(read_head(handle))
        if kind != "zip":
            return kind
        with open_archive(handle, path, error) as archive:
            names = archive.namelist()
    if any(name.endswith("data.pkl") for name in names):
        return "torch-zip"
    if names and all(name.endswith(".npy") for name in names):
        return "npz"
    return "zip"
