"""The gate is the only way in: no module outside ``timm_vitscratch/gate/`` calls a parser of outside bytes.

Read from the source (nothing is imported): every call or import of ``json.load(s)``, ``torch.load``,
``safetensors``' readers, ``numpy.load`` and the ``.npy`` header readers, ``pickle``, ``zipfile`` / ``tarfile``
readers and ``PIL.Image.open`` is listed with its module and line; only the gate may hold them.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support.import_graph import CONSOLE_SCRIPT, PACKAGE, module_names

#: (module, attribute) pairs whose call parses bytes; a bare name in the second column matches any base
PARSERS = {
    ("json", "load"),
    ("json", "loads"),
    ("torch", "load"),
    ("numpy", "load"),
    ("np", "load"),
    ("pickle", "load"),
    ("pickle", "loads"),
    ("pickle", "Unpickler"),
    ("Image", "open"),
    ("zipfile", "ZipFile"),
    ("tarfile", "open"),
    ("yaml", "safe_load"),
    ("yaml", "load"),
}
#: names that parse outside bytes wherever they are imported from
PARSER_NAMES = {
    "safe_open",
    "load_file",
    "safe_load",
    "read_array_header_1_0",
    "read_array_header_2_0",
    "read_magic",
    "ZipFile",
    "Unpickler",
}
GATE = f"{PACKAGE}.gate"


def _dotted(node: ast.AST) -> str:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    return ".".join(reversed(parts))


def _writes(call: ast.Call) -> bool:
    """``ZipFile(f, "w")`` and the like: a writer of our own bytes, not a reader of outside ones."""
    modes = [a for a in call.args[1:2]] + [k.value for k in call.keywords if k.arg == "mode"]
    return any(isinstance(m, ast.Constant) and str(m.value)[:1] in ("w", "x", "a") for m in modes)


def parser_uses(source: str) -> list[tuple[int, str]]:
    """``(line, what)`` for each call or import of a parser of outside bytes in ``source``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            found += [(node.lineno, f"import {a.name}") for a in node.names if a.name in PARSER_NAMES]
        elif isinstance(node, ast.Call):
            name = _dotted(node.func)
            parts = name.split(".")
            if _writes(node):
                continue
            if parts[-1] in PARSER_NAMES or (len(parts) >= 2 and (parts[-2], parts[-1]) in PARSERS):
                found.append((node.lineno, name))
    return found


def test_no_module_outside_the_gate_parses_outside_bytes():
    wrong = [
        f"{name}:{line}: {what}"
        for name, path in module_names().items()
        if name != GATE and not name.startswith(GATE + ".")
        for line, what in parser_uses(Path(path).read_text(encoding="utf-8"))
    ]
    assert wrong == []


def test_the_gate_holds_the_parsers():
    # the scan finds what it looks for: the gate itself calls them
    gate_uses = {
        what
        for name, path in module_names().items()
        if name == GATE or name.startswith(GATE + ".")
        for _, what in parser_uses(Path(path).read_text(encoding="utf-8"))
    }
    assert "json.loads" in gate_uses


def test_the_scan_finds_each_kind_of_use():
    planted = """
import json, torch, zipfile
import numpy as np
from PIL import Image
from safetensors import safe_open
from numpy.lib.format import read_array_header_1_0

def f(path):
    json.loads(b"{}")
    torch.load(path, weights_only=True)
    np.load(path)
    Image.open(path)
    zipfile.ZipFile(path)
    zipfile.ZipFile(path, "w")
    with safe_open(path, "pt"):
        pass
"""
    kinds = {what for _, what in parser_uses(planted)}
    assert kinds == {
        "import safe_open",
        "import read_array_header_1_0",
        "json.loads",
        "torch.load",
        "np.load",
        "Image.open",
        "zipfile.ZipFile",
        "safe_open",
    }


def test_the_console_script_is_scanned_too():
    assert CONSOLE_SCRIPT in module_names()
