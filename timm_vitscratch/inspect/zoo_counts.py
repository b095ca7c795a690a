"""``zoo_counts.json``: the counts ``vitscratch list`` prints, pinned per registered variant, and their generator.

Per variant: its classes at the default head, its true count, its leaf-module (torchsummary) count, the model of the
same architecture in torchvision or timm and that model's true count, and the arguments they were counted at. Each
figure is a fact of the code; building the 92 variants and the references on ``meta`` to find them again takes
seconds of CPU, so they are generated once, shipped with the package and checked by a test against a fresh
computation (``tests/inspect/test_zoo_counts.py``), as ``hub_configs/`` is. Regenerate with
``python -m timm_vitscratch.inspect.zoo_counts``; ``--check`` reports what differs instead of writing.

The file also pins the SHA-256 of the sources the registry's names and arguments are read from
(:data:`SOURCES`). While they are unchanged the pinned rows are the registry's, and the table is printed from the
file alone: this module imports only the standard library at its top, so the console script runs it on its own (as
it runs ``choices.py``) and prints ``vitscratch list`` without importing torch. Where they differ the registry is
imported, and a variant the file does not hold at its arguments is built and counted for its row
(:func:`registry_rows`); ``vitscratch list --live`` builds every row (:func:`live_rows`, :func:`differences`).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

#: the pinned counts, shipped in the package
DATA = Path(__file__).with_name("zoo_counts.json")
#: the package's directory
PACKAGE = Path(__file__).resolve().parents[1]
#: the files the registry's names and arguments are read from, relative to the package (the family records and
#: what a record is); ``variants.py`` imports nothing else of the package
SOURCES = ("models/variants.py", "models/family.py")
#: how to write the file again
GENERATE = "python -m timm_vitscratch.inspect.zoo_counts"

HEADER = ["model", "classes", "true count", "torchsummary count", "hidden"]
REFERENCE_HEADER = ["reference", "same"]


@dataclass(frozen=True)
class ZooRow:
    """One variant's row of ``vitscratch list``, at its default head."""

    name: str
    #: the variant's arguments (``ARCHITECTURES[name]``, as JSON holds them: tuples as lists)
    args: Mapping[str, Any]
    num_classes: int
    #: ``sum(p.numel() for p in model.parameters())``
    true: int
    #: what torchsummary prints: the weights and biases of the leaf modules that run
    leaf_module: int
    #: the model of the same architecture (``torchvision vit_b_16``, ``timm vit_small_patch16_dinov3``), None where
    #: neither library has it (DeiT) or references were not asked for
    reference: str | None = None
    #: its true count at ``num_classes``
    reference_true: int | None = None


def sources_sha256(package: Path | None = None) -> str:
    """The SHA-256 of :data:`SOURCES` (line endings as ``\\n``): while it equals the file's, so do the names."""
    digest = hashlib.sha256()
    for relative in SOURCES:
        digest.update(relative.encode() + b"\0")
        digest.update(((package or PACKAGE) / relative).read_bytes().replace(b"\r\n", b"\n") + b"\0")
    return digest.hexdigest()


def read(path: Path | None = None) -> tuple[str, dict[str, ZooRow]]:
    """The pinned sources' SHA-256 and the rows by name, in the registry's order (``path``: default :data:`DATA`)."""
    data = json.loads((path or DATA).read_text(encoding="utf-8"))
    return data["sources_sha256"], {name: ZooRow(name=name, **row) for name, row in data["rows"].items()}


def render_data(rows: Iterable[ZooRow], sha256: str) -> str:
    """The file's text: the sources' SHA-256, then one line per row (a row per line keeps diffs readable)."""
    lines = [
        f"    {json.dumps(row.name)}: {json.dumps({k: v for k, v in asdict(row).items() if k != 'name'})}"
        for row in rows
    ]
    head = f'{{\n  "generated_by": {json.dumps(GENERATE)},\n  "sources_sha256": {json.dumps(sha256)},\n  "rows": {{\n'
    return head + ",\n".join(lines) + "\n  }\n}\n"


def pinned_rows(path: Path | None = None, package: Path | None = None) -> list[ZooRow] | None:
    """The pinned rows, when the registry's sources are those they were generated from (so the names, their order
    and their arguments are the registry's); None when they are not: ask :func:`registry_rows`."""
    sha256, rows = read(path)
    return list(rows.values()) if sha256 == sources_sha256(package) else None


def _fmt(value: int | None) -> str:
    return "—" if value is None else f"{value:,}"


def render_table(header: list[str], rows: list[list[str]]) -> str:
    """Columns: the first left-aligned, the others right-aligned, a rule under the header."""
    widths = [max(len(r[i]) for r in [header] + rows) for i in range(len(header))]

    def line(cells: list[str]) -> str:
        return "  ".join(
            c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=False))
        )

    return "\n".join([line(header), "  ".join("-" * w for w in widths)] + [line(r) for r in rows])


