"""Support for the fuzz tests: damaged copies of valid files, and a loader process that may crash or hang.

Damage is truncation and byte edits (a flipped bit or a replaced byte), at positions drawn anywhere in
the file or, more often, inside its structure (safetensors header, zip headers and central directory,
pickles), where a reader's parsing happens; flips in tensor data only change values.
Every run has a fixed seed (``derandomize=True``, no example database) and is bounded (``max_examples``).
hypothesis also mixes in constants from the local modules imported so far, so which cases are drawn (not
how many) depends on what ran before in the process; no test asserts how the outcomes split.
"""

from __future__ import annotations

import collections
import json
import operator
import os
import queue
import struct
import subprocess
import sys
import tempfile
import threading
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import IO, Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from tests.support import time_limits

WORKER_SCRIPT = Path(__file__).with_name("loader_worker.py")
Span = tuple[int, int]

#: cases run per fuzz test, by test name (printed at the end of the session by conftest.py)
CASES: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)


def fuzz_settings(max_examples: int) -> settings:
    return settings(
        max_examples=max_examples,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture],
    )


# --- where a file's structure is -------------------------------------------------------------------
def safetensors_structure(data: bytes) -> list[Span]:
    return [(0, 8 + struct.unpack("<Q", data[:8])[0])]


def zip_structure(path: Path, member_prefix: int = 160) -> list[Span]:
    """Each member's local header (and the first bytes of its data: .npy headers), the pickle member
    of a torch.save zip whole, and the central directory."""
    with zipfile.ZipFile(path) as archive:
        spans = []
        for info in archive.infolist():
            end = info.header_offset + 30 + len(info.filename) + member_prefix
            if info.filename.endswith(".pkl"):
                end = info.header_offset + 30 + len(info.filename) + 64 + info.compress_size
            spans.append((info.header_offset, end))
        spans.append((archive.start_dir, path.stat().st_size))
    size = path.stat().st_size
    return [(a, min(b, size)) for a, b in spans if a < size]


def whole(data: bytes) -> list[Span]:
    return [(0, len(data))]


# --- damage ----------------------------------------------------------------------------------------
class Damage:
    """A damaged copy of a file's bytes; shown (when a case fails) as the list of edits, not the bytes."""

    def __init__(self, content: bytes, description: str) -> None:
        self.content, self.description = content, description

    def __repr__(self) -> str:
        return f"Damage({self.description!r})"


@st.composite
def damaged(draw: Any, data: bytes, structure: list[Span]) -> Damage:
    """A damaged copy of ``data``: up to four byte edits, and a truncation (or only a truncation)."""

    def position() -> int:
        span = draw(st.sampled_from(structure)) if draw(st.integers(0, 3)) else (0, len(data))
        return draw(st.integers(span[0], span[1] - 1))

    out = bytearray(data)
    steps = []
    for _ in range(draw(st.integers(0, 4))):
        at = position()
        if draw(st.booleans()):
            bit = draw(st.integers(0, 7))
            out[at] ^= 1 << bit
            steps.append(f"flip bit {bit} at {at}")
        else:
            value = draw(st.integers(0, 255).filter(partial(operator.ne, out[at])))
            out[at] = value
            steps.append(f"byte {at} = {value:#04x}")
    if not steps or draw(st.booleans()):
        at = position()
        del out[at:]
        steps.append(f"truncate at {at}")
    return Damage(bytes(out), ", ".join(steps))


# --- the loader process ----------------------------------------------------------------------------
class LoaderProcess:
    """``loader_worker.py`` in a child process: runs one loader call at a time, with a time limit.

    A call whose process dies (a crash in a C/Rust parser) or does not answer in ``timeout`` seconds on a quiet
    machine (a hang; scaled by this machine's factor, so that a busy machine is not taken for a hang) comes back
    as ``{"outcome": "crash" | "hang", ...}`` and a fresh process is started.
    """

    def __init__(self, timeout: float = 60.0, script: Path = WORKER_SCRIPT) -> None:
        self.factor = time_limits.machine_factor()[0]
        self.timeout = timeout * self.factor
        self.script = script  # another worker speaking the same protocol (tests/support/naflex_worker.py)
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._stderr = tempfile.TemporaryFile()
        self._start()

    def _start(self) -> None:
        self._lines = queue.Queue()
        self._stderr.seek(0)
        self._stderr.truncate()
        self._proc: subprocess.Popen[str] = subprocess.Popen(
            [sys.executable, str(self.script)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
            env={**os.environ, "OMP_NUM_THREADS": "1"},
        )
        assert self._proc.stdin is not None  # a pipe: stdin=PIPE above
        self._stdin: IO[str] = self._proc.stdin
        threading.Thread(target=self._pump, args=(self._proc, self._lines), daemon=True).start()
        ready = self._next(120.0 * self.factor)
        assert ready is not None and ready.get("outcome") == "ready", f"loader process did not start: {ready}"

    @staticmethod
    def _pump(proc: subprocess.Popen[str], lines: queue.Queue[str | None]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith("@@ "):
                lines.put(line[3:])
        lines.put(None)  # the process is gone

    def _next(self, timeout: float) -> dict[str, Any] | None:
        try:
            line = self._lines.get(timeout=timeout)
        except queue.Empty:
            return {"outcome": "hang", "message": f"no answer within {timeout:.0f} s"}
        return None if line is None else json.loads(line)

    def run(self, loader: str, path: Path | str, **extra: Any) -> dict[str, Any]:
        self._stdin.write(json.dumps({"loader": loader, "path": str(path), **extra}) + "\n")
        self._stdin.flush()
        result = self._next(self.timeout)
        if result is None or result["outcome"] == "hang":
            self._proc.kill()
            code = self._proc.wait()
            self._stderr.seek(0)
            tail = self._stderr.read()[-2000:].decode(errors="replace")
            result = result or {"outcome": "crash", "message": f"exit code {code}"}
            result["stderr"] = tail
            self._start()
        return result

    def close(self) -> None:
        if self._proc.poll() is None:
            self._stdin.close()
            try:
                self._proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._stderr.close()


def check_outcome(result: dict[str, Any], names: str, damage: str) -> str:
    """Assert a loader's answer is a load or one of our errors naming ``names``; returns the outcome."""
    outcome = result["outcome"]
    assert outcome in ("ok", "error"), f"{damage}: the loader's process reported {outcome}: {result}"
    if outcome == "error":
        assert result["ours"], f"{damage}: escaped as {result['type']}: {result['message']}\n{result['traceback']}"
        assert names in result["message"], f"{damage}: the message does not name {names}: {result['message']}"
        problem = result["message"].replace(names, "").strip(" :")
        assert len(problem) >= 8, f"{damage}: the message does not say what is wrong: {result['message']}"
    return outcome


@contextmanager
def offline_loader(timeout: float, headroom: int) -> Iterator[LoaderProcess]:
    """A :class:`LoaderProcess` kept offline (``HF_HUB_OFFLINE=1`` while it runs) whose address space may grow by
    at most ``headroom`` bytes over what it uses once started, ``timeout`` seconds a case."""
    saved = os.environ.get("HF_HUB_OFFLINE")
    os.environ["HF_HUB_OFFLINE"] = "1"
    process = LoaderProcess(timeout=timeout)
    try:
        assert process.run("limit_memory", "-", headroom=headroom)["outcome"] == "ok"
        yield process
    finally:
        process.close()
        if saved is None:
            os.environ.pop("HF_HUB_OFFLINE")
        else:
            os.environ["HF_HUB_OFFLINE"] = saved
