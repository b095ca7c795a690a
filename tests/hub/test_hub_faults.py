"""A failing Hub: the client retries where huggingface_hub retries, says clearly what failed where it does not,
and a pull never installs (or leaves in the cache) weights whose sha256 does not match.

What huggingface_hub 2.4 retries during a pull (found with these faults, asserted below through the hit
counts): the weights download from storage on 429 (honouring ``Retry-After``), a dropped connection and
a body cut short (resumed with a ``Range`` request past whole 10 MB chunks, else from the start); the file
metadata request (HEAD) once on 5xx; a 429 on a regular file. It does not retry the repo lookup
(``/api/models/.../revision/...``: 429, 5xx), a 5xx on a download, or a HEAD whose connection dropped.
Pushes retry the LFS upload and batch calls and the preupload call, not the commit.
"""

import json
import shutil
import time
import zlib

import pytest
import torch
from huggingface_hub import HfApi
from huggingface_hub.errors import HfHubHTTPError

from tests.support import tiny
from tests.support.hub_fixtures import model_dir, repo_for
from tests.support.local_hub import (
    CorruptBodyFault,
    CutBodyFault,
    DelayFault,
    DropConnectionFault,
    HttpErrorFault,
)
from timm_vitscratch import hub
from timm_vitscratch.cli import main as cli_main
from timm_vitscratch.files import sha256_file

RETRY_AFTER_0 = {"Retry-After": "0"}


class BackOff:
    """Stands in for the ``time`` module of huggingface_hub's retry code: records each wait it decides on
    and waits at most 0.05 s of it (its decisions are unchanged; the suite is spared the back-off)."""

    def __init__(self):
        self.asked = []

    def sleep(self, seconds):
        self.asked.append(seconds)
        time.sleep(min(seconds, 0.05))

    def __getattr__(self, name):
        return getattr(time, name)


@pytest.fixture(autouse=True)
def backoff(monkeypatch):
    import huggingface_hub.file_download
    import huggingface_hub.utils._http

    waits = BackOff()
    monkeypatch.setattr(huggingface_hub.utils._http, "time", waits)  # http_backoff: status codes, errors
    monkeypatch.setattr(huggingface_hub.file_download, "time", waits)  # http_get: resuming a download
    return waits


@pytest.fixture
def inject(local_hub):
    """Add faults to the session's Hub for this test only."""
    added = []

    def add(fault):
        added.append(local_hub.inject(fault))
        return fault

    yield add
    for fault in added:
        local_hub.faults.remove(fault)


@pytest.fixture
def pushed(hub_env, tmp_path, request):
    """A repo holding a tiny model; returns (repo id, the weights' sha256)."""
    repo = repo_for(request)
    directory = model_dir(tmp_path / "src", tiny())
    hub.push(directory, repo)
    return repo, json.loads((directory / "config.json").read_text())["vitscratch"]["sha256"]


def cache_blobs_match_their_names(hf_home):
    """Every LFS blob in the Hugging Face cache holds the bytes its name (the Hub's sha256) promises."""
    blobs = [p for p in hf_home.glob("hub/*/blobs/*") if len(p.name) == 64]
    return bool(blobs) and all(sha256_file(p) == p.name for p in blobs)


def leftovers(directory):
    return sorted(p.name for p in directory.iterdir() if p.name.startswith("."))


RETRIED = {
    "429 with Retry-After on the weights download": lambda repo, sha: HttpErrorFault(
        429, headers=RETRY_AFTER_0, origin="storage", method="GET", path=sha, times=2
    ),
    "connection dropped before the weights download answers": lambda repo, sha: DropConnectionFault(
        origin="storage", method="GET", path=sha, times=2
    ),
    "weights download cut short after 1000 bytes": lambda repo, sha: CutBodyFault(
        1000, origin="storage", method="GET", path=sha, times=2
    ),
    "slow weights download (1 s)": lambda repo, sha: DelayFault(1.0, origin="storage", method="GET", path=sha, times=1),
    "500 on the weights' metadata (HEAD)": lambda repo, sha: HttpErrorFault(
        500, method="HEAD", path=f"^/{repo}/resolve/.*/model.safetensors$", times=1
    ),
    "429 on config.json": lambda repo, sha: HttpErrorFault(
        429, headers=RETRY_AFTER_0, method="GET", path=f"^/{repo}/resolve/.*/config.json$", times=1
    ),
    "weights corrupted in transfer once (pull downloads again)": lambda repo, sha: CorruptBodyFault(
        origin="storage", method="GET", path=sha, times=1
    ),
}


@pytest.mark.parametrize("case", list(RETRIED))
def test_pull_gets_through_faults_that_are_retried(case, pushed, inject, tmp_path):
    repo, sha256 = pushed
    fault = inject(RETRIED[case](repo, sha256))
    times = fault.remaining
    out = hub.pull(repo, tmp_path / "out")
    assert fault.hits == times and fault.remaining == 0  # the fault really struck, every time it could
    assert sha256_file(out / "model.safetensors") == sha256
    hub.check_model_directory(out)
    assert cache_blobs_match_their_names(tmp_path / "hf-home")


def test_retry_after_is_honoured(pushed, inject, backoff, tmp_path):
    repo, sha256 = pushed
    fault = inject(
        HttpErrorFault(429, headers={"Retry-After": "7"}, origin="storage", method="GET", path=sha256, times=2)
    )
    hub.pull(repo, tmp_path / "out")
    assert fault.hits == 2 and backoff.asked == [8.0, 8.0]  # Retry-After + 1 s, each time (not 1 s, then 2 s)


