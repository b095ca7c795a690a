"""docs/architecture.md's rooms table is the package as it is: every module and folder under ``timm_vitscratch/``
is named in it, every file and folder it names exists, and the sentence above it counts the subpackages.

The table's first column names paths: the first from the repository root, the rest beside it (or from the root
when they start with ``timm_vitscratch``); the second names a row's modules as ``NAME.py``, in the row's folder (the
first path, or the folder it is in), or with a ``/`` under ``timm_vitscratch/`` unless they start there.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "architecture.md"
PACKAGE = ROOT / "timm_vitscratch"
CODE = re.compile(r"`([^`]+)`")
NUMBERS = ("no", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve")


def table_rows() -> list[tuple[str, str]]:
    """(path cell, holds cell) of each row of the first ``| path | holds |`` table."""
    lines = PAGE.read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if line.replace(" ", "") == "|path|holds|")
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        cells = [cell.strip() for cell in line.strip().strip("|").split(" | ")]
        assert len(cells) == 2, f"a rooms row has two cells: {line[:80]}"
        rows.append((cells[0], cells[1]))
    return rows


def named_paths() -> tuple[set[Path], list[str]]:
    """Every path the table names (resolved), and the names that do not exist."""
    named: set[Path] = set()
    missing: list[str] = []
    for path_cell, holds_cell in table_rows():
        tokens = CODE.findall(path_cell)
        first = ROOT / tokens[0].rstrip("/")
        beside, folder = first.parent, first if tokens[0].endswith("/") else first.parent
        for token in tokens:
            path = (ROOT if token.startswith("timm_vitscratch") else beside) / token
            named.add(path.resolve())
            if not path.exists():
                missing.append(f"{token} (path of the row {tokens[0]})")
        for token in CODE.findall(holds_cell):
            if not re.fullmatch(r"[\w/]+\.py", token):
                continue
            path = (
                (ROOT if token.startswith("timm_vitscratch/") else PACKAGE) / token if "/" in token else folder / token
            )
            named.add(path.resolve())
            if not path.exists():
                missing.append(f"{token} (in the row {tokens[0]})")
    return named, missing


def package_entries() -> list[Path]:
    """Every module (but ``__init__.py``) and folder under ``timm_vitscratch/``."""
    entries = []
    for path in sorted(PACKAGE.rglob("*")):
        if "__pycache__" in path.parts:
            continue
        if path.is_dir() or (path.suffix == ".py" and path.name != "__init__.py"):
            entries.append(path)
    return entries


def test_every_module_and_folder_of_the_package_is_named():
    named, _ = named_paths()
    unnamed = [path.relative_to(ROOT).as_posix() for path in package_entries() if path.resolve() not in named]
    assert unnamed == [], f"docs/architecture.md's rooms table does not name: {unnamed}"


def test_every_path_the_table_names_exists():
    _, missing = named_paths()
    assert missing == [], f"docs/architecture.md's rooms table names what does not exist: {missing}"


def test_the_subpackages_are_counted():
    subpackages = [p for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()]
    text = PAGE.read_text(encoding="utf-8")
    said = re.search(r"`timm_vitscratch` is (\w+) subpackages", text)
    assert said is not None, "docs/architecture.md opens with how many subpackages the package is"
    assert said.group(1) == NUMBERS[len(subpackages)], sorted(p.name for p in subpackages)
