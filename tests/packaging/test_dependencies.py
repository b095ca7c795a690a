"""The runtime dependencies are what the package imports, no more and no fewer; the rest sits in extras.

Every import in the package, the console script and the autoload module (inside functions too) is read
from the source; each third-party one is mapped to the distribution that provides it.
"""

from __future__ import annotations

import ast
import re
import sys
from importlib.metadata import packages_distributions
from pathlib import Path

from tests.support.environments import PROJECT

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the TOML reader pip carries
    from pip._vendor import tomli as tomllib

SOURCES = [*sorted((PROJECT / "timm_vitscratch").rglob("*.py")), PROJECT / "timm_vitscratch_cli.py"]
SOURCES.append(PROJECT / "timm_vitscratch_autoload.py")
#: imports the package makes only where an extra is installed: module -> the extra that brings it
IN_EXTRAS = {"matplotlib": "plots", "PIL": "plots", "transformers": "transformers"}
#: imports tried only where the user installed the package, never required: module -> what it serves
WHEN_INSTALLED = {"flash_attn": "flash-attn's variable-length kernel, one choice of the packed attention on CUDA"}


def _normalised(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _imported_modules(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found


def _project() -> dict:
    return tomllib.loads((PROJECT / "pyproject.toml").read_text(encoding="utf-8"))["project"]


def _names(requirements: list[str]) -> set[str]:
    return {_normalised(re.match(r"[A-Za-z0-9._-]+", r).group(0)) for r in requirements}  # type: ignore[union-attr]


def third_party_imports() -> dict[str, set[str]]:
    """``{module: files importing it}`` for every top-level module that is neither ours nor the standard library."""
    ours = {"timm_vitscratch", "timm_vitscratch_cli", "timm_vitscratch_autoload"}
    found: dict[str, set[str]] = {}
    for path in SOURCES:
        for module in _imported_modules(path) - ours - set(sys.stdlib_module_names):
            found.setdefault(module, set()).add(path.relative_to(PROJECT).as_posix())
    return found


def test_dependencies_are_what_the_package_imports() -> None:
    providers = packages_distributions()
    imported = third_party_imports()
    runtime = {
        _normalised(providers[module][0]) for module in imported if module not in {**IN_EXTRAS, **WHEN_INSTALLED}
    }
    assert _names(_project()["dependencies"]) == runtime


def test_what_only_some_commands_import_is_in_their_extra() -> None:
    providers = packages_distributions()
    imported = third_party_imports()
    extras = _project()["optional-dependencies"]
    for module, extra in IN_EXTRAS.items():
        assert module in imported, f"the package no longer imports {module}: drop it from IN_EXTRAS and [{extra}]"
        assert _normalised(providers[module][0]) in _names(extras[extra]), (module, extra)


def test_neither_yaml_nor_tqdm_is_imported_or_required() -> None:
    assert not {"yaml", "tqdm"} & set(third_party_imports())
    assert not {"pyyaml", "tqdm"} & _names(_project()["dependencies"])


def test_developer_tools_are_in_dev_only() -> None:
    extras = _project()["optional-dependencies"]
    tools = {"ruff", "mypy", "setuptools", "pytest", "pytest-xdist", "hypothesis"}
    assert tools <= _names(extras["dev"])
    for name, requirements in extras.items():
        assert name == "dev" or not tools & _names(requirements), name
    assert "timm_vitscratch[plots,examples,transformers]" in extras["dev"]  # dev brings every extra


def test_what_is_tried_when_installed_is_imported_in_one_place_and_required_nowhere() -> None:
    imported = third_party_imports()
    project = _project()
    required = _names([*project["dependencies"], *(r for rs in project["optional-dependencies"].values() for r in rs)])
    for module in WHEN_INSTALLED:
        assert imported.get(module) == {"timm_vitscratch/models/packed_kernels.py"}, (module, imported.get(module))
        assert _normalised(module) not in required and _normalised(module.replace("_", "-")) not in required
