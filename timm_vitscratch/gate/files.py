"""Bounded reading of files that come from other people: regular files only, inside their directory,
and never more than a budget.

A FIFO would block a read forever and a device would never end it; a symlink could make a model
directory read (and a push upload) any file on the machine. Every side file (``config.json``,
``preprocessor_config.json``, label lists, model cards) is read here; JSON is then parsed by
:mod:`.json_data`.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Union

#: the largest text side file read (label lists, model cards)
MAX_TEXT_BYTES = 16 << 20

PathLike = Union[str, "os.PathLike[str]"]
ErrorType = Callable[[str], Exception]


def regular_file(path: PathLike, error: ErrorType, inside: PathLike | None = None) -> Path:
    """``path`` when it is a regular file (and, with ``inside``, resolves to a place inside that directory).

    A symlink is followed only when it stays inside ``inside``; FIFOs, sockets and devices are refused.
    """
    path = Path(path)
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise error(f"{path} does not exist") from None
    except OSError as err:
        raise error(f"{path} cannot be read: {err.strerror}") from None
    if not stat.S_ISREG(info.st_mode):
        raise error(f"{path} is not a regular file (a directory, FIFO, socket or device); expected a file")
    if inside is not None and path.is_symlink():
        root, target = Path(inside).resolve(), path.resolve()
        if root != target and root not in target.parents:
            raise error(f"{path} is a symlink to {target}, outside {root}; files of a directory must lie inside it")
    return path


def read_bytes(path: PathLike, limit: int, error: ErrorType, inside: PathLike | None = None) -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes (see :func:`regular_file`)."""
    path = regular_file(path, error, inside)
    try:
        # O_NONBLOCK: if the file was swapped for a FIFO since the check, the open does not hang
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        with os.fdopen(fd, "rb") as handle:
            if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
                raise error(f"{path} is not a regular file; expected a file")
            data = handle.read(limit + 1)
    except OSError as err:
        raise error(f"{path} cannot be read: {err.strerror}") from None
    if len(data) > limit:
        raise error(f"{path} is larger than {limit:,} bytes, the most read from such a file")
    return data


def read_text(path: PathLike, error: ErrorType, inside: PathLike | None = None, limit: int = MAX_TEXT_BYTES) -> str:
    """A UTF-8 text side file, bounded."""
    try:
        return read_bytes(path, limit, error, inside).decode("utf-8")
    except UnicodeDecodeError as err:
        raise error(f"{path} is not UTF-8 text: {err}") from None
