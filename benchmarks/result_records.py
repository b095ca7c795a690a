"""Turning samples into records (medians, paired ratios), and records into JSON, Markdown and a plot."""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

# torch, timm and the models are imported where a run needs them: rendering a results file
# (render_results.py, the docs' checked blocks) needs only the JSON

Samples = dict[str, dict[str, list[float]]]

TITLES = {
    "infer": "inference fp32 (img/s)",
    "infer_bf16": "inference bf16 autocast (img/s)",
    "train": "training step (img/s)",
    "compiled_infer": "torch.compile inference fp32 (img/s)",
    "compiled_train": "torch.compile training step (img/s)",
    "latency": "batch 1 latency, bf16 on CUDA / fp32 on CPU (img/s)",
    "latency_compiled": "batch 1 under torch.compile(mode='reduce-overhead') (img/s)",
    "memory": "peak tensor memory of a training step (MiB)",
    "create": "create_model, random init (s)",
    "pretrained": "create_model(pretrained=True) from a local file (s)",
}


#: Our model with options (see contestants.OUR_OPTIONS): each gets a row of its own against the peers.
OPTION_LABELS = {
    "ours-pooled": "pooled forward (opt-in)",
    "ours-sdpa": "sdpa attention",
    "ours-eager": "eager attention",
}
PEERS = ("timm", "torchvision")


def aligned_lines(header: Sequence[str], rows: Sequence[Sequence[str]], left: int) -> list[str]:
    """A text table: each column as wide as its widest cell, the first ``left`` columns left-aligned and the
    others right-aligned, a rule of dashes under the header."""
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(
            c.ljust(w) if i < left else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=False))
        )

    return [line(header), line(["-" * w for w in widths]), *(line(row) for row in rows)]


def write_json(path: Path, data: dict[str, Any]) -> None:
    """``data`` as ``path``, written under a temporary name and renamed (a stopped run leaves no half file)."""
    temporary = path.with_suffix(".json.tmp")
    temporary.write_text(json.dumps(data, indent=2) + "\n")
    os.replace(temporary, path)


def _peers(contestants: Sequence[str]) -> list[str]:
    if "ours" not in contestants:
        return list(contestants[1:])
    return [c for c in contestants if c != "ours" and c not in OPTION_LABELS]


def _base(contestants: Sequence[str]) -> str:
    return "ours" if "ours" in contestants else contestants[0]


def _options(contestants: Sequence[str]) -> list[str]:
    """Our model with options, when it is compared with the peers (``ours`` is the base)."""
    return [c for c in contestants if c in OPTION_LABELS] if "ours" in contestants else []


def option_ratios(ratio, contestants: Sequence[str]) -> dict[str, dict[str, float]]:
    """``ratio(option, peer)`` for each of our options against each peer present."""
    return {
        option: {peer: ratio(option, peer) for peer in PEERS if peer in contestants} for option in _options(contestants)
    }


def throughput_record(
    kind: str, variant: str, batch: int, samples: Samples, contestants: Sequence[str]
) -> dict[str, Any]:
    """img/s medians and ours/peer throughput ratios (> 1: ours is faster)."""
    from timing import paired_ratio

    times = {name: samples[name]["time"] for name in contestants}
    base = _base(contestants)
    return {
        "kind": kind,
        "variant": variant,
        "batch": batch,
        "unit": "img/s",
        "better": "higher",
        "median": {name: batch / statistics.median(t) for name, t in times.items()},
        "ratio": {peer: paired_ratio(times[peer], times[base]) for peer in _peers(contestants)},
        "option_ratio": option_ratios(lambda option, peer: paired_ratio(times[peer], times[option]), contestants),
        "samples_seconds": times,
    }


