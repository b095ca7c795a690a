"""Time limits for the commands the tests start: guards against a hung command, scaled to this machine, never a
verdict on speed.

A limit is what the command takes on a quiet 2-core machine, times a margin, times how much slower this machine is
right now (its calibration: a small piece of the suite's own work, timed). On a machine busy with a second test
run the limits grow with it; a command stopped at its limit fails with one line that says so and how the limit
was reached, so that a hang is never mistaken for a wrong answer (or the other way round).
"""

from __future__ import annotations

import functools
import os
import subprocess
import time
from typing import Any

import pytest
import timm

#: set to a number to fix the machine factor by hand (e.g. 4 on a machine known to be four times slower)
FACTOR_VARIABLE = "VITSCRATCH_TIME_FACTOR"
#: calibration_seconds() on a quiet 2-core machine of the project's kind
QUIET_CALIBRATION_S = 0.16
#: a limit is this many times the quiet time, before scaling
MARGIN = 5.0


def calibration_seconds() -> float:
    """Seconds this machine takes, now, for a small piece of the suite's own work: timm's ViT-Ti/16 built, then
    run forward and backward on two images (the slower of two tries: a limit should err on the long side)."""
    import torch

    times = []
    for _ in range(2):
        started = time.perf_counter()
        timm.create_model("vit_tiny_patch16_224")(torch.randn(2, 3, 224, 224)).sum().backward()
        times.append(time.perf_counter() - started)
    return max(times)


@functools.cache
def machine_factor() -> tuple[float, str]:
    """How many times slower than a quiet machine this one is (at least 1), and where that comes from."""
    value = os.environ.get(FACTOR_VARIABLE, "").strip()
    if value:
        try:
            return max(1.0, float(value)), f"set by {FACTOR_VARIABLE}"
        except ValueError:
            raise pytest.UsageError(f"{FACTOR_VARIABLE}={value!r}: expected a number (a machine factor)") from None
    calibration = calibration_seconds()
    factor = max(1.0, calibration / QUIET_CALIBRATION_S)
    return factor, f"a {calibration:.2f} s calibration against {QUIET_CALIBRATION_S} s on a quiet machine"


def limit(quiet_seconds: float) -> tuple[float, str]:
    """The limit for a command that takes up to ``quiet_seconds`` on a quiet machine, and how it was reached."""
    factor, origin = machine_factor()
    seconds = MARGIN * quiet_seconds * factor
    return seconds, f"{MARGIN:.0f}× its {quiet_seconds:.0f} s on a quiet machine × {factor:.1f} from {origin}"


def run(command: Any, quiet_seconds: float, **kwargs: Any) -> subprocess.CompletedProcess:
    """``subprocess.run(command, **kwargs)`` under :func:`limit`; past it, the test fails with one line saying so."""
    seconds, origin = limit(quiet_seconds)
    started = time.perf_counter()
    try:
        return subprocess.run(command, timeout=seconds, **kwargs)
    except subprocess.TimeoutExpired:
        shown = command if isinstance(command, str) else " ".join(map(str, command))
        pytest.fail(
            f"`{shown[:300]}` was stopped at its time limit of {seconds:.0f} s ({origin}) after "
            f"{time.perf_counter() - started:.0f} s: a hung command, not a wrong answer; {FACTOR_VARIABLE} raises "
            f"the limit on a machine slower than that",
            pytrace=False,
        )
