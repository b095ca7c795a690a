"""The gate is the only way in: no module outside ``timm_vitscratch/gate/`` calls a parser of outside bytes, and
the few that open files to read them only hash or copy the bytes, or read files of the package's own (a table).

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


#: modules outside the gate that parse a file of the package's own, never one from outside, and why
PARSERS_OF_OUR_OWN_FILES = {
    f"{PACKAGE}.inspect.zoo_counts": "the package's own inspect/zoo_counts.json (generated, test-checked, shipped)",
}


def test_no_module_outside_the_gate_parses_outside_bytes():
    wrong = [
        f"{name}:{line}: {what}"
        for name, path in module_names().items()
        if name != GATE and not name.startswith(GATE + ".") and name not in PARSERS_OF_OUR_OWN_FILES
        for line, what in parser_uses(Path(path).read_text(encoding="utf-8"))
    ]
    assert wrong == []
    used = {name for name, path in module_names().items() if parser_uses(Path(path).read_text(encoding="utf-8"))}
    assert set(PARSERS_OF_OUR_OWN_FILES) <= used, "an entry that parses nothing any more"


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


#: modules outside the gate that open files to read them, and why none of them parses what it reads: each
#: hashes or copies bytes, or reads a file of ours. A new entry needs a reason here (or the read moves to the gate).
READERS_OUTSIDE_THE_GATE = {
    f"{PACKAGE}.files": "sha256 of a file, in chunks (hashing, no parsing)",
    f"{PACKAGE}.hub.listing": "the git blob id of a downloaded file (hashing, no parsing)",
    f"{PACKAGE}.hub.client": "push copies and hashes its own staged copy; pull copies snapshot bytes into staging",
    f"{PACKAGE}.hub.cache": "compares a refs/ file of the Hugging Face cache with a commit id the gate checked",
    f"{PACKAGE}.hub.variant_configs": "the package's own hub_configs/*.json, compared as text",
    f"{PACKAGE}.atomic_replace": "descriptors of directories and staging files, opened to lock them",
    f"{PACKAGE}.inspect.zoo_counts": "the package's own inspect/zoo_counts.json and the sources it pins (sha256)",
    f"{PACKAGE}.licenses": "the package's own license texts (license_texts/), copied as bytes into model directories",
    f"{PACKAGE}.layouts.page_release": "/proc/self/maps and /proc/self/smaps, this process's own memory map",
    CONSOLE_SCRIPT: "the package's own version.py, parsed as Python source without importing torch",
}


def read_opens(source: str) -> list[tuple[int, str]]:
    """``(line, what)`` for each place ``source`` opens a file to read it (``open``, ``os.open`` without a
    write flag, ``Path.read_text`` / ``read_bytes``, ``os.fdopen`` for reading)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        name = _dotted(node.func)
        last = name.split(".")[-1]
        if last in ("read_text", "read_bytes"):
            found.append((node.lineno, name))
        elif name == "os.open":
            flags = ast.unparse(node.args[1]) if len(node.args) > 1 else ""
            if not any(flag in flags for flag in ("O_WRONLY", "O_RDWR", "O_CREAT", "_NEW_FILE")):
                found.append((node.lineno, name))
        elif name in ("open", "io.open", "os.fdopen") and not _writes(node):
            found.append((node.lineno, name))
    return found


def test_modules_that_read_files_outside_the_gate_only_hash_copy_or_read_their_own():
    readers = {
        name
        for name, path in module_names().items()
        if name != GATE and not name.startswith(GATE + ".") and read_opens(Path(path).read_text(encoding="utf-8"))
    }
    assert readers == set(READERS_OUTSIDE_THE_GATE)


def test_the_read_scan_finds_each_kind_of_read():
    planted = """
import os
from pathlib import Path

def f(path):
    open(path)
    open(path, "rb")
    open(path, "wb")
    os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    os.open(path, os.O_WRONLY | os.O_CREAT)
    Path(path).read_text()
    Path(path).read_bytes()
    os.fdopen(3, "rb")
    os.fdopen(3, "wb")
"""
    assert [what for _, what in read_opens(planted)] == [
        "open",
        "open",
        "os.open",
        "read_text",
        "read_bytes",
        "os.fdopen",
    ]