def ceiling_fraction(
    samples: Samples, batch: int, flops_per_image: int, size: int, contestants: Sequence[str]
) -> dict[str, Any]:
    """Each model's achieved FLOP/s as a fraction of the large-matmul FLOP/s timed in the same rounds."""
    matmul_flops = 2 * size**3
    matmul_times = samples["matmul"]["time"]
    fractions = {}
    for name in contestants:
        per_round = [
            (flops_per_image * batch / t) / (matmul_flops / m)
            for t, m in zip(samples[name]["time"], matmul_times, strict=False)
        ]
        fractions[name] = statistics.median(per_round)
    return {
        "matmul_size": size,
        "matmul_gflops": matmul_flops / statistics.median(matmul_times) / 1e9,
        "achieved_gflops": {
            name: flops_per_image * batch / statistics.median(samples[name]["time"]) / 1e9 for name in contestants
        },
        "fraction_of_matmul": fractions,
    }


def duration_record(kind: str, variant: str, samples: Samples, contestants: Sequence[str]) -> dict[str, Any]:
    """Median seconds and ours/peer time ratios (< 1: ours is quicker); extra named durations too."""
    from timing import paired_ratio

    base = _base(contestants)
    record: dict[str, Any] = {
        "kind": kind,
        "variant": variant,
        "unit": "s",
        "better": "lower",
        "median": {name: statistics.median(samples[name]["time"]) for name in contestants},
        "ratio": {peer: paired_ratio(samples[base]["time"], samples[peer]["time"]) for peer in _peers(contestants)},
        "option_ratio": option_ratios(
            lambda option, peer: paired_ratio(samples[option]["time"], samples[peer]["time"]), contestants
        ),
        "samples_seconds": {name: samples[name]["time"] for name in contestants},
    }
    if "first_logits" in samples[base]:
        record["first_logits_median"] = {name: statistics.median(samples[name]["first_logits"]) for name in contestants}
        record["first_logits_ratio"] = {
            peer: paired_ratio(samples[base]["first_logits"], samples[peer]["first_logits"])
            for peer in _peers(contestants)
        }
    return record


def memory_record(
    variant: str, batch: int, results: dict[str, dict[str, Any]], contestants: Sequence[str]
) -> dict[str, Any]:
    """Peak bytes per model (primary: CUDA allocator or torch's CPU allocations) and ours/peer ratios."""
    key = "cuda_peak_bytes" if "cuda_peak_bytes" in results[contestants[0]] else "torch_peak_bytes"
    base = _base(contestants)
    mib = {name: results[name][key] / 2**20 for name in contestants}
    record: dict[str, Any] = {
        "kind": "memory",
        "variant": variant,
        "batch": batch,
        "unit": "MiB",
        "better": "lower",
        "measure": key,
        "median": mib,
        "ratio": {peer: mib[base] / mib[peer] for peer in _peers(contestants)},
        "option_ratio": option_ratios(lambda option, peer: mib[option] / mib[peer], contestants),
        "raw": results,
    }
    if all(results[name].get("rss_peak_bytes") for name in contestants):
        rss = {name: results[name]["rss_peak_bytes"] / 2**20 for name in contestants}
        record["rss_peak_mib"] = rss
        record["rss_ratio"] = {peer: rss[base] / rss[peer] for peer in _peers(contestants)}
    return record


def one_line(record: dict[str, Any]) -> str:
    values = ", ".join(f"{k} {v:.4g}" for k, v in record["median"].items())
    ratios = ", ".join(
        [f"{_base(list(record['median']))}/{k} {v:.3f}" for k, v in record["ratio"].items()]
        + [
            f"{option}/{k} {v:.3f}"
            for option, by_peer in record.get("option_ratio", {}).items()
            for k, v in by_peer.items()
        ]
    )
    extra = ""
    if "fraction_of_matmul" in record:
        extra = f" | matmul {record['matmul_gflops']:.1f} GFLOP/s, ours at {record['fraction_of_matmul'].get('ours', 0):.0%}"
    return (
        f"{record['kind']} {record['variant']} {record.get('batch', '')}: {values} {record['unit']} | {ratios}{extra}"
    )


def load_average() -> list[float] | None:
    try:
        return list(os.getloadavg())
    except OSError:
        return None


