"""The tests' time limits guard against hangs and scale with the machine: a command past its limit fails with one
line that says so, and a slower machine (or a busy one) gets a longer limit."""

import sys

import pytest

from tests.support import time_limits


@pytest.fixture
def factor(monkeypatch):
    def set_factor(value: str) -> None:
        monkeypatch.setenv(time_limits.FACTOR_VARIABLE, value)
        time_limits.machine_factor.cache_clear()

    yield set_factor
    time_limits.machine_factor.cache_clear()


def test_a_command_past_its_limit_fails_in_one_line_saying_so(factor):
    factor("1")
    with pytest.raises(pytest.fail.Exception) as failed:
        time_limits.run([sys.executable, "-c", "import time; time.sleep(30)"], quiet_seconds=0.05)
    message = str(failed.value)
    assert "was stopped at its time limit of 0 s" in message and "a hung command, not a wrong answer" in message
    assert "\n" not in message and f"set by {time_limits.FACTOR_VARIABLE}" in message


def test_the_limit_grows_with_the_machine_factor(factor):
    factor("1")
    quiet = time_limits.limit(10)[0]
    factor("3")
    assert time_limits.limit(10)[0] == 3 * quiet == 3 * time_limits.MARGIN * 10
    factor("0.2")  # a machine faster than the quiet one keeps the quiet limit
    assert time_limits.limit(10)[0] == quiet


def test_measured_factor_is_this_machine_against_a_quiet_one(factor, monkeypatch):
    factor("")
    monkeypatch.setattr(time_limits, "calibration_seconds", lambda: 4 * time_limits.QUIET_CALIBRATION_S)
    value, origin = time_limits.machine_factor()
    assert value == pytest.approx(4) and "calibration" in origin


def test_a_command_within_its_limit_returns_its_result(factor):
    factor("1")
    done = time_limits.run([sys.executable, "-c", "print('ok')"], quiet_seconds=60, capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout == "ok\n"
