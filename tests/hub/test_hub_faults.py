"""A failing Hub, and what push and pull do about it: a pull installs weights whose sha256 checks out, or
nothing; it says in one line why it failed; it downloads damaged files once more and never leaves damaged bytes
in the cache; a push's commit holds what a pull verifies.

Whether a request is retried, how often and after how long is huggingface_hub's business: nothing here
patches or asserts its retry policy. Each fault either passes (it strikes once: the pull or push ends with the
right files, whatever retried it) or persists (the command fails with one clear line and changes nothing).
"""

import json
import shutil
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

pytestmark = pytest.mark.slow  # huggingface_hub's retries against injected faults

RETRY_AFTER_0 = {"Retry-After": "0"}


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


PASSING = {
    "429 on the weights download": lambda repo, sha: HttpErrorFault(
        429, headers=RETRY_AFTER_0, origin="storage", method="GET", path=sha, times=1
    ),
    "connection dropped before the weights download answers": lambda repo, sha: DropConnectionFault(
        origin="storage", method="GET", path=sha, times=1
    ),
    "weights download cut short after 1000 bytes": lambda repo, sha: CutBodyFault(
        1000, origin="storage", method="GET", path=sha, times=1
    ),
    "slow weights download (1 s)": lambda repo, sha: DelayFault(1.0, origin="storage", method="GET", path=sha, times=1),
    "500 on the weights' metadata (HEAD)": lambda repo, sha: HttpErrorFault(
        500, method="HEAD", path=f"^/{repo}/resolve/.*/model.safetensors$", times=1
    ),
    "429 on config.json": lambda repo, sha: HttpErrorFault(
        429, headers=RETRY_AFTER_0, method="GET", path=f"^/{repo}/resolve/.*/config.json$", times=1
    ),
}


@pytest.mark.parametrize("case", list(PASSING))
def test_pull_through_a_fault_that_passes_installs_verified_weights(case, pushed, inject, tmp_path):
    repo, sha256 = pushed
    fault = inject(PASSING[case](repo, sha256))
    out = hub.pull(repo, tmp_path / "out")
    assert fault.hits == 1  # the fault really struck
    assert sha256_file(out / "model.safetensors") == sha256
    hub.check_model_directory(out)
    assert cache_blobs_match_their_names(tmp_path / "hf-home")
    assert leftovers(tmp_path) == []


def test_weights_corrupted_on_the_way_are_downloaded_exactly_once_more(pushed, inject, local_hub, tmp_path):
    repo, sha256 = pushed
    inject(CorruptBodyFault(origin="storage", method="GET", path=sha256, times=1))
    first = len(local_hub.requests)
    out = hub.pull(repo, tmp_path / "out")
    downloads = [r for r in local_hub.requests[first:] if r[:3] == ("storage", "GET", f"/lfs/{sha256}")]
    assert len(downloads) == 2
    assert sha256_file(out / "model.safetensors") == sha256 and cache_blobs_match_their_names(tmp_path / "hf-home")


PERSISTING = {
    "503 on the repo lookup": (
        lambda repo, sha: HttpErrorFault(503, method="GET", path=f"^/api/models/{repo}/revision/"),
        "answered HTTP 503 for {repo}: Internal Error - injected by the local Hub",
    ),
    "429 on the repo lookup": (
        lambda repo, sha: HttpErrorFault(
            429, headers=RETRY_AFTER_0, method="GET", path=f"^/api/models/{repo}/revision/"
        ),
        "answered HTTP 429 for {repo}",
    ),
    "503 on the weights download": (
        lambda repo, sha: HttpErrorFault(503, origin="storage", method="GET", path=sha),
        "answered HTTP 503 for {repo}",
    ),
    "connection dropped on the weights' metadata (HEAD)": (
        lambda repo, sha: DropConnectionFault(method="HEAD", path=f"^/{repo}/resolve/.*/model.safetensors$"),
        "dropped the connection (RemoteProtocolError: Server disconnected without sending a response.)",
    ),
    "weights corrupted on every download": (
        lambda repo, sha: CorruptBodyFault(origin="storage", method="GET", path=sha),
        "{repo}@main: model.safetensors arrived damaged twice: the Hub says its sha256 is {sha}",
    ),
}


