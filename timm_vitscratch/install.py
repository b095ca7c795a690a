"""Putting a finished output in place: staging beside the target, one atomic step, recovery after a kill.

Every writer stages its output under a name of its own beside the target, ``.NAME.<pid>-<random>.tmp``
(a file, or a directory for a model directory), and holds an OS lock on it while it lives. The install
is one step, taken under an OS lock on the target's parent directory: a file is renamed over the target;
a directory is exchanged with the target (Linux ``renameat2(RENAME_EXCHANGE)``; elsewhere the target is
renamed aside to ``.NAME.<pid>-<random>.old`` and the stage renamed in, two renames that :func:`recover`
undoes after a kill between them). A kill at any instant leaves the old output or the new one, whole.

Before installing, a writer checks that the target is still what it was when the writer started (its
:func:`identity`); if another process wrote it meanwhile, this writer's result is dropped: quietly when
the other process installed the same bytes, else with :class:`ConcurrentWriteError`. :func:`recover`
removes only this target's staging (matched exactly, never a sibling's such as ``a.b``'s for ``a``)
and only what no living process holds.

The locks are ``filelock``'s native locks on an open descriptor (``lock_descriptor``: ``flock`` on
POSIX, ``LockFileEx`` on Windows), released by the OS when a process dies, so a kill never leaves a
stale lock. Where there is no such lock (a file system without ``flock``, a Python without ``fcntl``, a
directory the OS does not open as a descriptor), writers go on unserialised and :func:`held` answers
"held", so that nothing is removed that might be alive.
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
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

from filelock import lock_descriptor, unlock_descriptor

Identity = tuple[int, ...] | None
T = TypeVar("T")


class ConcurrentWriteError(FileExistsError):
    """Another process wrote the target while this writer ran; this writer installed nothing."""

    def __init__(self, target: Path) -> None:
        super().__init__(
            errno.EEXIST,
            f"{target} was written by another process while this one ran; this one's "
            "result was not installed (run it again to replace that)",
            str(target),
        )

    def __str__(self) -> str:
        return str(self.strerror)


# --- names -----------------------------------------------------------------------------------------
def staging_name(target: Path, kind: str) -> Path:
    """A new name beside ``target`` for this process: ``.NAME.<pid>-<8 hex>.<kind>`` (kind: tmp or old)."""
    return target.with_name(f".{target.name}.{os.getpid()}-{secrets.token_hex(4)}.{kind}")


def staging_pattern(target: Path) -> re.Pattern[str]:
    """What :func:`staging_name` gives for ``target`` and for no other name (the random part has no dot)."""
    return re.compile(rf"\.{re.escape(target.name)}\.\d+-[0-9a-f]{{8}}\.(tmp|old)")


def _create(target: Path, make: Callable[[Path], T]) -> tuple[Path, T]:
    """``make(path)`` at a new staging name for ``target``; another name if that one is taken."""
    while True:
        path = staging_name(target, "tmp")
        try:
            return path, make(path)
        except FileExistsError:
            continue


# --- locks ---------------------------------------------------------------------------------------
_NO_LOCK = (errno.ENOSYS, errno.ENOLCK, errno.EOPNOTSUPP)  # the system or file system has no lock to take
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)  # opening a FIFO to look at it must not hang


def _lock(fd: int) -> None:
    """Take the OS lock on ``fd`` (waiting for another holder), or none where there is none to take."""
    try:
        lock_descriptor(fd, poll_interval=0.01)
    except OSError as err:
        if err.errno not in _NO_LOCK:
            raise


def held(path: os.PathLike) -> bool:
    """Whether a living process (this one included) holds the OS lock on ``path``.

    What cannot be looked at (no permission, no lock to ask on this system) counts as held: such an entry
    is left alone, never removed.
    """
    try:
        fd = os.open(path, os.O_RDONLY | _NONBLOCK | _NOFOLLOW)
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


class _HeldDirectory:
    """This process's hold on one directory: a thread lock, and the OS lock while any thread holds it."""

    def __init__(self) -> None:
        self.thread_lock = threading.RLock()
        self.fd: int | None = None
        self.depth = 0


