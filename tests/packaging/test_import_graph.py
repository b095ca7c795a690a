"""The package's layers point only down (tests/support/import_graph.py builds the graph from the source,
imports inside functions and under ``if TYPE_CHECKING:`` included): no cycle between modules, no import
from a lower layer to a higher one or between two units of the same layer, and ``layouts`` a leaf the
loader can stand on."""

import ast

from tests.support.import_graph import (
    PACKAGE,
    ROOT,
    TOP,
    cycles,
    dependencies,
    graph,
    imports_of,
    layer_of,
    module_names,
    type_only_imports,
    unit,
)


def test_no_module_imports_a_module_that_imports_it_back():
    # type-only imports included: ``if TYPE_CHECKING: from .vision_transformer import VisionTransformer`` in a
    # module the model imports is a cycle too (the helper reads the model's internals); pass what it needs
    assert cycles(dependencies()) == []


def test_every_import_between_units_points_down():
    wrong = [
        f"{source} -> {target}"
        for source, targets in graph().items()
        for target in targets
        if unit(source) != unit(target) and unit(source) != TOP and layer_of(unit(target)) >= layer_of(unit(source))
    ]
    assert wrong == []


def test_type_only_imports_point_down_too():
    # an import under TYPE_CHECKING never runs, but it keeps to the layers: within its own unit or down
    wrong = [
        f"{source} -> {target}"
        for source, targets in type_only_imports().items()
        for target in targets
        if unit(source) != unit(target) and layer_of(unit(target)) >= layer_of(unit(source))
    ]
    assert wrong == []


def test_nothing_inside_imports_the_package_root():
    assert [m for m, targets in graph().items() if TOP in targets and m != TOP] == []


def test_layouts_stay_a_leaf_without_model_or_reference_libraries():
    # the loader's knowledge of layouts must not pull in torchvision, transformers or timm's models
    heavy = ("torchvision", "transformers", "timm")
    for path in (ROOT / PACKAGE / "layouts").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom) and not node.level
                else []
            )
            assert not [n for n in names if n.split(".")[0] in heavy], f"{path.name} imports {names}"


def test_the_checker_finds_a_cycle_and_an_upward_edge(tmp_path):
    # the checks above are only as good as these functions: feed them a graph that is wrong
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    up = {"timm_vitscratch.models.x": {"timm_vitscratch.convert.y"}}
    assert [s for s, ts in up.items() for t in ts if layer_of(unit(t)) >= layer_of(unit(s))] == [s for s in up]
    # and the real graph holds the function-level import a loader once used to reach convert
    modules = module_names()
    source = "def f():\n    from ..convert.formats import FORMATS\n"
    fake = tmp_path / "fake.py"
    fake.write_text(source)
    assert imports_of("timm_vitscratch.models.fake", fake, modules) == {"timm_vitscratch.convert.formats"}


def test_the_checker_reads_type_only_imports(tmp_path):
    # the cycle vision_transformer <-> naflex once hid under TYPE_CHECKING: the reader must see such imports
    modules = module_names()
    source = (
        "from typing import TYPE_CHECKING\n"
        "from . import naflex\n"
        "if TYPE_CHECKING:\n"
        "    from .vision_transformer import VisionTransformer\n"
    )
    fake = tmp_path / "fake.py"
    fake.write_text(source)
    runs = imports_of("timm_vitscratch.models.fake", fake, modules)
    typed = imports_of("timm_vitscratch.models.fake", fake, modules, type_only=True)
    assert runs == {"timm_vitscratch.models.naflex"}
    assert typed == {"timm_vitscratch.models.vision_transformer"}
    closed = {"timm_vitscratch.models.vision_transformer": {"timm_vitscratch.models.fake"}}
    assert cycles({**closed, "timm_vitscratch.models.fake": runs | typed}) != []
