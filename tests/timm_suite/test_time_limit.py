"""When timm's model suite runs out of time, the run says so once, in one line, and how to give it more."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.timm_suite import timm_tests
from tests.timm_suite.conftest import CONTROLS, OUR_MODELS

STOPPED = "was stopped at its time limit of 2 s (set by TIMM_SUITE_TIMEOUT), after "


@pytest.mark.slow  # the timm suite's test file in a child pytest, stopped at a 2 s limit
def test_a_stopped_suite_fails_one_test_with_one_line_and_reports_the_rest_not_run() -> None:
    env = {**os.environ, timm_tests.TIMEOUT_VARIABLE: "2"}
    env.pop("PYTEST_XDIST_WORKER", None)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "tests/timm_suite/test_timm_model_tests.py"],
        cwd=timm_tests.REPOSITORY_ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    output = done.stdout + done.stderr
    # every test that reads the run's outcomes: ours, and the controls on timm's own ViT-Ti/16 and DINOv3
    waiting = sum(
        timm_tests.selected(test, model) for test in timm_tests.PER_MODEL_TESTS for model in [*OUR_MODELS, *CONTROLS]
    )
    assert done.returncode == 1, output
    assert f"1 failed, 1 passed, {waiting - 1} skipped" in output, output
    # said once; pytest's short summary repeats a failure's message on its FAILED line (in full when CI
    # is set, cut to the terminal's width otherwise), as it does for every failure
    said_lines = [
        line
        for line in output.splitlines()
        if "was stopped at its time limit" in line and not line.startswith("FAILED ")
    ]
    assert len(said_lines) == 1, output
    said = said_lines[0]
    assert said.startswith("timm's model suite (tests/timm_suite: ") and STOPPED in said, output
    assert "a slow or busy machine is the likely cause" in said and "TIMM_SUITE_TIMEOUT=SECONDS" in said
    (failed,) = [line for line in output.splitlines() if line.startswith("FAILED ")]
    not_run = [line for line in output.splitlines() if line.startswith("SKIPPED ")]
    assert len(not_run) == 1 and f"SKIPPED [{waiting - 1}]" in not_run[0], output
    assert failed.split()[1].split(" - ")[0] in not_run[0]  # the tests not run point at the one that says why
    assert "Traceback" not in output and "TimeoutExpired" not in output, output


def test_the_limit_scales_with_a_calibration_run_and_can_be_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(timm_tests, "calibration_seconds", lambda: 10.0)
    monkeypatch.delenv(timm_tests.TIMEOUT_VARIABLE, raising=False)
    limit, origin = timm_tests.time_limit(models=11)
    assert limit == timm_tests.MARGIN * 10.0 * timm_tests.SUITE_PER_MODEL * 11
    assert origin.endswith("from a 10.0 s calibration run")
    monkeypatch.setattr(timm_tests, "calibration_seconds", lambda: 0.001)
    assert timm_tests.time_limit(models=11)[0] == timm_tests.MINIMUM_LIMIT
    monkeypatch.setenv(timm_tests.TIMEOUT_VARIABLE, "0")
    assert timm_tests.time_limit(models=11) == (0.0, "set by TIMM_SUITE_TIMEOUT")
    monkeypatch.setenv(timm_tests.TIMEOUT_VARIABLE, "soon")
    with pytest.raises(timm_tests.SuiteIncomplete, match="expected a number of seconds"):
        timm_tests.time_limit(models=11)
    assert timm_tests.progress("..F. [ 12%]\n.... [ 45%]\n..") == "45%" and timm_tests.progress("") == "none"