_HELD: dict[tuple[int, int], _HeldDirectory] = {}
_HELD_GUARD = threading.Lock()


def _open_directory(directory: os.PathLike) -> int | None:
    """A descriptor to lock ``directory`` through, or None where the OS opens no directory as one (Windows)."""
    try:
        return os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except PermissionError:
        if os.path.isdir(directory) and sys.platform == "win32":
            return None
        raise


@contextlib.contextmanager
def directory_lock(directory: os.PathLike) -> Iterator[None]:
    """An exclusive lock on a directory, across processes and threads; re-entrant in a thread.

    Re-entrant because a writer that holds its staging directory also writes files into it, and those
    writes lock their parent directory.
    """
    fd = _open_directory(directory)
    try:
        info = os.fstat(fd) if fd is not None else os.stat(directory)
        with _HELD_GUARD:
            hold = _HELD.setdefault((info.st_dev, info.st_ino), _HeldDirectory())
        hold.thread_lock.acquire()
    except BaseException:
        if fd is not None:
            os.close(fd)
        raise
    try:
        if hold.depth == 0 and fd is not None:
            _lock(fd)
            hold.fd, fd = fd, None
        hold.depth += 1
        try:
            yield
        finally:
            hold.depth -= 1
            if hold.depth == 0 and hold.fd is not None:
                os.close(hold.fd)  # closing the descriptor releases the lock
                hold.fd = None
    finally:
        if fd is not None:
            os.close(fd)
        hold.thread_lock.release()


# --- state -----------------------------------------------------------------------------------------
def identity(path: os.PathLike) -> Identity:
    """What ``path`` is now, to tell later whether another process replaced it (None: nothing there).

    A directory is its inode (a model directory is replaced as a whole); a file also its size and mtime.
    """
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return None
    if stat.S_ISDIR(info.st_mode):
        return info.st_dev, info.st_ino
    return info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns


