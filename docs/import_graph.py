"""Print what imports what inside timm_vitscratch, read from the source (nothing is imported).

    python docs/import_graph.py

docs/architecture.md shows this output in a checked block (tests/docs), so the page's drawing of
the package changes when the code does. Every ``import`` statement counts, including the ones
inside functions (the package defers heavy imports such as torchvision that way).
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

PACKAGE = "timm_vitscratch"
ROOT = Path(__file__).resolve().parents[1] / PACKAGE
#: the console script, a top-level module beside the package (so that --help imports no torch)
CONSOLE_SCRIPT = ROOT.parent / "timm_vitscratch_cli.py"


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path, known: set[str]) -> set[str]:
    """The package's own modules that ``path`` imports (relative imports resolved)."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            # "from . import m" names a module; "from .m import f" names something in m
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def layer(module: str) -> str:
    """The subpackage a module belongs to (``models``, ``convert``, ...) or its own name at the top."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else module


def short(module: str) -> str:
    """A module's name inside the package (the package's own and outside modules keep their full name)."""
    return module[len(PACKAGE) + 1 :] if module.startswith(PACKAGE + ".") else module


def graph() -> dict[str, set[str]]:
    paths = sorted(ROOT.rglob("*.py")) + [CONSOLE_SCRIPT]
    known = {module_name(p) for p in paths}
    return {module_name(p): imported_modules(p, known) for p in paths}


def main() -> None:
    edges = graph()
    layers: dict[str, set[str]] = defaultdict(set)
    for module, targets in edges.items():
        layers[layer(module)] |= {layer(t) for t in targets} - {layer(module)}
    width = max(len(name) for name in layers)
    print("Subpackages (and top-level modules): what each imports from the rest of the package")
    for name in sorted(layers):
        print(f"  {name:<{width}}  <- {', '.join(sorted(layers[name])) or '(nothing)'}")
    print()
    print("Modules: what each imports from the package")
    width = max(len(short(name)) for name in edges)
    for module in sorted(edges):
        targets = sorted(short(t) for t in edges[module])
        print(f"  {short(module):<{width}}  <- {', '.join(targets) or '(nothing)'}")


if __name__ == "__main__":
    main()