@pytest.mark.parametrize("case", list(PERSISTING))
def test_pull_through_a_fault_that_persists_says_why_and_changes_nothing(case, pushed, inject, tmp_path, capsys):
    repo, sha256 = pushed
    make, message = PERSISTING[case]
    out = model_dir(tmp_path / "out", tiny(num_classes=3))  # a previous model, to be replaced with --force
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    fault = inject(make(repo, sha256))
    assert cli_main(["pull", "--force", repo, str(out)]) == 2
    err = capsys.readouterr().err  # huggingface_hub's progress bars, then our one line
    line = err.splitlines()[-1]
    assert line.startswith("vitscratch: error: ") and "Traceback" not in err, err
    assert message.format(repo=repo, sha=sha256) in line, err
    assert fault.hits >= 1
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before and leftovers(tmp_path) == []
    blobs = list((tmp_path / "hf-home").glob("hub/*/blobs/*"))
    assert all(sha256_file(p) == p.name for p in blobs if len(p.name) == 64)  # nothing damaged stays cached


PUSH_PASSING = {
    "503 on the LFS upload": lambda: HttpErrorFault(503, origin="storage", method="PUT", times=1),
    "connection dropped on the LFS upload": lambda: DropConnectionFault(origin="storage", method="PUT", times=1),
    "500 on the LFS batch call": lambda: HttpErrorFault(500, method="POST", path="/info/lfs/objects/batch$", times=1),
    "429 on preupload": lambda: HttpErrorFault(429, headers=RETRY_AFTER_0, method="POST", path="/preupload/", times=1),
}


@pytest.mark.parametrize("case", list(PUSH_PASSING))
def test_push_through_a_fault_that_passes_commits_what_a_pull_verifies(case, hub_env, inject, tmp_path, request):
    repo = repo_for(request)
    torch.manual_seed(zlib.crc32(case.encode()))  # weights of its own: the Hub stores an LFS object only once
    directory = model_dir(tmp_path / "src", tiny())
    fault = inject(PUSH_PASSING[case]())
    hub.push(directory, repo)  # checks the Hub's LFS sha256 of what it pushed
    assert fault.hits == 1
    assert HfApi().model_info(repo, files_metadata=True).siblings  # the commit landed
    out = hub.pull(repo, tmp_path / "out")
    assert sha256_file(out / "model.safetensors") == sha256_file(directory / "model.safetensors")


def test_push_whose_commit_is_refused_says_why_and_changes_nothing(
    hub_env, inject, local_hub, tmp_path, request, capsys
):
    repo = repo_for(request)
    hub.push(model_dir(tmp_path / "v1", tiny()), repo)
    head = local_hub.store.resolve(repo, "main")["id"]
    inject(HttpErrorFault(429, headers=RETRY_AFTER_0, method="POST", path=f"^/api/models/{repo}/commit/"))
    with pytest.raises(HfHubHTTPError) as raised:
        hub.push(model_dir(tmp_path / "v2", tiny()), repo)
    assert raised.value.response.status_code == 429
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


def test_damaged_config_already_in_the_cache_is_downloaded_again(pushed, tmp_path):
    """A config.json that no longer parses, or records another sha256, is compared with the Hub's git hash."""
    repo, sha256 = pushed
    first = hub.pull(repo, tmp_path / "first")
    (cached,) = (tmp_path / "hf-home").glob("hub/*/snapshots/*/config.json")
    for damage in (b"{not json", (first / "config.json").read_bytes().replace(sha256.encode(), b"0" * 64)):
        cached.resolve().write_bytes(damage)
        out = hub.pull(repo, tmp_path / "second", force=True)
        assert (out / "config.json").read_bytes() == (first / "config.json").read_bytes()
        assert cached.read_bytes() == (first / "config.json").read_bytes()