def _cpu_model() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
        for line in out.splitlines():
            if line.startswith("Model name:"):
                return line.split(":", 1)[1].strip()
    except (OSError, subprocess.CalledProcessError):
        pass
    return platform.processor() or platform.machine()


def machine_info(args) -> dict[str, Any]:
    import timm
    import torch
    import torchvision

    import timm_vitscratch

    info = {
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "threads": args.threads,
        "device": str(args.device),
        "torch": torch.__version__,
        "timm": timm.__version__,
        "torchvision": torchvision.__version__,
        "timm_vitscratch": timm_vitscratch.__version__,
        "python": platform.python_version(),
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "load_average_start": load_average(),
        # naflex.py times wall-clock only and has no --clock option
        "clock": getattr(args, "clock", "wall"),
    }
    if args.device.type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(args.device)
    return info


def _format(value: float, unit: str) -> str:
    if unit == "s":
        return f"{value:.3f}"
    return f"{value:,.1f}" if value >= 10 else f"{value:.2f}"


def best_ratios(record: dict[str, Any], base: str | None = None) -> dict[str, float]:
    """ours/peer (or ``base``/peer) from each model's fastest round (background load only ever adds time)."""
    samples = record.get("samples_seconds")
    peers = record["ratio"] if base is None else record["option_ratio"][base]
    base = base or _base(list(record["median"]))
    if not samples or base not in samples:
        return {}
    fastest = {name: min(times) for name, times in samples.items()}
    if record["better"] == "higher":  # throughput: peer time / our time
        return {peer: fastest[peer] / fastest[base] for peer in peers}
    return {peer: fastest[base] / fastest[peer] for peer in peers}


def table_rows(record: dict[str, Any]) -> list[tuple[str, str, dict[str, float], dict[str, float]]]:
    """The record's rows: (title, whose figures fill the 'ours' column, ratios, best-round ratios).

    First our model as built by default, then one row per option it was also measured with.
    """
    title = TITLES.get(record["kind"], record["kind"])
    base = _base(list(record["median"]))
    rows = [(title, base, record["ratio"] if base == "ours" else {}, best_ratios(record) if base == "ours" else {})]
    for option, ratios in record.get("option_ratio", {}).items():
        rows.append((f"{title}, {OPTION_LABELS[option]}", option, ratios, best_ratios(record, option)))
    return rows


