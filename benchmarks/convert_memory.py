"""Conversion cost at ViT-L/16: our streaming ``convert`` vs the naive route, side by side in one run.

The naive route is what a conversion script usually does: load the whole state dict
(``torch.load`` / ``safetensors.torch.load_file``), rename the keys, ``safetensors.torch.save_file``.
It does not fsync; "naive+fsync" adds the one fsync of the output that ours always does, to show
what durability costs on the machine at hand.
Ours: ``timm_vitscratch.convert.convert`` (plans from shapes, reads and writes one tensor at a time,
also writes config.json with the sha256).

The benchmark writes two ViT-L/16 checkpoints (random weights, 1.2 GB each) — a torchvision
``vit_l_16`` ``.pth`` and a timm ``vit_large_patch16_224`` ``.safetensors`` — then converts each with
both routes, every conversion in its own fresh subprocess (same imports in both), alternating the
order, ``--repeats`` times. It reports the median wall time of the conversion itself (imports
excluded) and the peak RSS of the process (``VmHWM``: imports included; the import-only floor is
printed too), and the ratios ours / naive. The parent never imports torch, so it stays small.

    python benchmarks/convert_memory.py [--repeats 5] [--workdir DIR] [--keep]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROUTES = ("naive", "naive+fsync", "ours")


# --- child side: one conversion, timed ------------------------------------------------------------
def child(route: str, source_format: str, src: str, out: str) -> None:
    import torch
    from safetensors.torch import load_file, save_file

    import timm_vitscratch  # noqa: F401  (both routes pay the same imports)
    from timm_vitscratch.convert import convert
    from timm_vitscratch.layouts import LAYOUTS

    start = time.perf_counter()
    if route == "ours":
        convert(src, out, source=source_format)
    elif route.startswith("naive"):
        if src.endswith(".safetensors"):
            state_dict = load_file(src)
        else:
            state_dict = torch.load(src, map_location="cpu", weights_only=True)
        depth = LAYOUTS[source_format].depth(set(state_dict))
        rules = LAYOUTS[source_format].key_map(set(state_dict), depth)  # renames only, for these formats
        renamed = {
            target: state_dict[rule.sources[0]] for target, rule in rules.items() if rule.sources[0] in state_dict
        }
        os.makedirs(out, exist_ok=True)
        save_file(renamed, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
        if route == "naive+fsync":  # the durability ours always pays for (atomic_write fsyncs)
            with open(os.path.join(out, "model.safetensors"), "rb+") as handle:
                os.fsync(handle.fileno())
    seconds = time.perf_counter() - start
    print(json.dumps({"seconds": seconds, "peak_rss_mb": peak_rss_mb()}))


def peak_rss_mb() -> float:
    """This process's peak resident set (VmHWM), in MiB."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc/self/status (Linux only)")


# --- parent side ----------------------------------------------------------------------------------
def _random_fill(model) -> None:
    import torch

    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for param in model.parameters():
            param.copy_(0.02 * torch.randn(param.shape, generator=generator))


def build_checkpoints(workdir: Path) -> None:
    """ViT-L/16 in torchvision .pth and timm .safetensors, random weights (no library init: it is slow)."""
    import timm
    import torch
    import torchvision
    from safetensors.torch import save_file

    paths = {"torchvision": workdir / "vit_l_16.pth", "timm": workdir / "vit_large_patch16_224.safetensors"}
    if not paths["torchvision"].exists():
        with torch.device("meta"):
            model = torchvision.models.vit_l_16()
        model.to_empty(device="cpu")
        _random_fill(model)
        torch.save(model.state_dict(), paths["torchvision"])
        del model
    if not paths["timm"].exists():
        with torch.device("meta"):
            model = timm.create_model("vit_large_patch16_224")
        model.to_empty(device="cpu")
        _random_fill(model)
        save_file(model.state_dict(), str(paths["timm"]))
        del model


def run_child(args: list[str]) -> dict[str, float]:
    os.sync()  # start every run with no dirty pages left over from the previous one
    result = subprocess.run([sys.executable, __file__, "--child", *args], capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"child {args} failed:\n{result.stderr}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--keep", action="store_true", help="keep the checkpoints and outputs")
    parser.add_argument("--child", nargs=4, metavar=("ROUTE", "FORMAT", "SRC", "OUT"), help=argparse.SUPPRESS)
    parser.add_argument("--build", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(*args.child)
        return
    if args.build:
        build_checkpoints(args.build)
        return

    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="convert-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        print(f"building ViT-L/16 checkpoints in {workdir} ...", flush=True)
        subprocess.run([sys.executable, __file__, "--build", str(workdir)], check=True)
        sources = {"torchvision": workdir / "vit_l_16.pth", "timm": workdir / "vit_large_patch16_224.safetensors"}
        floor = run_child(["imports", "timm", str(sources["timm"]), str(workdir / "unused")])
        print(f"import-only peak RSS (torch + timm + timm_vitscratch): {floor['peak_rss_mb']:.0f} MB")
        results = {}
        for source_format, src in sources.items():
            size = src.stat().st_size / 2**20
            runs: dict[str, list[dict[str, float]]] = {route: [] for route in ROUTES}
            for repeat in range(args.repeats):
                order = ROUTES[repeat % len(ROUTES) :] + ROUTES[: repeat % len(ROUTES)]  # rotate the order
                for route in order:
                    out = workdir / f"out-{source_format}-{route}"
                    shutil.rmtree(out, ignore_errors=True)
                    runs[route].append(run_child([route, source_format, str(src), str(out)]))
                    shutil.rmtree(out, ignore_errors=True)
            summary = {
                route: {
                    "seconds": statistics.median(r["seconds"] for r in rs),
                    "peak_rss_mb": statistics.median(r["peak_rss_mb"] for r in rs),
                }
                for route, rs in runs.items()
            }
            results[source_format] = summary
            naive, ours = summary["naive"], summary["ours"]
            print(f"\n{source_format} source ({src.name}, {size:.0f} MB), median of {args.repeats}:")
            print(f"  {'route':12s} {'convert s':>10s} {'peak RSS MB':>12s} {'RSS above imports':>18s}   each run (s)")
            for route in ROUTES:
                row = summary[route]
                each = " ".join(f"{r['seconds']:.1f}" for r in runs[route])
                print(
                    f"  {route:12s} {row['seconds']:10.2f} {row['peak_rss_mb']:12.0f} "
                    f"{row['peak_rss_mb'] - floor['peak_rss_mb']:18.0f}   {each}"
                )
            above = (ours["peak_rss_mb"] - floor["peak_rss_mb"]) / (naive["peak_rss_mb"] - floor["peak_rss_mb"])
            durable = summary["naive+fsync"]["seconds"]
            print(
                f"  ours / naive: time {ours['seconds'] / naive['seconds']:.2f}x "
                f"(vs naive+fsync {ours['seconds'] / durable:.2f}x), peak RSS "
                f"{ours['peak_rss_mb'] / naive['peak_rss_mb']:.2f}x (above the import floor: {above:.2f}x)"
            )
        print("\n" + json.dumps({"import_floor_mb": floor["peak_rss_mb"], **results}))
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
