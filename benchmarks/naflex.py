"""Native resolution: our packed NaFlex path against timm's padded NaFlexVit, in one process, as ratios.

    python benchmarks/naflex.py                      # measure, write benchmarks/results/naflex-<device>.json
    python benchmarks/naflex.py --device cuda        # the same on a GPU: float32, then bfloat16 under autocast
    python benchmarks/naflex.py --render FILE.json   # print the table of a results file (no timing)

A batch of 8 images of mixed sizes and aspect ratios is collated by timm's NaFlexCollator to 256 and
to 576 tokens, once with about 60 % padding (images of 32 to 576 patches) and once with none (every
image exactly fills the sequence). All models hold the same weights (timm's NaFlexVit built from the
classic ViT, or for ``eva02_s14`` from timm's EVA02 with its axial rotary position on a reference grid,
with ``use_naflex=True``, loaded through its own checkpoint filter); ours runs packed (the default) and,
as "ours padded", on timm's padded layout (``set_naflex_packed(False)``), and with each packed-attention kernel
that runs on the device, dtype and measurement (``set_packed_attention``: segments, flex, varlen, flash; "ours" is
``'auto'``, the kernel named in the results). Half precision runs under ``torch.autocast``. Throughput counts
valid tokens only; ratios are ours/timm, the median of per-round ratios of interleaved rounds, and
(best) the ratio of each model's fastest round, which background load disturbs least.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from timm_vitscratch.models import packed_kernels
from timm_vitscratch.models.packing import segments_of

sys.path.insert(0, str(Path(__file__).resolve().parent))
import result_records
from timing import calls_for, interleave, make_optimizer, paired_ratio, timed

HERE = Path(__file__).resolve().parent
#: variant -> (ours, timm's model that ``use_naflex=True`` turns into its NaFlexVit, patch size)
VARIANTS = {
    "ti16": ("scratch_vit_ti16", "vit_tiny_patch16_224", 16),
    "s16": ("scratch_vit_s16", "vit_small_patch16_224", 16),
    "b16": ("scratch_vit_b16", "vit_base_patch16_224", 16),
    "eva02_s14": ("scratch_eva02_s14", "eva02_small_patch14_224", 14),
}
#: (rows, columns) of patches per image: per sequence length, a batch with ~60 % padding and one with none
GRIDS: dict[tuple[int, str], Sequence[tuple[int, int]]] = {
    (256, "~60%"): ((14, 14), (2, 16), (8, 12), (12, 8), (4, 14), (10, 10), (16, 8), (6, 20)),
    (256, "0%"): ((16, 16), (8, 32), (32, 8), (4, 64), (64, 4), (16, 16), (8, 32), (32, 8)),
    (576, "~60%"): ((24, 24), (4, 36), (12, 18), (18, 12), (8, 20), (14, 14), (20, 10), (9, 15)),
    (576, "0%"): ((24, 24), (12, 48), (48, 12), (16, 36), (36, 16), (18, 32), (32, 18), (24, 24)),
}


def naflex_batch(
    grids: Sequence[tuple[int, int]], seq_len: int, device: torch.device, patch: int = 16
) -> dict[str, torch.Tensor]:
    """Random images of the given patch grids, patchified and collated by timm's own NaFlex pieces."""
    from timm.data.naflex_dataset import NaFlexCollator
    from timm.data.naflex_transforms import Patchify

    generator = torch.Generator().manual_seed(0)
    samples = [(Patchify(patch)(torch.randn(3, h * patch, w * patch, generator=generator)), 0) for h, w in grids]
    batch, _ = NaFlexCollator(max_seq_len=seq_len)(samples)
    return {k: v.to(device) for k, v in batch.items() if isinstance(v, torch.Tensor)}


def build_models(variant: str, device: torch.device, kernels: Sequence[str] = ()):
    """Ours (packed), ours on timm's padded layout (``set_naflex_packed(False)``), ours with each of ``kernels``
    (``ours-<kernel>``) and timm's NaFlexVit, one set of weights."""
    import timm
    from timm.models.naflexvit import checkpoint_filter_fn

    import timm_vitscratch  # noqa: F401  (registers the zoo)

    ours_name, reference_name, _ = VARIANTS[variant]
    ours = timm.create_model(ours_name, num_classes=1000).to(device)
    theirs = timm.create_model(reference_name, use_naflex=True, num_classes=1000).to(device)
    state = {k: v.clone() for k, v in ours.state_dict().items()}  # timm's filter edits the class token in place
    theirs.load_state_dict(checkpoint_filter_fn(state, theirs))
    padded = copy.deepcopy(ours)
    padded.set_naflex_packed(False)
    models = {"ours": ours, "ours-padded": padded, "timm": theirs}
    for kernel in kernels:
        models[f"ours-{kernel}"] = copy.deepcopy(ours)
        models[f"ours-{kernel}"].set_packed_attention(kernel)
    return models


