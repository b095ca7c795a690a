"""Replacing an output in one atomic step: stage it beside its target, then rename (or exchange) it into place.

A writer stages its output, a file or a model directory, under a name of its own beside the target,
``.NAME.<pid>-<random>.tmp`` (:func:`staged`), and holds an OS lock on it while it lives. :func:`install` then,
under an OS lock on the target's directory, checks that the target is still what it was when the writer started
(:func:`identity`) and puts the stage in place: a file is renamed over the target; a directory is exchanged with
it by Linux's ``renameat2(RENAME_EXCHANGE)``, the one system call that replaces a non-empty directory atomically.
Where the system has no exchange, the target is renamed aside to ``.NAME.<pid>-<random>.old`` and the stage
renamed in; a kill between the two leaves the old output there, which the next writer puts back. If another
process wrote the target meanwhile, nothing is installed: quietly when it installed the same bytes, else
:class:`ConcurrentWriteError`.

The next writer of a target removes what killed writers of that target left: names matched exactly (never
``a.b``'s for ``a``), and only entries whose lock no living process holds. The locks are filelock's
``lock_descriptor`` (``flock``) on an open descriptor, which the OS releases when a process dies. Where there is
no lock to take (a file system without ``flock``, a Python without ``fcntl``, a Windows directory), writers run
unserialised and a killed writer's staging is kept rather than risk removing a living one's.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import filecmp
import os
import re
import secrets
import shutil
import stat
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

from filelock import lock_descriptor, unlock_descriptor

#: what a target was when a writer started (device and inode; a file also its size and mtime); None: nothing
Identity = tuple[int, ...] | None


class ConcurrentWriteError(FileExistsError):
    """Another process wrote the target while this writer ran; this writer installed nothing."""

    def __init__(self, target: Path) -> None:
        super().__init__(
            f"{target} was written by another process while this one ran; this one's result was not installed "
            "(run it again to replace that)"
        )


def staging_name(target: Path, kind: str = "tmp") -> Path:
    """A new name beside ``target`` for this process: ``.NAME.<pid>-<8 hex>.<kind>`` (kind: tmp or old)."""
    return target.with_name(f".{target.name}.{os.getpid()}-{secrets.token_hex(4)}.{kind}")


def identity(path: os.PathLike[str]) -> Identity:
    """What ``path`` is now, to tell later whether another process replaced it.

    A directory is its inode (a model directory is replaced as a whole); a file also its size and mtime.
    """
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return None
    if stat.S_ISDIR(info.st_mode):
        return info.st_dev, info.st_ino
    return info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns


# --- locks -----------------------------------------------------------------------------------------
#: the staging directories this process holds: files written into them need no lock (no one else writes there)
_OWN_STAGING: set[tuple[int, int]] = set()


def _open(path: Path) -> int | None:
    """A descriptor to lock ``path`` through; None where the OS opens no directory as one (Windows)."""
    try:
        return os.open(path, os.O_RDONLY)
    except PermissionError:
        if sys.platform == "win32" and path.is_dir():
            return None
        raise


def _lock(fd: int | None) -> None:
    """Take the OS lock on ``fd``, waiting for another holder; none where the system has none to take."""
    try:
        if fd is not None:
            lock_descriptor(fd, poll_interval=0.01)
    except OSError as err:
        if err.errno not in (errno.ENOSYS, errno.ENOLCK, errno.EOPNOTSUPP):
            raise


@contextlib.contextmanager
def _directory_locked(target: Path) -> Iterator[None]:
    """Hold the OS lock on the directory of ``target`` (threads each take it through a descriptor of their own,
    so they wait for each other too), unless that directory is a staging directory of this process."""
    info = os.stat(target.parent)
    if (info.st_dev, info.st_ino) in _OWN_STAGING:
        yield
        return
    fd = _open(target.parent)
    try:
        _lock(fd)
        yield
    finally:
        if fd is not None:
            os.close(fd)  # closing the descriptor releases the lock


def _held(path: Path) -> bool:
    """Whether a living process (this one included) holds the OS lock on ``path``.

    What cannot be asked (no permission, no lock on this system) counts as held: such an entry is never removed.
    """
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0))
    except FileNotFoundError:
        return False
    except OSError:
        return True
    try:
        if not lock_descriptor(fd, blocking=False):
            return True
        unlock_descriptor(fd)
        return False
    except OSError:
        return True
    finally:
        os.close(fd)


# --- staging and recovery --------------------------------------------------------------------------
def _remove(path: Path) -> None:
    """Remove a staging entry (a directory tree or a file), if it is there."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


def _recover(target: Path) -> None:
    """Undo what killed writers of ``target`` left beside it (called under the directory's lock).

    A previous version set aside between the two renames goes back to ``target`` if that is missing, and away
    otherwise; staging that no living process holds is removed. Entries of other targets are never touched.
    """
    own_name = re.compile(rf"\.{re.escape(target.name)}\.\d+-[0-9a-f]{{8}}\.(tmp|old)")
    for name in sorted(name for name in os.listdir(target.parent) if own_name.fullmatch(name)):
        path = target.parent / name
        if name.endswith(".old") and not os.path.lexists(target):
            os.rename(path, target)
        elif name.endswith(".old") or not _held(path):
            _remove(path)


