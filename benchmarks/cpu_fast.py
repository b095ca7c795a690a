"""Fast CPU inference (``timm_vitscratch.models.fast_cpu``) against timm's float32 model, speed and agreement.

    python benchmarks/cpu_fast.py --threads 1        # measure, write benchmarks/results/cpu-fast.json
    python benchmarks/cpu_fast.py --render FILE.json  # print the table of a results file (no timing)

For each family's B-size pair of ``families.py`` (timm's model, its random init, loaded strict into ours),
four models run batch 8 at 224 px in interleaved rounds: timm's in float32 (the reference), ours in
float32, ours after ``fast_cpu_inference(model, "bf16")`` (where the CPU has bf16 instructions) and ours
after ``fast_cpu_inference(model, "int8")``. Speed-ups are img/s over timm's float32, the median of
per-round ratios.

Agreement is measured on real photographs that ship with installed packages (matplotlib's sample data,
scikit-learn's sample images), several crops and flips of each through the model's eval transform: the
share of images whose top-1 class equals timm's float32 top-1, and the largest logit difference. The
weights are random (timm's init; nothing is downloaded), so agreement measures how closely each route
computes float32's logits, not accuracy on a task; random weights give small top-1 margins, a harder
test than trained weights' confident predictions.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
import result_records
from families import FAMILIES, build_pair, timm_name
from timing import calls_for, interleave, paired_ratio, timed, use_clock

from timm_vitscratch.models.fast_cpu import cpu_has_bf16, fast_cpu_inference

HERE = Path(__file__).resolve().parent
ROUTES = ("timm-fp32", "ours-fp32", "ours-bf16", "ours-int8")
LABELS = {
    "timm-fp32": "timm float32",
    "ours-fp32": "ours float32",
    "ours-bf16": "ours bf16",
    "ours-int8": "ours int8 linear",
}


def photographs() -> list[Path]:
    """Photographs that ship inside installed packages (none is downloaded)."""
    import matplotlib
    import sklearn.datasets

    sample_data = Path(matplotlib.get_data_path()) / "sample_data"
    sklearn_images = Path(sklearn.datasets.__file__).parent / "images"
    paths = [sample_data / "grace_hopper.jpg", sample_data / "Minduka_Present_Blue_Pack.png"]
    paths += [sklearn_images / "china.jpg", sklearn_images / "flower.jpg"]
    return [path for path in paths if path.is_file()]


def views(model: nn.Module) -> tuple[torch.Tensor, list[str]]:
    """Each photograph whole, centre-cropped at two scales and in four corner crops, each also mirrored:
    through the model's eval transform."""
    from PIL import ImageOps

    from timm_vitscratch.inspect.attention_maps import model_input, read_picture

    images, names = [], []
    for path in photographs():
        picture = read_picture(path)
        width, height = picture.size
        w, h = width * 5 // 8, height * 5 // 8
        boxes = {
            "whole": (0, 0, width, height),
            "centre 3/4": (width // 8, height // 8, width - width // 8, height - height // 8),
            "centre 1/2": (width // 4, height // 4, width - width // 4, height - height // 4),
            "top-left": (0, 0, w, h),
            "top-right": (width - w, 0, width, h),
            "bottom-left": (0, height - h, w, height),
            "bottom-right": (width - w, height - h, width, height),
        }
        for box_name, box in boxes.items():
            crop = picture.crop(box)
            for mirrored in (False, True):
                images.append(model_input(ImageOps.mirror(crop) if mirrored else crop, model))  # type: ignore[arg-type]
                names.append(f"{path.name} {box_name}{' mirrored' if mirrored else ''}")
    return torch.cat(images), names


def prepare(models: dict[str, nn.Module], bf16: bool) -> dict[str, nn.Module]:
    """The contestants: timm's and ours in float32, and copies of ours through each fast route."""
    contestants = {"timm-fp32": models["timm"].eval(), "ours-fp32": models["ours"].eval()}
    if bf16:
        contestants["ours-bf16"] = fast_cpu_inference(copy.deepcopy(models["ours"]), "bf16")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # torch.ao.quantization's notice, said in the docs
        warnings.filterwarnings("ignore", message=".*quantize_per_tensor")  # and its quantised tensors
        contestants["ours-int8"] = fast_cpu_inference(copy.deepcopy(models["ours"]), "int8")
    return contestants


def predict(model: nn.Module, images: torch.Tensor, batch: int) -> torch.Tensor:
    with torch.inference_mode():
        return torch.cat([model(chunk).float() for chunk in images.split(batch)])


def measure(args: argparse.Namespace, family: str) -> dict[str, Any]:
    size = "b"
    models = build_pair(family, size, torch.device("cpu"))
    contestants = prepare(models, cpu_has_bf16())
    images, _ = views(models["ours"])
    logits = {name: predict(model, images, args.batch) for name, model in contestants.items()}
    reference = logits["timm-fp32"]
    top1 = reference.argmax(-1)
    top2 = reference.topk(2, dim=-1).values
    margin = top2[:, 0] - top2[:, 1]
    agreement = {}
    for name, out in logits.items():
        if name != "timm-fp32":
            changed = out.argmax(-1) != top1
            agreement[name] = dict(
                top1_agreement=1 - changed.float().mean().item(),
                max_abs_logit_diff=(out - reference).abs().max().item(),
                # how near a tie float32's answer was wherever this route's top-1 differs
                largest_margin_changed=margin[changed].max().item() if changed.any() else None,
            )
    batch = torch.randn(args.batch, 3, 224, 224, generator=torch.Generator().manual_seed(0))
    tasks = {}
    for name, model in contestants.items():

        def forward(model: nn.Module = model) -> None:
            with torch.inference_mode():
                model(batch)

        calls = calls_for(forward, torch.device("cpu"), args.min_time)
        tasks[name] = lambda forward=forward, calls=calls: timed(forward, torch.device("cpu"), calls)
    times = {name: samples["time"] for name, samples in interleave(tasks, args.repeats, warmup=0).items()}
    ours_name, shape = FAMILIES[family][size]
    record = dict(
        family=family,
        size=size + ("*" if shape else ""),
        ours_model=ours_name,
        timm_model=timm_name(ours_name),
        batch=args.batch,
        images=len(images),
        median_top1_margin=margin.median().item(),
        img_per_s={name: args.batch / sorted(t)[len(t) // 2] for name, t in times.items()},
        speedup={name: paired_ratio(times["timm-fp32"], t) for name, t in times.items() if name != "timm-fp32"},
        agreement=agreement,
        samples_seconds=times,
    )
    _log(
        f"{family}: "
        + ", ".join(
            f"{name} x{record['speedup'][name]:.2f} top-1 {agreement[name]['top1_agreement']:.1%} "
            f"max diff {agreement[name]['max_abs_logit_diff']:.3g}"
            for name in record["speedup"]
        )
    )
    return record


def render(path: Path) -> str:
    data = json.loads(Path(path).read_text())
    machine, settings = data["machine"], data["settings"]
    clock = "CPU time of the process" if machine.get("clock") == "cpu" else "wall-clock time"
    records = data["records"]
    lines = [
        f"Machine: {machine['cpu']}, {machine['cores']} cores, {machine['threads']} threads; bf16 instructions: "
        f"{'yes' if machine['bf16_instructions'] else 'no'}; torch {machine['torch']}, timm {machine['timm']}; "
        f"timed by {clock}",
        f"224 px, batch {settings['batch']}, {settings['repeats']} interleaved rounds; speed-up: img/s over timm "
        f"float32; agreement with timm float32 on {records[0]['images']} views of {len(data['photographs'])} "
        "photographs, random weights",
        "",
    ]
    header = ["family", "size", "route", "img/s", "speed-up", "top-1 agreement", "max |logit diff|", "top-2 gap"]
    rows = []
    for r in records:
        rows.append(
            [
                r["family"],
                r["size"],
                LABELS["timm-fp32"],
                f"{r['img_per_s']['timm-fp32']:.1f}",
                "1.00",
                "",
                "",
                f"{r['median_top1_margin']:.1e}",
            ]
        )
        for name in r["speedup"]:
            agree = r["agreement"][name]
            rows.append(
                [
                    r["family"],
                    r["size"],
                    LABELS[name],
                    f"{r['img_per_s'][name]:.1f}",
                    f"{r['speedup'][name]:.2f}",
                    f"{agree['top1_agreement']:.1%}",
                    f"{agree['max_abs_logit_diff']:.1e}",
                    "-" if agree["largest_margin_changed"] is None else f"{agree['largest_margin_changed']:.1e}",
                ]
            )
    lines += result_records.aligned_lines(header, rows, left=3)
    lines += [
        "",
        "top-2 gap: the gap between timm float32's two highest logits, its median over the images (timm float32 rows)",
        "and its largest value among the images whose top-1 the route changes (other rows; - where none changes)",
        "photographs: " + ", ".join(data["photographs"]),
    ]
    return "\n".join(line.rstrip() for line in lines) + "\n"


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--families", nargs="+", default=list(FAMILIES), choices=list(FAMILIES))
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument(
        "--clock",
        choices=["wall", "cpu"],
        default=None,
        help="wall-clock time, or the CPU time this process used (default with --threads 1)",
    )
    parser.add_argument("--repeats", type=int, default=5, help="interleaved rounds")
    parser.add_argument("--min-time", type=float, default=0.2, help="seconds one timed sample lasts at least")
    parser.add_argument("--out", type=Path, default=HERE / "results", help="folder of the results file")
    parser.add_argument("--name", default="cpu-fast", help="results file name")
    parser.add_argument("--render", type=Path, default=None, help="print the table of a results file and exit")
    args = parser.parse_args(argv)
    if args.clock is None:
        args.clock = "cpu" if args.threads == 1 else "wall"
    if args.clock == "cpu" and args.threads != 1:
        parser.error("--clock cpu times CPU work on one thread: use it with --threads 1")
    args.device = torch.device("cpu")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.render:
        sys.stdout.write(render(args.render))
        return 0
    torch.set_num_threads(args.threads)
    use_clock(args.clock)
    machine = result_records.machine_info(args)
    machine["bf16_instructions"] = cpu_has_bf16()
    records = [measure(args, family) for family in args.families]
    machine["load_average_end"] = result_records.load_average()
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"{args.name}.json"
    settings = {k: v if isinstance(v, int | float | list) else str(v) for k, v in vars(args).items()}
    data = dict(machine=machine, settings=settings, photographs=[p.name for p in photographs()], records=records)
    result_records.write_json(path, data)
    _log(f"wrote {path} ({time.strftime('%H:%M:%S')})")
    sys.stdout.write(render(path))
    return 0


if __name__ == "__main__":
    sys.exit(main())
