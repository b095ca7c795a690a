"""Every family against timm's model of it: ours and timm's, one set of weights, in one process, as ratios.

    python benchmarks/families.py --device cpu --threads 1   # S and B of every family, write families-cpu.json
    python benchmarks/families.py --device cuda              # every size of every family that fits the GPU
    python benchmarks/families.py --render FILE.json         # print the table of a results file (no timing)

For each family (classic ViT, DINOv3, DINOv2, SigLIP, EVA02, Perception Encoder, AIMv2) and size, timm's
model is built with its random init and its state dict is loaded strict into ours, so both compute the
same thing; the max-abs-diff of their fp32 logits is recorded. Every model runs at 224 pixels with a
1000-class head. Measured, ours and timm's taking turns in interleaved rounds (contestants in rotated
order each round):

* inference fp32 and inference under bf16 autocast (a GPU, or a CPU with bf16 instructions);
* a training step: forward, cross-entropy, backward, AdamW step (dropout off);
* the peak memory of a training step, each model in a fresh process: live tensor bytes from the
  allocator's events (torch's profiler on CPU, ``max_memory_allocated`` on CUDA), with the process's
  peak RSS beside it on CPU (the method of ``step_memory.py``).

Throughput ratios are ours/timm img/s, the median of per-round ratios ("best": the ratio of each
model's fastest round); the memory ratio is timm's peak over ours. Above 1, ours is ahead.

A size a family has no model of (SigLIP has no S, AIMv2 starts at L) is the family's smallest model
with S's or B's width, depth and heads given to both constructors (marked ``*``): the family's
computation at that size, not a released model.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
import result_records
from dinov3 import _task, has_bf16
from timing import calls_for, interleave, timed, use_clock

HERE = Path(__file__).resolve().parent
IMG_SIZE = 224
#: width, depth and heads of the S and B sizes, for a family without a model of that size
SHAPES = {"s": dict(embed_dim=384, depth=12, num_heads=6), "b": dict(embed_dim=768, depth=12, num_heads=12)}

#: family -> size -> (our variant, shape override or None); timm's model comes from the variant's family record
FAMILIES: dict[str, dict[str, tuple[str, str | None]]] = {
    "vit": {
        "s": ("scratch_vit_s16", None),
        "b": ("scratch_vit_b16", None),
        "l": ("scratch_vit_l16", None),
        "h": ("scratch_vit_h14", None),
    },
    "dinov3": {
        "s": ("scratch_dinov3_s16", None),
        "b": ("scratch_dinov3_b16", None),
        "s+": ("scratch_dinov3_s16_plus", None),
        "l": ("scratch_dinov3_l16", None),
        "h+": ("scratch_dinov3_h16_plus", None),
        "7b": ("scratch_dinov3_7b16", None),
    },
    "dinov2": {
        "s": ("scratch_dinov2_s14", None),
        "b": ("scratch_dinov2_b14", None),
        "l": ("scratch_dinov2_l14", None),
        "g": ("scratch_dinov2_g14", None),
    },
    "siglip": {
        "s": ("scratch_siglip_b16", "s"),
        "b": ("scratch_siglip_b16", None),
        "l": ("scratch_siglip_l16_256", None),
        "so400m": ("scratch_siglip_so400m14", None),
        "gopt": ("scratch_siglip_gopt16_256", None),
    },
    "eva02": {
        "s": ("scratch_eva02_s14", None),
        "b": ("scratch_eva02_b14", None),
        "l": ("scratch_eva02_l14", None),
    },
    "pe": {
        "s": ("scratch_pe_core_s16", None),
        "b": ("scratch_pe_core_b16", None),
        "l": ("scratch_pe_core_l14", None),
        "g": ("scratch_pe_core_g14", None),
    },
    "aimv2": {
        "s": ("scratch_aimv2_l14", "s"),
        "b": ("scratch_aimv2_l14", "b"),
        "l": ("scratch_aimv2_l14", None),
        "h": ("scratch_aimv2_h14", None),
        "1b": ("scratch_aimv2_1b14", None),
        "3b": ("scratch_aimv2_3b14", None),
    },
}
KINDS = ("infer", "infer_bf16", "train", "memory")
TITLES = {
    "infer": "inference fp32",
    "infer_bf16": "inference bf16",
    "train": "training step",
    "memory": "train-step peak memory",
}


def timm_name(ours: str) -> str:
    """timm's model of the same architecture, as our variant's family record names it."""
    from timm_vitscratch.models.variants import FAMILY_OF

    return str(FAMILY_OF[ours].timm_names[ours])


def build_pair(family: str, size: str, device: torch.device, control: bool = False) -> dict[str, nn.Module]:
    """timm's model (its random init) and ours with timm's state dict loaded strict: one set of weights.

    ``control``: a second timm model in our place, the harness's own noise.
    """
    torch.manual_seed(0)
    theirs = build_one(family, size, "timm", device)
    ours = build_one(family, size, "timm" if control else "ours", device)
    ours.load_state_dict(theirs.state_dict())
    return {"ours": ours, "timm": theirs}


def build_one(family: str, size: str, who: str, device: torch.device) -> nn.Module:
    """Ours or timm's model of ``family`` at ``size``, 224 px, a 1000-class head, its own random init, built
    on ``device`` (a GPU initialises the largest models in seconds)."""
    import timm

    import timm_vitscratch  # noqa: F401  (registers the zoo)

    ours_name, shape = FAMILIES[family][size]
    extra: dict[str, Any] = dict(img_size=IMG_SIZE, num_classes=1000, **(SHAPES[shape] if shape else {}))
    with device:
        return timm.create_model(ours_name if who == "ours" else timm_name(ours_name), **extra)


def _label(family: str, size: str) -> dict[str, Any]:
    ours_name, shape = FAMILIES[family][size]
    return dict(
        family=family, size=size + ("*" if shape else ""), ours_model=ours_name, timm_model=timm_name(ours_name)
    )


def measure_throughput(args: argparse.Namespace, family: str, size: str) -> list[dict[str, Any]]:
    models = build_pair(family, size, args.device)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        probe = torch.randn(2, 3, IMG_SIZE, IMG_SIZE, generator=generator).to(args.device)
        outputs = {name: model.eval()(probe) for name, model in models.items()}
    max_abs_diff = (outputs["ours"] - outputs["timm"]).abs().max().item()
    records = []
    for kind in [k for k in args.measure if k != "memory"]:
        if kind == "infer_bf16" and not has_bf16(args.device):
            records.append(dict(kind=kind, **_label(family, size), skipped="no bf16 instructions"))
            continue
        batch = args.train_batch if kind == "train" else args.batch
        images = torch.randn(batch, 3, IMG_SIZE, IMG_SIZE, generator=generator).to(args.device)
        labels = torch.arange(batch, device=args.device) % 1000
        try:
            samples = _interleaved(args, kind, models, images, labels)
        except torch.OutOfMemoryError:
            samples = None
        if samples is None:  # what the failed call held (activations, optimizer state) is released here
            _free(args.device)
            records.append(dict(kind=kind, **_label(family, size), skipped=f"does not fit on {args.device}"))
            _log(f"{family} {size} {kind}: does not fit on {args.device}")
            continue
        record = result_records.throughput_record(kind, f"{family}-{size}", batch, samples, ["ours", "timm"])
        record.update(
            **_label(family, size),
            ratio=record["ratio"]["timm"],
            best_ratio=result_records.best_ratios(record)["timm"],
            max_abs_diff_fp32=max_abs_diff,
        )
        _log(_line(record))
        records.append(record)
    del models, outputs
    _free(args.device)
    return records


def _interleaved(
    args: argparse.Namespace, kind: str, models: dict[str, nn.Module], images: torch.Tensor, labels: torch.Tensor
) -> dict[str, dict[str, list[float]]]:
    tasks = {}
    for name, model in models.items():
        run = _task(kind, model, images, labels)
        calls = calls_for(run, args.device, args.min_time)
        tasks[name] = lambda run=run, calls=calls: timed(run, args.device, calls)
    # calls_for's probe call was each model's warm-up
    return interleave(tasks, args.repeats, warmup=0)


def _free(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def measure_memory(args: argparse.Namespace, family: str, size: str) -> dict[str, Any]:
    """One fresh process per model (``--memory-child``), so each starts clean."""
    results = {}
    for who in ("ours", "timm"):
        command = [sys.executable, str(Path(__file__).resolve()), "--memory-child", who, "--families", family]
        command += ["--sizes", size, "--device", str(args.device), "--threads", str(args.threads)]
        command += ["--train-batch", str(args.train_batch)]
        out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
        results[who] = json.loads(out.strip().splitlines()[-1])
    record = result_records.memory_record(f"{family}-{size}", args.train_batch, results, ["ours", "timm"])
    record.update(**_label(family, size), ratio=1 / record["ratio"]["timm"])
    if "rss_ratio" in record:
        record["rss_ratio"] = 1 / record["rss_ratio"]["timm"]
    _log(_line(record))
    return record


def memory_child(args: argparse.Namespace) -> dict[str, Any]:
    """Peak memory of the second training step of one model (the first creates AdamW's state)."""
    from step_memory import step_peaks
    from timing import make_optimizer, training_step

    family, size = args.families[0], args.sizes[0]
    torch.manual_seed(0)
    model = build_one(family, size, args.memory_child, args.device).train()
    optimizer = make_optimizer(model)
    images = torch.randn(args.train_batch, 3, IMG_SIZE, IMG_SIZE, device=args.device)
    labels = torch.arange(args.train_batch, device=args.device) % 1000
    step = training_step(model, optimizer, images, labels)
    step()
    result: dict[str, Any] = {"contestant": args.memory_child, "batch": args.train_batch}
    return {**result, **step_peaks(step, model, optimizer, args.device)}


def profile(args: argparse.Namespace, family: str, size: str, kind: str) -> str:
    """Both models' operators under torch's profiler, a few interleaved calls each: where the time goes.

    Prints, per aten operator, the calls and self CPU time of each model, the largest differences first, and
    whether the two ran the same operators the same number of times (then a gap is the machine's, not the code's).
    """
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    models = build_pair(family, size, args.device, control=args.control)
    batch = args.train_batch if kind == "train" else args.batch
    images = torch.randn(batch, 3, IMG_SIZE, IMG_SIZE, generator=torch.Generator().manual_seed(0)).to(args.device)
    labels = torch.arange(batch, device=args.device) % 1000
    runs = {name: _task(kind, model, images, labels) for name, model in models.items()}
    for run in runs.values():
        run()
    stats: dict[str, dict[str, tuple[int, float]]] = {name: {} for name in runs}
    for round_index in range(args.repeats):
        for name in list(runs)[round_index % 2 :] + list(runs)[: round_index % 2]:
            with torch_profile(activities=[ProfilerActivity.CPU]) as prof:
                runs[name]()
            for event in prof.key_averages():
                count, total = stats[name].get(event.key, (0, 0.0))
                stats[name][event.key] = (count + event.count, total + event.self_cpu_time_total / 1e3)
    ops = sorted(set(stats["ours"]) | set(stats["timm"]))
    differ = [op for op in ops if stats["ours"].get(op, (0, 0))[0] != stats["timm"].get(op, (0, 0))[0]]
    total = {name: sum(t for _, t in stats[name].values()) for name in stats}
    lines = [
        *(["control: timm's model against a copy of itself in the 'ours' columns"] if args.control else []),
        f"{family} {size} {kind}, {args.repeats} profiled calls each: self CPU ms ours {total['ours']:.0f}, timm "
        f"{total['timm']:.0f}; operators called a different number of times: {', '.join(differ) or 'none'}",
        f"{'operator':<44} {'calls ours':>10} {'calls timm':>10} {'ms ours':>9} {'ms timm':>9} {'diff':>8}",
    ]
    rows = []
    for op in ops:
        (ours_calls, ours_ms), (timm_calls, timm_ms) = (stats[n].get(op, (0, 0.0)) for n in ("ours", "timm"))
        rows.append((ours_ms - timm_ms, op, ours_calls, timm_calls, ours_ms, timm_ms))
    for diff, op, ours_calls, timm_calls, ours_ms, timm_ms in sorted(rows, key=lambda r: -abs(r[0]))[:15]:
        lines.append(f"{op[:44]:<44} {ours_calls:>10} {timm_calls:>10} {ours_ms:>9.1f} {timm_ms:>9.1f} {diff:>+8.1f}")
    return "\n".join(lines) + "\n"


def measure_size(args: argparse.Namespace, family: str, size: str) -> list[dict[str, Any]]:
    """Every measurement of one size; a size that does not fit the device is recorded as skipped."""
    try:
        records = measure_throughput(args, family, size)
    except torch.OutOfMemoryError:
        records = None
    if records is None:
        _free(args.device)
        _log(f"{family} {size}: does not fit on {args.device}")
        return [dict(kind="all", **_label(family, size), skipped=f"does not fit on {args.device}")]
    if "memory" in args.measure:
        try:
            records.append(measure_memory(args, family, size))
        except subprocess.CalledProcessError as error:
            if "out of memory" not in (error.stderr or "").lower():
                raise
            records.append(dict(kind="memory", **_label(family, size), skipped=f"does not fit on {args.device}"))
    return records


def _line(record: dict[str, Any]) -> str:
    median = record["median"]
    return (
        f"{record['family']} {record['size']} {record['kind']} batch {record['batch']}: ours {median['ours']:.2f}, "
        f"timm {median['timm']:.2f} {record['unit']}, ours vs timm {record['ratio']:.3f}"
        + (f" (best {record['best_ratio']:.3f})" if "best_ratio" in record else "")
    )


def render(path: Path) -> str:
    data = json.loads(Path(path).read_text())
    machine, settings = data["machine"], data["settings"]
    clock = "CPU time of the process" if machine.get("clock") == "cpu" else "wall-clock time"
    gpu = f" ({machine['gpu']})" if "gpu" in machine else ""
    lines = [
        f"Machine: {machine['cpu']}, {machine['cores']} cores, {machine['threads']} threads, device "
        f"{machine['device']}{gpu}; torch {machine['torch']}, timm {machine['timm']}; timed by {clock}",
        f"{IMG_SIZE} px, inference batch {settings['batch']}, training batch {settings['train_batch']}, "
        f"{settings['repeats']} interleaved rounds; ours vs timm: img/s ratio (memory: timm's peak / ours)",
        "",
    ]
    header = ["family", "size", "timm model", "measurement", "ours", "timm", "unit", "ours vs timm", "(best)"]
    rows = []
    for r in data["records"]:
        start = [r["family"], r["size"], r["timm_model"]]
        if "skipped" in r:
            rows.append([*start, TITLES.get(r["kind"], "every measurement"), "-", "-", "", "skipped:", r["skipped"]])
            continue
        best = f"{r['best_ratio']:.2f}" if "best_ratio" in r else ""
        values = [f"{r['median']['ours']:,.1f}", f"{r['median']['timm']:,.1f}", r["unit"], f"{r['ratio']:.2f}", best]
        rows.append([*start, TITLES[r["kind"]], *values])
    lines += result_records.aligned_lines(header, rows, left=4)
    diffs = [r["max_abs_diff_fp32"] for r in data["records"] if "max_abs_diff_fp32" in r]
    if diffs:
        lines += ["", f"max |ours - timm| of the fp32 logits, every pair: {max(diffs):.1e}"]
    return "\n".join(line.rstrip() for line in lines) + "\n"


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--families", nargs="+", default=list(FAMILIES), choices=list(FAMILIES))
    parser.add_argument(
        "--sizes", nargs="+", default=None, help="sizes to run (default: s and b on CPU, every size on a GPU)"
    )
    parser.add_argument("--measure", nargs="+", default=list(KINDS), choices=KINDS)
    parser.add_argument("--batch", type=int, default=None, help="inference batch (default: 8 on CPU, 64 on a GPU)")
    parser.add_argument(
        "--train-batch", type=int, default=None, help="training-step batch (default: 4 on CPU, 32 on a GPU)"
    )
    parser.add_argument(
        "--device", type=torch.device, default=torch.device("cuda" if torch.cuda.is_available() else "cpu")
    )
    parser.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument(
        "--clock",
        choices=["wall", "cpu"],
        default=None,
        help="wall-clock time, or the CPU time this process used (default with --device cpu --threads 1)",
    )
    parser.add_argument("--repeats", type=int, default=5, help="interleaved rounds per measurement")
    parser.add_argument("--min-time", type=float, default=0.2, help="seconds one timed sample lasts at least")
    parser.add_argument("--out", type=Path, default=HERE / "results", help="folder of the results file")
    parser.add_argument("--name", default=None, help="results file name (default families-<device type>)")
    parser.add_argument("--render", type=Path, default=None, help="print the table of a results file and exit")
    parser.add_argument(
        "--profile",
        nargs=3,
        metavar=("FAMILY", "SIZE", "KIND"),
        default=None,
        help="profile one measurement (kind: infer, infer_bf16 or train) of ours and timm's and print the operators",
    )
    parser.add_argument(
        "--control",
        action="store_true",
        help="with --profile: timm's model against a copy of itself, to show the differences the harness makes alone",
    )
    parser.add_argument("--memory-child", choices=["ours", "timm"], default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    on_cpu = args.device.type == "cpu"
    args.batch = args.batch or (8 if on_cpu else 64)
    args.train_batch = args.train_batch or (4 if on_cpu else 32)
    if args.clock is None:
        args.clock = "cpu" if on_cpu and args.threads == 1 else "wall"
    if args.clock == "cpu" and (not on_cpu or args.threads != 1):
        parser.error("--clock cpu times CPU work on one thread: use it with --device cpu --threads 1")
    unknown = [s for s in args.sizes or [] if not any(s in sizes for sizes in FAMILIES.values())]
    if unknown:
        parser.error(f"unknown sizes {unknown}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.render:
        sys.stdout.write(render(args.render))
        return 0
    torch.set_num_threads(args.threads)
    if args.profile:
        sys.stdout.write(profile(args, *args.profile))
        return 0
    if args.memory_child:
        print(json.dumps(memory_child(args)))
        return 0
    use_clock(args.clock)
    machine = result_records.machine_info(args)
    machine["bf16_instructions"] = has_bf16(args.device)
    records = []
    for family in args.families:
        sizes = args.sizes or (["s", "b"] if args.device.type == "cpu" else list(FAMILIES[family]))
        for size in [s for s in sizes if s in FAMILIES[family]]:
            records += measure_size(args, family, size)
    machine["load_average_end"] = result_records.load_average()
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"{args.name or 'families-' + args.device.type}.json"
    settings = {k: v if isinstance(v, int | float | list) else str(v) for k, v in vars(args).items()}
    result_records.write_json(path, dict(machine=machine, settings=settings, records=records))
    _log(f"wrote {path} ({time.strftime('%H:%M:%S')})")
    sys.stdout.write(render(path))
    return 0


if __name__ == "__main__":
    sys.exit(main())
