"""Pulls killed with SIGKILL at each stage leave the previous model intact and, after the next pull, nothing of
ours behind; two processes pulling one repo at once both end with a correct model.

Where a killed pull leaves things, and who cleans up: our staging directory ``.OUT.<pid>-<random>.tmp`` beside
``OUT`` is removed by the next pull into ``OUT`` (it holds an OS lock while alive, so a running pull's staging
is never touched). The download's partial file is huggingface_hub's, ``blobs/<etag>.<random>.incomplete`` under a
name of that download's own: huggingface_hub never reads it as the file, lists it (``scan_cache_dir``) and
removes it with ``hf cache prune``; the pull leaves it to huggingface_hub, and the cached file stays whole.
The install itself is one atomic exchange; tests/convert/test_install_kills.py kills a pull at every step of it.
"""

import os
import select
import signal
import subprocess
import sys
import time

import pytest
import timm
import torch
from huggingface_hub import scan_cache_dir, try_to_load_from_cache

from tests.support import tiny
from tests.support.hub_fixtures import model_dir, repo_for
from tests.support.local_hub import DelayFault, GateFault
from timm_vitscratch import hub
from timm_vitscratch.atomic_replace import ConcurrentWriteError
from timm_vitscratch.files import sha256_file

pytestmark = pytest.mark.slow  # killed and concurrent pull processes


