"""Safe file writing: write to a temporary name beside the target, fsync, then rename."""
from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from pathlib import Path
from typing import IO, Iterator, Union

PathLike = Union[str, os.PathLike]


@contextlib.contextmanager
def atomic_write(path: PathLike, mode: str = "wb") -> Iterator[IO]:
    """Open a temporary file beside ``path``; on success fsync and rename it over ``path``.

    On any exception (or a kill before the rename) the previous ``path`` is left untouched and
    the temporary file is removed (a kill -9 can leave one ``.<name>.*.tmp`` behind, which the
    next write to the same directory cleans up).
    """
    path = Path(path)
    directory = path.parent
    if not directory.is_dir():
        raise FileNotFoundError(f"output directory {str(directory)!r} does not exist")
    if not os.access(directory, os.W_OK):
        raise PermissionError(f"output directory {str(directory)!r} is not writable")
    remove_stale_temporaries(path)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, mode) as handle:
            yield handle
            handle.flush()
            # mkstemp creates 0600; give the result the permissions a plain open() would have
            os.fchmod(handle.fileno(), 0o666 & ~current_umask())
            os.fsync(handle.fileno())
        os.replace(tmp_name, path)
        fsync_directory(directory)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp_name)
        raise


def current_umask() -> int:
    """The process umask (reading it means setting it: put it straight back)."""
    mask = os.umask(0)
    os.umask(mask)
    return mask


def remove_stale_temporaries(path: PathLike) -> None:
    """Delete temporaries a killed writer of ``path`` left behind."""
    path = Path(path)
    for stale in path.parent.glob(f".{path.name}.*.tmp"):
        with contextlib.suppress(FileNotFoundError):
            stale.unlink()


def fsync_directory(directory: Path) -> None:
    """Make renames inside ``directory`` durable (best effort)."""
    with contextlib.suppress(OSError):  # not every filesystem lets a directory be fsynced
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def sha256_file(path: PathLike, chunk_size: int = 1 << 20) -> str:
    """Hex sha256 of a file, read in chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(chunk_size), b""):
            digest.update(chunk)
    return digest.hexdigest()
