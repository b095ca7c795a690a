"""DINOv3 7B without 7B of memory: peak RSS and time of converting and loading a synthetic 13.4 GB checkpoint.

Steps, each in a fresh child process (the parent never imports torch):

1. ``make``: benchmarks/make_synthetic_7b.py writes timm's ``vit_7b_patch16_dinov3`` tensors in bfloat16,
   in timm's names, laid out as ``safetensors.torch.save_file`` lays them out (data start not 64-aligned).
2. ``convert``: ``vitscratch convert SRC OUT`` (the CLI, in its own process).
3. Loads with ``dtype=torch.bfloat16`` (the file's dtype: no cast), each followed by one read of every weight:
   - ``file``: ``timm.create_model('scratch_dinov3_7b16', pretrained=True, pretrained_cfg_overlay=dict(file=SRC))``;
   - ``tag``: ``timm.create_model('scratch_dinov3_7b16.lvd1689m', pretrained=True)`` with SRC laid (hard-linked)
     into an offline Hugging Face cache where timm's download puts ``timm/vit_7b_patch16_dinov3.lvd1689m``;
   - ``local-dir``: ``timm.create_model('local-dir:OUT', pretrained=True)``, the directory ``convert`` wrote.

For each child: wall time, its peak RSS (``ru_maxrss`` from ``wait4``: anonymous and file-backed pages
together, as ``VmHWM``), and the peaks of anonymous and file-backed RSS sampled every 20 ms. A load child
reports its own figures too: RSS after imports, the load's seconds and RSS growth, how many of the model's
bytes are views of the weights file's mapping (memory-mapped, not copied), and the same after reading
every weight once. Peak RSS is set against the largest tensor and the checkpoint's size.

    python benchmarks/stream_7b.py [--workdir /tmp/big7b] [--out benchmarks/results/stream-7b.json] [--keep]
    python benchmarks/stream_7b.py --depth 2 --embed-dim 1024 --num-heads 16   # a small model, same shape

The work directory's big files are removed at the end unless ``--keep``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
MODEL = "scratch_dinov3_7b16"
TAG = "lvd1689m"
HUB_REPO = "timm/vit_7b_patch16_dinov3.lvd1689m"
REVISION = "0123456789abcdef0123456789abcdef01234567"
SAMPLE_SECONDS = 0.02


# --- child side: one load, measured from inside ---------------------------------------------------------
def _status_kib(*fields: str) -> dict[str, int]:
    values = {}
    with open("/proc/self/status") as status:
        for line in status:
            name, _, rest = line.partition(":")
            if name in fields:
                values[name] = int(rest.split()[0])
    return values


def _mapped_bytes(model: Any, suffix: str) -> tuple[int, int]:
    """(bytes of the model's tensors inside a mapping of a file named ``*suffix``, bytes of all its tensors)."""
    import itertools

    ranges = []
    with open("/proc/self/maps") as maps:
        for line in maps:
            parts = line.split(maxsplit=5)
            if len(parts) == 6 and parts[5].strip().endswith(suffix):
                ranges.append(tuple(int(v, 16) for v in parts[0].split("-")))
    mapped = total = 0
    for tensor in itertools.chain(model.parameters(), model.buffers()):
        nbytes = tensor.numel() * tensor.element_size()
        total += nbytes
        if any(lo <= tensor.data_ptr() < hi for lo, hi in ranges):
            mapped += nbytes
    return mapped, total


def child_load(route: str, location: str, extra: dict[str, Any]) -> None:
    with open("/proc/self/oom_score_adj", "w") as adj:  # out of memory, this child goes first, not a neighbour
        adj.write("1000")
    import timm
    import torch

    import timm_vitscratch  # noqa: F401  (registers the models)

    before = _status_kib("VmRSS", "VmHWM")
    kwargs: dict[str, Any] = {"pretrained": True, "dtype": torch.bfloat16, **extra}
    start = time.perf_counter()
    if route == "file":
        model = timm.create_model(MODEL, pretrained_cfg_overlay=dict(file=location), **kwargs)
    elif route == "tag":
        model = timm.create_model(f"{MODEL}.{TAG}", **kwargs)
    else:
        model = timm.create_model(f"local-dir:{location}", **kwargs)
    load_seconds = time.perf_counter() - start
    loaded = _status_kib("VmRSS", "VmHWM")
    mapped, total = _mapped_bytes(model, ".safetensors")
    start = time.perf_counter()
    with torch.no_grad():  # read every weight once (a reduction: no copy), so all its pages become resident
        checksum = sum(float(hi) - float(lo) for lo, hi in (torch.aminmax(t) for t in model.parameters()))
    touch_seconds = time.perf_counter() - start
    touched = _status_kib("VmRSS", "VmHWM")
    print(
        json.dumps(
            {
                "parameters": sum(p.numel() for p in model.parameters()),
                "dtype": str(next(model.parameters()).dtype).replace("torch.", ""),
                "load_seconds": load_seconds,
                "touch_seconds": touch_seconds,
                "rss_after_imports_mb": before["VmRSS"] / 1024,
                "rss_after_load_mb": loaded["VmRSS"] / 1024,
                "peak_rss_after_load_mb": loaded["VmHWM"] / 1024,
                "rss_after_reading_every_weight_mb": touched["VmRSS"] / 1024,
                "model_bytes": total,
                "memory_mapped_bytes": mapped,
                "checksum_finite": checksum == checksum and checksum != float("inf"),
            }
        )
    )


# --- parent side -------------------------------------------------------------------------------------------
def measured(command: list[str], log: Path, env: dict[str, str] | None = None, check: bool = True) -> dict[str, Any]:
    """Run ``command``; its wall time, peak RSS (wait4's ru_maxrss) and sampled anonymous / file RSS peaks.
    A failure ends the run, or with ``check=False`` is recorded as ``error`` (the output's last line)."""
    os.sync()  # no dirty pages of an earlier step are written back during this one
    peaks = {"RssAnon": 0, "RssFile": 0}
    with open(log, "w") as out:
        start = time.perf_counter()
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
        while True:
            pid, status, usage = os.wait4(process.pid, os.WNOHANG)
            if pid:
                break
            try:
                with open(f"/proc/{process.pid}/status") as handle:
                    for line in handle:
                        name, _, rest = line.partition(":")
                        if name in peaks:
                            peaks[name] = max(peaks[name], int(rest.split()[0]))
            except (OSError, ValueError):
                pass
            time.sleep(SAMPLE_SECONDS)
        seconds = time.perf_counter() - start
    process.returncode = os.waitstatus_to_exitcode(status)  # reaped here: Popen must not wait for it again
    text = log.read_text()
    if process.returncode != 0 and check:
        raise SystemExit(f"{' '.join(command)} failed ({process.returncode}):\n{text[-3000:]}")
    result: dict[str, Any] = {
        "wall_seconds": round(seconds, 1),
        "peak_rss_mb": round(usage.ru_maxrss / 1024),
        "peak_anon_rss_mb": round(peaks["RssAnon"] / 1024),
        "peak_file_rss_mb": round(peaks["RssFile"] / 1024),
    }
    last = text.strip().splitlines()[-1] if text.strip() else ""
    if process.returncode != 0:
        result["error"] = last
    elif last.startswith("{"):
        result["child"] = json.loads(last)
    return result


def mem_available() -> int:
    """Bytes the kernel says can be allocated without swapping (``MemAvailable``)."""
    with open("/proc/meminfo") as meminfo:
        for line in meminfo:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) << 10
    return 0


