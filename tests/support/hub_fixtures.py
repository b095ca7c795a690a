"""Support for the Hub tests: the local Hub server, isolated client environments, tiny model directories.

Every client here is the real ``huggingface_hub`` (and timm): in this process through
``use_hub`` (environment variables for child processes, plus the client's module-level
settings, which it reads from the environment once at import), in child processes through
``run_client`` with the same environment.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from huggingface_hub import constants

from tests.support import tiny
from tests.support.local_hub import LocalHub
from tests.support.local_hub.faults import AnyFault, Fault
from timm_vitscratch.model_dir import save_model_directory

TOKEN = "hf_local_test_token"
CLIENT_SCRIPT = Path(__file__).with_name("hub_client.py")
_ENV_KEYS = (
    "HF_ENDPOINT",
    "HF_HOME",
    "HF_HUB_CACHE",
    "HF_HUB_DISABLE_XET",
    "HF_HUB_DISABLE_TELEMETRY",
    "HF_HUB_DISABLE_PROGRESS_BARS",
    "HF_TOKEN",
    "HF_HUB_OFFLINE",
)


@pytest.fixture(scope="session")
def local_hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalHub]:
    """One local Hub for the session; writes need ``TOKEN``. Tests use repo names of their own."""
    with LocalHub(tmp_path_factory.mktemp("local-hub"), token=TOKEN) as hub:
        yield hub


class FaultAdder:
    """``inject(fault)`` adds ``fault`` to the Hub and returns it; ``inject.stop`` is set when the test ends."""

    def __init__(self, hub: LocalHub) -> None:
        self.hub = hub
        self.added: list[Fault] = []
        self.stop = threading.Event()

    def __call__(self, fault: AnyFault) -> AnyFault:
        self.added.append(self.hub.inject(fault))
        return fault


@pytest.fixture
def inject(local_hub: LocalHub) -> Iterator[FaultAdder]:
    """Add faults to the session's Hub for this test only; bodies still being sent are stopped after it."""
    add = FaultAdder(local_hub)
    yield add
    add.stop.set()
    for fault in add.added:
        local_hub.faults.remove(fault)


def use_hub(
    monkeypatch: pytest.MonkeyPatch, endpoint: str, hf_home: Path, token: str | None = TOKEN, offline: bool = False
) -> dict[str, str]:
    """Point this process's ``huggingface_hub`` (and child processes) at ``endpoint``, caching under ``hf_home``."""
    env = LocalHub.client_env_for(endpoint, hf_home, token)
    if offline:
        env["HF_HUB_OFFLINE"] = "1"
    for key in _ENV_KEYS:
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    hf_home = Path(hf_home)
    settings: dict[str, object] = dict(
        ENDPOINT=endpoint,
        HUGGINGFACE_CO_URL_TEMPLATE=endpoint + "/{repo_id}/resolve/{revision}/{filename}",
        HF_HOME=str(hf_home),
        HF_HUB_CACHE=str(hf_home / "hub"),
        HF_ASSETS_CACHE=str(hf_home / "assets"),
        HF_XET_CACHE=str(hf_home / "xet"),
        HF_TOKEN_PATH=str(hf_home / "token"),
        HF_STORED_TOKENS_PATH=str(hf_home / "stored_tokens"),
        AGENT_HARNESSES_PATH=str(hf_home / ".agent_harnesses.json"),
        HF_HUB_OFFLINE=offline,
        HF_HUB_DISABLE_XET=True,
        HF_HUB_DISABLE_TELEMETRY=True,
    )
    for name, setting in settings.items():
        monkeypatch.setattr(constants, name, setting)
    return {**os.environ}


@pytest.fixture
def hub_env(local_hub: LocalHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """This test's client environment: the session's local Hub, a fresh cache, the write token."""
    return use_hub(monkeypatch, local_hub.url, tmp_path / "hf-home")


def repo_for(request: pytest.FixtureRequest, suffix: str = "") -> str:
    """A repo id unique to the test (the session's Hub is shared)."""
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", request.node.name)[:80].strip("-.")
    return f"tests/{name}{suffix}"


def model_dir(path: Path, model: torch.nn.Module, license: str | None = None) -> Path:
    """A model directory of ``model`` in the shared format (safetensors + timm config.json + sha256).

    Its license: ``license``, else what the model's pretrained cfg records, else apache-2.0 (tiny random test
    weights are the tests' own; a directory whose license is unknown is not pushed)."""
    recorded = getattr(model, "pretrained_cfg", {}).get("license")
    return save_model_directory(
        model,
        path,
        source={"format": "test", "note": "tiny random model"},
        license=license or (None if recorded else "apache-2.0"),
    )


def upload_raw(directory: Path, repo: str) -> None:
    """Publish a directory as it is, bypassing `vitscratch push` and its checks (a foreign or broken tool)."""
    from huggingface_hub import HfApi

    api = HfApi()
    api.create_repo(repo, exist_ok=True)
    api.upload_folder(repo_id=repo, folder_path=directory)


def tiny_variants() -> dict[str, torch.nn.Module]:
    """A plain, a has_logits (representation layer) and a distilled tiny model, in eval mode."""
    return {
        "plain": tiny("scratch_vit_ti16", num_classes=10).eval(),
        "has_logits": tiny("scratch_vit_b16_in21k", num_classes=10, representation_size=32).eval(),
        "distilled": tiny("scratch_deit_ti16_distilled", num_classes=10).eval(),
    }


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """Logits computed the same way in every process: one intra-op thread."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def logits(model: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    with one_thread(), torch.no_grad():
        return model.eval()(x)


def run_client(jobs: list[dict[str, Any]], workdir: Path, env: dict[str, str]) -> dict[str, Any]:
    """Run ``hub_client.py`` (a fresh Python process) on ``jobs``; returns its results by job id."""
    spec = workdir / "jobs.json"
    spec.write_text(json.dumps(jobs))
    result = subprocess.run(
        [sys.executable, str(CLIENT_SCRIPT), str(spec)], env=env, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, f"client failed:\n{result.stdout}\n{result.stderr}"
    return json.loads((workdir / "results.json").read_text())


@contextlib.contextmanager
def refused_endpoint() -> Iterator[str]:
    """An endpoint on 127.0.0.1 where nothing listens: the port is bound (so no one else takes it) but closed."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        sock.close()
