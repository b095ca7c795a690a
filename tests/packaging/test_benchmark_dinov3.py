"""The DINOv3 benchmark against timm's Eva runs end to end and writes its JSON and table (no timing checks)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import time_limits

pytestmark = pytest.mark.slow  # runs the benchmark end to end

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "dinov3.py"


def test_dinov3_benchmark_runs_end_to_end(tmp_path: Path) -> None:
    command = [sys.executable, str(SCRIPT), "--variants", "s16", "--sizes", "64", "--batch", "1", "--train-batch", "2"]
    command += ["--repeats", "1", "--min-time", "0", "--threads", "1", "--clock", "cpu"]
    command += ["--out", str(tmp_path), "--name", "smoke"]
    done = time_limits.run(command, capture_output=True, text=True, quiet_seconds=120)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads((tmp_path / "smoke.json").read_text())
    assert result["machine"]["clock"] == "cpu" and result["machine"]["threads"] == 1
    records = result["records"]
    assert [r["kind"] for r in records] == ["infer", "infer_bf16", "train"]
    measured = [r for r in records if "skipped" not in r]
    # bf16 is left out, with the reason recorded, only where the CPU has no bf16 instructions
    assert len(measured) == 3 or records[1]["skipped"] == "this CPU has no bf16 instructions"
    for record in measured:
        assert record["timm_model"] == "vit_small_patch16_dinov3" and record["img_size"] == 64
        assert set(record["median"]) == {"ours", "timm"} and min(record["median"].values()) > 0
        assert record["ratio"] > 0 and record["max_abs_diff_fp32"] <= 1e-5  # the same weights, timm's outputs
    assert "ours/timm" in done.stdout and "training step fp32" in done.stdout
    rendered = subprocess.run(
        [sys.executable, str(SCRIPT), "--render", str(tmp_path / "smoke.json")], capture_output=True, text=True
    )
    assert rendered.returncode == 0 and rendered.stdout == done.stdout


def test_the_cpu_clock_needs_one_thread() -> None:
    """CPU time of several threads would count their spin-waiting: the CPU clock takes one thread."""
    done = time_limits.run(
        [sys.executable, str(SCRIPT), "--clock", "cpu", "--threads", "2"],
        capture_output=True,
        text=True,
        quiet_seconds=24,
    )
    assert done.returncode == 2 and "use it with --device cpu --threads 1" in done.stderr
