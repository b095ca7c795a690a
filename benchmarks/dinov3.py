"""DINOv3: our ``scratch_dinov3_*`` against timm's ``Eva`` (``vit_*_patch16_dinov3``), in one process, as ratios.

    python benchmarks/dinov3.py --threads 1 --clock cpu   # measure, write benchmarks/results/dinov3-cpu.json
    python benchmarks/dinov3.py --render FILE.json         # print the table of a results file (no timing)

Both models hold the same weights (timm's state dict, loaded strict into ours) and run the same
batch: inference in fp32, inference under bf16 autocast (where the CPU has bf16 instructions, or on a
GPU), and a training step (forward, cross-entropy on a 1000-class head, backward, AdamW step), at
224 and 256 pixels. Ratios are ours/timm throughput (> 1: ours is faster), the median of per-round
ratios of interleaved rounds; "best" is the ratio of each model's fastest round, which background
load disturbs least. Each record also holds the max-abs-diff of the two models' fp32 outputs.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
import result_records
from timing import calls_for, interleave, make_optimizer, paired_ratio, timed, training_step, use_clock

HERE = Path(__file__).resolve().parent
#: our variant -> timm's model of the same architecture
MODELS = {"s16": "vit_small_patch16_dinov3", "b16": "vit_base_patch16_dinov3"}
KINDS = ("infer", "infer_bf16", "train")
TITLES = {"infer": "inference fp32", "infer_bf16": "inference bf16 autocast", "train": "training step fp32"}


def has_bf16(device: torch.device) -> bool:
    """bf16 is measured on a GPU, or on a CPU with bf16 instructions (without them autocast emulates it)."""
    if device.type != "cpu":
        return True
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def build_models(variant: str, size: int, device: torch.device) -> dict[str, nn.Module]:
    """Ours and timm's, one set of weights (timm's random init loaded strict into ours), with a 1000-class head."""
    import timm

    import timm_vitscratch  # noqa: F401  (registers the zoo)

    torch.manual_seed(0)
    theirs = timm.create_model(MODELS[variant], img_size=size, num_classes=1000)
    ours = timm.create_model(f"scratch_dinov3_{variant}", img_size=size, num_classes=1000)
    ours.load_state_dict(theirs.state_dict())
    return {"ours": ours.to(device), "timm": theirs.to(device)}


def _task(kind: str, model: nn.Module, images: torch.Tensor, labels: torch.Tensor) -> Any:
    if kind == "train":
        model.train()
        return training_step(model, make_optimizer(model), images, labels)
    model.eval()
    cast = torch.autocast(images.device.type, dtype=torch.bfloat16) if kind == "infer_bf16" else None

    def forward() -> None:
        with torch.inference_mode(), cast or contextlib.nullcontext():
            model(images)

    return forward


def measure(args: argparse.Namespace, variant: str, size: int) -> list[dict[str, Any]]:
    models = build_models(variant, size, args.device)
    generator = torch.Generator().manual_seed(0)
    kinds = [k for k in args.measure if k != "infer_bf16" or has_bf16(args.device)]
    with torch.no_grad():
        probe = torch.randn(2, 3, size, size, generator=generator).to(args.device)
        outputs = {name: model.eval()(probe) for name, model in models.items()}
    max_abs_diff = (outputs["ours"] - outputs["timm"]).abs().max().item()
    records = []
    for kind in kinds:
        batch = args.train_batch if kind == "train" else args.batch
        images = torch.randn(batch, 3, size, size, generator=generator).to(args.device)
        labels = torch.arange(batch, device=args.device) % 1000
        tasks = {}
        for name, model in models.items():
            run = _task(kind, model, images, labels)
            calls = calls_for(run, args.device, args.min_time)
            tasks[name] = lambda run=run, calls=calls: timed(run, args.device, calls)
        times = {name: samples["time"] for name, samples in interleave(tasks, args.repeats).items()}
        record = dict(
            kind=kind,
            variant=variant,
            timm_model=MODELS[variant],
            img_size=size,
            batch=batch,
            unit="img/s",
            median={name: batch / sorted(t)[len(t) // 2] for name, t in times.items()},
            ratio=paired_ratio(times["timm"], times["ours"]),
            best_ratio=min(times["timm"]) / min(times["ours"]),
            max_abs_diff_fp32=max_abs_diff,
            samples_seconds=times,
        )
        _log(
            f"{variant} {size}px {kind} batch {batch}: ours {record['median']['ours']:.2f} img/s, timm "
            f"{record['median']['timm']:.2f} img/s, ours/timm {record['ratio']:.3f} (best {record['best_ratio']:.3f})"
        )
        records.append(record)
    if "infer_bf16" in args.measure and "infer_bf16" not in kinds:
        records.append(
            dict(kind="infer_bf16", variant=variant, img_size=size, skipped="this CPU has no bf16 instructions")
        )
    return records


def render(path: Path) -> str:
    data = json.loads(Path(path).read_text())
    machine = data["machine"]
    clock = "CPU time of the process" if machine.get("clock") == "cpu" else "wall-clock time"
    lines = [
        f"Machine: {machine['cpu']}, {machine['cores']} cores, {machine['threads']} threads, device {machine['device']}; "
        f"torch {machine['torch']}, timm {machine['timm']}; timed by {clock}",
        "",
    ]
    header = [
        "measurement",
        "model",
        "size",
        "batch",
        "ours (img/s)",
        "timm (img/s)",
        "ours/timm",
        "(best)",
        "max |diff|",
    ]
    rows = []
    for r in data["records"]:
        if "skipped" in r:
            rows.append(
                [TITLES[r["kind"]], r["variant"], str(r["img_size"]), "-", "skipped:", r["skipped"], "", "", ""]
            )
            continue
        rows.append(
            [
                TITLES[r["kind"]],
                r["variant"],
                str(r["img_size"]),
                str(r["batch"]),
                f"{r['median']['ours']:,.2f}",
                f"{r['median']['timm']:,.2f}",
                f"{r['ratio']:.2f}",
                f"{r['best_ratio']:.2f}",
                f"{r['max_abs_diff_fp32']:.1e}",
            ]
        )
    lines += result_records.aligned_lines(header, rows, left=2)
    return "\n".join(line.rstrip() for line in lines) + "\n"


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--variants", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--sizes", nargs="+", type=int, default=[224, 256], help="image sizes in pixels")
    parser.add_argument("--measure", nargs="+", default=list(KINDS), choices=KINDS)
    parser.add_argument("--batch", type=int, default=8, help="inference batch")
    parser.add_argument("--train-batch", type=int, default=4, help="training-step batch")
    parser.add_argument(
        "--device", type=torch.device, default=torch.device("cuda" if torch.cuda.is_available() else "cpu")
    )
    parser.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument(
        "--clock",
        choices=["wall", "cpu"],
        default="wall",
        help="wall-clock time, or (CPU, --threads 1) the CPU time this process used, which leaves out other load",
    )
    parser.add_argument("--repeats", type=int, default=5, help="interleaved rounds per measurement")
    parser.add_argument("--min-time", type=float, default=0.5, help="seconds one timed sample lasts at least")
    parser.add_argument("--out", type=Path, default=HERE / "results", help="folder of the results file")
    parser.add_argument("--name", default=None, help="results file name (default dinov3-<device type>)")
    parser.add_argument("--render", type=Path, default=None, help="print the table of a results file and exit")
    args = parser.parse_args(argv)
    if args.clock == "cpu" and (args.device.type != "cpu" or args.threads != 1):
        parser.error("--clock cpu times CPU work on one thread: use it with --device cpu --threads 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.render:
        sys.stdout.write(render(args.render))
        return 0
    torch.set_num_threads(args.threads)
    use_clock(args.clock)
    machine = result_records.machine_info(args)
    machine["bf16_instructions"] = has_bf16(args.device)
    records = []
    for variant in args.variants:
        for size in args.sizes:
            records += measure(args, variant, size)
    machine["load_average_end"] = result_records.load_average()
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"{args.name or 'dinov3-' + args.device.type}.json"
    settings = {k: str(v) for k, v in vars(args).items()}
    result_records.write_json(path, dict(machine=machine, settings=settings, records=records))
    _log(f"wrote {path} ({time.strftime('%H:%M:%S')})")
    sys.stdout.write(render(path))
    return 0


if __name__ == "__main__":
    sys.exit(main())
