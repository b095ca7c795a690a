"""What the suite prints at its end (fuzz case counts, timm's test table), also when pytest-xdist runs it.

Under xdist the tests run in worker processes, and only the controller prints. Each worker hands its part
over in ``workeroutput`` as plain data; the controller merges the parts (counts add up) and prints them.
"""

from __future__ import annotations

import collections
import sys
from typing import Any

import pytest

#: what this process will print: parts merged from the workers, or this process's own
MERGED: dict[str, Any] = {"fuzz": collections.defaultdict(collections.Counter), "sections": []}


def own_parts() -> dict[str, Any]:
    """This process's parts, as plain data: fuzz counts by loader, and finished sections ``[title, text]``."""
    fuzzing = sys.modules.get("tests.support.fuzzing")
    timm_tests = sys.modules.get("tests.timm_suite.timm_tests")
    fuzz = {name: dict(outcomes) for name, outcomes in fuzzing.CASES.items()} if fuzzing else {}
    sections = [list(timm_tests.LAST_RUN["section"])] if timm_tests and timm_tests.LAST_RUN else []
    return {"fuzz": fuzz, "sections": sections}


def merge(parts: dict[str, Any]) -> None:
    for name, outcomes in parts["fuzz"].items():
        MERGED["fuzz"][name].update(outcomes)
    MERGED["sections"].extend(parts["sections"])


def write(terminalreporter: pytest.TerminalReporter) -> None:
    for title, text in MERGED["sections"]:
        terminalreporter.section(title)
        terminalreporter.write_line(text)
    if not MERGED["fuzz"]:
        return
    terminalreporter.section("fuzz cases run")
    total = 0
    for name, outcomes in MERGED["fuzz"].items():
        total += sum(outcomes.values())
        shown = ", ".join(f"{count} {outcome}" for outcome, count in sorted(outcomes.items()))
        terminalreporter.write_line(f"{name}: {sum(outcomes.values())} ({shown})")
    terminalreporter.write_line(f"total: {total}")