def fsync_directory(directory: os.PathLike) -> None:
    """Make renames inside ``directory`` durable (best effort)."""
    with contextlib.suppress(OSError):  # not every file system lets a directory be fsynced
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _remove(path: Path) -> None:
    """Remove a staging entry (a directory tree or a file), if it is there."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


# --- recovery --------------------------------------------------------------------------------------
def recover(target: os.PathLike) -> None:
    """Undo what killed writers of ``target`` left beside it (call under the parent directory's lock).

    A previous version set aside (``.NAME.*.old``, between the two renames of a swap) goes back to
    ``target`` if that is missing and is removed otherwise; staging (``.NAME.*.tmp``) that no living
    process holds is removed. Entries of other targets are never touched.
    """
    target = Path(target)
    pattern = staging_pattern(target)
    for name in sorted(name for name in os.listdir(target.parent) if pattern.fullmatch(name)):
        path = target.parent / name
        if name.endswith(".old"):
            if not os.path.lexists(target):
                os.rename(path, target)
            else:
                _remove(path)
        elif not held(path):
            _remove(path)


def starting_point(target: os.PathLike) -> Identity:
    """Recover ``target`` from killed writers and return its :func:`identity`: where a writer starts from."""
    target = Path(target)
    with directory_lock(target.parent):
        recover(target)
        return identity(target)


# --- files -----------------------------------------------------------------------------------------
_NEW_FILE = os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)


@contextlib.contextmanager
def staged_file(target: os.PathLike) -> Iterator[tuple[int, Path]]:
    """A new file beside ``target``: (open descriptor, path). It stays locked by this process until the
    block ends, also after the caller closes the descriptor, and is removed then unless it was installed."""
    target = Path(target)
    with directory_lock(target.parent):
        recover(target)
        path, fd = _create(target, lambda p: os.open(p, _NEW_FILE, 0o666))  # the OS applies the umask, as open() does
        _lock(fd)  # a new file: nobody else can hold it yet
    lock = os.dup(fd)  # the lock belongs to the open file, which this keeps open
    try:
        yield fd, path
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        os.close(lock)


def install_file(staged: Path, target: Path, started: Identity) -> None:
    """Rename the finished ``staged`` file over ``target``, unless another process wrote ``target`` since
    ``started`` (then: nothing to do if it holds the same bytes, else :class:`ConcurrentWriteError`)."""
    with directory_lock(target.parent):
        if identity(target) != started:
            if target.is_file() and not target.is_symlink() and filecmp.cmp(staged, target, shallow=False):
                os.unlink(staged)
                return
            raise ConcurrentWriteError(target)
        os.replace(staged, target)
    fsync_directory(target.parent)


# --- directories -----------------------------------------------------------------------------------
@contextlib.contextmanager
def staged_directory(target: os.PathLike) -> Iterator[Path]:
    """A new directory beside ``target``, held by this process; removed when the block ends (after an
    install by exchange it holds the previous version, which goes with it)."""
    target = Path(target)
    with contextlib.ExitStack() as stack:
        with directory_lock(target.parent):
            recover(target)
            path, _ = _create(target, os.mkdir)  # mode 0o777 & ~umask, as a plain mkdir gives
            stack.enter_context(directory_lock(path))
        stack.callback(_remove, path)  # gone when installed by a rename
        yield path


def install_directory(
    staged: Path, target: Path, started: Identity, keep_other_files: bool = False, only_into_empty: bool = False
) -> bool:
    """Put the finished directory ``staged`` in place of ``target`` in one atomic step.

    ``keep_other_files``: entries of the old ``target`` that ``staged`` does not have (a user's README,
    notes) are hard-linked into it first, so the swap loses nothing. ``only_into_empty``: refuse a
    ``target`` that was filled meanwhile. Returns False when another process installed the same files
    meanwhile (nothing to do); raises :class:`ConcurrentWriteError` when it installed something else.
    """
    with directory_lock(target.parent):
        recover(target)
        if identity(target) != started:
            if _holds_same_files(target, staged):
                return False
            raise ConcurrentWriteError(target)
        if started is None:
            os.rename(staged, target)
        else:
            if only_into_empty and os.listdir(target):
                raise FileExistsError(
                    errno.ENOTEMPTY,
                    f"{target} is not empty (it was filled while this process ran); nothing was installed",
                    str(target),
                )
            os.chmod(staged, stat.S_IMODE(os.stat(target).st_mode))
            if keep_other_files:
                _link_other_entries(target, staged)
            fsync_directory(staged)
            _swap(staged, target)
        fsync_directory(target.parent)
    return True


def _holds_same_files(directory: Path, staged: Path) -> bool:
    """Whether ``directory`` holds each file of ``staged`` with the same bytes."""
    if not directory.is_dir() or directory.is_symlink():
        return False
    for entry in os.scandir(staged):
        theirs = directory / entry.name
        if not (
            entry.is_file(follow_symlinks=False)
            and theirs.is_file()
            and not theirs.is_symlink()
            and filecmp.cmp(entry.path, theirs, shallow=False)
        ):
            return False
    return True


def _link_other_entries(source: Path, staged: Path) -> None:
    """Hard-link what ``source`` holds and ``staged`` does not into ``staged`` (symlinks copied as links)."""
    for entry in os.scandir(source):
        destination = staged / entry.name
        if os.path.lexists(destination):
            continue
        if entry.is_symlink():
            os.symlink(os.readlink(entry.path), destination)
        elif entry.is_dir():
            shutil.copytree(entry.path, destination, symlinks=True, copy_function=os.link)
        else:
            os.link(entry.path, destination, follow_symlinks=False)


def _swap(staged: Path, target: Path) -> None:
    """Exchange ``staged`` and ``target`` (atomic), or where the system cannot, rename ``target`` aside and
    ``staged`` in (a kill between leaves ``.NAME.*.old``, which :func:`recover` puts back)."""
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


# --- the atomic exchange ---------------------------------------------------------------------------
_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


def _load_renameat2() -> Callable[..., int] | None:
    """libc's ``renameat2`` (Linux, glibc 2.28+), or None."""
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


def rename_exchange(a: os.PathLike, b: os.PathLike) -> bool:
    """Swap two existing paths in one atomic step; False where the system or file system cannot."""
    if _renameat2 is None:
        return False
    if _renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
        return False  # an old kernel, or a file system without exchange
    raise OSError(code, os.strerror(code), os.fspath(a), None, os.fspath(b))
