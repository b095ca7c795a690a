"""``python -m tests.support.license_roundtrip``: the DINOv3 License's text through a push and a pull (docs/hub.md).

A tiny classic model whose pretrained cfg records ``dinov3-license`` (standing for a DINOv3 variant) is pushed to
the local Hub-protocol server and pulled back into a new directory. Prints the pulled directory's files, the
license file's sha256, line count and first line, and the license lines of the card the push generated.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

import pytest
from huggingface_hub.utils import disable_progress_bars

from tests.support import tiny
from tests.support.hub_fixtures import TOKEN, model_dir, use_hub
from tests.support.local_hub import LocalHub
from timm_vitscratch import hub

REPO = "demo/dinov3-licensed"


def main() -> None:
    disable_progress_bars()  # the figure is stdout; the bars would only add noise on stderr
    with tempfile.TemporaryDirectory() as tmp, LocalHub(Path(tmp, "hub"), token=TOKEN) as server:
        with pytest.MonkeyPatch.context() as monkeypatch:
            use_hub(monkeypatch, server.url, Path(tmp, "hf-home"))
            source = model_dir(Path(tmp, "model"), tiny(pretrained_cfg_overlay=dict(license="dinov3-license")))
            hub.push(source, REPO)
            out = hub.pull(REPO, Path(tmp, "pulled"))
        print(f"pulled {REPO}: {', '.join(sorted(os.listdir(out)))}")
        text = (out / "LICENSE.md").read_bytes()
        lines = text.decode("utf-8").splitlines()
        print(f"LICENSE.md: sha256 {hashlib.sha256(text).hexdigest()}, {len(lines)} lines, first {lines[0]!r}")
        card = (out / "README.md").read_text(encoding="utf-8").splitlines()
        for line in card:
            if line.startswith(("license", "- **License:**")):
                print(f"README.md: {line}")


if __name__ == "__main__":
    main()
