"""What imports what inside timm_vitscratch, read from the source (nothing is imported): every import
that runs counts, including those inside functions (``graph``). Imports under ``if TYPE_CHECKING:`` never
run (the type checker alone reads them); ``type_only_imports`` lists them, and ``dependencies`` adds them
to the graph: a module that names another in its annotations depends on it as much as one that imports
it, so they may close no cycle either.

    python -m tests.support.import_graph

prints the layers and the graph that docs/architecture.md shows in a checked block;
tests/packaging/test_import_graph.py holds the package to them.
"""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "timm_vitscratch"
#: the units of the package, lowest first; a unit imports only units of lower layers
LAYERS: list[tuple[str, ...]] = [
    ("choices", "errors", "private_api", "version"),
    ("gate", "atomic_replace", "weight_sources"),
    ("files",),
    ("tensor_writer", "licenses"),
    ("layouts",),
    ("models",),
    ("model_dir", "inspect"),
    ("convert", "hub", "train"),
    ("cli",),
]
#: the package's own ``__init__`` registers the models and re-exports them: nothing inside imports it
TOP = PACKAGE
#: the console script, a top-level module beside the package (so that --help imports no torch): the cli unit
CONSOLE_SCRIPT = "timm_vitscratch_cli"


def module_names() -> dict[str, Path]:
    modules = {}
    for path in sorted((ROOT / PACKAGE).rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        modules[name] = path
    modules[CONSOLE_SCRIPT] = ROOT / f"{CONSOLE_SCRIPT}.py"
    return modules


def _type_only(tree: ast.Module) -> set[ast.AST]:
    """The nodes inside ``if TYPE_CHECKING:`` blocks."""
    inside: set[ast.AST] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in {
            getattr(node.test, "id", None),
            getattr(node.test, "attr", None),
        }:
            for statement in node.body:
                inside.update(ast.walk(statement))
    return inside


def imports_of(name: str, path: Path, modules: dict[str, Path], type_only: bool = False) -> set[str]:
    """The package modules ``name`` imports, wherever in the file the import stands (with ``type_only``,
    only those under ``if TYPE_CHECKING:``, which never run)."""
    is_package = path.name == "__init__.py"
    here = name.split(".") if is_package else name.split(".")[:-1]
    found = set()
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skipped = _type_only(tree)
    for node in ast.walk(tree):
        if (node in skipped) != type_only:
            continue
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = ".".join([*here[: len(here) - node.level + 1], *([node.module] if node.module else [])])
            if not node.level:
                base = node.module or ""
            # ``from pkg import mod`` imports the module pkg.mod; ``from mod import name``, the module mod
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
        else:
            continue
        for target in targets:
            while target and target not in modules:  # ``import a.b.c`` of a name inside a module
                target = target.rpartition(".")[0]
            if target.startswith(PACKAGE) and target != name:
                found.add(target)
    return found


def type_only_imports() -> dict[str, set[str]]:
    modules = module_names()
    return {name: found for name, path in modules.items() if (found := imports_of(name, path, modules, True))}


@cache  # the source does not change during a run
def graph() -> dict[str, set[str]]:
    modules = module_names()
    return {name: imports_of(name, path, modules) for name, path in modules.items()}


def dependencies() -> dict[str, set[str]]:
    """``graph`` with the type-only imports added: what each module depends on, run time or type checking."""
    type_only = type_only_imports()
    return {name: targets | type_only.get(name, set()) for name, targets in graph().items()}


def unit(module: str) -> str:
    if module == CONSOLE_SCRIPT:
        return "cli"
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else TOP


def layer_of(unit_name: str) -> int:
    for index, names in enumerate(LAYERS):
        if unit_name in names:
            return index
    raise AssertionError(f"{unit_name} is in no layer: add it to LAYERS")


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in edges.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def unit_edges(edges: dict[str, set[str]]) -> dict[str, set[str]]:
    units: dict[str, set[str]] = defaultdict(set)
    for source, targets in edges.items():
        for target in targets:
            if unit(source) != unit(target):
                units[unit(source)].add(unit(target))
    return units


def short(module: str) -> str:
    return module[len(PACKAGE) + 1 :] if module.startswith(PACKAGE + ".") else module


def render() -> str:
    """The layers, top first, with what each unit imports; then every module's imports."""
    edges = graph()
    units = unit_edges(edges)
    lines = ["Layers, top first: what each unit imports from the package"]
    for index in reversed(range(len(LAYERS))):
        for name in LAYERS[index]:
            below = ", ".join(sorted(units.get(name, ()), key=lambda u: (-layer_of(u), u))) or "(nothing)"
            lines.append(f"  {index}  {name:<14} -> {below}")
    lines += ["", "Modules: what each imports from the package"]
    width = max(len(short(m)) for m in edges)
    for module in sorted(edges):
        lines.append(
            f"  {short(module):<{width}}  -> {', '.join(sorted(short(t) for t in edges[module])) or '(nothing)'}"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    print(render())
