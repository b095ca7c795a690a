"""Writers in forked children: run one (``run_in_child``), or kill one at each step of its install (a child
wraps the calls that change the file system and SIGKILLs itself at the k-th one: ``run_killed_at``).

The steps counted are the calls that name a path inside the test's work directory: ``os.mkdir``,
``os.replace``, ``os.rename``, ``os.link``, ``shutil.rmtree`` and ``atomic_replace.rename_exchange`` (everything
a write does between them, such as the bytes of a file, lies inside a step's staging). At step ``k`` the
child is killed ``before`` the call, or, for an ``rmtree``, ``midway`` (after one file of the tree is gone).
A fork, not a fresh interpreter: the child has everything imported already.
"""

from __future__ import annotations

import os
import re
import select
import shutil
import signal
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any, NamedTuple

from timm_vitscratch import atomic_replace

WRAPPED = (
    (os, "mkdir"),
    (os, "replace"),
    (os, "rename"),
    (os, "link"),
    (shutil, "rmtree"),
    (atomic_replace, "rename_exchange"),
)


def run_in_child(action: Callable[[], str], timeout: float = 300.0) -> tuple[int | None, str]:
    """Fork a child (one torch thread: a thread pool does not survive a fork) that runs ``action()``; returns its
    exit code (None when it was killed for running past ``timeout``) and the text ``action`` returned."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 3
        try:
            os.close(read_end)
            import torch

            torch.set_num_threads(1)
            os.write(write_end, action().encode())
            code = 0
        except BaseException:
            import traceback

            os.write(write_end, traceback.format_exc().encode())
        finally:
            os._exit(code)
    os.close(write_end)
    output = _read_all(read_end, timeout)
    if output is None:
        os.kill(pid, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    return (None if output is None else os.waitstatus_to_exitcode(status)), output or ""


def _read_all(fd: int, timeout: float) -> str | None:
    """Everything written to the pipe ``fd`` until its writer closes it, or None after ``timeout`` seconds."""
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while True:
            ready, _, _ = select.select([fd], [], [], max(deadline - time.monotonic(), 0))
            if not ready:
                return None
            chunk = os.read(fd, 65536)
            if not chunk:
                return b"".join(chunks).decode()
            chunks.append(chunk)
    finally:
        os.close(fd)


class Run(NamedTuple):
    steps: list[str]  # the steps the child announced, the last one being where it was killed
    killed: bool
    exit_code: int | None


def _shown(value: object, work: Path) -> str | None:
    """A path inside ``work``, as the step table shows it (the staging names' pid and random part elided)."""
    if isinstance(value, (str, os.PathLike)):
        path = Path(value)
        if work in path.parents:
            return re.sub(r"\.\d+-[0-9a-f]{8}\.", ".<pid>-<random>.", str(path.relative_to(work)))
    return None


def run_killed_at(
    work: Path, action: Callable[[], None], step: int | None = None, midway: bool = False, exchange: bool = True
) -> Run:
    """Fork a child that runs ``action()`` and is SIGKILLed before its ``step``-th step (1-based; None: never).

    ``exchange=False`` makes the child use the two-rename install of systems without ``RENAME_EXCHANGE``.
    """
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 3
        try:
            os.close(read_end)
            import torch

            torch.set_num_threads(1)
            count = [0]

            def wrap(module: ModuleType, name: str) -> None:
                original = getattr(module, name)

                def counted(*args: Any, **kwargs: Any) -> Any:
                    shown = [s for s in (_shown(a, work) for a in args[:2]) if s is not None]
                    if shown:
                        count[0] += 1
                        os.write(write_end, f"{name} {' -> '.join(shown)}\n".encode())
                        if count[0] == step:
                            if midway and name == "rmtree":
                                first = next((p for p in Path(args[0]).rglob("*") if p.is_file()), None)
                                if first is not None:
                                    os.unlink(first)
                            os.kill(os.getpid(), signal.SIGKILL)
                    return original(*args, **kwargs)

                setattr(module, name, counted)

            if not exchange:
                atomic_replace.rename_exchange = lambda a, b: False
            for module, name in WRAPPED:
                if exchange or name != "rename_exchange":
                    wrap(module, name)
            action()
            code = 0
        except BaseException:
            import traceback

            traceback.print_exc()
        finally:
            os._exit(code)
    os.close(write_end)
    output = _read_all(read_end, 300.0)
    if output is None:
        os.kill(pid, signal.SIGKILL)
        raise AssertionError(f"the writer did not finish in 300 s (killed at step {step})")
    _, status = os.waitpid(pid, 0)
    killed = os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
    return Run(output.splitlines(), killed, None if killed else os.waitstatus_to_exitcode(status))
