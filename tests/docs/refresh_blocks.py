"""Rewrite every ``<!-- check: COMMAND -->`` block in README.md and docs/ with its command's output.

Run from the repository root after a change that alters a shown figure, then review the diff:
``python -m tests.docs.refresh_blocks``. The test in ``test_doc_blocks.py`` checks the same blocks.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

from tests.docs.test_doc_blocks import ROOT, checked_blocks, command_environment, markdown_files, normalised


def refresh(path: Path, env: dict) -> bool:
    """Rewrite ``path``'s checked blocks in place (atomically); True when anything changed."""
    lines = path.read_text(encoding="utf-8").splitlines()
    changed = False
    for block in reversed(checked_blocks(path)):  # bottom-up: earlier line numbers stay valid
        done = subprocess.run(
            ["bash", "-c", f"set -o pipefail; {block.command}"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            raise SystemExit(f"{block.where}: `{block.command}` exited with {done.returncode}:\n{done.stderr}")
        printed = normalised(done.stdout)
        if printed == normalised(block.expected):
            continue
        start = block.line + 1  # index of the first line inside the fence (marker line is 1-based)
        end = start + (len(block.expected.splitlines()) if block.expected else 0)
        lines[start:end] = printed.splitlines()
        changed = True
        print(f"refreshed {block.where}")
    if changed:
        staged = path.with_name(f".{path.name}.refresh")
        staged.write_text("\n".join(lines) + "\n", encoding="utf-8")
        staged.replace(path)
    return changed


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        env = command_environment(Path(tmp))
        changed = [path for path in markdown_files() if refresh(path, env)]
    print(f"{len(changed)} file(s) changed" if changed else "every block is up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
