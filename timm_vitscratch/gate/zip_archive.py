"""Zip archives from outside (torch.save files and numpy ``.npz``), opened only once their directory is bounded.

``zipfile.ZipFile`` reads the whole central directory into objects, so its size and entry count are read
first from the end-of-directory record (and its zip64 form): a 100 MB directory of a million entries is
refused before ``zipfile`` parses it. Then: member names are unique (two readers of one archive could
each pick a different member of the same name), and all members together may not expand past
:data:`MAX_EXPANSION` times the file (beyond :data:`EXPANSION_FLOOR`): a decompression bomb is refused
before anything is decompressed.
"""

from __future__ import annotations

import os
import struct
import zipfile
from typing import BinaryIO

from .checkpoints import MAX_TENSORS
from .files import ErrorType, PathLike

#: members in one archive: a tensor each (torch.save adds a few records of its own)
MAX_MEMBERS = MAX_TENSORS + 64
#: bytes of the central directory (46 bytes a member plus its name and extra fields)
MAX_DIRECTORY_BYTES = MAX_MEMBERS * 512
#: the archive's members may expand at most this many times over its size ...
MAX_EXPANSION = 100
#: ... beyond this many bytes in all (numeric weights barely compress)
EXPANSION_FLOOR = 256 << 20

_END = b"PK\x05\x06"
_END_SIZE = 22
_LOCATOR = b"PK\x06\x07"
_END64 = b"PK\x06\x06"


def _directory_size(handle: BinaryIO, path: PathLike, error: ErrorType) -> tuple[int, int]:
    """(entries, directory bytes) from the end-of-directory record, found as ``zipfile`` finds it."""
    size = handle.seek(0, os.SEEK_END)
    tail_start = max(0, size - (1 << 16) - _END_SIZE)
    handle.seek(tail_start)
    tail = handle.read()
    at = len(tail) - _END_SIZE
    if not (at >= 0 and tail[at : at + 4] == _END and tail[-2:] == b"\x00\x00"):
        at = tail.rfind(_END)
    if at < 0 or at + _END_SIZE > len(tail):
        raise error(f"{path}: is not a readable zip archive (no end of its central directory: truncated?)")
    _, _, _, _, entries, directory, _ = struct.unpack("<4sHHHHII", tail[at : at + 20])
    locator = tail_start + at - 20  # zip64: a locator just before the record, its record just before that
    if locator >= 56:
        handle.seek(locator - 56)
        body = handle.read(76)
        if body[56:60] == _LOCATOR and body[:4] == _END64:
            entries, directory = struct.unpack("<QQ", body[32:48])
    return entries, directory


def open_archive(handle: BinaryIO, path: PathLike, error: ErrorType) -> zipfile.ZipFile:
    """The zip archive open in ``handle`` (named ``path``), once its directory, member names and expansion are
    within bounds (closing it leaves ``handle`` open)."""
    entries, directory = _directory_size(handle, path, error)
    if entries > MAX_MEMBERS or directory > MAX_DIRECTORY_BYTES:
        raise error(
            f"{path}: its zip directory lists {entries:,} members in {directory:,} bytes; at most "
            f"{MAX_MEMBERS:,} members in {MAX_DIRECTORY_BYTES:,} bytes are read (one member per tensor)"
        )
    try:
        handle.seek(0)
        archive = zipfile.ZipFile(handle)
    except Exception as err:  # BadZipFile, but also UnicodeDecodeError, NotImplementedError ... on damage
        raise error(f"{path}: is a damaged zip archive (truncated?): {type(err).__name__}: {err}") from None
    try:
        members = archive.infolist()
        if len(members) > MAX_MEMBERS:
            raise error(f"{path}: its zip archive has {len(members):,} members; at most {MAX_MEMBERS:,} are read")
        names = [info.filename for info in members]
        if len(set(names)) != len(names):
            twice = next(name for i, name in enumerate(names) if name in names[:i])
            raise error(f"{path}: its zip archive holds two members named {twice!r}; expected each name once")
        check_expansion(members, os.fstat(handle.fileno()).st_size, path, error)
    except BaseException:
        archive.close()
        raise
    return archive


def check_expansion(members: list[zipfile.ZipInfo], archive_size: int, path: PathLike, error: ErrorType) -> None:
    """All members together may not expand past :data:`MAX_EXPANSION` times the file (beyond
    :data:`EXPANSION_FLOOR`), however the bytes are split between them; read from the zip directory."""
    total = sum(info.file_size for info in members)
    if total > EXPANSION_FLOOR and total > MAX_EXPANSION * max(archive_size, 1):
        raise error(
            f"{path}: its {len(members)} members would decompress from {archive_size:,} to {total:,} bytes in all "
            f"(more than {MAX_EXPANSION}x): a decompression bomb, not weights; refused before decompressing anything"
        )


def check_member(info: zipfile.ZipInfo, archive_size: int, path: PathLike, error: ErrorType) -> None:
    """One member lies inside the file and expands at most :data:`MAX_EXPANSION` times (beyond the floor)."""
    if info.header_offset + info.compress_size > archive_size:
        raise error(
            f"{path}: member {info.filename!r} claims {info.compress_size:,} stored bytes, past the end of the "
            f"{archive_size:,}-byte file (truncated?)"
        )
    if info.file_size > EXPANSION_FLOOR and info.file_size > MAX_EXPANSION * max(info.compress_size, 1):
        raise error(
            f"{path}: member {info.filename!r} would decompress from {info.compress_size:,} to {info.file_size:,} "
            f"bytes (more than {MAX_EXPANSION}x): a decompression bomb, not weights; refused before decompressing it"
        )


def read_member(archive: zipfile.ZipFile, name: str, limit: int, path: PathLike, error: ErrorType) -> bytes:
    """The bytes of one member of at most ``limit`` bytes (checked from the directory, then while reading)."""
    info = archive.getinfo(name)
    if info.file_size > limit:
        raise error(f"{path}: member {name!r} is {info.file_size:,} bytes; at most {limit:,} are read")
    check_member(info, archive_size(archive), path, error)
    try:
        with archive.open(info) as handle:
            data = handle.read(limit + 1)
    except Exception as err:  # BadZipFile, zlib.error, EOFError ... on damage
        raise error(f"{path}: member {name!r} cannot be read (damaged?): {type(err).__name__}: {err}") from None
    if len(data) > limit:
        raise error(f"{path}: member {name!r} holds more than {limit:,} bytes; at most that many are read")
    return data


def archive_size(archive: zipfile.ZipFile) -> int:
    """Bytes of the file an archive was opened on."""
    return os.fstat(archive.fp.fileno()).st_size  # type: ignore[union-attr]
