"""The constraints of the minimum-versions job (``make test-min``), printed to stdout.

Every ``name>=X`` in ``pyproject.toml``'s dependencies (and in the extras named in :data:`FLOORED_EXTRAS`) becomes
``name==X``, so the job installs each declared floor and no floor goes untested; every other package keeps its
line from ``constraints.txt`` (the pinned working set). Run it with the job's own Python.

``--installed`` prints the version of each floored package installed in this Python's environment, and fails
unless each is its floor: the line that says which minimum versions the job ran.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the TOML reader pip carries
    from pip._vendor import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
#: extras whose floors are pinned too: the libraries we convert from and verify against
FLOORED_EXTRAS = ("transformers",)


def _name(requirement: str) -> str:
    """The normalised project name at the start of a requirement or constraint line (PEP 503)."""
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
    if match is None:
        raise ValueError(f"not a requirement: {requirement!r}")
    return re.sub(r"[-_.]+", "-", match.group(1)).lower()


def floors(pyproject: Path = ROOT / "pyproject.toml") -> dict[str, str]:
    """``{name: floor}`` for each ``>=`` requirement of the dependencies and :data:`FLOORED_EXTRAS`."""
    project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
    requirements = list(project["dependencies"])
    for extra in FLOORED_EXTRAS:
        requirements += project["optional-dependencies"][extra]
    found = {}
    for requirement in requirements:
        floor = re.search(r">=\s*([0-9][^,;\s]*)", requirement)
        if floor is None:
            raise ValueError(f"pyproject.toml: {requirement!r} states no floor (name>=version)")
        found[_name(requirement)] = floor.group(1)
    return found


def constraints(pyproject: Path = ROOT / "pyproject.toml", working_set: Path = ROOT / "constraints.txt") -> str:
    pinned = floors(pyproject)
    lines = [f"{name}=={version}" for name, version in pinned.items()]
    for line in working_set.read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.lstrip().startswith("#") and _name(line) not in pinned:
            lines.append(line.strip())
    return "\n".join(lines) + "\n"


def installed() -> int:
    from importlib.metadata import PackageNotFoundError, version

    from packaging.version import Version

    found, wrong = [], []
    for name, floor in floors().items():
        try:
            have = version(name)
        except PackageNotFoundError:
            have = "not installed"
        found.append(f"{name} {have}")
        if have == "not installed" or Version(have) != Version(floor):
            wrong.append(f"{name} {have} (its floor is {floor})")
    print("minimum versions: " + ", ".join(found))
    if wrong:
        print("not the floors pyproject.toml states: " + ", ".join(wrong), file=sys.stderr)
    return 1 if wrong else 0


if __name__ == "__main__":
    if sys.argv[1:] == ["--installed"]:
        sys.exit(installed())
    sys.stdout.write(constraints())
