"""Every figure the README and docs/ show is the output of a command this test runs.

In any Markdown file (README.md, docs/**/*.md), a fenced code block directly preceded by a line

    <!-- check: COMMAND -->

must equal what COMMAND prints (stdout) when run from the repository root. COMMAND is a shell
command line in which ``python`` and ``vitscratch`` are the interpreter running the tests and the
console script installed beside it. Only trailing whitespace is normalised. A block edited by
hand, or a command whose output has changed, fails with a diff naming the file and line.
"""

from __future__ import annotations

import difflib
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support import time_limits

pytestmark = pytest.mark.slow  # re-runs every command the docs show

ROOT = Path(__file__).resolve().parents[2]
MARKER = re.compile(r"^<!--\s*check:\s*(?P<command>.+?)\s*-->\s*$")
FENCE = re.compile(r"^(?P<fence>`{3,}|~{3,})")
#: the longest a checked command takes on a quiet machine (its time limit scales from it: tests/support/time_limits.py)
COMMAND_QUIET_S = 60


@dataclass(frozen=True)
class CheckedBlock:
    path: Path
    line: int  # 1-based line of the marker
    command: str
    expected: str

    @property
    def where(self) -> str:
        return f"{shown_path(self.path)}:{self.line}"


def shown_path(path: Path) -> str:
    return path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else str(path)


def markdown_files() -> list[Path]:
    return [ROOT / "README.md"] + sorted((ROOT / "docs").rglob("*.md"))


def checked_blocks(path: Path) -> list[CheckedBlock]:
    """The marked blocks of one file (markers inside other code blocks are text, not checks)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks, index = [], 0
    while index < len(lines):
        marker, opening = MARKER.match(lines[index]), FENCE.match(lines[index])
        if marker:
            where = f"{shown_path(path)}:{index + 1}"
            opening = FENCE.match(lines[index + 1]) if index + 1 < len(lines) else None
            if opening is None:
                raise ValueError(f"{where}: a check marker must be directly followed by a fenced code block")
            end = _closing_fence(lines, index + 1, opening.group("fence"), where)
            blocks.append(CheckedBlock(path, index + 1, marker.group("command"), "\n".join(lines[index + 2 : end])))
            index = end + 1
        elif opening:
            index = _closing_fence(lines, index, opening.group("fence"), f"{shown_path(path)}:{index + 1}") + 1
        else:
            index += 1
    return blocks


def _closing_fence(lines: list[str], start: int, fence: str, where: str) -> int:
    for index in range(start + 1, len(lines)):
        if lines[index].strip() == fence:
            return index
    raise ValueError(f"{where}: a fenced code block is never closed")


def normalised(text: str) -> str:
    """Trailing whitespace off every line and off the end: the only difference a block may have."""
    return "\n".join(line.rstrip() for line in text.rstrip().splitlines())


def command_environment(tmp_path: Path) -> dict:
    """PATH with ``python`` = this interpreter and ``vitscratch`` = its console script first."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    # a wrapper, not a symlink: a venv's interpreter finds its site-packages from the path it runs as
    wrapper = bin_dir / "python"
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    wrapper.chmod(0o755)
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(bin_dir), str(Path(sys.executable).parent), env.get("PATH", "")])
    env.setdefault("OMP_NUM_THREADS", "1")
    env["COLUMNS"] = "100"  # argparse help and any terminal-sized output wrap the same everywhere
    return env


_OUTPUTS: dict = {}  # command -> output: a command shown on two pages runs once


def run_command(command: str, tmp_path: Path) -> str:
    if command in _OUTPUTS:
        return _OUTPUTS[command]
    done = time_limits.run(
        ["bash", "-c", f"set -o pipefail; {command}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=command_environment(tmp_path),
        quiet_seconds=COMMAND_QUIET_S,
    )
    if done.returncode != 0:
        pytest.fail(f"`{command}` exited with {done.returncode}:\n{done.stderr[-3000:]}")
    _OUTPUTS[command] = done.stdout
    return done.stdout


BLOCKS = [block for path in markdown_files() for block in checked_blocks(path)]


@pytest.mark.parametrize("block", BLOCKS, ids=[block.where for block in BLOCKS])
def test_block_equals_command_output(block: CheckedBlock, tmp_path):
    shown, printed = normalised(block.expected), normalised(run_command(block.command, tmp_path))
    if shown != printed:
        diff = "\n".join(
            difflib.unified_diff(
                shown.splitlines(),
                printed.splitlines(),
                fromfile=f"{block.where} (as shown)",
                tofile=f"`{block.command}` (as printed now)",
                lineterm="",
            )
        )
        pytest.fail(
            f"{block.where}: the block differs from the output of `{block.command}`. "
            f"Paste the command's output into the block (python -m tests.docs.refresh_blocks does it for every block).\n{diff}",
            pytrace=False,
        )


def test_readme_and_docs_have_checked_blocks():
    """The mechanism is in use where the figures are: the README and the inspection page."""
    where = {block.path.relative_to(ROOT).as_posix() for block in BLOCKS}
    assert {"README.md", "docs/inspection.md", "docs/performance.md", "docs/architecture.md"} <= where


def test_a_marker_without_a_block_is_an_error(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("<!-- check: vitscratch list -->\n\nno block here\n")
    with pytest.raises(ValueError, match="directly followed by a fenced code block"):
        checked_blocks(page)


def test_an_edited_figure_fails(tmp_path):
    """The checker itself: a block one digit away from its command's output is reported with a diff."""
    page = tmp_path / "page.md"
    page.write_text("Text.\n<!-- check: python -c 'print(6 * 7)' -->\n```text\n43\n```\n")
    [block] = checked_blocks(page)
    assert (block.line, block.command, block.expected) == (2, "python -c 'print(6 * 7)'", "43")
    with pytest.raises(pytest.fail.Exception, match=r"(?s)page.md:2: the block differs.*-43\n\+42"):
        test_block_equals_command_output(block, tmp_path)