def lay_in_hub_cache(source: Path, hf_home: Path) -> None:
    """``source`` hard-linked where ``hf_hub_download`` of the tag's repo puts model.safetensors (no copy)."""
    repo = hf_home / "hub" / ("models--" + HUB_REPO.replace("/", "--"))
    snapshot = repo / "snapshots" / REVISION
    snapshot.mkdir(parents=True, exist_ok=True)
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / "main").write_text(REVISION)
    target = snapshot / "model.safetensors"
    target.unlink(missing_ok=True)
    os.link(source, target)


def ratios(result: dict[str, Any], floor_mb: float, largest: int, size: int) -> None:
    """Peak RSS above ``floor_mb`` (a load child's own RSS after its imports; for convert, the peak of a
    process that only imports), over the largest tensor and over the checkpoint's size."""
    above = (result["peak_rss_mb"] - floor_mb) * 2**20
    result["peak_above_imports_mb"] = round(above / 2**20)
    result["peak_above_imports_over_largest_tensor"] = round(above / largest, 2)
    result["peak_above_imports_over_checkpoint"] = round(above / size, 3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "big7b")
    parser.add_argument("--out", type=Path, default=None, help="write the results here (JSON)")
    parser.add_argument("--keep", action="store_true", help="keep the checkpoint and the converted directory")
    parser.add_argument("--depth", type=int, default=None)
    parser.add_argument("--embed-dim", type=int, default=None)
    parser.add_argument("--num-heads", type=int, default=None)
    parser.add_argument("--routes", default="file,tag,local-dir", help="the loads to run (local-dir: also convert)")
    parser.add_argument("--note", default="", help="recorded with the results (e.g. the code measured)")
    parser.add_argument("--child-load", nargs=3, metavar=("ROUTE", "LOCATION", "KWARGS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child_load:
        route, location, extra = args.child_load
        child_load(route, location, json.loads(extra))
        return

    overrides = {
        key: value
        for key, value in (("depth", args.depth), ("embed_dim", args.embed_dim), ("num_heads", args.num_heads))
        if value
    }
    work = args.workdir
    work.mkdir(parents=True, exist_ok=True)
    source, converted, hf_home = work / "synthetic-7b.safetensors", work / "converted", work / "hf"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    python = sys.executable
    results: dict[str, Any] = {
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()},
        "model": MODEL,
        "model_overrides": overrides,
        "note": args.note,
        "mem_available_at_start_gib": round(mem_available() / 2**30, 1),
    }
    try:
        imports = "import json, timm, torch, timm_vitscratch; print(json.dumps(dict(rss_mb=int(open('/proc/self/statm')"
        imports += ".read().split()[1]) * 4096 / 2**20)))"
        results["imports"] = measured([python, "-c", imports], work / "imports.log", env)
        floor = results["imports"]["child"]["rss_mb"]  # resident after the imports (the peak has transients)
        size_flags = [f"--{k.replace('_', '-')}={v}" for k, v in overrides.items()]
        make = measured([python, str(HERE / "make_synthetic_7b.py"), str(source), *size_flags], work / "make.log", env)
        results["checkpoint"] = make.pop("child")
        results["make"] = make
        size, largest = results["checkpoint"]["bytes"], results["checkpoint"]["largest_tensor"]["bytes"]
        print(f"checkpoint: {size / 1e9:.2f} GB, largest tensor {largest / 1e6:.1f} MB ({make['wall_seconds']} s)")

        shutil.rmtree(converted, ignore_errors=True)
        wanted = args.routes.split(",")
        if "local-dir" in wanted:
            convert = [python, "-m", "timm_vitscratch.cli", "convert", str(source), str(converted)]
            results["convert"] = measured(convert, work / "convert.log", env, check=False)
            results["convert"]["output"] = (work / "convert.log").read_text().strip().splitlines()
        else:
            results["convert"] = {"error": "not run (--routes)"}
        lay_in_hub_cache(source, hf_home)
        hub_env = {**env, "HF_HOME": str(hf_home), "HF_HUB_OFFLINE": "1"}
        extra = json.dumps(overrides)
        routes = {"file": (str(source), env), "tag": (str(source), hub_env), "local-dir": (str(converted), env)}
        routes = {route: routes[route] for route in wanted if route in routes}
        if "error" in results["convert"]:
            routes.pop("local-dir", None)  # nothing was converted to load
        results["load"] = {}
        for route, (location, route_env) in routes.items():
            if route != "local-dir" and mem_available() < size + (2 << 30):
                # an unaligned file is copied into anonymous memory: without room for it, other processes suffer
                results["load"][route] = {
                    "skipped": f"MemAvailable {mem_available() / 2**30:.1f} GiB < the copy + 2 GiB"
                }
                continue
            command = [python, __file__, "--child-load", route, location, extra if route != "local-dir" else "{}"]
            results["load"][route] = measured(command, work / f"load-{route}.log", route_env)
        for step in [results["convert"], *results["load"].values()]:
            if "peak_rss_mb" in step and "error" not in step:
                ratios(step, step.get("child", {}).get("rss_after_imports_mb", floor), largest, size)
        print(json.dumps(results, indent=1))
        if args.out:
            args.out.write_text(json.dumps(results, indent=1) + "\n")
    finally:
        if not args.keep:
            for path in (source, converted, hf_home):
                shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink(missing_ok=True)


if __name__ == "__main__":
    main()
