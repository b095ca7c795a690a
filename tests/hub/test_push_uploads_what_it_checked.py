"""A push uploads exactly the bytes it checked (probe r01), and takes back a commit whose bytes the Hub reports
otherwise.

r01: ``push`` checked ``DIR/model.safetensors``, made its network calls, then handed huggingface_hub the path,
which opened it again and followed a symlink swapped in meanwhile: a secret was committed. Here the swap (weights
and README each replaced by a symlink to a secret) happens when the local Hub receives the N-th request of the
push, for every N: the push must upload the bytes it read before, and the secret must be nowhere on the Hub.
"""

from __future__ import annotations

import json
import os
import re

import pytest
import torch

from tests.support import tiny
from tests.support.hub_fixtures import model_dir, repo_for
from tests.support.local_hub import Fault
from timm_vitscratch import hub
from timm_vitscratch.cli import main as cli_main
from timm_vitscratch.errors import ModelDirectoryError

pytestmark = pytest.mark.slow  # a push per request, with a file swapped at that request

SECRET = "hf_SECRET_TOKEN_OF_THE_VICTIM=abc123\n"
CARD = "# my model\nhand-written card\n"


class SwapAtRequest(Fault):
    """At the ``at``-th request the Hub receives (1-based), swap the files of ``directory`` for symlinks to
    ``secret``, then let the Hub answer; records which request it was."""

    def __init__(self, at: int, directory, secret) -> None:
        super().__init__()
        self.at, self.directory, self.secret = at, directory, secret
        self.swapped_at: str | None = None

    def respond(self, handler) -> None:
        if self.hits == self.at:
            for name in ("model.safetensors", "README.md"):
                os.replace(self.directory / name, self.directory.parent / f"moved-{name}")
                os.symlink(self.secret, self.directory / name)
            self.swapped_at = f"{handler.command} {handler.path}"
        handler.route_request()


class ReportOtherWeights(Fault):
    """The Hub's file metadata at a commit says model.safetensors has another sha256 (a Hub that stored, or
    reports, other bytes than were sent)."""

    def respond(self, handler) -> None:
        send = handler._send_json

        def tampered(status, payload, headers=None):
            for sibling in payload.get("siblings", []) if isinstance(payload, dict) else []:
                if sibling["rfilename"] == "model.safetensors" and "lfs" in sibling:
                    sibling["lfs"]["sha256"] = "0" * 64
            send(status, payload, headers)

        handler._send_json = tampered  # on this request only: the handler serves the connection's next ones
        try:
            handler.route_request()
        finally:
            del handler._send_json


def fresh_model_dir(path, seed):
    torch.manual_seed(seed)  # weights no other push sent: the Hub's LFS store cannot hold them yet
    directory = model_dir(path, tiny(num_classes=3))
    (directory / "README.md").write_text(CARD)
    return directory


def secret_on_hub(local_hub) -> list[str]:
    return [str(p) for p in local_hub.root.rglob("*") if p.is_file() and SECRET.encode() in p.read_bytes()]


def hub_entries(local_hub, repo):
    return local_hub.store.resolve(repo, "main")["files"]


def test_a_swap_at_any_request_of_the_push_uploads_the_bytes_checked(hub_env, local_hub, tmp_path, request):
    secret = tmp_path / "victim-secret.txt"
    secret.write_text(SECRET)
    first = len(local_hub.requests)
    hub.push(fresh_model_dir(tmp_path / "clean", 1000), repo_for(request, "-clean"))
    calls = [f"{origin} {method} {path}" for origin, method, path, _ in local_hub.requests[first:]]
    assert len(calls) >= 6, calls  # create, model_info, preupload, LFS batch, PUT, commit, model_info
    for at in range(1, len(calls) + 1):
        directory = fresh_model_dir(tmp_path / f"m{at}", 1000 + at)
        weights = (directory / "model.safetensors").read_bytes()
        repo = repo_for(request, f"-{at}")
        swap = local_hub.inject(SwapAtRequest(at, directory, secret))
        try:
            hub.push(directory, repo)
        finally:
            local_hub.faults.remove(swap)
        assert swap.swapped_at is not None, f"request {at} never came: {calls}"
        assert (directory / "model.safetensors").is_symlink()
        entries = hub_entries(local_hub, repo)
        stored = local_hub.store.file_path(entries["model.safetensors"]).read_bytes()
        card = local_hub.store.file_path(entries["README.md"]).read_text()
        assert stored == weights and card == CARD, f"swap at {swap.swapped_at}"
    assert secret_on_hub(local_hub) == []


def test_the_cli_push_with_a_swap_at_create_repo(hub_env, local_hub, tmp_path, request, capsys):
    """r01 as the probe runs it: the swap when the Hub is asked to create the repo; the CLI pushes the checked bytes."""
    secret = tmp_path / "victim-secret.txt"
    secret.write_text(SECRET)
    directory = fresh_model_dir(tmp_path / "model", 2000)
    weights = (directory / "model.safetensors").read_bytes()
    repo = repo_for(request)
    swap = local_hub.inject(SwapAtRequest(1, directory, secret))
    swap.path = re.compile(r"^/api/repos/create$")
    try:
        assert cli_main(["push", str(directory), repo]) == 0
    finally:
        local_hub.faults.remove(swap)
    assert swap.swapped_at == "POST /api/repos/create" and "Traceback" not in capsys.readouterr().err
    assert local_hub.store.file_path(hub_entries(local_hub, repo)["model.safetensors"]).read_bytes() == weights
    assert secret_on_hub(local_hub) == []


def test_other_bytes_reported_for_a_new_file_revert_the_commit_by_deleting_it(
    hub_env, local_hub, tmp_path, request, capsys
):
    repo = repo_for(request)
    directory = fresh_model_dir(tmp_path / "model", 3000)
    path = rf"^/api/models/{re.escape(repo)}/revision/[0-9a-f]{{40}}$"
    lie = local_hub.inject(ReportOtherWeights(method="GET", path=path, times=1))
    try:
        assert cli_main(["push", str(directory), repo]) == 2
    finally:
        local_hub.faults.remove(lie)
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("vitscratch:")]  # besides progress bars
    assert len(lines) == 1 and "Traceback" not in err, err
    assert re.fullmatch(
        rf"vitscratch: error: {re.escape(repo)}@[0-9a-f]{{40}}: the Hub reports model.safetensors with sha256 0{{64}}, "
        r"but the push sent [0-9a-f]{64}; the commit was reverted by [0-9a-f]{40}, so main holds what it held before",
        lines[0],
    ), lines[0]
    assert sorted(hub_entries(local_hub, repo)) == [".gitattributes"]  # what create_repo made, and nothing else


def test_other_bytes_reported_for_a_replaced_file_revert_the_commit_to_the_old_bytes(
    hub_env, local_hub, tmp_path, request
):
    repo = repo_for(request)
    hub.push(fresh_model_dir(tmp_path / "v1", 4000), repo)
    before = json.loads(json.dumps(hub_entries(local_hub, repo)))
    second = fresh_model_dir(tmp_path / "v2", 4001)
    (second / "README.md").write_text("# version 2\n")
    path = rf"^/api/models/{re.escape(repo)}/revision/[0-9a-f]{{40}}$"
    lie = local_hub.inject(ReportOtherWeights(method="GET", path=path, times=1))
    try:
        with pytest.raises(ModelDirectoryError, match="the commit was reverted by"):
            hub.push(second, repo)
    finally:
        local_hub.faults.remove(lie)
    assert hub_entries(local_hub, repo) == before  # config, weights and card as the first push left them