def pull_in_child(repo, out, stage):
    """Fork a child that pulls ``repo`` into ``out`` with ``--force`` and stops at ``stage`` for the kill:
    ``downloading`` (it says so as it starts) or ``staged`` (downloaded, copied and checked in the staging
    directory, not installed).
    A fork, not a fresh interpreter: the child has everything imported already. Returns (pid, pipe)."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid:
        os.close(write_end)
        return pid, read_end
    try:  # the child: never returns into pytest
        os.close(read_end)

        def stop_here():
            os.write(write_end, stage.encode() + b"\n")
            time.sleep(120)

        if stage == "staged":
            check = hub.client.check_model_directory

            def checked_then_stop(*args, **kwargs):
                result = check(*args, **kwargs)
                stop_here()
                return result

            hub.client.check_model_directory = checked_then_stop
        else:
            os.write(write_end, stage.encode() + b"\n")
        hub.pull(repo, out, force=True)
    finally:
        os._exit(3)


def read_line(fd, timeout=120.0):
    ready, _, _ = select.select([fd], [], [], timeout)
    return os.read(fd, 100).decode().strip() if ready else None


def files(directory):
    return {p.name: p.read_bytes() for p in directory.iterdir()}


def ours(directory):
    """Entries a pull into ``directory/out`` may create beside it."""
    return sorted(p.name for p in directory.iterdir() if p.name.startswith(".out."))


def incomplete_downloads(hf_home):
    return list(hf_home.glob("hub/*/blobs/*.incomplete"))


@pytest.fixture
def two_versions(hub_env, tmp_path, request):
    """A repo at version 2, and ``out`` holding version 1 pulled from it. Returns (repo, out, v2 sha256)."""
    repo = repo_for(request)
    torch.manual_seed(11)
    hub.push(model_dir(tmp_path / "v1", tiny()), repo)
    out = hub.pull(repo, tmp_path / "out")
    torch.manual_seed(12)
    v2 = model_dir(tmp_path / "v2", tiny())
    hub.push(v2, repo)
    return repo, out, sha256_file(v2 / "model.safetensors")


def wait_until_under_way(fault, timeout=120.0):
    deadline = time.monotonic() + timeout
    while fault.active == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert fault.active == 1


def kill(pid, pipe):
    os.kill(pid, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    os.close(pipe)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL


@pytest.mark.parametrize("stage", ["downloading", "staged"])
def test_pull_killed_keeps_the_previous_model_and_the_next_pull_cleans_up(stage, two_versions, local_hub, tmp_path):
    repo, out, v2_sha256 = two_versions
    before = files(out)
    slow = (
        local_hub.inject(DelayFault(30.0, origin="storage", method="GET", path=v2_sha256, times=1))
        if stage == "downloading"
        else None
    )
    pid, pipe = pull_in_child(repo, out, stage)
    try:
        assert read_line(pipe) == stage
        if slow is not None:  # wait until the weights' download is under way
            wait_until_under_way(slow)
    finally:
        kill(pid, pipe)
        if slow is not None:
            local_hub.faults.remove(slow)
    hf_home = tmp_path / "hf-home"
    partial = incomplete_downloads(hf_home)
    if stage == "downloading":
        assert files(out) == before and partial  # huggingface_hub's partial file
    else:
        assert files(out) == before and [n for n in ours(tmp_path) if n.endswith(".tmp")]

    # the next pull (without --force: OUT is not empty) first puts things right, then refuses
    with pytest.raises(FileExistsError, match="is not empty"):
        hub.pull(repo, out)
    assert files(out) == before and ours(tmp_path) == []
    hub.pull(repo, out, force=True)
    assert sha256_file(out / "model.safetensors") == v2_sha256
    assert ours(tmp_path) == []
    hub.check_model_directory(out)
    # the cache is huggingface_hub's: the killed download's partial file is left to it, listed as incomplete
    # (what ``hf cache prune`` removes) and never read as the weights, which are whole
    assert incomplete_downloads(hf_home) == partial
    assert sorted(f.file_path for f in scan_cache_dir(hf_home / "hub").incomplete_files) == sorted(partial)
    assert sha256_file(try_to_load_from_cache(repo, "model.safetensors", revision="main")) == v2_sha256


def test_two_processes_pulling_one_repo_at_once_both_get_a_correct_model(hub_env, local_hub, tmp_path, request):
    """Same Hugging Face cache, same OUT_DIR; the Hub holds both lookups until both processes are in flight."""
    repo = repo_for(request)
    torch.manual_seed(13)
    source = tiny().eval()
    hub.push(model_dir(tmp_path / "src", source), repo)
    gate = local_hub.inject(GateFault(2, timeout=120, method="GET", path=f"^/api/models/{repo}/revision/"))
    out = tmp_path / "out"
    try:
        pullers = [
            subprocess.Popen(
                [sys.executable, "-m", "timm_vitscratch.cli", "pull", repo, str(out)],
                env=hub_env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(2)
        ]
        results = [p.communicate(timeout=300) for p in pullers]
    finally:
        local_hub.faults.remove(gate)
    for puller, (stdout, stderr) in zip(pullers, results, strict=False):
        assert puller.returncode == 0, stderr
        assert f"installed {repo}@main into {out} (sha256 verified)" in stdout
    assert gate.met and gate.hits == 2  # both were mid-pull at the same moment
    assert sorted(p.name for p in out.iterdir()) == ["README.md", "config.json", "model.safetensors"]
    assert ours(tmp_path) == [] and incomplete_downloads(tmp_path / "hf-home") == []
    loaded = timm.create_model(f"local-dir:{out}", pretrained=True).eval()
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        assert torch.equal(loaded(x), source(x))


@pytest.mark.parametrize("parent", ["exists", "missing"])
def test_a_pull_overtaken_during_its_download_by_a_pull_of_the_same_files_ends_quietly(
    parent, hub_env, tmp_path, request, monkeypatch
):
    """The order the two-process test above meets only by chance, made certain: the other pull installs
    while this one downloads. This pull started from an empty ``out`` and must see the other as a
    concurrent writer of the same files (nothing to do), not refuse ``out`` as filled."""
    repo = repo_for(request)
    torch.manual_seed(14)
    source = tiny().eval()
    hub.push(model_dir(tmp_path / "src", source), repo)
    out = tmp_path / "out" if parent == "exists" else tmp_path / "new" / "out"
    download = hub.client._download
    overtaken = []

    def overtaken_while_downloading(*args, **kwargs):
        snapshot = download(*args, **kwargs)
        if not overtaken:
            overtaken.append(None)  # the other pull downloads through this too
            overtaken[0] = hub.pull(repo, out)  # the other pull, start to end
        return snapshot

    monkeypatch.setattr(hub.client, "_download", overtaken_while_downloading)
    assert hub.pull(repo, out) == out
    assert overtaken == [out]
    assert sorted(p.name for p in out.iterdir()) == ["README.md", "config.json", "model.safetensors"]
    assert sorted(p.name for p in out.parent.iterdir() if p.name.startswith(".out.")) == []
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        assert torch.equal(timm.create_model(f"local-dir:{out}", pretrained=True).eval()(x), source(x))


def test_a_pull_overtaken_by_a_pull_of_other_files_fails_and_keeps_them(hub_env, tmp_path, request, monkeypatch):
    repo, other = repo_for(request), repo_for(request, "-other")
    torch.manual_seed(15)
    hub.push(model_dir(tmp_path / "src", tiny()), repo)
    hub.push(model_dir(tmp_path / "other", tiny()), other)
    out = tmp_path / "out"
    download = hub.client._download

    def overtaken_while_downloading(repo_id, *args, **kwargs):
        snapshot = download(repo_id, *args, **kwargs)
        if repo_id == repo:
            hub.pull(other, out)
        return snapshot

    monkeypatch.setattr(hub.client, "_download", overtaken_while_downloading)
    with pytest.raises(ConcurrentWriteError, match="written by another process"):
        hub.pull(repo, out)
    assert files(out) == files(tmp_path / "other") | {"README.md": (out / "README.md").read_bytes()}