def starting_point(target: os.PathLike[str]) -> Identity:
    """Recover ``target`` from killed writers and return its :func:`identity`: where a writer starts from."""
    target = Path(target)
    with _directory_locked(target):
        _recover(target)
        return identity(target)


@contextlib.contextmanager
def staged(target: os.PathLike[str], directory: bool = False) -> Iterator[Path]:
    """A new empty file (or ``directory``) at a staging name beside ``target``, with the mode a plain ``open`` or
    ``mkdir`` gives (the OS applies the umask). It stays locked by this process until the block ends, so that no
    other writer removes it, and is removed then (after an exchange it holds the previous version)."""
    target = Path(target)
    with _directory_locked(target):
        _recover(target)
        while True:
            path = staging_name(target)
            try:
                if directory:
                    os.mkdir(path)
                else:
                    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
                break
            except FileExistsError:
                continue
        fd = _open(path)
        _lock(fd)  # new: no one else can hold it yet
    info = os.stat(path)
    own = (info.st_dev, info.st_ino)
    if directory:
        _OWN_STAGING.add(own)
    try:
        yield path
    finally:
        _OWN_STAGING.discard(own)
        _remove(path)
        if fd is not None:
            os.close(fd)


# --- the install -----------------------------------------------------------------------------------
def install(
    staged: Path, target: Path, started: Identity, keep_other_files: bool = False, only_into_empty: bool = False
) -> bool:
    """Put the finished file or directory ``staged`` in place of ``target`` in one atomic step.

    Returns False, installing nothing, when another process installed the same bytes since ``started``; raises
    :class:`ConcurrentWriteError` when it installed something else. A directory replacing another:
    ``keep_other_files`` hard-links the old directory's entries that ``staged`` lacks (a user's README, notes)
    into it first; ``only_into_empty`` refuses a ``target`` that was filled meanwhile.
    """
    with _directory_locked(target):
        _recover(target)
        if identity(target) != started:
            if _same_files(staged, target):
                return False
            raise ConcurrentWriteError(target)
        if staged.is_dir() and started is not None:
            if only_into_empty and os.listdir(target):
                raise FileExistsError(
                    errno.ENOTEMPTY,
                    f"{target} is not empty (it was filled while this process ran); nothing was installed",
                    str(target),
                )
            os.chmod(staged, stat.S_IMODE(os.stat(target).st_mode))
            if keep_other_files:
                ours = set(os.listdir(staged))
                shutil.copytree(
                    target,
                    staged,
                    symlinks=True,
                    copy_function=os.link,
                    dirs_exist_ok=True,
                    ignore=lambda where, names: ours.intersection(names) if where == os.fspath(target) else set(),
                )
            _fsync(staged)
            _exchange(staged, target)
        else:
            os.replace(staged, target)
        _fsync(target.parent)
    return True


def _same_files(staged: Path, target: Path) -> bool:
    """Whether ``target`` holds the bytes of ``staged`` (a file), or each file of it (a directory)."""
    if target.is_symlink():
        return False
    if not staged.is_dir():
        return target.is_file() and filecmp.cmp(staged, target, shallow=False)
    names = sorted(os.listdir(staged))
    return target.is_dir() and filecmp.cmpfiles(target, staged, names, shallow=False)[0] == names


def _fsync(directory: Path) -> None:
    """Make the renames inside ``directory`` durable (best effort: not every file system can)."""
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _exchange(staged: Path, target: Path) -> None:
    """Swap ``staged`` and ``target`` in one step; where the system cannot, rename ``target`` aside and ``staged``
    in (a kill between the two leaves ``.NAME.<pid>-<random>.old``, which :func:`_recover` puts back)."""
    if rename_exchange(staged, target):
        return
    aside = staging_name(target, "old")
    os.rename(target, aside)
    try:
        os.rename(staged, target)
    except BaseException:
        os.rename(aside, target)
        raise
    shutil.rmtree(aside, ignore_errors=True)


def _load_renameat2() -> Callable[..., int] | None:
    """libc's ``renameat2`` (Linux, glibc 2.28+; Python has no binding for it), or None."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        function = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return None
    function.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    function.restype = ctypes.c_int
    return function


_renameat2 = _load_renameat2()
_AT_FDCWD, _RENAME_EXCHANGE = -100, 2


def rename_exchange(a: os.PathLike[str], b: os.PathLike[str]) -> bool:
    """Swap two existing paths in one atomic step; False where the system or file system cannot."""
    if _renameat2 is None:
        return False
    if _renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
        return False  # an old kernel, or a file system without exchange
    raise OSError(code, os.strerror(code), os.fspath(a), None, os.fspath(b))
