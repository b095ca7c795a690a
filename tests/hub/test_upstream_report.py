"""The reproduction docs/guarantees.md sends upstream runs as printed there, against the installed huggingface_hub.

It is read from the page (so the page cannot drift from what runs) and run in a child process in a temporary
directory. Whatever huggingface_hub does, the child must finish; the test records which answer it gives, and a
fix upstream shows as ``outside the cache: []`` (the page's text is then updated).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from tests.support import time_limits

PAGE = Path(__file__).parents[2] / "docs" / "guarantees.md"


def reproduction() -> str:
    text = PAGE.read_text(encoding="utf-8")
    section = text.split("## Reported upstream", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S)[1]


def test_the_reported_reproduction_still_shows_the_problem(tmp_path):
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "HF_HOME": str(tmp_path / "hf")}
    done = time_limits.run(
        [sys.executable, "-c", reproduction()], capture_output=True, text=True, env=env, cwd=tmp_path, quiet_seconds=60
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert lines[0] == "missing.json: RemoteEntryNotFoundError"
    # what the page says it prints; when huggingface_hub fixes it this fails, and the page says so instead
    assert lines[-1] == "outside the cache: ['outside-a', 'outside-a/missing.json', 'outside-b', 'outside-b.lock']"
