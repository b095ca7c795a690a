"""Print a committed benchmark results file as the text tables the docs show (no timing is run).

    python benchmarks/render_results.py benchmarks/results/cpu.json [--kinds infer train] [--notes]

The first line names the machine and the software; then one row per record: the medians and the
ours/peer ratios (median of per-round ratios), our model as built by default first, then a row for
each option of ours measured with it (the opt-in pooled forward, a forced attention path). ``--notes`` adds the lines beneath a table
(matmul ceiling shares, RSS, first-logits times, compile times). docs/performance.md shows this
output in checked blocks, so the page always matches the JSON it links to.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from result_records import PEERS, TITLES, _extras, _format, aligned_lines, table_rows

PEOPLE = ("ours", "timm", "torchvision")


def machine_line(machine: dict[str, Any]) -> str:
    gpu = f" ({machine['gpu']})" if "gpu" in machine else ""
    clock = "; throughput timed by the process's CPU time" if machine.get("clock") == "cpu" else ""
    return (
        f"Machine: {machine['cpu']}, {machine['cores']} cores, {machine['threads']} threads, "
        f"device {machine['device']}{gpu}; torch {machine['torch']}, timm {machine['timm']}, "
        f"torchvision {machine['torchvision']}{clock}"
    )


def table(records: list[dict[str, Any]]) -> list[str]:
    header = ["measurement", "variant", "batch", *PEOPLE, "ours/timm", "ours/torchvision"]
    rows = []
    for record in records:
        unit, median = record["unit"], record["median"]
        for title, ours, ratio, _best in table_rows(record):
            rows.append(
                [
                    title,
                    record["variant"],
                    str(record.get("batch", "—")),
                    *(_format(median[n], unit) if n in median else "—" for n in (ours,) + PEERS),
                    *(f"{ratio[n]:.3f}" if n in ratio else "—" for n in PEERS),
                ]
            )
    return aligned_lines(header, rows, left=2)


def render(path: Path, kinds: Sequence[str] = (), notes: bool = False) -> str:
    data = json.loads(Path(path).read_text())
    records = [r for r in data["records"] if not kinds or r["kind"] in kinds]
    lines = [machine_line(data["machine"]), ""] + table(records)
    if notes:
        lines += [""] + _extras(records)
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", type=Path, help="a results JSON written by benchmarks/run.py")
    parser.add_argument("--kinds", nargs="+", default=[], choices=sorted(TITLES), help="only these measurements")
    parser.add_argument("--notes", action="store_true", help="add the notes beneath the table")
    args = parser.parse_args(argv)
    sys.stdout.write(render(args.results, args.kinds, args.notes))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
