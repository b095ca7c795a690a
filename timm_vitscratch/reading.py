"""Bounded reading of files that come from other people: regular files only, inside their directory,
and never more than a budget.

A FIFO would block a read forever and a device would never end it; a symlink could make a model
directory read (and a push upload) any file on the machine; a deeply nested or huge JSON file would
exhaust the stack or the memory. Every side file (``config.json``, ``preprocessor_config.json``, label
lists, model cards) is read here.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any, Union

#: the largest JSON side file read (a config with 100,000 label names is about 3 MB)
MAX_JSON_BYTES = 16 << 20
#: the deepest nesting of objects and lists a JSON side file may have (timm's configs use 3)
MAX_JSON_DEPTH = 32
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


def read_json_object(path: PathLike, error: ErrorType, inside: PathLike | None = None) -> dict:
    """A JSON side file holding an object: bounded in size and nesting, with a clear error otherwise."""
    text = read_text(path, error, inside, MAX_JSON_BYTES)
    try:
        value = json.loads(text)
    except json.JSONDecodeError as err:
        raise error(f"{path} is not valid JSON: {err}") from None
    except RecursionError:
        raise error(f"{path} nests JSON deeper than {MAX_JSON_DEPTH} levels; expected a flat config") from None
    if json_depth(value) > MAX_JSON_DEPTH:
        raise error(f"{path} nests JSON deeper than {MAX_JSON_DEPTH} levels; expected a flat config")
    if not isinstance(value, dict):
        raise error(f"{path} holds a JSON {type(value).__name__}; expected an object of config fields")
    return value


def json_depth(value: Any) -> int:
    """How deeply lists and objects nest in a parsed JSON value (without recursion)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list)):
            deepest = max(deepest, depth)
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
    return deepest
