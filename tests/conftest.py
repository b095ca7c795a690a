import sys

import pytest
import torch

pytest_plugins = ["tests.support.hub_fixtures"]


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def pytest_terminal_summary(terminalreporter):
    """How many fuzz cases ran (tests/support/fuzzing.py counts them), by loader and outcome."""
    fuzzing = sys.modules.get("tests.support.fuzzing")
    if fuzzing is None or not fuzzing.CASES:
        return
    terminalreporter.section("fuzz cases run")
    total = 0
    for name, outcomes in fuzzing.CASES.items():
        total += sum(outcomes.values())
        shown = ", ".join(f"{count} {outcome}" for outcome, count in sorted(outcomes.items()))
        terminalreporter.write_line(f"{name}: {sum(outcomes.values())} ({shown})")
    terminalreporter.write_line(f"total: {total}")
