"""The benchmark entry point runs end to end and writes its JSON, Markdown and plot (no timing checks)."""

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from tests.support import time_limits

pytestmark = pytest.mark.slow  # runs the benchmark end to end

ROOT = Path(__file__).resolve().parents[2]


def test_benchmark_smoke_run_writes_all_outputs(tmp_path):
    command = [
        sys.executable,
        str(ROOT / "benchmarks" / "run.py"),
        "--measure",
        "infer",
        "train",
        "memory",
        "create",
        "pretrained",
        "--variants",
        "ti16",
        "--pretrained-variants",
        "ti16",
        "--contestants",
        "ours",
        "ours-pooled",
        "timm",
        "--batch-sizes",
        "1",
        "2",
        "--train-batch-sizes",
        "2",
        "--repeats",
        "1",
        "--create-repeats",
        "1",
        "--warmup",
        "0",
        "--min-time",
        "0",
        "--matmul-size",
        "256",
        "--out",
        str(tmp_path),
        "--name",
        "smoke",
        "--threads",
        "1",
        "--clock",
        "cpu",
    ]
    done = time_limits.run(command, capture_output=True, text=True, quiet_seconds=120)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads((tmp_path / "smoke.json").read_text())
    kinds = [(r["kind"], r.get("batch")) for r in result["records"]]
    assert kinds == [("infer", 1), ("infer", 2), ("train", 2), ("memory", 2), ("create", None), ("pretrained", None)]
    for record in result["records"]:
        # the opt-in pooled forward builds as ours does: measured where the forward runs, not at creation
        pooled = {"ours-pooled"} if record["kind"] in ("infer", "train", "memory") else set()
        assert set(record["median"]) == {"ours", "timm"} | pooled and all(v > 0 for v in record["median"].values())
        assert set(record["ratio"]) == {"timm"} and set(record["option_ratio"]) == pooled
        assert all(set(by_peer) == {"timm"} for by_peer in record["option_ratio"].values())
    infer = result["records"][0]
    assert infer["forward_flops_per_image"] > 1e9 and 0 < infer["fraction_of_matmul"]["ours"]
    pretrained = result["records"][-1]
    assert pretrained["logits_max_abs_diff_vs_timm"]["ours"] <= 1e-5
    memory = result["records"][3]["raw"]
    assert memory["ours"]["torch_peak_bytes"] > memory["ours"]["resting_bytes"] > 0
    table = (tmp_path / "smoke.md").read_text()
    assert "| inference fp32 (img/s) | ti16 | 1 |" in table and "ours/timm" in table
    assert "| inference fp32 (img/s), pooled forward (opt-in) | ti16 | 1 |" in table
    assert (tmp_path / "smoke.png").stat().st_size > 0
    assert result["machine"]["threads"] == 1 and result["machine"]["clock"] == "cpu" and result["machine"]["torch"]
    assert "timed by the CPU time the process used" in table
    # a second bounded run appends to the same report, keeping both runs' dates and loads
    again = command[:2] + [
        "--measure",
        "create",
        "--variants",
        "ti16",
        "--contestants",
        "ours",
        "timm",
        "--repeats",
        "1",
        "--create-repeats",
        "1",
        "--warmup",
        "0",
        "--out",
        str(tmp_path),
        "--name",
        "smoke",
        "--append",
        "--threads",
        "1",
        "--clock",
        "cpu",
    ]
    done = time_limits.run(again, capture_output=True, text=True, quiet_seconds=120)
    assert done.returncode == 0, done.stderr[-3000:]
    merged = json.loads((tmp_path / "smoke.json").read_text())
    assert [r["kind"] for r in merged["records"]] == [k for k, _ in kinds] + ["create"]
    assert len(merged["machine"]["runs"]) == 2 and len(merged["settings"]["runs"]) == 2
    assert (tmp_path / "smoke.md").read_text().count("- run ") == 2
    # an existing results file is never overwritten unless asked: the run stops before measuring anything
    before = (tmp_path / "smoke.json").read_bytes()
    done = time_limits.run([a for a in again if a != "--append"], capture_output=True, text=True, quiet_seconds=120)
    assert done.returncode == 2 and "smoke.json exists: pass --replace to overwrite it" in done.stderr
    assert (tmp_path / "smoke.json").read_bytes() == before


def test_a_run_writes_a_new_file_by_default_and_quick_is_small():
    spec = importlib.util.spec_from_file_location("benchmarks_run", ROOT / "benchmarks" / "run.py")
    run = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(run)  # the script puts benchmarks/ on sys.path for its own helpers
    args = run.parse_args(["--quick"])
    assert args.out == ROOT / "benchmarks" / "results" / "local" and args.name.startswith("cpu-quick-")
    assert args.variants == ["ti16"] and args.pretrained_variants == ["ti16"] and args.matmul_size == 2048
    assert "compile" not in args.measure and "infer_bf16" not in args.measure
    assert run.parse_args(["--quick", "--variants", "b16", "--measure", "all"]).variants == ["b16"]  # given wins


def test_cpu_clock_needs_one_thread():
    """CPU time of several threads would count their spin-waiting: the CPU clock takes one thread."""
    done = time_limits.run(
        [sys.executable, str(ROOT / "benchmarks" / "run.py"), "--clock", "cpu", "--threads", "2"],
        capture_output=True,
        text=True,
        quiet_seconds=24,
    )
    assert done.returncode == 2 and "use it with --device cpu --threads 1" in done.stderr


def test_naflex_benchmark_runs_end_to_end(tmp_path):
    """The packed-against-padded NaFlex benchmark writes its JSON and prints its table (no timing checks)."""
    command = [sys.executable, str(ROOT / "benchmarks" / "naflex.py"), "--variants", "ti16", "--repeats", "1"]
    command += ["--seq-lens", "256"]  # the shorter of the two: both paddings, both kinds, every contestant
    command += ["--min-time", "0", "--threads", "1", "--out", str(tmp_path), "--name", "smoke"]
    done = time_limits.run(command, capture_output=True, text=True, quiet_seconds=120)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads((tmp_path / "smoke.json").read_text())
    assert result["machine"]["clock"] == "wall" and result["records"]
    assert {r["kind"] for r in result["records"]} == {"infer", "train"} and {
        r["seq_len"] for r in result["records"]
    } == {256}
    assert all(
        min(r["median"].values()) > 0
        and set(r["median"]) - {f"ours-{k}" for k in r["kernel_ratios"]} == {"ours", "ours-padded", "timm"}
        for r in result["records"]
    )
    assert "ours/timm" in done.stdout
