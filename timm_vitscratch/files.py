"""Safe file writing: write to a staging name beside the target, fsync, then rename (see :mod:`.atomic_replace`)."""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from .atomic_replace import identity, install, staged

PathLike = str | os.PathLike


@contextlib.contextmanager
def atomic_write(path: PathLike, mode: str = "wb") -> Iterator[IO]:
    """Open a staging file beside ``path``; on success fsync it and rename it over ``path``.

    On any exception (or a kill before the rename) the previous ``path`` is left untouched and the
    staging file is removed (a kill -9 leaves one ``.<name>.<pid>-<random>.tmp``, which the next write
    of ``path`` removes). If another process wrote ``path`` while this one wrote, the other's file is
    kept and :class:`~timm_vitscratch.atomic_replace.ConcurrentWriteError` is raised (unless it holds the same bytes).
    The file gets the permissions a plain ``open(path, "w")`` gives (0o666 less the umask).
    """
    path = Path(path)
    directory = path.parent
    if not directory.is_dir():
        raise FileNotFoundError(f"output directory {str(directory)!r} does not exist")
    if not os.access(directory, os.W_OK):
        raise PermissionError(f"output directory {str(directory)!r} is not writable")
    started = identity(path)
    with staged(path) as staging:
        with open(staging, mode) as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        install(staging, path, started)


def sha256_file(path: PathLike, chunk_size: int = 1 << 20) -> str:
    """Hex sha256 of a file, read in chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(chunk_size), b""):
            digest.update(chunk)
    return digest.hexdigest()
