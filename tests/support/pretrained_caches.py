"""Lay weight files into the caches exactly where a download would put them (for pretrained-tag tests).

Hugging Face: ``$HF_HOME/hub/models--ORG--NAME/snapshots/<revision>/<file>`` with ``refs/main`` naming the
revision, read with ``HF_HUB_OFFLINE=1``. torch: ``$TORCH_HOME/hub/checkpoints/<file name from the URL>``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from .hub_fixtures import use_hub

REVISION = "0123456789abcdef0123456789abcdef01234567"


def offline_caches(root: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Empty HF and torch caches under ``root``; no network (offline, and an endpoint nobody answers)."""
    use_hub(monkeypatch, "http://127.0.0.1:9", root / "hf", offline=True)
    monkeypatch.setenv("TORCH_HOME", str(root / "torch"))
    return root


def lay_in_hf_cache(root: Path, repo_id: str, files: dict[str, Callable[[Path], None]]) -> Path:
    """Write ``files`` ({name: writer(path)}) where ``hf_hub_download`` puts them: snapshots/<rev>/ + refs/main."""
    repo = root / "hf" / "hub" / ("models--" + repo_id.replace("/", "--"))
    snapshot = repo / "snapshots" / REVISION
    snapshot.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(REVISION)
    for name, write in files.items():
        write(snapshot / name)
    return snapshot


def lay_in_torch_cache(root: Path, url: str) -> Path:
    """The path ``torch.hub.load_state_dict_from_url(url)`` reads from, its folder created."""
    checkpoints = root / "torch" / "hub" / "checkpoints"
    checkpoints.mkdir(parents=True, exist_ok=True)
    return checkpoints / url.rsplit("/", 1)[-1]


def save_safetensors(state_dict: dict[str, torch.Tensor]) -> Callable[[Path], None]:
    return lambda path: save_file(
        {k: v.contiguous() for k, v in state_dict.items()}, str(path), metadata={"format": "pt"}
    )