def markdown(machine: dict[str, Any], records: list[dict[str, Any]]) -> str:
    load = machine.get("load_average_start")
    lines = [
        f"Machine: {machine['cpu']}, {machine['cores']} cores, {machine['threads']} threads, device "
        f"`{machine['device']}`{', ' + machine['gpu'] if 'gpu' in machine else ''}; torch {machine['torch']}, "
        f"timm {machine['timm']}, torchvision {machine['torchvision']}; {machine['date']}"
        + (f"; load average at start {load[0]:.1f}" if load else ""),
        *_run_lines(machine),
        "",
        clock_line(machine)
        + "Values are medians over interleaved rounds. Ratios are ours/peer: the median of per-round "
        "ratios, and (best) the ratio of each model's fastest round, which background load disturbs "
        "least. Throughput: > 1 means ours is faster. Time and memory: < 1 means ours is quicker / smaller.",
        "",
        "| measurement | variant | batch | ours | timm | torchvision | ours/timm | ours/torchvision "
        "| ours/timm (best) | ours/torchvision (best) |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for record in records:
        unit = record["unit"]
        for title, ours, ratio, best in table_rows(record):
            cells = [
                _format(record["median"][n], unit) if n in record["median"] else "—"
                for n in (ours, "timm", "torchvision")
            ]
            ratios = [f"{source[n]:.3f}" if n in source else "—" for source in (ratio, best) for n in PEERS]
            lines.append(
                f"| {title} | {record['variant']} | {record.get('batch', '—')} | " + " | ".join(cells + ratios) + " |"
            )
    extras = _extras(records)
    return "\n".join(lines + ([""] + extras if extras else [])) + "\n"


def clock_line(machine: dict[str, Any]) -> str:
    """What the throughput figures were timed by, when it is not the wall clock."""
    if machine.get("clock") == "cpu":
        return (
            "Throughput is timed by the CPU time the process used (one thread), which other processes' "
            "load does not add to. "
        )
    return ""


def _run_lines(machine: dict[str, Any]) -> list[str]:
    """One line per appended run: when, what, and the load average (1 min) before and after."""
    lines = []
    for run in machine.get("runs", []):
        loads = [run.get("load_average_start"), run.get("load_average_end")]
        load = " → ".join(f"{x[0]:.1f}" for x in loads if x)
        lines.append(
            f"- run {run['date']}: {', '.join(run.get('variants') or [])} "
            f"({', '.join(run.get('measure') or [])}); load average {load}"
        )
    return [""] + lines if lines else []


def _extras(records: list[dict[str, Any]]) -> list[str]:
    """Lines under the table: ceiling fractions, other contestants, RSS, first logits, compile times."""
    lines = []
    for record in records:
        where = f"{record['kind']} {record['variant']}" + (f" batch {record['batch']}" if "batch" in record else "")
        others = {
            k: v
            for k, v in record["median"].items()
            if k not in ("ours",) + PEERS and k not in record.get("option_ratio", {})
        }
        if others:
            base = _base(list(record["median"]))
            best = best_ratios(record)
            lines.append(
                f"- {where}: "
                + ", ".join(
                    f"{k} {_format(v, record['unit'])} {record['unit']}"
                    + (
                        f" ({base}/{k} {record['ratio'][k]:.3f}, best {best[k]:.3f})"
                        if k in best
                        else f" ({base}/{k} {record['ratio'][k]:.3f})"
                        if k in record["ratio"]
                        else ""
                    )
                    for k, v in others.items()
                )
            )
        if "fraction_of_matmul" in record:
            fractions = ", ".join(f"{k} {v:.0%}" for k, v in record["fraction_of_matmul"].items())
            lines.append(
                f"- {where}: fp32 matmul ceiling {record['matmul_gflops']:.1f} GFLOP/s "
                f"({record['matmul_size']}² matmul); share of it reached: {fractions}"
            )
        if "rss_peak_mib" in record:
            rss = ", ".join(f"{k} {v:,.0f} MiB" for k, v in record["rss_peak_mib"].items())
            ratio = ", ".join(f"ours/{k} {v:.3f}" for k, v in record["rss_ratio"].items())
            lines.append(
                f"- {where}: each model measured in a fresh process; the table's figure is the peak of "
                f"live tensor bytes (weights, gradients, AdamW state, saved activations) from torch's "
                f"allocator events; the process's peak RSS (VmHWM, everything the OS sees) was {rss} "
                f"({ratio})"
            )
        if "first_logits_median" in record:
            first = ", ".join(f"{k} {v:.3f} s" for k, v in record["first_logits_median"].items())
            ratio = ", ".join(f"ours/{k} {v:.3f}" for k, v in record["first_logits_ratio"].items())
            diff = ", ".join(f"{k} {v:.2e}" for k, v in record["logits_max_abs_diff_vs_timm"].items())
            lines.append(
                f"- {where}: create + first forward (1 image): {first} ({ratio}); logits max-abs-diff vs timm: {diff}"
            )
        if "compile_seconds" in record and record["kind"] == "compiled_infer":
            lines.append(
                f"- compile time (first call, {record['variant']} batch {record['batch']}): "
                + ", ".join(f"{k} {v:.0f} s" for k, v in record["compile_seconds"].items())
            )
    return lines


def plot(path: Path, machine: dict[str, Any], records: list[dict[str, Any]]) -> Path | None:
    """Throughput against batch size, one panel per (kind, variant) with more than one batch size."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels: dict[tuple, list[dict[str, Any]]] = {}
    for record in records:
        if record["unit"] == "img/s":
            panels.setdefault((record["kind"], record["variant"]), []).append(record)
    panels = {k: v for k, v in panels.items() if len(v) > 1}
    if not panels:
        return None
    columns = min(3, len(panels))
    rows = -(-len(panels) // columns)
    fig, axes = plt.subplots(rows, columns, figsize=(5 * columns, 4 * rows), squeeze=False)
    for ax in axes.flat[len(panels) :]:
        ax.set_visible(False)
    for ax, ((kind, variant), group) in zip(axes.flat, panels.items(), strict=False):
        group = sorted(group, key=lambda r: r["batch"])
        for name in group[0]["median"]:
            ax.plot([r["batch"] for r in group], [r["median"][name] for r in group], marker="o", label=name)
        ax.set_xscale("log", base=2)
        ax.set_xticks([r["batch"] for r in group], [str(r["batch"]) for r in group])
        ax.set_xlabel("batch size")
        ax.set_ylabel("images / s")
        ax.set_title(f"ViT-{variant.upper()} {TITLES[kind].replace(' (img/s)', '')}", fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle(
        f"{machine['cpu']}, {machine['threads']} threads, {machine['device']}, torch {machine['torch']}", fontsize=9
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def render(json_path: Path) -> list[Path]:
    """Rewrite the Markdown and the plot of an existing results JSON (same stem, same directory)."""
    data = json.loads(Path(json_path).read_text())
    md_path = json_path.with_suffix(".md")
    md_path.write_text(markdown(data["machine"], data["records"]))
    png = plot(json_path.with_suffix(".png"), data["machine"], data["records"])
    return [md_path] + ([png] if png else [])


def appended(
    json_path: Path, machine: dict[str, Any], settings: dict[str, Any], records: list[dict[str, Any]]
) -> tuple[dict[str, Any], dict[str, Any], list[dict[str, Any]]]:
    """An earlier results file with this run added: records concatenated, each run's date and load kept."""
    import torch

    earlier = json.loads(Path(json_path).read_text())
    earlier["machine"] = {"clock": "wall", **earlier["machine"]}  # files from before the choice of clock
    same = ("cpu", "threads", "device", "torch", "timm", "torchvision", "clock")
    if any(
        earlier["machine"].get(k) != str(machine.get(k)) and earlier["machine"].get(k) != machine.get(k) for k in same
    ):
        raise ValueError(f"{json_path} was measured on another machine or software stack; not appending")
    runs = earlier["machine"].get("runs") or [_run_summary(earlier["machine"], earlier["settings"])]
    merged = {**earlier["machine"], "runs": runs + [_run_summary(machine, settings)]}
    all_settings = earlier["settings"].get("runs") or [earlier["settings"]]
    settings = {
        "runs": all_settings
        + [{k: (str(v) if isinstance(v, (Path, torch.device)) else v) for k, v in settings.items()}]
    }
    return merged, settings, earlier["records"] + records


def _run_summary(machine: dict[str, Any], settings: dict[str, Any]) -> dict[str, Any]:
    return {
        "date": machine["date"],
        "load_average_start": machine.get("load_average_start"),
        "load_average_end": machine.get("load_average_end"),
        "variants": settings.get("variants"),
        "measure": settings.get("measure"),
    }


def write(
    out: Path, name: str, machine: dict[str, Any], args: dict[str, Any], records: list[dict[str, Any]]
) -> list[Path]:
    """``name``.json (everything), ``name``.md (the tables) and ``name``.png (if any curve exists)."""
    import torch

    out.mkdir(parents=True, exist_ok=True)
    json_path, md_path = out / f"{name}.json", out / f"{name}.md"
    settings = {k: (str(v) if isinstance(v, (Path, torch.device)) else v) for k, v in args.items()}
    json_path.write_text(json.dumps({"machine": machine, "settings": settings, "records": records}, indent=1) + "\n")
    md_path.write_text(markdown(machine, records))
    paths = [json_path, md_path]
    png = plot(out / f"{name}.png", machine, records)
    if png:
        paths.append(png)
    return paths