NOT_RETRIED = {
    "503 on the repo lookup": (
        lambda repo, sha: HttpErrorFault(503, method="GET", path=f"^/api/models/{repo}/revision/"),
        1,
        "answered HTTP 503 for {repo}: Internal Error - injected by the local Hub",
    ),
    "429 on the repo lookup": (
        lambda repo, sha: HttpErrorFault(
            429, headers=RETRY_AFTER_0, method="GET", path=f"^/api/models/{repo}/revision/"
        ),
        1,
        "answered HTTP 429 for {repo}",
    ),
    "503 on the weights download": (
        lambda repo, sha: HttpErrorFault(503, origin="storage", method="GET", path=sha),
        1,
        "answered HTTP 503 for {repo}",
    ),
    "connection dropped on the weights' metadata (HEAD)": (
        lambda repo, sha: DropConnectionFault(method="HEAD", path=f"^/{repo}/resolve/.*/model.safetensors$"),
        1,
        "dropped the connection (RemoteProtocolError: Server disconnected without sending a response.)",
    ),
    "connection dropped on every weights download": (
        lambda repo, sha: DropConnectionFault(origin="storage", method="GET", path=sha),
        6,
        "dropped the connection (RemoteProtocolError: Server disconnected without sending a response.)",
    ),
    "weights corrupted on every download": (
        lambda repo, sha: CorruptBodyFault(origin="storage", method="GET", path=sha),
        2,
        "{repo}@main: model.safetensors arrived damaged twice: the Hub says its sha256 is {sha}",
    ),
}


@pytest.mark.parametrize("case", list(NOT_RETRIED))
def test_pull_that_cannot_get_through_says_why_and_changes_nothing(case, pushed, inject, tmp_path, capsys):
    repo, sha256 = pushed
    make, hits, message = NOT_RETRIED[case]
    out = model_dir(tmp_path / "out", tiny(num_classes=3))  # a previous model, to be replaced with --force
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    fault = inject(make(repo, sha256))
    assert cli_main(["pull", "--force", repo, str(out)]) == 2
    err = capsys.readouterr().err
    assert message.format(repo=repo, sha=sha256) in err, err
    assert fault.hits == hits  # 1: not retried; 6: five retries (huggingface_hub's); 2: our one re-download
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before and leftovers(tmp_path) == []
    blobs = list((tmp_path / "hf-home").glob("hub/*/blobs/*"))
    assert all(sha256_file(p) == p.name for p in blobs if len(p.name) == 64)  # nothing damaged stays cached


PUSH_RETRIED = {
    "503 on the LFS upload": lambda: HttpErrorFault(503, origin="storage", method="PUT", times=1),
    "connection dropped on the LFS upload": lambda: DropConnectionFault(origin="storage", method="PUT", times=1),
    "500 on the LFS batch call": lambda: HttpErrorFault(500, method="POST", path="/info/lfs/objects/batch$", times=1),
    "429 on preupload": lambda: HttpErrorFault(429, headers=RETRY_AFTER_0, method="POST", path="/preupload/", times=1),
}


@pytest.mark.parametrize("case", list(PUSH_RETRIED))
def test_push_gets_through_faults_that_are_retried(case, hub_env, inject, tmp_path, request):
    repo = repo_for(request)
    torch.manual_seed(zlib.crc32(case.encode()))  # weights of its own: the Hub stores an LFS object only once
    directory = model_dir(tmp_path / "src", tiny())
    fault = inject(PUSH_RETRIED[case]())
    hub.push(directory, repo)  # checks the Hub's LFS sha256 of what it pushed
    assert fault.hits == 1
    assert HfApi().model_info(repo, files_metadata=True).siblings  # the commit landed
    out = hub.pull(repo, tmp_path / "out")
    assert sha256_file(out / "model.safetensors") == sha256_file(directory / "model.safetensors")


def test_push_commit_rate_limited_is_not_retried_and_changes_nothing(
    hub_env, inject, local_hub, tmp_path, request, capsys
):
    repo = repo_for(request)
    hub.push(model_dir(tmp_path / "v1", tiny()), repo)
    head = local_hub.store.resolve(repo, "main")["id"]
    fault = inject(HttpErrorFault(429, headers=RETRY_AFTER_0, method="POST", path=f"^/api/models/{repo}/commit/"))
    with pytest.raises(HfHubHTTPError) as raised:
        hub.push(model_dir(tmp_path / "v2", tiny()), repo)
    assert raised.value.response.status_code == 429 and fault.hits == 1
    assert cli_main(["push", str(tmp_path / "v2"), repo]) == 2
    assert f"answered HTTP 429 for {repo}" in capsys.readouterr().err
    assert local_hub.store.resolve(repo, "main")["id"] == head


def test_damaged_blob_already_in_the_cache_is_downloaded_again(pushed, tmp_path):
    """A cache filled by an older client or a damaged disk: the blob's bytes no longer match its name."""
    repo, sha256 = pushed
    hub.pull(repo, tmp_path / "first")
    blob = next((tmp_path / "hf-home").glob(f"hub/*/blobs/{sha256}"))
    damaged = bytearray(blob.read_bytes())
    damaged[len(damaged) // 2] ^= 0xFF
    blob.write_bytes(bytes(damaged))
    out = hub.pull(repo, tmp_path / "second")
    assert sha256_file(out / "model.safetensors") == sha256 and sha256_file(blob) == sha256
    shutil.rmtree(tmp_path / "first")
