"""Run one refusal in a child process under a memory cap, and report its time and memory.

The child imports what it needs first, then caps its address space at what it already uses plus
``--cap-mb`` and runs the snippet: an allocation past the cap would end in MemoryError (or a crash),
never in a machine out of memory. It prints one JSON line: outcome, error type and message, seconds,
and how much its peak resident memory grew.
"""

from __future__ import annotations

import json
import resource
import sys
import time
import traceback


def _vm_bytes() -> int:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[0]) * resource.getpagesize()


def main() -> None:
    setup, snippet, cap_mb = sys.argv[1], sys.argv[2], int(sys.argv[3])
    scope: dict = {}
    exec(setup, scope)  # imports and inputs: not measured
    limit = _vm_bytes() + (cap_mb << 20)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    peak_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    try:
        exec(snippet, scope)
        outcome, kind, message = "ok", "", ""
    except BaseException as err:  # reported to the test, which decides
        outcome, kind, message = "error", type(err).__name__, str(err) or traceback.format_exc()[-500:]
    seconds = time.perf_counter() - start
    grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak_before) / 1024
    print(json.dumps(dict(outcome=outcome, type=kind, message=message, seconds=seconds, peak_growth_mb=grown)))


def bounded(setup: str, snippet: str, cap_mb: int = 200) -> dict:
    """``snippet`` in a child (this file) whose address space may grow by ``cap_mb`` after ``setup``: its JSON
    line (outcome, error type and message, seconds, peak memory growth)."""
    import subprocess

    result = subprocess.run(
        [sys.executable, __file__, setup, snippet, str(cap_mb)], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


if __name__ == "__main__":
    main()