def table_cells(row: ZooRow, reference: bool = True) -> list[str]:
    """The row's cells in ``vitscratch list``."""
    cells = [row.name, str(row.num_classes), _fmt(row.true), _fmt(row.leaf_module), _fmt(row.true - row.leaf_module)]
    if reference:
        if row.reference is None or row.reference_true is None:
            cells += ["—", "—"]
        else:
            same = "yes" if row.reference_true == row.true else "NO"
            cells += [f"{row.reference_true:,} ({row.reference})", same]
    return cells


def zoo_text(rows: Iterable[ZooRow], reference: bool = True) -> str:
    """The table ``vitscratch list`` prints (``reference``: with the last two columns)."""
    header = HEADER + (REFERENCE_HEADER if reference else [])
    return render_table(header, [table_cells(row, reference) for row in rows])


# --- what builds models: imported inside the functions, when they run ---------------------------------------------
def _json_args(args: Mapping[str, Any]) -> dict[str, Any]:
    """The arguments as the file holds them (tuples as lists)."""
    return dict(json.loads(json.dumps(dict(args))))


def live_row(name: str, reference: bool = True) -> ZooRow:
    """``name``'s row, its model built on ``meta`` and counted (and the reference's, when ``reference``)."""
    from ..models.build import build_on_meta
    from ..models.variants import ARCHITECTURES
    from ..models.vision_transformer import VisionTransformer
    from .counts import leaf_module_param_count, reference_param_count, true_param_count

    model = build_on_meta(name)
    assert isinstance(model, VisionTransformer)  # every registered variant is one
    num_classes = int(model.num_classes)
    found = reference_param_count(name, num_classes) if reference else None
    return ZooRow(
        name=name,
        args=_json_args(ARCHITECTURES[name]),
        num_classes=num_classes,
        true=true_param_count(model),
        leaf_module=leaf_module_param_count(model),
        reference=None if found is None else found[0],
        reference_true=None if found is None else found[1],
    )


def live_rows(reference: bool = True) -> list[ZooRow]:
    """Every registered variant's row, each built and counted."""
    from ..models.variants import ARCHITECTURES

    return [live_row(name, reference) for name in ARCHITECTURES]


def registry_rows(reference: bool = True, path: Path | None = None) -> list[ZooRow]:
    """The registry's rows: the pinned one where the file holds the variant at its arguments, else built and
    counted (a variant added or changed since the file was written)."""
    from ..models.variants import ARCHITECTURES

    pinned = pinned_rows(path)
    if pinned is not None:
        return pinned
    rows = read(path)[1]
    return [
        rows[name] if name in rows and rows[name].args == _json_args(args) else live_row(name, reference)
        for name, args in ARCHITECTURES.items()
    ]


def _without_reference(row: ZooRow) -> ZooRow:
    return ZooRow(**{**asdict(row), "reference": None, "reference_true": None})


def differences(live: list[ZooRow], path: Path | None = None, reference: bool = True) -> dict[str, str]:
    """What differs between the file and ``live`` (every registered variant's row, built): by name, in words (the
    registered first, then the pinned ones no longer registered); ``""`` is the sources' SHA-256. Without
    ``reference`` the references' fields are not compared."""
    sha256, pinned = read(path)
    found: dict[str, str] = {}
    for row in live:
        if row.name not in pinned:
            found[row.name] = "not pinned"
            continue
        held = pinned[row.name] if reference else _without_reference(pinned[row.name])
        row = row if reference else _without_reference(row)
        changed = [
            f"{key} pinned {theirs!r}, live {ours!r}"
            for key, ours in asdict(row).items()
            if (theirs := asdict(held)[key]) != ours
        ]
        if changed:
            found[row.name] = "; ".join(changed)
    registered = {row.name for row in live}
    found.update({name: "pinned, not registered" for name in pinned if name not in registered})
    if not found and list(pinned) != [row.name for row in live]:
        found["order"] = "pinned in another order than the registry's"
    if sha256 != sources_sha256():
        found[""] = f"generated from other {' and '.join(SOURCES)} (vitscratch list imports the registry)"
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=GENERATE, description=(__doc__ or "").split("\n")[0])
    parser.add_argument("path", nargs="?", type=Path, default=None, help="the file (default: the package's)")
    parser.add_argument("--check", action="store_true", help="report differences instead of writing")
    args = parser.parse_args(argv)
    args.path = args.path or DATA
    live = live_rows()
    if args.check:
        found = differences(live, args.path) if args.path.is_file() else {"": f"missing {args.path}"}
        for name, words in found.items():
            print(f"{name}: {words}" if name else words)
        if not found:
            print(f"{args.path}: {len(live)} rows in sync")
        return 1 if found else 0
    from ..files import atomic_write

    with atomic_write(args.path, "w") as handle:
        handle.write(render_data(live, sources_sha256()))
    print(args.path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