def runnable_kernels(
    kernels: Sequence[str], device: torch.device, dtype: torch.dtype, kind: str
) -> tuple[str, list[str]]:
    """The kernel ``'auto'`` picks here, and those of ``kernels`` that run here (``kind`` 'train': with a backward)."""
    probe = torch.empty(0, device=device, dtype=dtype)
    needs_grad = kind == "train"
    auto = packed_kernels.choose("auto", probe, segments_of([1]), True, needs_grad)
    return auto, [k for k in kernels if packed_kernels.available(k, probe, needs_grad)]


def measure(args, variant: str) -> list[dict[str, Any]]:
    all_models = build_models(variant, args.device, args.kernels)
    records = []
    for dtype_name, (seq_len, padding), kind in (
        (d, key, k) for d in args.dtypes for key in GRIDS for k in ("infer", "train")
    ):
        grids = GRIDS[(seq_len, padding)]
        if seq_len not in args.seq_lens:
            continue
        dtype = getattr(torch, dtype_name)
        batch = naflex_batch(grids, seq_len, args.device, VARIANTS[variant][2])
        valid = int(batch["patch_valid"].sum())
        labels = torch.arange(len(grids), device=args.device) % 1000
        auto, kernels = runnable_kernels(args.kernels, args.device, dtype, kind)
        # the kernel 'auto' picks is measured once, as "ours"
        models = {
            n: m for n, m in all_models.items() if n[5:] not in args.kernels or (n[5:] in kernels and n[5:] != auto)
        }
        # half precision as mixed-precision code runs it: float32 weights, the layers' own dtypes under autocast
        autocast = torch.autocast(args.device.type, dtype=dtype, enabled=dtype != torch.float32)
        tasks, failed = {}, {}
        for name, model in models.items():
            if kind == "infer":
                model.eval()

                def run(model=model, batch=batch, autocast=autocast):
                    with torch.inference_mode(), autocast:
                        model(batch)
            else:
                model.train()
                optimizer = make_optimizer(model)

                def run(model=model, optimizer=optimizer, batch=batch, labels=labels, autocast=autocast):
                    optimizer.zero_grad(set_to_none=True)
                    with autocast:
                        loss = F.cross_entropy(model(batch), labels)
                    loss.backward()
                    optimizer.step()

            try:
                run()  # the first call compiles (FlexAttention): not what sizes the samples
            except Exception as error:  # a kernel this machine cannot run: said, and left out of the record
                failed[name] = f"{type(error).__name__}: {(str(error).splitlines() or [''])[0]}"
                _log(f"{variant} {kind} {dtype_name} seq {seq_len} {padding}: {name} failed ({failed[name]})")
                continue
            calls = calls_for(run, args.device, args.min_time)
            tasks[name] = lambda run=run, calls=calls: timed(run, args.device, calls)
        if {"ours", "ours-padded", "timm"} & failed.keys():  # no ratio to give: the failure is the result
            args.failures.append(dict(kind=kind, dtype=dtype_name, variant=variant, seq_len=seq_len, failed=failed))
            continue
        kernels = [k for k in kernels if f"ours-{k}" not in failed]
        samples = interleave(tasks, args.repeats)
        times = {name: samples[name]["time"] for name in tasks}
        median = {name: valid / sorted(t)[len(t) // 2] for name, t in times.items()}
        record = dict(
            kind=kind,
            dtype=dtype_name,
            variant=variant,
            seq_len=seq_len,
            padding=padding,
            images=len(grids),
            valid_tokens=valid,
            padded_fraction=round(1 - valid / (len(grids) * seq_len), 3),
            unit="valid tokens/s",
            median=median,
            ratio=paired_ratio(times["timm"], times["ours"]),
            padded_ratio=paired_ratio(times["timm"], times["ours-padded"]),
            auto_kernel=auto,
            failed_kernels=failed,
            kernel_ratios={
                k: paired_ratio(times["timm"], times["ours" if k == auto else f"ours-{k}"]) for k in kernels
            },
            samples=times,
        )
        _log(
            f"{variant} {kind} {dtype_name} seq {seq_len} padding {record['padded_fraction']:.0%}: "
            f"ours ({auto}) {median['ours']:.0f} tok/s, ours-padded {median['ours-padded']:.0f} tok/s, timm "
            f"{median['timm']:.0f} tok/s, ours/timm {record['ratio']:.3f}, ours-padded/timm {record['padded_ratio']:.3f}"
            + "".join(f", ours-{k}/timm {r:.3f}" for k, r in record["kernel_ratios"].items())
        )
        records.append(record)
    return records


TITLES = {"infer": "inference", "train": "training step"}


def render(path: Path) -> str:
    data = json.loads(Path(path).read_text())
    machine = data["machine"]
    lines = [_machine_line(machine), ""]
    header = [
        "measurement",
        "model",
        "seq len",
        "padding",
        "ours (valid tok/s)",
        "timm (valid tok/s)",
        "ours/timm",
        "ours/timm (best)",
        "ours padded/timm",
    ]
    # results with packed-attention kernels: the kernel 'auto' ran, and ours/timm with each kernel that ran
    kernels = [
        k for k in packed_kernels.PACKED_ATTENTION if any(k in r.get("kernel_ratios", {}) for r in data["records"])
    ]
    if kernels:
        header[1:1] = ["precision"]
        header[-1:-1] = ["ours kernel"]
        header += [f"ours {k}/timm" for k in kernels]
    rows = [
        [
            TITLES[r["kind"]],
            r["variant"],
            str(r["seq_len"]),
            f"{r['padded_fraction']:.0%}",
            f"{r['median']['ours']:,.0f}",
            f"{r['median']['timm']:,.0f}",
            f"{r['ratio']:.2f}",
            f"{min(r['samples']['timm']) / min(r['samples']['ours']):.2f}",
            f"{r['padded_ratio']:.2f}" if "padded_ratio" in r else "-",
        ]
        for r in data["records"]
    ]
    if kernels:
        for row, r in zip(rows, data["records"], strict=True):
            ratios = r.get("kernel_ratios", {})
            row[1:1] = [r.get("dtype", "float32")]
            row[-1:-1] = [r.get("auto_kernel", "segments")]
            row += [f"{ratios[k]:.2f}" if k in ratios else "-" for k in kernels]
    lines += result_records.aligned_lines(header, rows, left=2)
    return "\n".join(lines) + "\n"


def _machine_line(machine: dict[str, Any]) -> str:
    return (
        f"Machine: {machine['cpu']}, {machine['cores']} cores, {machine['threads']} threads, device "
        f"{machine['device']}; torch {machine['torch']}, timm {machine['timm']}; batch of 8 images"
    )


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--variants", nargs="+", default=["ti16"], choices=list(VARIANTS))
    parser.add_argument(
        "--device", type=torch.device, default=torch.device("cuda" if torch.cuda.is_available() else "cpu")
    )
    parser.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    lengths = sorted({seq_len for seq_len, _ in GRIDS})
    parser.add_argument(
        "--seq-lens", nargs="+", type=int, default=lengths, choices=lengths, help="sequence lengths to measure"
    )
    parser.add_argument(
        "--kernels",
        nargs="*",
        default=list(packed_kernels.PACKED_ATTENTION[1:]),
        choices=packed_kernels.PACKED_ATTENTION[1:],
        help="packed-attention kernels measured beside 'auto' (those that run on the device, dtype and measurement)",
    )
    parser.add_argument(
        "--dtypes",
        nargs="+",
        default=None,
        choices=["float32", "bfloat16", "float16"],
        help="precisions (half ones under autocast); default float32, and bfloat16 too on CUDA",
    )
    parser.add_argument("--repeats", type=int, default=5, help="interleaved rounds per measurement")
    parser.add_argument("--min-time", type=float, default=0.2, help="seconds one timed sample lasts at least")
    parser.add_argument("--out", type=Path, default=HERE / "results", help="folder of the results file")
    parser.add_argument("--name", default=None, help="results file name (default naflex-<device type>)")
    parser.add_argument("--render", type=Path, default=None, help="print the table of a results file and exit")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.render:
        sys.stdout.write(render(args.render))
        return 0
    if args.dtypes is None:
        args.dtypes = ["float32", "bfloat16"] if args.device.type == "cuda" else ["float32"]
    torch.set_num_threads(args.threads)
    machine = result_records.machine_info(args)
    records, args.failures = [], []
    for variant in args.variants:
        records += measure(args, variant)
    machine["load_average_end"] = result_records.load_average()
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"{args.name or 'naflex-' + args.device.type}.json"
    settings = {k: str(v) for k, v in vars(args).items() if k != "failures"}
    results = dict(machine=machine, settings=settings, records=records)
    if args.failures:
        results["failures"] = args.failures
    result_records.write_json(path, results)
    _log(f"wrote {path} ({time.strftime('%H:%M:%S')})")
    sys.stdout.write(render(path))
    return 0


if __name__ == "__main__":
    sys.exit(main())
